// pt2rt::Runtime and pt2run on the packages export_packages.py made (ctest fixture "packages").
#include <pt2rt/aten.h>
#include <pt2rt/pt2rt.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <malloc.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <numeric>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "test_env.h"
#include "test_shell.h"

namespace fs = std::filesystem;

namespace {

const std::string kPackages = test_packages_dir();
const std::string kOps = IDENTITY_CONV_OPS_LIBRARY;
const std::string kProbeOps = PT2RT_PROBE_OPS_LIBRARY;
const std::string kPt2run = pt2run_command();
const std::string kNet = kPackages + "/net_dynamic.pt2";
const std::string kOp = kPackages + "/op_static.pt2";

pt2rt::Options with_ops(int runners = 1) {
  pt2rt::Options o;
  o.ops_libraries = {kOps};
  o.num_runners = runners;
  return o;
}

pt2rt::TensorView view_of(const at::Tensor& t) {
  return pt2rt::TensorView{t.const_data_ptr(), t.sizes().vec(), pt2rt::DType::Float32};
}

at::Tensor run1(const pt2rt::Runtime& rt, const at::Tensor& x) { return pt2rt::run(rt, {x}).at(0); }

// The error a call throws, as (code, message); fails the test when it throws nothing.
template <typename F>
std::pair<pt2rt::ErrorCode, std::string> error_of(F&& f) {
  try {
    f();
  } catch (const pt2rt::Error& e) {
    return {e.code(), e.what()};
  }
  ADD_FAILURE() << "no pt2rt::Error thrown";
  return {pt2rt::ErrorCode::Usage, ""};
}

#define EXPECT_ERROR(call, expected_code, fragment)                                      \
  do {                                                                                   \
    auto [code_, message_] = error_of([&] { call; });                                    \
    EXPECT_EQ(std::string(pt2rt::error_code_name(code_)), pt2rt::error_code_name(expected_code)) << message_; \
    EXPECT_NE(message_.find(fragment), std::string::npos) << message_;                   \
    EXPECT_EQ(message_.find('\n'), std::string::npos) << "not one line: " << message_;  \
  } while (0)

int shell(const std::string& command) { return test_shell::exit_code(command); }

TEST(Runtime, GoldenCasesPassForEveryPackage) {
  for (const auto& package : {kNet, kOp, kPackages + "/net_fp16.pt2", kPackages + "/net_bf16.pt2"}) {
    const pt2rt::Runtime rt = pt2rt::Runtime::load(package, with_ops());
    const pt2rt::VerifyReport report = rt.verify();
    EXPECT_TRUE(report.passed()) << package;
    EXPECT_EQ(report.cases.size(), rt.spec().golden_names.size());
    for (const auto& c : report.cases) EXPECT_TRUE(c.passed) << package << " " << c.name << ": " << c.reason;
  }
}

TEST(Verify, AValueMismatchFailsItsCaseAndSaysByHowMuch) {
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kPackages + "/bad/golden_wrong_values.pt2", with_ops());
  const pt2rt::VerifyReport report = rt.verify();
  ASSERT_EQ(report.cases.size(), 4u);
  EXPECT_FALSE(report.passed());
  for (size_t i = 0; i < report.cases.size(); ++i) {
    const auto& c = report.cases[i];
    EXPECT_EQ(c.passed, i != 1) << c.name << ": " << c.reason;
  }
  EXPECT_NEAR(report.cases[1].max_abs_error, 0.5, 1e-4);
  EXPECT_EQ(report.cases[1].reason.rfind("output 0 differs beyond rtol", 0), 0u) << report.cases[1].reason;
}

TEST(Verify, AShapeOrDtypeMismatchFailsItsCase) {
  for (const auto& [file, expected] : std::vector<std::pair<std::string, std::string>>{
           {"golden_wrong_shape.pt2", "output 0: expected Float [4, 4, 32, 32], got Float [4, 8, 32, 32]"},
           {"golden_wrong_dtype.pt2", "output 0: expected Double [4, 8, 32, 32], got Float [4, 8, 32, 32]"}}) {
    const pt2rt::VerifyReport report = pt2rt::Runtime::load(kPackages + "/bad/" + file, with_ops()).verify();
    ASSERT_EQ(report.cases.size(), 4u) << file;
    EXPECT_FALSE(report.cases[0].passed) << file;
    EXPECT_EQ(report.cases[0].reason, expected) << file;
    EXPECT_TRUE(report.cases[1].passed && report.cases[2].passed && report.cases[3].passed) << file;
  }
}

TEST(Verify, NaNMatchesOnlyNaN) {
  // The unusual-input test shows NaN outputs pass where eager has NaN too; here the golden case has NaN where the
  // package computes numbers.
  const pt2rt::VerifyReport report =
      pt2rt::Runtime::load(kPackages + "/bad/golden_nan.pt2", with_ops()).verify();
  ASSERT_EQ(report.cases.size(), 4u);
  EXPECT_FALSE(report.cases[2].passed);
  EXPECT_EQ(report.cases[2].reason.rfind("output 0 differs beyond rtol", 0), 0u) << report.cases[2].reason;
  EXPECT_TRUE(report.cases[0].passed && report.cases[1].passed && report.cases[3].passed);
}

TEST(Verify, Pt2runExitsOneOnAMismatch) {
  const fs::path out = fs::temp_directory_path() / ("pt2run-verify-" + std::to_string(getpid()) + ".txt");
  EXPECT_EQ(shell(kPt2run + " verify " + kPackages + "/bad/golden_wrong_values.pt2 --ops " + kOps + " > " +
                  out.string()),
            1);
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(out);
  EXPECT_NE(text.find("FAIL min_batch=1"), std::string::npos) << text;
  EXPECT_NE(text.find("MISMATCH: 3 of 4 golden cases passed"), std::string::npos) << text;
}

// aliasing.pt2 returns (x.reshape(batch, -1), a constant as it is, y, y): every output must be the caller's alone.
TEST(Runtime, OutputsAreOwnedWhateverTheModelReturns) {
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kPackages + "/aliasing.pt2", with_ops());
  EXPECT_TRUE(rt.verify().passed());
  std::vector<float> x(3 * 3 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  const std::vector<float> given = x;
  const pt2rt::TensorView in{x.data(), {3, 3, 4}, pt2rt::DType::Float32};
  std::vector<pt2rt::Tensor> out = rt.run({in});
  ASSERT_EQ(out.size(), 4u);
  ASSERT_EQ(out[0].shape(), (std::vector<int64_t>{3, 12}));
  const auto floats = [](const pt2rt::Tensor& t) { return static_cast<const float*>(t.data()); };
  // the view of the input is a copy: the caller reuses its buffer, the output keeps the values
  EXPECT_NE(out[0].data(), static_cast<const void*>(x.data()));
  std::fill(x.begin(), x.end(), -1.0f);
  EXPECT_EQ(std::vector<float>(floats(out[0]), floats(out[0]) + given.size()), given);
  // the same tensor twice: two buffers
  ASSERT_NE(out[2].data(), out[3].data());
  static_cast<float*>(out[2].mutable_data())[1] = 1e6f;
  EXPECT_EQ(floats(out[3])[1], 2.0f * given[1]);
  // the constant: writing into the output changes neither the model nor the next run's output
  ASSERT_EQ(out[1].shape(), (std::vector<int64_t>{2, 3}));
  static_cast<float*>(out[1].mutable_data())[4] = 42.0f;
  const std::vector<pt2rt::Tensor> again = rt.run({in});
  EXPECT_EQ(floats(again[1])[4], 4.0f);
  EXPECT_NE(again[1].data(), out[1].data());
  EXPECT_EQ(floats(again[0])[0], -1.0f);
  EXPECT_TRUE(rt.verify().passed());
}

// run_into writes into the caller's buffers what run returns, aliasing outputs included, and refuses views that do
// not fit with nothing written.
TEST(Runtime, RunIntoWritesWhatRunReturnsIntoTheCallersBuffers) {
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kPackages + "/aliasing.pt2", with_ops());
  std::vector<float> x(3 * 3 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 7.5f;
  const pt2rt::TensorView in{x.data(), {3, 3, 4}, pt2rt::DType::Float32};
  const std::vector<pt2rt::Tensor> expected = rt.run({in});
  std::vector<float> o0(36, -99), o1(6, -99), o2(36, -99), o3(36, -99);
  const auto views = [&](std::vector<int64_t> s0) {
    return std::vector<pt2rt::OutputView>{{o0.data(), std::move(s0), pt2rt::DType::Float32},
                                          {o1.data(), {2, 3}, pt2rt::DType::Float32},
                                          {o2.data(), {3, 3, 4}, pt2rt::DType::Float32},
                                          {o3.data(), {3, 3, 4}, pt2rt::DType::Float32}};
  };
  rt.run_into({in}, views({3, 12}));
  const std::vector<std::vector<float>*> got = {&o0, &o1, &o2, &o3};
  for (size_t i = 0; i < 4; ++i) {
    const auto* e = static_cast<const float*>(expected[i].data());
    EXPECT_EQ(*got[i], std::vector<float>(e, e + expected[i].numel())) << "output " << i;
  }
  // refused before running: count, dtype, rank, static dim, null buffer, overlaps
  const auto refused = [&](std::vector<pt2rt::OutputView> v, const std::string& what) {
    const auto [code, message] = error_of([&] { rt.run_into({in}, v); });
    EXPECT_EQ(code, pt2rt::ErrorCode::Usage) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
  };
  std::fill(o0.begin(), o0.end(), -99.0f);
  auto v = views({3, 12});
  v.pop_back();
  refused(v, "expected 4 output views, got 3");
  v = views({3, 12});
  v[1].dtype = pt2rt::DType::Float64;
  refused(v, "output 1 (" + rt.spec().outputs[1].name + "): expected dtype float32, got float64");
  refused(views({3, 3, 4}), "output 0 (" + rt.spec().outputs[0].name + "): expected shape");
  v = views({3, 12});
  v[1].shape = {3, 2};
  refused(v, "expected shape [2, 3], got [3, 2]");
  v = views({3, 12});
  v[2].data = nullptr;
  refused(v, "output 2 (" + rt.spec().outputs[2].name + "): data is null");
  v = views({3, 12});
  v[3].data = o2.data() + 4;
  refused(v, "its buffer overlaps output 2's");
  v = views({3, 12});
  v[2].data = x.data();
  refused(v, "its buffer overlaps input 0's");
  // a dynamic dim known only after the run: refused, nothing written
  refused(views({2, 12}), "is [3, 12] for these inputs, the view is [2, 12]; nothing was written");
  EXPECT_EQ(o0, std::vector<float>(36, -99.0f));
  // bad inputs stay input errors
  const std::vector<float> small(4);
  EXPECT_EQ(error_of([&] { rt.run_into({pt2rt::TensorView{small.data(), {1, 4}, pt2rt::DType::Float32}}, views({3, 12})); })
                .first,
            pt2rt::ErrorCode::Input);
}

// Counts what torch's default CPU allocator hands out, in front of it.
class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n > 0) count.fetch_add(1);  // torch's gives no memory for 0 bytes
    return next_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return next_->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t n) const override { std::memcpy(dest, src, n); }
  std::atomic<int64_t> count{0};

 private:
  c10::Allocator* next_ = c10::GetDefaultCPUAllocator();
};

void into(const pt2rt::Runtime& r, const at::Tensor& x, at::Tensor& out) {
  r.run_into({view_of(x)}, {pt2rt::OutputView{out.data_ptr(), out.sizes().vec(), pt2rt::DType::Float32}});
}

pt2rt::Options reusing(bool on, int runners = 1) {
  pt2rt::Options o = with_ops(runners);
  o.reuse_run_memory = on;
  return o;
}

// Options::reuse_run_memory: once warm, a model of fixed shapes allocates nothing per run_into (its intermediates
// and outputs come from the blocks earlier runs freed); off, every run allocates. The answers are the same, at
// any batch size in any order.
TEST(Runtime, ReusedRunMemoryMakesRunIntoAllocateNothingOnceWarm) {
  static CountingAllocator counting;  // torch may keep it past the test
  c10::SetCPUAllocator(&counting, 0);
  const int threads = pt2rt::num_threads();
  pt2rt::set_num_threads(1);  // allocations of other threads of the pool would be counted too
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kNet, reusing(true));
  const pt2rt::Runtime plain = pt2rt::Runtime::load(kNet, reusing(false));
  const auto input = [](int64_t batch) { return at::randn({batch, 3, 32, 32}); };
  const at::Tensor x = input(4);
  const at::Tensor expected = run1(plain, x);
  at::Tensor out = at::empty_like(expected);
  for (int i = 0; i < 3; ++i) into(rt, x, out);  // warm
  const int64_t before = counting.count.load();
  for (int i = 0; i < 20; ++i) into(rt, x, out);
  EXPECT_EQ(counting.count.load() - before, 0) << "allocations in 20 warm runs reusing memory";
  EXPECT_TRUE(at::equal(out, expected));
  const int64_t before_plain = counting.count.load();
  for (int i = 0; i < 20; ++i) into(plain, x, out);
  EXPECT_GE(counting.count.load() - before_plain, 20) << "allocations in 20 runs allocating anew";
  // sizes that change run to run: the same answers; then warm again at one size
  for (int64_t batch : {1, 8, 2, 8, 1, 32, 3}) {
    const at::Tensor xb = input(batch);
    at::Tensor ob = at::empty({batch, expected.size(1), expected.size(2), expected.size(3)});
    into(rt, xb, ob);
    EXPECT_TRUE(at::equal(ob, run1(plain, xb))) << "batch " << batch;
    EXPECT_TRUE(at::equal(run1(rt, xb), ob)) << "run(), batch " << batch;
  }
  for (int i = 0; i < 3; ++i) into(rt, x, out);
  const int64_t again = counting.count.load();
  for (int i = 0; i < 10; ++i) into(rt, x, out);
  EXPECT_EQ(counting.count.load() - again, 0) << "allocations after the batch size settled";
  pt2rt::set_num_threads(threads);
}

// Runs reusing their memory from several threads at once, each with its own buffers and batch size, two runners.
TEST(Runtime, ReusedRunMemoryServesRunsFromSeveralThreads) {
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kNet, reusing(true, 2));
  const pt2rt::Runtime plain = pt2rt::Runtime::load(kNet, reusing(false));
  std::vector<std::thread> workers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      const at::Tensor xt = at::randn({1 + t, 3, 32, 32});
      const at::Tensor et = run1(plain, xt);
      at::Tensor ot = at::empty_like(et);
      for (int i = 0; i < 25; ++i) {
        into(rt, xt, ot);
        if (!at::equal(ot, et)) ++wrong;
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Runtime, SpecDescribesThePackage) {
  const pt2rt::Spec spec = pt2rt::Runtime::read_spec(kNet);
  EXPECT_EQ(spec.format, "pt2rt-spec/2");
  ASSERT_EQ(spec.inputs.size(), 1u);
  EXPECT_EQ(spec.inputs[0].shape, (std::vector<int64_t>{-1, 3, 32, 32}));
  ASSERT_EQ(spec.inputs[0].dynamic_dims.size(), 1u);
  EXPECT_EQ(spec.inputs[0].dynamic_dims[0].min, 1);
  EXPECT_EQ(spec.inputs[0].dynamic_dims[0].max.value_or(-1), 32);
  EXPECT_EQ(spec.libraries, std::vector<std::string>{"libidentity_conv_ops.so"});
  EXPECT_EQ(spec.custom_classes.at(0).name, "my_ops::IdentityConvClass");
  ASSERT_EQ(spec.variants.size(), 3u);
  for (const auto& v : spec.variants) {
    EXPECT_EQ(v.sha256.size(), 64u);
    EXPECT_EQ(v.record.rfind("data/aotinductor/" + v.model + "/", 0), 0u) << v.record;
  }
}

TEST(Runtime, MatchesTheEagerModelFromPython) {
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kNet, with_ops());
  const auto x = pt2rt::load_tensors(kPackages + "/net_input.pt").at(0);
  const auto expected = pt2rt::to_aten(pt2rt::load_tensors(kPackages + "/net_expected.pt").at(0));
  const auto out = rt.run({x.view()});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(at::allclose(pt2rt::to_aten(out[0]), expected, 1.3e-6, 1e-5));
}

TEST(Runtime, DynamicBatchAtMinMaxAndBetween) {
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kNet, with_ops());
  at::manual_seed(0);
  for (int64_t batch : {1, 2, 17, 31, 32}) {
    const at::Tensor x = at::randn({batch, 3, 32, 32});
    const at::Tensor y = run1(rt, x);
    ASSERT_EQ(y.sizes(), (at::IntArrayRef{batch, 8, 32, 32}));
    for (int64_t i = 0; i < batch; i += std::max<int64_t>(1, batch / 4)) {  // a batch is its samples run alone
      EXPECT_TRUE(at::allclose(y[i], run1(rt, x.slice(0, i, i + 1).contiguous())[0], 1e-5, 1e-5)) << batch << "/" << i;
    }
  }
}

TEST(Runtime, AtenOverloadAcceptsAnyLayout) {
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kNet, with_ops());
  const at::Tensor x = at::randn({4, 3, 32, 32});
  const at::Tensor expected = run1(rt, x);
  EXPECT_TRUE(at::allclose(run1(rt, x.contiguous(at::MemoryFormat::ChannelsLast)), expected, 1e-5, 1e-5));
  const at::Tensor wide = at::randn({4, 3, 32, 64});
  EXPECT_TRUE(at::allclose(run1(rt, wide.slice(3, 0, 64, 2)), run1(rt, wide.slice(3, 0, 64, 2).contiguous()), 0, 0));
}

class Threads : public testing::TestWithParam<int> {};

TEST_P(Threads, ManyThreadsShareOneRuntime) {
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kNet, with_ops(GetParam()));
  at::manual_seed(1);
  std::vector<at::Tensor> inputs, expected;
  for (int64_t batch : {1, 2, 5, 8, 13}) {
    inputs.push_back(at::randn({batch, 3, 32, 32}));
    expected.push_back(run1(rt, inputs.back()));
  }
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 400; ++i) {  // 3200 runs per configuration
        const size_t k = rng() % inputs.size();
        try {
          const auto out = rt.run({view_of(inputs[k])});
          if (!at::allclose(pt2rt::to_aten(out.at(0)), expected[k], 1e-5, 1e-5)) ++mismatches;
        } catch (const std::exception&) {
          ++errors;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(errors.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Runners, Threads, testing::Values(1, 4));

// The test above shows results stay right under load; this one shows what num_runners does, through the probe op
// (probe_ops.cpp), which holds each call 5 ms and counts the calls in flight: with one runner, runs from four
// threads go one at a time; with four runners, several run at once - on any number of cores, however the threads
// are scheduled (with four runners the probe's calls wait for each other until two run at once; they would wait in
// vain, 60 s, if the runtime ran one at a time).
TEST(Runners, BoundHowManyRunsAreInFlight) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({2, 3});
  for (const int runners : {1, 4}) {
    pt2rt::Options o;
    o.ops_libraries = {kProbeOps};
    o.num_runners = runners;
    const pt2rt::Runtime rt = pt2rt::Runtime::load(kPackages + "/probe.pt2", o);
    void* lib = dlopen(kProbeOps.c_str(), RTLD_NOW | RTLD_NOLOAD);  // the copy the runtime loaded
    ASSERT_NE(lib, nullptr) << dlerror();
    const auto take_most_in_flight = reinterpret_cast<int (*)()>(dlsym(lib, "pt2rt_probe_take_most_in_flight"));
    ASSERT_NE(take_most_in_flight, nullptr);
    take_most_in_flight();
    const auto meet = reinterpret_cast<void (*)(int)>(dlsym(lib, "pt2rt_probe_meet"));
    ASSERT_NE(meet, nullptr);
    EXPECT_TRUE(at::allclose(run1(rt, x), x * 2 + 1));  // the first run folds constants, alone
    meet(runners == 1 ? 0 : 2);
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 8; ++i)
          if (!at::allclose(run1(rt, x), x * 2 + 1)) ++wrong;
      });
    }
    for (auto& th : threads) th.join();
    const int most = take_most_in_flight();
    dlclose(lib);
    EXPECT_EQ(wrong.load(), 0);
    if (runners == 1) {
      EXPECT_EQ(most, 1) << "one runner ran several calls at once";
    } else {
      EXPECT_GE(most, 2) << runners << " runners never ran two calls at once";
      EXPECT_LE(most, runners);
    }
  }
}

// set_num_threads holds on every thread that runs a model, also where the model never enters one of torch's own
// parallel ops (the probe package: an inductor kernel and the probe op) - torch sizes a thread's OpenMP team only
// inside those, so such a thread kept the default team of one thread per core whatever was asked.
TEST(Runtime, NumThreadsHoldsOnEveryThreadThatRuns) {
  const auto omp_max_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  ASSERT_NE(omp_max_threads, nullptr) << "torch's OpenMP runtime is not loaded";
  pt2rt::Options o;
  o.ops_libraries = {kProbeOps};
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kPackages + "/probe.pt2", o);
  const at::Tensor x = at::randn({2, 3});
  const int before = pt2rt::num_threads();
  // differs from the default of a thread on this machine (its cores), so a thread left at its default shows
  const int wanted = static_cast<int>(std::thread::hardware_concurrency()) + 1;
  int seen = 0, seen_after_change = 0;
  std::promise<void> ran, changed;
  pt2rt::set_num_threads(wanted);
  std::thread caller([&] {
    rt.run({view_of(x)});
    seen = omp_max_threads();
    ran.set_value();
    changed.get_future().wait();
    rt.run({view_of(x)});
    seen_after_change = omp_max_threads();
  });
  ran.get_future().wait();
  pt2rt::set_num_threads(1);  // from another thread: it reaches a thread that ran before it, at its next run
  changed.set_value();
  caller.join();
  pt2rt::set_num_threads(before);
  EXPECT_EQ(seen, wanted);
  EXPECT_EQ(seen_after_change, 1);
}

// Options::intra_op_threads sizes the OpenMP team of each run on its calling thread and gives the thread its own
// setting back afterwards, so runtimes loaded with different counts share threads (a server's workers). The team a
// run made stays in the calling thread's pool: the threads the process gained are the team's, whatever the timing.
TEST(Runtime, IntraOpThreadsSizeEachRunsTeamAndRestoreTheCallers) {
  const auto omp_max_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  const auto omp_set_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  ASSERT_TRUE(omp_max_threads && omp_set_threads) << "torch's OpenMP runtime is not loaded";
  const auto tasks = [] {
    return static_cast<int>(std::distance(fs::directory_iterator("/proc/self/task"), fs::directory_iterator{}));
  };
  const int many = static_cast<int>(std::thread::hardware_concurrency()) + 2;
  pt2rt::Options wide = with_ops(), one = with_ops();
  wide.intra_op_threads = many;
  one.intra_op_threads = 1;
  const pt2rt::Runtime rt_wide = pt2rt::Runtime::load(kPackages + "/reductions.pt2", wide);
  const pt2rt::Runtime rt_one = pt2rt::Runtime::load(kPackages + "/reductions.pt2", one);
  const std::vector<pt2rt::Tensor> inputs = rt_one.example_inputs();
  std::vector<pt2rt::TensorView> views;
  for (const auto& t : inputs) views.push_back(t.view());
  int grown_one = -1, grown_wide = -1, kept_one = -1, kept_wide = -1;
  std::thread caller([&] {
    rt_one.run(views);  // the process-wide setting is applied at a thread's first run
    omp_set_threads(many);  // the thread's own setting: runs of rt_one must not take it
    int before = tasks();
    rt_one.run(views);
    grown_one = tasks() - before;
    kept_one = omp_max_threads();
    omp_set_threads(1);  // and runs of rt_wide must not keep to it
    before = tasks();
    rt_wide.run(views);
    grown_wide = tasks() - before;
    kept_wide = omp_max_threads();
  });
  caller.join();
  EXPECT_EQ(grown_one, 0) << "a runtime of one intra-op thread ran a team of the calling thread's size";
  EXPECT_EQ(grown_wide, many - 1) << "a runtime of " << many << " intra-op threads ran another team";
  EXPECT_EQ(kept_one, many);
  EXPECT_EQ(kept_wide, 1);
  pt2rt::Options negative = with_ops();
  negative.intra_op_threads = -1;
  EXPECT_ERROR(pt2rt::Runtime::load(kNet, negative), pt2rt::ErrorCode::Usage,
               "intra_op_threads must be in 1..1024 (0: set_num_threads' count), got -1");
}

// Inductor splits a large reduction over the caller's OpenMP team and keeps one partial result per thread: the
// package sized that array by the exporting process's threads, so more threads here wrote past it (a crash or a
// wrong sum). The export's threads are this machine's cores at most.
TEST(Runtime, ReductionsRunOnMoreThreadsThanTheExportHad) {
  const int before = pt2rt::num_threads();
  const int many = 2 * static_cast<int>(std::thread::hardware_concurrency()) + 3;
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kPackages + "/reductions.pt2", with_ops());
  for (const int threads : {many, 1}) {
    pt2rt::set_num_threads(threads);  // applies at this thread's next run
    const pt2rt::VerifyReport report = rt.verify();
    EXPECT_EQ(report.cases.size(), 2u);
    for (const auto& c : report.cases) EXPECT_TRUE(c.passed) << threads << " threads, " << c.name << ": " << c.reason;
  }
  pt2rt::set_num_threads(before);
}

// GRU and RNN layers run through libpt2rt_kernels.so's pt2rt::rnn_layer (export_tools/recurrent.py), their input
// projections (18 rows) through its pt2rt::linear (export_tools/linear.py): a package names that library like any
// ops library, and the runtime finds it next to libpt2rt.so with nothing given.
TEST(Runtime, RecurrentLayersRunThroughTheKernelsLibraryNextToTheRuntime) {
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kPackages + "/recurrent.pt2");
  std::set<std::string> ops;
  for (const auto& op : rt.spec().custom_ops) {
    ops.insert(op.name);
    EXPECT_EQ(op.library, "libpt2rt_kernels.so") << op.name;
  }
  EXPECT_EQ(ops, (std::set<std::string>{"pt2rt::linear", "pt2rt::rnn_layer"}));
  ASSERT_EQ(rt.ops_libraries().size(), 1u);
  EXPECT_EQ(fs::path(rt.ops_libraries()[0]).parent_path(), fs::path(PT2RT_LIBRARY).parent_path());
  const pt2rt::VerifyReport report = rt.verify();  // batch 1, 4 and between: a dynamic batch through the kernels
  EXPECT_GE(report.cases.size(), 3u);
  for (const auto& c : report.cases) EXPECT_TRUE(c.passed) << c.name << ": " << c.reason;
}

TEST(RuntimeErrors, BadPackages) {
  const std::string bad = kPackages + "/bad/";
  EXPECT_ERROR(pt2rt::Runtime::load(kPackages + "/missing.pt2", with_ops()), pt2rt::ErrorCode::Package,
               "No such file or directory");
  EXPECT_ERROR(pt2rt::Runtime::load(kPackages, with_ops()), pt2rt::ErrorCode::Package, "is a directory");
  EXPECT_ERROR(pt2rt::Runtime::load(bad + "empty.pt2", with_ops()), pt2rt::ErrorCode::Package, "is empty");
  EXPECT_ERROR(pt2rt::Runtime::load(bad + "truncated.pt2", with_ops()), pt2rt::ErrorCode::Package, "not a .pt2 package");
  EXPECT_ERROR(pt2rt::Runtime::load(bad + "random.pt2", with_ops()), pt2rt::ErrorCode::Package, "not a .pt2 package");
  EXPECT_ERROR(pt2rt::Runtime::load(bad + "not_package.pt2", with_ops()), pt2rt::ErrorCode::Package,
               "not a .pt2 package");
  EXPECT_ERROR(pt2rt::Runtime::load(bad + "damaged_lib.pt2", with_ops()), pt2rt::ErrorCode::Package,
               "the compiled model library is damaged");
  EXPECT_ERROR(pt2rt::Runtime::load(bad + "cut_lib.pt2", with_ops()), pt2rt::ErrorCode::Package, "damaged");
  EXPECT_ERROR(pt2rt::Runtime::load(bad + "no_spec.pt2", with_ops()), pt2rt::ErrorCode::Package, "no pt2rt spec");
  EXPECT_ERROR(pt2rt::Runtime::load(bad + "bad_spec_format.pt2", with_ops()), pt2rt::ErrorCode::Package,
               "spec format 'pt2rt-spec/99' is not supported");
  EXPECT_ERROR(pt2rt::Runtime::load(bad + "missing_feature.pt2", with_ops()), pt2rt::ErrorCode::Package,
               "no CPU variant of the package runs on this host (avx2: this CPU lacks avx5124fmaps;");
  EXPECT_ERROR(pt2rt::Runtime::load(bad + "other_torch.pt2", with_ops()), pt2rt::ErrorCode::Package,
               "exported with torch 2.0.0+cpu");
  if (!at::hasCUDA()) {
    EXPECT_ERROR(pt2rt::Runtime::load(bad + "cuda_device.pt2", with_ops()), pt2rt::ErrorCode::Package,
                 "no usable CUDA device");
  }
}

TEST(RuntimeErrors, OpsLibraries) {
  pt2rt::Options o;
  o.ops_libraries = {kPackages + "/libmissing.so"};
  EXPECT_ERROR(pt2rt::Runtime::load(kNet, o), pt2rt::ErrorCode::OpsLibrary, "does not exist");
  o.ops_libraries = {kPackages + "/net_input.pt"};
  EXPECT_ERROR(pt2rt::Runtime::load(kNet, o), pt2rt::ErrorCode::OpsLibrary, "cannot load ops library");
  unsetenv("PT2RT_OPS_PATH");
  const std::string own_dir = fs::canonical(fs::path(kOps).parent_path()).string();  // libpt2rt.so's too
  EXPECT_ERROR(pt2rt::Runtime::load(kPackages + "/bad/unknown_library.pt2"), pt2rt::ErrorCode::OpsLibrary,
               "the package needs libnot_there.so, which was not found in " + own_dir + " (pass it with --ops");
  o.ops_libraries = {PT2RT_LIBRARY};  // a real library, without my_ops
  EXPECT_ERROR(pt2rt::Runtime::load(kPackages + "/bad/unknown_library.pt2", o), pt2rt::ErrorCode::OpsLibrary,
               "libnot_there.so, which was not found in " + own_dir + " and is not among the ops libraries given (" +
                   PT2RT_LIBRARY);
  // The libraries given come first, and the default lookup (next to libpt2rt.so) finds what they lack.
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kOp, o);
  ASSERT_EQ(rt.ops_libraries().size(), 2u);
  EXPECT_EQ(fs::path(rt.ops_libraries()[1]).filename(), "libidentity_conv_ops.so");
  EXPECT_TRUE(rt.verify().passed());
}

TEST(RuntimeErrors, AGivenLibraryOfTheSpecsNameIsNotLookedUpAgain) {
  // A file named libidentity_conv_ops.so that registers other ops (a copy of the probe ops): the package's library
  // by that name is the caller's, so the runtime does not load the one next to libpt2rt.so behind its back.
  const fs::path dir = fs::temp_directory_path() / ("pt2rt-named-" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::copy_file(kProbeOps, dir / "libidentity_conv_ops.so", fs::copy_options::overwrite_existing);
  const fs::path err = dir / "err.txt";
  EXPECT_EQ(shell(kPt2run + " verify " + kOp + " --ops " + (dir / "libidentity_conv_ops.so").string() + " 2>" +
                  err.string()),
            4);
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("not registered after loading " + fs::canonical(dir / "libidentity_conv_ops.so").string() +
                      ": op my_ops::identity_conv_op (from libidentity_conv_ops.so)"),
            std::string::npos)
      << text;
  fs::remove_all(dir);
}

TEST(RuntimeErrors, OpsLibraryFoundThroughTheSearchPath) {
  setenv("PT2RT_OPS_PATH", fs::path(kOps).parent_path().c_str(), 1);
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kOp);
  ASSERT_EQ(rt.ops_libraries().size(), 1u);
  EXPECT_EQ(fs::path(rt.ops_libraries()[0]).filename(), "libidentity_conv_ops.so");
  EXPECT_TRUE(rt.verify().passed());
}

TEST(RuntimeErrors, BadInputs) {
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kNet, with_ops());
  const at::Tensor x = at::randn({2, 3, 32, 32});
  const at::Tensor x64 = x.to(at::kDouble);
  const at::Tensor xl = at::ones({2, 3, 32, 32}, at::kLong);
  const at::Tensor big = at::randn({33, 3, 32, 32});
  using pt2rt::DType;
  using pt2rt::ErrorCode;
  using V = pt2rt::TensorView;
  EXPECT_ERROR(rt.run({}), ErrorCode::Input, "expected 1 input (x), got 0");
  EXPECT_ERROR(rt.run({view_of(x), view_of(x)}), ErrorCode::Input, "expected 1 input (x), got 2");
  EXPECT_ERROR(rt.run({V{x64.const_data_ptr(), {2, 3, 32, 32}, DType::Float64}}), ErrorCode::Input,
               "input 0 (x): expected dtype float32, got float64");
  EXPECT_ERROR(rt.run({V{xl.const_data_ptr(), {2, 3, 32, 32}, DType::Int64}}), ErrorCode::Input, "got int64");
  EXPECT_ERROR(rt.run({V{x.const_data_ptr(), {3, 32, 32}, DType::Float32}}), ErrorCode::Input,
               "expected 4 dims [batch, 3, 32, 32], got 3 dims [3, 32, 32]");
  EXPECT_ERROR(rt.run({V{x.const_data_ptr(), {1, 3, 32, 32, 1}, DType::Float32}}), ErrorCode::Input, "got 5 dims");
  EXPECT_ERROR(rt.run({V{x.const_data_ptr(), {1, 3, 64, 16}, DType::Float32}}), ErrorCode::Input,
               "(dim 2 must be 32)");
  EXPECT_ERROR(rt.run({V{x.const_data_ptr(), {1, 3, 16, 16}, DType::Float32}}), ErrorCode::Input, "dim 2 must be 32");
  EXPECT_ERROR(rt.run({V{x.const_data_ptr(), {2, 4, 32, 32}, DType::Float32}}), ErrorCode::Input, "dim 1 must be 3");
  EXPECT_ERROR(rt.run({V{big.const_data_ptr(), {33, 3, 32, 32}, DType::Float32}}), ErrorCode::Input,
               "dim 0 (batch) must be in 1..32, got 33");
  EXPECT_ERROR(rt.run({V{x.const_data_ptr(), {0, 3, 32, 32}, DType::Float32}}), ErrorCode::Input,
               "dim 0 (batch) must be in 1..32, got 0");
  EXPECT_ERROR(rt.run({V{nullptr, {1, 3, 32, 32}, DType::Float32}}), ErrorCode::Input, "data is null");
  if (at::hasCUDA()) {  // GPU memory for a CPU package: copied to the host by the runtime
    const at::Tensor g = x.narrow(0, 0, 1).contiguous().cuda();
    const auto moved = rt.run({V{g.const_data_ptr(), {1, 3, 32, 32}, DType::Float32, pt2rt::Device::CUDA}});
    EXPECT_TRUE(at::equal(pt2rt::to_aten(moved.at(0)), run1(rt, x.narrow(0, 0, 1).contiguous())));
  } else {
    EXPECT_ERROR(rt.run({V{x.const_data_ptr(), {1, 3, 32, 32}, DType::Float32, pt2rt::Device::CUDA}}), ErrorCode::Input,
                 "a cuda tensor, but this host has no usable CUDA device (the package runs on cpu)");
  }
  // and the runtime still works afterwards
  EXPECT_EQ(rt.run({view_of(x)}).at(0).shape(), (std::vector<int64_t>{2, 8, 32, 32}));
}

TEST(RuntimeErrors, AnErrorInsideTheModelIsARuntimeErrorAndTheRunnerServesOn) {
  // The probe op fails on +inf. With one runner, a runner not handed back after the failure would hang the next run.
  pt2rt::Options o;
  o.ops_libraries = {kProbeOps};
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kPackages + "/probe.pt2", o);
  const at::Tensor bad = at::full({2, 3}, std::numeric_limits<float>::infinity());
  // torch 2.11's AOTInductor does not give the caller the model's error; newer ones do
  const std::string failed =
      std::string(pt2rt::torch_version()).rfind("2.11.", 0) == 0
          ? std::string("the model failed (the AOTInductor of torch ") + pt2rt::torch_version() + " does not say why)"
          : "the model failed: pt2rt_probe::hold was asked to fail (its input holds +inf)";
  for (int i = 0; i < 3; ++i) {
    EXPECT_ERROR(rt.run({view_of(bad)}), pt2rt::ErrorCode::Runtime, failed);
    const at::Tensor x = at::randn({2, 3});
    EXPECT_TRUE(at::allclose(run1(rt, x), x * 2 + 1));
  }
  const fs::path in = fs::temp_directory_path() / ("pt2rt-inf-" + std::to_string(getpid()) + ".pt");
  pt2rt::save_tensors(in.string(), {pt2rt::Tensor::copy_of(view_of(bad))});
  const fs::path err = in.string() + ".err";
  EXPECT_EQ(shell(kPt2run + " run " + kPackages + "/probe.pt2 --ops " + kProbeOps + " --input " + in.string() +
                  " --output /dev/null 2> " + err.string()),
            7);
  std::ifstream e(err);
  const std::string text((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "pt2run: error (runtime): " + failed + "\n");
  fs::remove(in);
  fs::remove(err);
}

TEST(RuntimeErrors, NoTemporaryDirectoryIsLeftBehind) {
  const fs::path tmp = fs::temp_directory_path() / ("pt2rt-test-" + std::to_string(getpid()));
  fs::create_directories(tmp);
  setenv("TMPDIR", tmp.c_str(), 1);
  {
    const pt2rt::Runtime rt = pt2rt::Runtime::load(kNet, with_ops());
    EXPECT_FALSE(fs::is_empty(tmp)) << "the package is extracted below TMPDIR while loaded";
  }
  EXPECT_TRUE(fs::is_empty(tmp)) << "left behind after the runtime was destroyed";
  pt2rt::Options unchecked = with_ops();
  unchecked.check_sha256 = false;  // let AOTInductor itself fail on the damaged library
  EXPECT_ERROR(pt2rt::Runtime::load(kPackages + "/bad/junk_lib.pt2", unchecked), pt2rt::ErrorCode::Package,
               "AOTInductor cannot load");
  EXPECT_TRUE(fs::is_empty(tmp)) << "left behind after a failed load";
  fs::remove_all(tmp);
}

TEST(RuntimeErrors, TensorFiles) {
  EXPECT_ERROR(pt2rt::load_tensors(kPackages + "/nope.pt"), pt2rt::ErrorCode::IO, "cannot read tensor file");
  EXPECT_ERROR(pt2rt::load_tensors(kPackages + "/bad/text.pt"), pt2rt::ErrorCode::IO, "is not a tensor file");
  EXPECT_ERROR(pt2rt::load_tensors(kPackages + "/dict.pt"), pt2rt::ErrorCode::IO, "expected a tensor or a list");
  EXPECT_EQ(pt2rt::load_tensors(kPackages + "/two_tensors.pt").size(), 2u);
  const fs::path out = fs::temp_directory_path() / ("pt2rt-roundtrip-" + std::to_string(getpid()) + ".pt");
  const auto x = pt2rt::load_tensors(kPackages + "/net_input.pt");
  pt2rt::save_tensors(out, {x[0], x[0]});
  const auto back = pt2rt::load_tensors(out);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_TRUE(at::equal(pt2rt::to_aten(back[1]), pt2rt::to_aten(x[0])));
  fs::remove(out);
  EXPECT_ERROR(pt2rt::save_tensors("/nonexistent-dir/out.pt", x), pt2rt::ErrorCode::IO, "cannot write");
}

TEST(Pt2run, ExitCodes) {
  const std::string run = kPt2run + " ";
  const std::string ops = " --ops " + kOps;
  const std::string quiet = " >/dev/null 2>&1";
  EXPECT_EQ(shell(run + "info " + kNet + quiet), 0);
  EXPECT_EQ(shell(run + "info --json " + kNet + quiet), 0);
  EXPECT_EQ(shell(run + "verify " + kNet + ops + quiet), 0);
  EXPECT_EQ(shell(run + quiet), 2);
  EXPECT_EQ(shell(run + "frobnicate" + quiet), 2);
  EXPECT_EQ(shell(run + "bench " + kNet + " --iters 0" + ops + quiet), 2);
  EXPECT_EQ(shell(run + "verify " + kPackages + "/bad/empty.pt2" + ops + quiet), 3);
  EXPECT_EQ(shell(run + "verify " + kNet + " --ops /nonexistent/lib.so" + quiet), 4);
  EXPECT_EQ(shell(run + "run " + kNet + ops + " -i " + kPackages + "/net_input_float64.pt -o /tmp/x.pt" + quiet), 5);
  EXPECT_EQ(shell(run + "run " + kNet + ops + " -i " + kPackages + "/bad/text.pt -o /tmp/x.pt" + quiet), 6);
  EXPECT_EQ(shell(run + "run " + kNet + ops + " -i " + kPackages + "/net_input.pt -o /nonexistent/x.pt" + quiet), 6);
  EXPECT_EQ(shell(run + "--help" + quiet), 0);
  for (const char* sub : {"info", "run", "verify", "bench"}) EXPECT_EQ(shell(run + sub + " --help" + quiet), 0) << sub;
}

TEST(Pt2run, RunWritesWhatTorchLoadReads) {
  const fs::path out = fs::temp_directory_path() / ("pt2run-out-" + std::to_string(getpid()) + ".pt");
  ASSERT_EQ(shell(kPt2run + " run " + kNet + " --ops " + kOps + " --input " + kPackages + "/net_input.pt --output " +
                  out.string() + " 2>/dev/null"),
            0);
  const auto got = pt2rt::load_tensors(out);
  const auto expected = pt2rt::load_tensors(kPackages + "/net_expected.pt");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(at::allclose(pt2rt::to_aten(got[0]), pt2rt::to_aten(expected[0]), 1.3e-6, 1e-5));
  fs::remove(out);
}

TEST(Pt2run, SeveralInputFilesAreJoinedInOrderAndSeveralOutputsWritten) {
  // multi_io.pt2: (x, y) -> (op(x) + y, x * sum(y), count(x > 0) + 2^53, x > y); `--input x --input y` and one file
  // holding [x, y] are the same inputs, and the four outputs are the eager model's, in order (float within
  // tolerance, int64 and bool exactly). Swapped files give other values.
  const fs::path dir = fs::temp_directory_path() / ("pt2run-multi-io-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string run = kPt2run + " run " + kPackages + "/multi_io.pt2 --ops " + kOps + " ";
  const std::string p = kPackages + "/";
  ASSERT_EQ(shell(run + "--input " + p + "multi_io_x.pt --input " + p + "multi_io_y.pt -o " + (dir / "a.pt").string() +
                  " 2>/dev/null"),
            0);
  ASSERT_EQ(shell(run + "--input " + p + "multi_io_xy.pt -o " + (dir / "b.pt").string() + " 2>/dev/null"), 0);
  ASSERT_EQ(shell(run + "--input " + p + "multi_io_y.pt --input " + p + "multi_io_x.pt -o " + (dir / "c.pt").string() +
                  " 2>/dev/null"),
            0);
  const auto expected = pt2rt::load_tensors(p + "multi_io_expected.pt");
  ASSERT_EQ(expected.size(), 4u);
  for (const char* name : {"a.pt", "b.pt"}) {
    const auto got = pt2rt::load_tensors((dir / name).string());
    ASSERT_EQ(got.size(), 4u) << name;
    for (size_t i = 0; i < 2; ++i)
      EXPECT_TRUE(at::allclose(pt2rt::to_aten(got[i]), pt2rt::to_aten(expected[i]), 1.3e-6, 1e-5)) << name << " " << i;
    EXPECT_EQ(got[2].dtype(), pt2rt::DType::Int64);
    EXPECT_EQ(got[3].dtype(), pt2rt::DType::Bool);
    for (size_t i = 2; i < 4; ++i)
      EXPECT_TRUE(at::equal(pt2rt::to_aten(got[i]), pt2rt::to_aten(expected[i]))) << name << " " << i;
  }
  const auto swapped = pt2rt::load_tensors((dir / "c.pt").string());
  EXPECT_FALSE(at::equal(pt2rt::to_aten(swapped[3]), pt2rt::to_aten(expected[3])));
  fs::remove_all(dir);
}

TEST(Verify, IntegerAndBoolOutputsCompareExactly) {
  EXPECT_TRUE(pt2rt::Runtime::load(kPackages + "/multi_io.pt2", with_ops()).verify().passed());
  // case, output: off by one where a comparison through double sees no difference (2^53 + 4k + 1); off by one
  // under a spec whose int64 tolerance would allow it; one bool flipped under a bool tolerance of 1
  for (const auto& [file, failing, output] : std::vector<std::tuple<std::string, size_t, int>>{
           {"golden_int_near_2p53.pt2", 0, 2}, {"golden_int_within_a_tolerance.pt2", 1, 2},
           {"golden_bool_flipped.pt2", 2, 3}}) {
    const pt2rt::VerifyReport report = pt2rt::Runtime::load(kPackages + "/bad/" + file, with_ops()).verify();
    ASSERT_EQ(report.cases.size(), 4u) << file;  // the example, batch min and max, one between
    for (size_t c = 0; c < report.cases.size(); ++c) {
      EXPECT_EQ(report.cases[c].passed, c != failing) << file << " case " << c << ": " << report.cases[c].reason;
    }
    EXPECT_EQ(report.cases[failing].reason.rfind("output " + std::to_string(output) + " differs", 0), 0u)
        << file << ": " << report.cases[failing].reason;
  }
}

TEST(RuntimeErrors, InputsSharingANamedDimMustAgreeOnIt) {
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kPackages + "/multi_io.pt2", with_ops());
  const at::Tensor x4 = at::randn({4, 3, 4, 4}), y4 = at::randn({4, 3, 4, 4}), y5 = at::randn({5, 3, 4, 4});
  EXPECT_ERROR(rt.run({view_of(x4), view_of(y5)}), pt2rt::ErrorCode::Input,
               "input 1 (y): dim 0 (batch) is 5, but input 0 (x) has batch = 4");
  EXPECT_EQ(rt.run({view_of(x4), view_of(y4)}).size(), 4u);
}

TEST(Documented, TheLocalVersionOfTorchIsNotCompared) {
  // "2.13.0+cu999" against a "2.13.0+cpu" runtime: the same release, another build; only the release is the ABI.
  EXPECT_TRUE(pt2rt::Runtime::load(kPackages + "/bad/other_local_version.pt2", with_ops()).verify().passed());
}

TEST(Documented, APackageFromThisTorchOrAnOlderOneInTheRangeLoadsANewerOneDoesNot) {
  // AOTInductor's promise (compat.cpp): a model library runs under the libtorch that made it or a newer one.
  EXPECT_TRUE(pt2rt::Runtime::load(kPackages + "/bad/other_patch.pt2", with_ops()).verify().passed());
  EXPECT_TRUE(pt2rt::Runtime::load(kPackages + "/bad/older_torch_in_range.pt2", with_ops()).verify().passed());
  const std::string here = pt2rt::torch_version();
  const int minor = std::stoi(here.substr(here.find('.') + 1));
  const std::string newer = "2." + std::to_string(minor + 1) + ".0+cpu";
  EXPECT_ERROR(pt2rt::Runtime::load(kPackages + "/bad/newer_torch.pt2", with_ops()), pt2rt::ErrorCode::Package,
               "the package was exported with torch " + newer + ", newer than this runtime's torch " + here);
  EXPECT_ERROR(pt2rt::Runtime::load(kPackages + "/bad/other_torch.pt2", with_ops()), pt2rt::ErrorCode::Package,
               "exported with torch 2.0.0+cpu, older than the oldest supported torch 2.11");
}

TEST(Pt2run, OutputFilesAreWhatTorchLoadReads) {
  // Read back by torch itself, not by our own reader: a writer and reader that agree on a wrong format pass
  // RunWritesWhatTorchLoadReads, not this (a list was written through torch.jit._pickle, which torch.load refuses
  // by default). One output is a tensor; several are a tuple.
  const fs::path dir = fs::temp_directory_path() / ("pt2run-torchload-" + std::to_string(getpid()));
  fs::create_directories(dir);
  ASSERT_EQ(shell(kPt2run + " run " + kNet + " --ops " + kOps + " --input " + kPackages + "/net_input.pt --output " +
                  (dir / "one.pt").string() + " 2>/dev/null"),
            0);
  const at::Tensor a = at::arange(6, at::kFloat).reshape({2, 3}), b = at::ones({4}, at::kLong);
  pt2rt::save_tensors((dir / "two.pt").string(), {pt2rt::from_aten(a), pt2rt::from_aten(b)});
  const std::string check =
      "import sys, torch\n"
      "one, two = torch.load(sys.argv[1]), torch.load(sys.argv[3])\n"
      "assert isinstance(one, torch.Tensor), type(one)\n"
      "torch.testing.assert_close(one, torch.load(sys.argv[2]), rtol=1.3e-6, atol=1e-5)\n"
      "assert isinstance(two, tuple) and len(two) == 2, two\n"
      "torch.testing.assert_close(two[0], torch.arange(6.0).reshape(2, 3), rtol=0, atol=0)\n"
      "torch.testing.assert_close(two[1], torch.ones(4, dtype=torch.long), rtol=0, atol=0)\n";
  std::ofstream(dir / "check.py") << check;
  EXPECT_EQ(shell(std::string(PT2RT_PYTHON) + " " + (dir / "check.py").string() + " " + (dir / "one.pt").string() + " " +
                  kPackages + "/net_expected.pt " + (dir / "two.pt").string()),
            0);
  fs::remove_all(dir);
}

TEST(Pt2run, RunsWithAnEmptyEnvironment) {
  EXPECT_EQ(shell("env -i " + kPt2run + " verify " + kNet + " --ops " + kOps + " >/dev/null 2>&1"), 0);
}

// The JSON `pt2run bench ... --json` prints; empty when it fails. `prefix` runs pt2run under another command.
std::string bench_json(const std::string& args, const std::string& prefix = "") {
  const fs::path out = fs::temp_directory_path() / ("pt2run-bench-" + std::to_string(getpid()) + ".json");
  const int rc = shell(prefix + kPt2run + " bench " + kNet + " --ops " + kOps + " " + args + " --json > " + out.string());
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(out);
  return rc == 0 ? text : std::string();
}

TEST(Pt2run, BenchPrintsJson) {
  const std::string text = bench_json("--warmup 2 --iters 20 --threads 2 --runners 2");
  ASSERT_FALSE(text.empty());
  for (const char* key : {"\"latency_ms\"", "\"p50\"", "\"p90\"", "\"p99\"", "\"mean\"", "\"throughput_per_s\""}) {
    EXPECT_NE(text.find(key), std::string::npos) << key << " in " << text;
  }
}

TEST(Pt2run, BenchSplitsTheCoresItMayUseBetweenCallers) {
  // Pinned with taskset to k CPUs: one caller gets torch's default (k threads), two callers k/2 each (at least 1) -
  // the cores pt2run may run on, not the machine's (a container's cpuset or taskset otherwise oversubscribes).
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  for (const size_t k : {1, 2, 4}) {
    if (k > cpus.size()) break;
    std::string list;
    for (size_t i = 0; i < k; ++i) list += (i ? "," : "") + std::to_string(cpus[i]);
    const std::string pin = "taskset -c " + list + " ";
    const std::string one = bench_json("--warmup 1 --iters 5 --threads 1", pin);
    const std::string two = bench_json("--warmup 1 --iters 5 --threads 2", pin);
    EXPECT_NE(one.find("\"intra_op_threads\":" + std::to_string(k) + ","), std::string::npos) << k << " CPUs: " << one;
    EXPECT_NE(two.find("\"intra_op_threads\":" + std::to_string(std::max<size_t>(1, k / 2)) + ","), std::string::npos)
        << k << " CPUs: " << two;
  }
}

TEST(Pt2run, BenchHelpShowsTheDefaults) {
  const fs::path out = fs::temp_directory_path() / ("pt2run-help-" + std::to_string(getpid()) + ".txt");
  ASSERT_EQ(shell(kPt2run + " bench --help > " + out.string()), 0);
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(out);
  for (const char* shown : {"--warmup INT:NONNEGATIVE=10", "--iters INT:POSITIVE=100", "[1 - 256]=1"})
    EXPECT_NE(text.find(shown), std::string::npos) << shown << " in:\n" << text;
}

TEST(Pt2run, BenchTakesIntraOpThreads) {
  const std::string text = bench_json("--warmup 1 --iters 5 --intra-op-threads 1");
  ASSERT_FALSE(text.empty());
  EXPECT_NE(text.find("\"intra_op_threads\":1"), std::string::npos) << text;
  EXPECT_EQ(shell(kPt2run + " bench " + kNet + " --intra-op-threads 0 >/dev/null 2>&1"), 2);
}

TEST(Pt2run, OneIntraOpThreadRunsTheModelOnOneThread) {
  // --intra-op-threads 1 is a promise to a service that packs models per core: every pool the model uses (inductor's
  // OpenMP loops, oneDNN, MKL) stays on the calling thread. Which threads spent CPU time in the measured runs is a
  // fact about threads, whatever else the machine runs (a process's CPU share is not: it judged wrongly beside
  // another test). Batch 32 gives each kernel work enough to split over a team; with two intra-op threads the
  // second thread's share shows that a team is seen when there is one.
  const fs::path input = fs::temp_directory_path() / ("pt2run-cores-" + std::to_string(getpid()) + ".pt");
  pt2rt::save_tensors(input, {pt2rt::from_aten(at::randn({32, 3, 32, 32}))});
  const auto working_threads = [&](int intra_op_threads) {
    const std::string text = bench_json("--input " + input.string() + " --warmup 5 --iters 100 --threads 1 " +
                                        "--intra-op-threads " + std::to_string(intra_op_threads));
    EXPECT_FALSE(text.empty());
    if (text.empty()) return std::make_pair(-1, text);
    const std::vector<double> cpu = nlohmann::json::parse(text).at("thread_cpu_s").get<std::vector<double>>();
    const double total = std::accumulate(cpu.begin(), cpu.end(), 0.0);
    // a thread that did a twentieth of the work ran kernels; main waiting in join, say, does not come near it
    const auto n = std::count_if(cpu.begin(), cpu.end(), [&](double s) { return s >= 0.05 * total; });
    return std::make_pair(static_cast<int>(n), text);
  };
  const auto [one, one_text] = working_threads(1);
  const auto [two, two_text] = working_threads(2);
  fs::remove(input);
  EXPECT_EQ(one, 1) << "one intra-op thread, and the model ran on " << one << " threads: " << one_text;
  EXPECT_GE(two, 2) << "two intra-op threads, and the model ran on " << two << ": " << two_text;
}

TEST(Pt2run, BenchWarmsUpOnTheThreadsItMeasures) {
  // Each thread that runs a model gets an OpenMP team; warm-up runs on main left an idle team there, and libgomp
  // then stopped spin-waiting (its threads outnumbered the cores): every measured call paid a wake-up. With the
  // warm-up on the bench threads, warming up adds no thread to the process.
  const auto threads_of = [](const std::string& text) {
    const auto at = text.find("\"process_threads\":");
    return at == std::string::npos ? -1 : std::atoi(text.c_str() + at + 18);
  };
  for (const char* callers : {"1", "2"}) {
    const std::string args = std::string("--iters 200 --intra-op-threads 2 --threads ") + callers;  // every caller runs
    const int warmed = threads_of(bench_json(args + " --warmup 20")), cold = threads_of(bench_json(args + " --warmup 0"));
    EXPECT_GT(cold, 1) << callers;
    EXPECT_EQ(warmed, cold) << callers << " caller(s)";
  }
}

TEST(Pt2run, BenchReportsItsOwnPeakResidentMemory) {
  // what make bench-peers compares per engine: at least libtorch's, and pt2run's own - not the peak of the process
  // that started it (ru_maxrss keeps that across exec: a Python benchmark's gigabytes were reported as pt2run's)
  const auto peak_of = [](const std::string& prefix) {
    const auto j = nlohmann::json::parse(bench_json("--iters 5 --warmup 1", prefix));
    return j.at("peak_rss_mib").get<double>();
  };
  const double alone = peak_of("");
  EXPECT_GT(alone, 50.0) << "libtorch alone is larger";
  // a parent that touched 1 GiB, then exec'd pt2run in place of itself
  const double after_big_parent = peak_of(
      "python3 -c \"import os, sys; b = b'x' * (1 << 30); os.execvp(sys.argv[1], sys.argv[1:])\" ");
  EXPECT_LT(after_big_parent, alone + 512.0) << "alone " << alone << " MiB";
}

TEST(Pt2run, AllocatesThroughItsBuildsMalloc) {
  // pt2run links jemalloc (runtime/CMakeLists.txt; not under the sanitizers) and exports its malloc, so every library
  // of the process allocates through it: libtorch's operator registrations alone put tens of MiB in its statistics,
  // where pt2run's own allocations are a few KiB
  const auto j = nlohmann::json::parse(bench_json("--iters 5 --warmup 1"));
  const std::string allocator = j.at("allocator").get<std::string>();
  EXPECT_EQ(allocator.rfind(std::string(PT2RUN_ALLOCATOR) + " ", 0), 0u) << allocator;
  const bool jemalloc = std::string(PT2RUN_ALLOCATOR) == "jemalloc";
  if (jemalloc) {
    EXPECT_GT(j.at("allocated_mib").get<double>(), 16.0);
  } else {
    EXPECT_EQ(j.at("allocated_mib").get<double>(), 0.0);
  }
  // glibc's malloc policy: applied where glibc's malloc serves (not beside jemalloc, whose mallctl it finds; not
  // under ASan, whose malloc ignores it)
#if defined(__SANITIZE_ADDRESS__)
  const bool sanitized = true;
#else
  const bool sanitized = false;
#endif
  EXPECT_EQ(j.at("keeps_freed_memory").get<bool>(), !jemalloc && !sanitized);
}

TEST(Documented, NumRunnersOutsideItsRangeIsAUsageError) {
  EXPECT_ERROR(pt2rt::Runtime::load(kNet, with_ops(0)), pt2rt::ErrorCode::Usage, "num_runners must be in 1..1024, got 0");
  EXPECT_ERROR(pt2rt::Runtime::load(kNet, with_ops(INT32_MAX)), pt2rt::ErrorCode::Usage, "got 2147483647");
}

TEST(Documented, AMissingClassIsNamedWithItsLibrary) {
  EXPECT_ERROR(pt2rt::Runtime::load(kPackages + "/bad/missing_class.pt2", with_ops()), pt2rt::ErrorCode::OpsLibrary,
               "class my_ops::NotThere (from libidentity_conv_ops.so)");
  // pt2rt's kernels library, loaded after the caller's my_ops library, registers no my_ops: the error is the class,
  // not a refusal to register my_ops twice
  EXPECT_ERROR(pt2rt::Runtime::load(kPackages + "/bad/missing_class_and_a_kernel.pt2", with_ops()),
               pt2rt::ErrorCode::OpsLibrary, "class my_ops::NotThere (from libidentity_conv_ops.so)");
}

TEST(Documented, CheckTorchVersionFalseLoadsAnotherTorchsPackage) {
  pt2rt::Options o = with_ops();
  EXPECT_ERROR(pt2rt::Runtime::load(kPackages + "/bad/other_torch.pt2", o), pt2rt::ErrorCode::Package,
               "exported with torch 2.0.0+cpu");
  o.check_torch_version = false;
  EXPECT_TRUE(pt2rt::Runtime::load(kPackages + "/bad/other_torch.pt2", o).verify().passed());
}

TEST(Documented, DtypeNamesRoundTrip) {
  using pt2rt::DType;
  for (DType d : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64, DType::Int32,
                  DType::Int16, DType::Int8, DType::UInt8, DType::Bool}) {
    EXPECT_EQ(pt2rt::dtype_from_name(pt2rt::dtype_name(d)), d) << pt2rt::dtype_name(d);
  }
  EXPECT_EQ(pt2rt::dtype_size(DType::BFloat16), 2u);
  EXPECT_EQ(pt2rt::dtype_size(DType::Int64), 8u);
  EXPECT_FALSE(pt2rt::dtype_from_name("float"));
  EXPECT_FALSE(pt2rt::dtype_from_name("Float32"));
}

TEST(Documented, TensorCopyOfOwnsItsMemoryAndMutableDataWrites) {
  std::vector<float> src = {1, 2, 3, 4, 5, 6};
  pt2rt::Tensor t = pt2rt::Tensor::copy_of(pt2rt::TensorView{src.data(), {2, 3}, pt2rt::DType::Float32});
  src[0] = 100;
  EXPECT_EQ(static_cast<const float*>(t.data())[0], 1.0f);  // a copy, not a view of src
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  static_cast<float*>(t.mutable_data())[5] = -1;
  const pt2rt::Tensor cpu = t.to_cpu();  // already on the CPU: the same storage
  EXPECT_EQ(cpu.data(), t.data());
  EXPECT_EQ(static_cast<const float*>(cpu.data())[5], -1.0f);
}

TEST(Documented, TensorCopyOfRefusesShapesTorchCannotHold) {
  // an empty tensor whose other dims multiply past int64 (found by fuzz_grpc_request: a c10::Error escaped)
  const int64_t huge = int64_t{1} << 62;
  EXPECT_ERROR(pt2rt::Tensor::copy_of(pt2rt::TensorView{nullptr, {0, huge, 4}, pt2rt::DType::Float32}),
               pt2rt::ErrorCode::Usage, "Tensor::copy_of: the shape [0, 4611686018427387904, 4] is too large");
  EXPECT_ERROR(pt2rt::Tensor::copy_of(pt2rt::TensorView{nullptr, {2, -1}, pt2rt::DType::Float32}),
               pt2rt::ErrorCode::Usage, "Tensor::copy_of: negative dim in the shape [2, -1]");
  const pt2rt::Tensor empty = pt2rt::Tensor::copy_of(pt2rt::TensorView{nullptr, {0, 1 << 20, 8}, pt2rt::DType::Int8});
  EXPECT_EQ(empty.shape(), (std::vector<int64_t>{0, 1 << 20, 8}));
  EXPECT_EQ(empty.nbytes(), 0u);
}

TEST(Documented, TensorToADevice) {
  const at::Tensor a = at::arange(6, at::kFloat).reshape({2, 3});
  const pt2rt::Tensor t = pt2rt::from_aten(a);
  EXPECT_EQ(t.to(pt2rt::Device::CPU).data(), t.data()) << "already there: the tensor itself";
  if (at::hasCUDA()) {
    const pt2rt::Tensor g = t.to(pt2rt::Device::CUDA);
    EXPECT_EQ(g.device(), pt2rt::Device::CUDA);
    EXPECT_TRUE(at::equal(pt2rt::to_aten(g.to_cpu()), a));
  } else {
    EXPECT_ERROR(t.to(pt2rt::Device::CUDA), pt2rt::ErrorCode::Input,
                 "cannot copy a tensor to cuda:0: this host has 0 usable CUDA devices");
  }
}

TEST(Documented, AMovedRuntimeRunsAndKeepsItsFiles) {
  pt2rt::Runtime a = pt2rt::Runtime::load(kNet, with_ops());
  pt2rt::Runtime b = std::move(a);
  EXPECT_TRUE(b.verify().passed());
  pt2rt::Runtime c = pt2rt::Runtime::load(kOp, with_ops());
  c = std::move(b);  // c's own runtime is released, b's is kept
  EXPECT_EQ(c.spec().model, "net_dynamic");
  EXPECT_TRUE(c.verify().passed());
}

TEST(Documented, VersionIsSemVerAndTheVersionFile) {
  const std::string v = pt2rt::version();
  EXPECT_TRUE(std::regex_match(v, std::regex("[0-9]+\\.[0-9]+\\.[0-9]+"))) << v;
  std::ifstream file(PT2RT_SOURCE_DIR "/VERSION");
  std::string written;
  std::getline(file, written);
  EXPECT_EQ(v, written);
  EXPECT_TRUE(std::regex_match(std::string(pt2rt::torch_version()), std::regex("[0-9]+\\.[0-9]+\\.[0-9]+")));
}

TEST(Runtime, SetNumThreads) {
  const int before = pt2rt::num_threads();
  pt2rt::set_num_threads(1);
  EXPECT_EQ(pt2rt::num_threads(), 1);
  try {
    pt2rt::set_num_threads(0);
    FAIL() << "set_num_threads(0) was accepted";
  } catch (const pt2rt::Error& e) {
    EXPECT_EQ(e.code(), pt2rt::ErrorCode::Usage);
    EXPECT_NE(std::string(e.what()).find("threads must be in 1..1024, got 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pt2rt::set_num_threads(pt2rt::kMaxIntraOpThreads + 1), pt2rt::Error);
  pt2rt::set_num_threads(before);
  EXPECT_EQ(pt2rt::num_threads(), before);
}


// Minor page faults of one `pt2run bench` run (through shell(); the shell's own are the same every time);
// -1 when it failed.
long bench_page_faults(const std::string& input, int iters) {
  rusage before{}, after{};
  getrusage(RUSAGE_CHILDREN, &before);
  const int rc = shell(kPt2run + " bench " + kNet + " --ops " + kOps + " --input " + input + " --warmup 5 --iters " +
                       std::to_string(iters) + " --intra-op-threads 1 >/dev/null");
  getrusage(RUSAGE_CHILDREN, &after);
  return rc == 0 ? after.ru_minflt - before.ru_minflt : -1;
}

TEST(Pt2run, RunsDoNotFaultTheirBuffersInAgain) {
  // pt2run keeps freed memory mapped (keep_freed_memory), so the model's per-call buffers (1 MiB at batch 32) are
  // not returned to the OS and faulted in again on every run: 100 more runs, hardly more page faults. Without it
  // (glibc's defaults, bench's worker thread) each run costs ~170-215 faults.
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's allocator replaces glibc's malloc (and cycles freed memory through its quarantine)";
#endif
  const fs::path input = fs::temp_directory_path() / ("pt2run-batch32-" + std::to_string(getpid()) + ".pt");
  pt2rt::save_tensors(input, {pt2rt::from_aten(at::randn({32, 3, 32, 32}))});
  const long few = bench_page_faults(input, 10), many = bench_page_faults(input, 110);
  fs::remove(input);
  ASSERT_GT(few, 0);
  ASSERT_GT(many, 0);
  EXPECT_LT(static_cast<double>(many - few) / 100.0, 20.0) << few << " faults with 10 runs, " << many << " with 110";
}

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
// A block past glibc's largest mmap threshold (32 MiB) under keep_freed_memory: (bytes mmapped for it, bytes free
// in malloc's heaps once it is freed). It must come from a heap and stay there, not be faulted in again next run.
// glibc's malloc itself: the policy is glibc's (x86-64 libtorch allocates through it; aarch64's through mimalloc).
std::pair<long long, std::size_t> allocate_and_free_40_mib() {
  constexpr std::size_t kBlock = std::size_t{40} << 20;
  // a thread's first allocation makes its arena, sized for that allocation: a small one first, as in a real thread
  void* small = std::malloc(4096);
  const auto mmapped_before = static_cast<long long>(mallinfo2().hblkhd);
  void* block = std::malloc(kBlock);
  std::memset(block, 1, kBlock);
  asm volatile("" : : "r"(block) : "memory");  // the block is used: the allocation stays
  const long long mmapped = static_cast<long long>(mallinfo2().hblkhd) - mmapped_before;
  std::free(block);
  const std::size_t kept = mallinfo2().fordblks;
  std::free(small);
  return {mmapped, kept};
}
#endif

TEST(Runtime, KeepFreedMemory) {
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)  // ASan's malloc ignores mallopt
  EXPECT_TRUE(pt2rt::keep_freed_memory());
  const auto [mmapped, kept] = allocate_and_free_40_mib();
  EXPECT_LT(mmapped, 1 << 20);
  EXPECT_GE(kept, std::size_t{40} << 20);
#else
  EXPECT_FALSE(pt2rt::keep_freed_memory());
#endif
  try {
    pt2rt::keep_freed_memory(std::size_t{4} << 30);
    FAIL() << "4 GiB was accepted";
  } catch (const pt2rt::Error& e) {
    EXPECT_EQ(e.code(), pt2rt::ErrorCode::Usage);
    EXPECT_NE(std::string(e.what()).find("keep_freed_memory: expected at most 2147483647 bytes, got 4294967296"),
              std::string::npos)
        << e.what();
  }
}

TEST(Runtime, KeepFreedMemoryOnAnotherThread) {
  // pt2run's runners and a server's workers allocate from their own arenas, whose heaps keep such a block too
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
  ASSERT_TRUE(pt2rt::keep_freed_memory());
  std::pair<long long, std::size_t> on_thread;
  std::thread([&] { on_thread = allocate_and_free_40_mib(); }).join();
  EXPECT_LT(on_thread.first, 1 << 20);
  EXPECT_GE(on_thread.second, std::size_t{40} << 20);
#else
  EXPECT_FALSE(pt2rt::keep_freed_memory());
#endif
}

TEST(Runtime, KeepFreedMemoryKeepsAThreadArenasNextHeap) {
  // a thread whose buffers outgrow its arena's first 64 MiB heap: the next heap stays mapped once empty, not made
  // and faulted in again on every run (EfficientNet-B0 at batch 8 with MKL's AVX2 code: ~11000 faults per run)
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
  ASSERT_TRUE(pt2rt::keep_freed_memory());
  constexpr std::size_t kBlock = std::size_t{40} << 20;
  long long heaps_before = 0, heaps_after = 0, mmapped = 0;
  std::thread([&] {
    void* small = std::malloc(4096);
    const auto mmapped_before = static_cast<long long>(mallinfo2().hblkhd);
    void* first = std::malloc(kBlock);
    std::memset(first, 1, kBlock);
    void* second = std::malloc(kBlock);  // two do not fit one heap
    std::memset(second, 1, kBlock);
    asm volatile("" : : "r"(first), "r"(second) : "memory");
    mmapped = static_cast<long long>(mallinfo2().hblkhd) - mmapped_before;
    heaps_before = static_cast<long long>(mallinfo2().arena);
    std::free(second);
    heaps_after = static_cast<long long>(mallinfo2().arena);
    std::free(first);
    std::free(small);
  }).join();
  EXPECT_LT(mmapped, 1 << 20);
  EXPECT_GE(heaps_after, heaps_before - (1 << 20)) << "a heap of " << (heaps_before - heaps_after) << " bytes went";
#else
  EXPECT_FALSE(pt2rt::keep_freed_memory());
#endif
}

}  // namespace
