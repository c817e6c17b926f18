// The bad-input matrix, through pt2run as a process: each case gets the documented exit code, one line on stderr
// that says what was wrong with no torch internals, no crash, and leaves nothing in TMPDIR. Unusual but valid
// inputs give the eager model's answer.
#include <pt2rt/aten.h>
#include <pt2rt/pt2rt.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "test_env.h"
#include "test_shell.h"

namespace fs = std::filesystem;

namespace {

const std::string kP = test_packages_dir();
const std::string kOps = IDENTITY_CONV_OPS_LIBRARY;
const std::string kNet = kP + "/net_dynamic.pt2";

struct Case {
  const char* name;
  std::string args;  // after "pt2run"
  int exit_code;
  const char* fragment;  // expected in the error line
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

struct Result {
  int exit_code = -1;
  bool signaled = false;
  std::string err;
};

// Runs pt2run with a fresh TMPDIR and an otherwise empty environment (plus PT2RT_OPS_PATH when given, and
// NAME=VALUE words at the start of args).
Result run_pt2run(std::string args, const fs::path& tmpdir, const std::string& ops_path = "") {
  const fs::path err = tmpdir.parent_path() / (tmpdir.filename().string() + ".stderr");
  std::string env = "env -i TMPDIR=" + tmpdir.string() + (ops_path.empty() ? "" : " PT2RT_OPS_PATH=" + ops_path);
  while (args.rfind("PT2RT_", 0) == 0 && args.find('=') < args.find(' ')) {
    env += " " + args.substr(0, args.find(' '));
    args = args.substr(args.find(' ') + 1);
  }
  for (const char* name : {"ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS"}) {  // under scripts/sanitize.sh
    if (const char* value = std::getenv(name)) env += std::string(" ") + name + "='" + value + "'";
  }
  const std::string cmd = env + " " + pt2run_command() + " " + args + " >/dev/null 2>" + err.string();
  const int status = test_shell::run(cmd);
  Result r;
  r.signaled = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) > 128);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  fs::remove(err);
  return r;
}

class Scratch {
 public:
  Scratch() {
    dir_ = fs::temp_directory_path() / ("pt2run-matrix-" + std::to_string(getpid()) + "-" + std::to_string(count_++));
    fs::create_directories(dir_);
  }
  ~Scratch() { fs::remove_all(dir_); }
  const fs::path& dir() const { return dir_; }

 private:
  static inline int count_ = 0;
  fs::path dir_;
};

class BadInput : public testing::TestWithParam<Case> {};

TEST_P(BadInput, ClearErrorNoCrashNothingLeft) {
  const Case& c = GetParam();
  if (std::string(c.name) == "cuda_package_no_gpu" && at::hasCUDA()) {
    GTEST_SKIP() << "checks the error on a machine without a CUDA device; this one has one";
  }
  Scratch tmp;
  const Result r = run_pt2run(c.args, tmp.dir());
  EXPECT_FALSE(r.signaled) << "crashed: " << r.err;
  EXPECT_EQ(r.exit_code, c.exit_code) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line:\n" << r.err;
  EXPECT_EQ(r.err.rfind("pt2run: error (", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(c.fragment), std::string::npos) << "expected '" << c.fragment << "' in: " << r.err;
  for (const char* internal : {"wrapper.cpp", "Exception raised from", "frame #", "miniz", "Could this error message"}) {
    EXPECT_EQ(r.err.find(internal), std::string::npos) << "torch internals in: " << r.err;
  }
  EXPECT_TRUE(fs::is_empty(tmp.dir())) << "left behind in TMPDIR: " << fs::directory_iterator(tmp.dir())->path();
}

std::string verify(const std::string& package) { return "verify " + package + " --ops " + kOps; }
std::string run_with(const std::string& input, const std::string& output = "/dev/null/never.pt") {
  return "run " + kNet + " --ops " + kOps + " --input " + input + " --output " +
         (output == "/dev/null/never.pt" ? fs::temp_directory_path().string() + "/pt2run-matrix-out.pt" : output);
}

const Case kCases[] = {
    // packages
    {"missing_package", verify(kP + "/missing.pt2"), 3, "No such file or directory"},
    {"directory", verify(kP), 3, "is a directory"},
    {"empty_file", verify(kP + "/bad/empty.pt2"), 3, "is empty"},
    {"truncated", verify(kP + "/bad/truncated.pt2"), 3, "not a .pt2 package"},
    {"random_bytes", verify(kP + "/bad/random.pt2"), 3, "not a .pt2 package"},
    {"zip_not_package", verify(kP + "/bad/not_package.pt2"), 3, "not a .pt2 package"},
    {"pt2_archive_without_model", verify(kP + "/bad/no_model.pt2"), 3,
     "is not an AOTInductor package (no data/aotinductor/<model>/*_metadata.json inside)"},
    {"damaged_model_library", verify(kP + "/bad/damaged_lib.pt2"), 3, "compiled model library is damaged"},
    {"cut_model_library", verify(kP + "/bad/cut_lib.pt2"), 3, "compiled model library is damaged"},
    {"junk_model_library", verify(kP + "/bad/junk_lib.pt2"), 3, "compiled model library is damaged"},
    {"no_spec", verify(kP + "/bad/no_spec.pt2"), 3, "no pt2rt spec"},
    {"unknown_spec_format", verify(kP + "/bad/bad_spec_format.pt2"), 3, "pt2rt-spec/99"},
    {"cpu_feature_this_host_lacks", verify(kP + "/bad/missing_feature.pt2"), 3, "this CPU lacks avx5124fmaps"},
    {"cpu_feature_unknown", verify(kP + "/bad/unknown_feature.pt2"), 3, "does not know: quantum_flux"},
    {"other_arch", verify(kP + "/bad/other_arch.pt2"), 3, "it is for aarch64, this host is x86_64"},
    {"variant_outside_its_folder", verify(kP + "/bad/variant_outside_its_folder.pt2"), 3, "outside its model folder"},
    {"forced_variant_absent", verify(kP + "/net_dynamic.pt2") + " --cpu-isa sse9", 3,
     "has no CPU variant sse9 (it has: avx2, avx512, default)"},
    {"forced_variant_absent_env", "PT2RT_CPU_ISA=native " + verify(kP + "/net_dynamic.pt2"), 3,
     "has no CPU variant native (it has: avx2, avx512, default)"},
    {"other_torch_version", verify(kP + "/bad/other_torch.pt2"), 3, "exported with torch 2.0.0"},
    // hostile packages
    {"zip_slip", verify(kP + "/bad/zip_slip.pt2"), 3, "has a record whose name has a '..' component"},
    {"second_library_in_model_folder", verify(kP + "/bad/second_library.pt2"), 3,
     "must have exactly its library"},
    {"library_named_by_path", verify(kP + "/bad/library_path.pt2"), 3,
     "library '../../tmp/x/libevil.so' is not a plain file name"},
    {"lite_library_not_the_librarys", verify(kP + "/bad/lite_library_other.pt2"), 3,
     "its lite_library 'libidentity_conv_ops.so' is not libidentity_conv_ops.so's lite build "
     "(libidentity_conv_ops_lite.so)"},
    {"newline_in_op_name", verify(kP + "/bad/newline_in_name.pt2"), 4, "identity_conv_op\\x0apt2run: verified"},
    {"deeply_nested_metadata", "info " + kP + "/bad/deep_metadata.pt2", 3, "nested deeper than 32 levels"},
    {"huge_metadata_record", "info " + kP + "/bad/huge_metadata.pt2", 3, "at most 16777216 are accepted"},
    {"cuda_package_no_gpu", verify(kP + "/bad/cuda_device.pt2"), 3, "no usable CUDA device"},
    {"info_of_garbage", "info " + kP + "/bad/random.pt2", 3, "not a .pt2 package"},
    // ops libraries
    {"ops_missing_path", "verify " + kNet + " --ops " + kP + "/libmissing.so", 4, "does not exist"},
    {"ops_not_a_library", "verify " + kNet + " --ops " + kP + "/net_input.pt", 4, "cannot load ops library"},
    // a library given that lacks the ops, and the one the spec names found nowhere
    {"ops_lacks_the_ops", "verify " + kP + "/bad/unknown_library.pt2 --ops " + PT2RT_LIBRARY, 4,
     "and is not among the ops libraries given (" PT2RT_LIBRARY},
    {"ops_none_found", "verify " + kP + "/bad/unknown_library.pt2", 4, "needs libnot_there.so, which was not found"},
    // another build of the library than the package was exported with: a real one (same file name, other schema),
    // then the spec's schemas edited for ops and classes
    {"ops_stale_build", "verify " + kP + "/probe.pt2 --ops " + PT2RT_PROBE_OPS_V2_LIBRARY, 4,
     "pt2rt_probe::hold (from libpt2rt_probe_ops.so): the package was exported against 'pt2rt_probe::hold(Tensor x, "
     "int micros) -> Tensor', the loaded library registers 'pt2rt_probe::hold(Tensor x, int micros, bool "
     "twice=False) -> Tensor'"},
    {"ops_stale_op_schema", verify(kP + "/bad/stale_op_schema.pt2"), 4,
     "my_ops::identity_conv_op (from libidentity_conv_ops.so): the package was exported against "
     "'my_ops::identity_conv_op(Tensor x, int k=3) -> Tensor', the loaded library registers "
     "'my_ops::identity_conv_op(Tensor x) -> Tensor'"},
    {"ops_stale_class_schema", verify(kP + "/bad/stale_class_schema.pt2"), 4,
     "my_ops::IdentityConvClass (from libidentity_conv_ops.so): the package was exported against "
     "'forward(__torch__.torch.classes.my_ops.IdentityConvClass _0, Tensor _1, Tensor _2) -> Tensor _0', the loaded "
     "library registers 'forward(__torch__.torch.classes.my_ops.IdentityConvClass _0, Tensor _1) -> Tensor _0'"},
    {"ops_stale_class_method_gone", verify(kP + "/bad/stale_class_method.pt2"), 4,
     "the loaded library registers 'no method forward_v2'"},
    // inputs
    {"input_count", run_with(kP + "/two_tensors.pt"), 5, "expected 1 input (x), got 2"},
    {"input_rank", run_with(kP + "/rank3.pt"), 5, "expected 4 dims [batch, 3, 32, 32], got 3 dims"},
    {"input_dim_larger", run_with(kP + "/big_hw.pt"), 5, "(dim 2 must be 32)"},
    {"input_dim_smaller", run_with(kP + "/small_hw.pt"), 5, "(dim 2 must be 32)"},
    {"batch_above_range", run_with(kP + "/batch33.pt"), 5, "dim 0 (batch) must be in 1..32, got 33"},
    {"batch_zero", run_with(kP + "/batch0.pt"), 5, "dim 0 (batch) must be in 1..32, got 0"},
    {"dtype_float64", run_with(kP + "/net_input_float64.pt"), 5, "expected dtype float32, got float64"},
    {"dtype_int64", run_with(kP + "/int64.pt"), 5, "expected dtype float32, got int64"},
    {"input_not_tensors", run_with(kP + "/dict.pt"), 6, "expected a tensor or a list of tensors"},
    {"input_stride0_claims_430GB", run_with(kP + "/stride0_huge.pt"), 6,
     "holds tensors of 430080000000 bytes once made contiguous; at most 268435456 are accepted here"},
    {"input_garbage", run_with(kP + "/bad/text.pt"), 6, "is not a tensor file"},
    {"input_missing", run_with(kP + "/nope.pt"), 6, "cannot read tensor file"},
    {"output_unwritable", run_with(kP + "/net_input.pt", "/nonexistent-dir/out.pt"), 6, "cannot write"},
    // usage
    {"no_subcommand", "", 2, "A subcommand is required"},
    {"unknown_subcommand", "frobnicate", 2, "unknown subcommand 'frobnicate'; expected info, run, verify, bench or host"},
    {"run_without_output", "run " + kNet + " --input " + kP + "/net_input.pt", 2, "--output is required"},
    {"bench_zero_iters", "bench " + kNet + " --iters 0", 2, "--iters"},
    {"run_zero_intra_op_threads", run_with(kP + "/net_input.pt") + " --intra-op-threads 0", 2, "--intra-op-threads"},
    {"verify_too_many_intra_op_threads", verify(kNet) + " --intra-op-threads 1025", 2, "--intra-op-threads"},
};

INSTANTIATE_TEST_SUITE_P(Matrix, BadInput, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

class UnusualInput : public testing::TestWithParam<const char*> {};

TEST_P(UnusualInput, GivesTheEagerAnswer) {
  const std::string name = GetParam();
  Scratch tmp;
  const fs::path out = tmp.dir().parent_path() / (tmp.dir().filename().string() + "-out.pt");
  const Result r = run_pt2run(run_with(kP + "/" + name + "_input.pt", out.string()), tmp.dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const at::Tensor got = pt2rt::to_aten(pt2rt::load_tensors(out.string()).at(0));
  const at::Tensor expected = pt2rt::to_aten(pt2rt::load_tensors(kP + "/" + name + "_expected.pt").at(0));
  EXPECT_TRUE(at::allclose(got, expected, 1.3e-6, 1e-5, /*equal_nan=*/true));
  EXPECT_EQ(at::isnan(got).sum().item<int64_t>(), at::isnan(expected).sum().item<int64_t>());
  EXPECT_TRUE(fs::is_empty(tmp.dir()));
  fs::remove(out);
}

INSTANTIATE_TEST_SUITE_P(Matrix, UnusualInput, testing::Values("channels_last", "sliced", "nonfinite"));

}  // namespace
