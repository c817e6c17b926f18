// The C API in the gtest binary, so the sanitizer and TSan builds cover it too (tests/c_api/ has the C, libc++ and
// C# consumers): statuses, per-thread errors, every error path freeing what it made, concurrent runs.
#include <pt2rt/pt2rt_c.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "test_env.h"

namespace {

const std::string kPackages = test_packages_dir();
const char* kOps = IDENTITY_CONV_OPS_LIBRARY;

pt2rt_runtime* load(const std::string& name, int runners = 1) {
  pt2rt_runtime* rt = nullptr;
  EXPECT_EQ(pt2rt_load((kPackages + "/" + name).c_str(), &kOps, 1, runners, &rt), PT2RT_OK) << pt2rt_last_error();
  return rt;
}

}  // namespace

TEST(CApi, ErrorsAreStatusesWithThisThreadsMessage) {
  pt2rt_runtime* rt = nullptr;
  EXPECT_EQ(pt2rt_load((kPackages + "/no-such.pt2").c_str(), &kOps, 1, 0, &rt), PT2RT_ERROR_PACKAGE);
  EXPECT_EQ(rt, nullptr);
  const std::string message = pt2rt_last_error();
  EXPECT_NE(message.find("no-such.pt2"), std::string::npos) << message;
  std::string other;
  std::thread([&] { other = pt2rt_last_error(); }).join();
  EXPECT_EQ(other, "");  // another thread's message is its own
  EXPECT_EQ(pt2rt_load(nullptr, nullptr, 0, 0, &rt), PT2RT_ERROR_USAGE);
  EXPECT_EQ(pt2rt_check_c_api_version(PT2RT_C_API_VERSION), PT2RT_OK);
  EXPECT_EQ(pt2rt_check_c_api_version(0), PT2RT_ERROR_USAGE);
}

TEST(CApi, RunsReturnOwnedOutputsAndBadInputsAreInputErrors) {
  pt2rt_runtime* rt = load("op_static.pt2");
  ASSERT_NE(rt, nullptr);
  const int64_t* shape = nullptr;
  size_t ndim = 0;
  ASSERT_EQ(pt2rt_input_spec(rt, 0, nullptr, nullptr, &shape, &ndim), PT2RT_OK);
  size_t numel = 1;
  for (size_t i = 0; i < ndim; ++i) numel *= static_cast<size_t>(shape[i]);
  std::vector<float> x(numel);
  for (size_t i = 0; i < numel; ++i) x[i] = static_cast<float>(i) - 3.5f;
  pt2rt_tensor_view in{x.data(), shape, ndim, PT2RT_FLOAT32};
  pt2rt_tensor* out = nullptr;
  size_t n = 0;
  ASSERT_EQ(pt2rt_run(rt, &in, 1, &out, 1, &n), PT2RT_OK) << pt2rt_last_error();
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(std::memcmp(pt2rt_tensor_data(out), x.data(), numel * sizeof(float)), 0);
  pt2rt_tensor_free(out);

  std::vector<int64_t> bad(shape, shape + ndim);
  bad[0] += 1;
  in.shape = bad.data();
  EXPECT_EQ(pt2rt_run(rt, &in, 1, &out, 1, &n), PT2RT_ERROR_INPUT);
  EXPECT_EQ(n, 0u);
  EXPECT_GT(std::strlen(pt2rt_last_error()), 0u);
  in.shape = shape;
  // what a C caller may pass: any int (stored without this C++ code reading an out-of-range enum value; the C
  // test passes them to pt2rt_dtype_name and pt2rt_status_name too)
  const int not_a_dtype = -1;
  std::memcpy(&in.dtype, &not_a_dtype, sizeof not_a_dtype);
  EXPECT_EQ(pt2rt_run(rt, &in, 1, &out, 1, &n), PT2RT_ERROR_USAGE);
  EXPECT_NE(std::string(pt2rt_last_error()).find("dtype is -1"), std::string::npos) << pt2rt_last_error();
  pt2rt_runtime_free(rt);
}

// aliasing.pt2 returns (x.reshape(batch, -1), a constant as it is, y, y): the C caller owns every output alone.
TEST(CApi, OutputsAreOwnedEvenWhenTheModelReturnsAViewOfItsInput) {
  pt2rt_runtime* rt = load("aliasing.pt2");
  ASSERT_NE(rt, nullptr);
  std::vector<float> x(2 * 3 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) + 0.5f;
  const std::vector<float> given = x;
  const int64_t shape[] = {2, 3, 4};
  const pt2rt_tensor_view in{x.data(), shape, 3, PT2RT_FLOAT32};
  pt2rt_tensor* out[4] = {};
  size_t n = 0;
  ASSERT_EQ(pt2rt_run(rt, &in, 1, out, 4, &n), PT2RT_OK) << pt2rt_last_error();
  ASSERT_EQ(n, 4u);
  EXPECT_NE(pt2rt_tensor_data(out[0]), static_cast<const void*>(x.data()));
  std::fill(x.begin(), x.end(), 0.0f);
  EXPECT_EQ(std::memcmp(pt2rt_tensor_data(out[0]), given.data(), given.size() * sizeof(float)), 0);
  EXPECT_NE(pt2rt_tensor_data(out[2]), pt2rt_tensor_data(out[3]));
  const auto* w = static_cast<const float*>(pt2rt_tensor_data(out[1]));
  EXPECT_EQ(w[5], 5.0f);
  for (pt2rt_tensor* t : out) pt2rt_tensor_free(t);
  pt2rt_runtime_free(rt);
}

TEST(CApi, ConcurrentRunsOnOneRuntime) {
  pt2rt_runtime* rt = load("net_dynamic.pt2", 2);
  ASSERT_NE(rt, nullptr);
  const int64_t shape[4] = {2, 3, 32, 32};
  std::vector<float> x(2 * 3 * 32 * 32, 0.5f);
  const pt2rt_tensor_view in{x.data(), shape, 4, PT2RT_FLOAT32};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        pt2rt_tensor* out = nullptr;
        size_t n = 0;
        if (pt2rt_run(rt, &in, 1, &out, 1, &n) != PT2RT_OK || n != 1 || pt2rt_tensor_shape(out)[0] != 2) ++failed;
        pt2rt_tensor_free(out);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  pt2rt_runtime_free(rt);
}

// Version 2 under the sanitizers: options, a package from memory (the bytes freed at once), run_into from threads,
// and the error paths freeing what they made.
TEST(CApi, OptionsLoadFromMemoryAndRunIntoFromThreads) {
  std::vector<char> bytes;
  {
    FILE* f = std::fopen((kPackages + "/op_static.pt2").c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char chunk[65536];
    for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;) bytes.insert(bytes.end(), chunk, chunk + n);
    std::fclose(f);
  }
  pt2rt_options* o = nullptr;
  ASSERT_EQ(pt2rt_options_create(&o), PT2RT_OK);
  EXPECT_EQ(pt2rt_options_set_num_runners(o, 0), PT2RT_ERROR_USAGE);
  EXPECT_EQ(pt2rt_options_set_num_runners(o, 2), PT2RT_OK);
  EXPECT_EQ(pt2rt_options_add_ops_library(o, kOps), PT2RT_OK);
  EXPECT_EQ(pt2rt_options_set_cpu_isa(o, "no_such_isa"), PT2RT_OK);
  pt2rt_runtime* rt = nullptr;
  EXPECT_EQ(pt2rt_load_from_memory(bytes.data(), bytes.size(), o, &rt), PT2RT_ERROR_PACKAGE);
  EXPECT_EQ(rt, nullptr);
  EXPECT_EQ(pt2rt_options_set_cpu_isa(o, nullptr), PT2RT_OK);
  std::vector<char> truncated(bytes.begin(), bytes.begin() + bytes.size() / 2);
  EXPECT_EQ(pt2rt_load_from_memory(truncated.data(), truncated.size(), o, &rt), PT2RT_ERROR_PACKAGE);
  ASSERT_EQ(pt2rt_load_from_memory(bytes.data(), bytes.size(), o, &rt), PT2RT_OK) << pt2rt_last_error();
  pt2rt_options_free(o);
  std::fill(bytes.begin(), bytes.end(), 0);
  bytes = std::vector<char>();
  const int64_t* shape = nullptr;
  size_t ndim = 0;
  ASSERT_EQ(pt2rt_input_spec(rt, 0, nullptr, nullptr, &shape, &ndim), PT2RT_OK);
  size_t numel = 1;
  for (size_t i = 0; i < ndim; ++i) numel *= static_cast<size_t>(shape[i]);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> x(numel), y(numel);
      for (int i = 0; i < 20; ++i) {
        for (size_t k = 0; k < numel; ++k) x[k] = static_cast<float>(k) * 0.5f + static_cast<float>(t * 100 + i);
        const pt2rt_tensor_view in{x.data(), shape, ndim, PT2RT_FLOAT32};
        const pt2rt_output_view out{y.data(), shape, ndim, PT2RT_FLOAT32};
        if (pt2rt_run_into(rt, &in, 1, &out, 1) != PT2RT_OK || y != x) ++wrong;  // the identity
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  std::vector<float> x(numel, 1.0f);
  const pt2rt_tensor_view in{x.data(), shape, ndim, PT2RT_FLOAT32};
  const pt2rt_output_view onto_input{x.data(), shape, ndim, PT2RT_FLOAT32};
  EXPECT_EQ(pt2rt_run_into(rt, &in, 1, &onto_input, 1), PT2RT_ERROR_USAGE);
  EXPECT_NE(std::string(pt2rt_last_error()).find("overlaps input 0"), std::string::npos) << pt2rt_last_error();
  EXPECT_EQ(pt2rt_run_into(rt, &in, 1, nullptr, 1), PT2RT_ERROR_USAGE);
  EXPECT_EQ(pt2rt_run_into(rt, nullptr, 1, &onto_input, 1), PT2RT_ERROR_USAGE);
  pt2rt_runtime_free(rt);
}
