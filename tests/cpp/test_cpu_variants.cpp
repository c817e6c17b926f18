// CPU variants: this host's features, which variant a package loads, forcing each one, and synthetic feature sets.
#include <pt2rt/aten.h>
#include <pt2rt/pt2rt.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sched.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "test_env.h"
#include "test_shell.h"

namespace {

const std::string kPackages = test_packages_dir();
const std::string kNet = kPackages + "/net_dynamic.pt2";

std::set<std::string> as_set(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

bool has(const std::string& feature) { return as_set(pt2rt::host_cpu_features()).count(feature) > 0; }

pt2rt::Options with(const std::string& cpu_isa) {
  pt2rt::Options o;
  o.ops_libraries = {IDENTITY_CONV_OPS_LIBRARY};
  o.cpu_isa = cpu_isa;
  return o;
}

pt2rt::Variant variant(const std::string& isa, std::vector<std::string> features, const std::string& arch = "x86_64") {
  pt2rt::Variant v;
  v.isa = isa;
  v.model = isa + "_model";
  v.arch = arch;
  v.cpu_features = std::move(features);
  return v;
}

pt2rt::Spec spec_of(std::vector<pt2rt::Variant> variants) {
  pt2rt::Spec s;
  s.variants = std::move(variants);
  return s;
}

nlohmann::json python_view() {
  std::ifstream in(kPackages + "/python_cpu.json");
  return nlohmann::json::parse(in);
}

// stdout of a command; empty when it fails.
std::string output_of(const std::string& command) { return test_shell::output(command); }

TEST(HostCpu, FeaturesAreKnownAndIncludeTheBaselineEveryTestHostHas) {
  EXPECT_STREQ(pt2rt::host_arch(), "x86_64");
  const auto known = as_set(pt2rt::known_cpu_features());
  for (const auto& f : pt2rt::host_cpu_features()) EXPECT_TRUE(known.count(f)) << f;
  for (const char* f : {"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"}) EXPECT_TRUE(has(f)) << f;
  // AVX-512 parts come together on every CPU that has them (x86-64-v4).
  const bool avx512 = has("avx512f");
  for (const char* f : {"avx512dq", "avx512vl", "avx512bw", "avx512cd"}) EXPECT_EQ(has(f), avx512) << f;
}

TEST(HostCpu, EveryFeatureTorchsIsasImplyIsKnownToTheRuntime) {
  // The exporter's vocabulary (compiler macros) for each inductor x86 ISA, checked against cpuid's table.
  const auto known = as_set(pt2rt::known_cpu_features());
  const auto isas = python_view().at("torch_isa_features");
  ASSERT_GE(isas.size(), 4u);  // avx2, avx512, avx512 avx512_vnni, amx
  for (const auto& [isa, features] : isas.items()) {
    for (const auto& f : features) EXPECT_TRUE(known.count(f.get<std::string>())) << isa << ": " << f;
  }
}

TEST(HostCpu, EveryFeatureTheCompilerCanNameIsKnownToTheRuntime) {
  // A native variant records what gcc -march=native defines on the export host (rtm where TSX is on, ...): every
  // name the compiler has for an ISA extension must be one the runtime can check on the host it loads on.
  const auto known = as_set(pt2rt::known_cpu_features());
  const auto names = python_view().at("compiler_features");
  ASSERT_GE(names.size(), 60u);
  for (const auto& f : names) EXPECT_TRUE(known.count(f.get<std::string>())) << f;
}

TEST(HostCpu, ANativeExportHereNeedsOnlyWhatTheRuntimeFindsHere) {
  // The native variant's features are gcc -march=native's: each must be one cpuid + XCR0 report on this host.
  const auto python = python_view();
  std::vector<std::string> native;
  for (const auto& f : python.at("host_features")) native.push_back(f.get<std::string>());
  pt2rt::Variant v = variant("native", native);
  EXPECT_EQ(pt2rt::why_variant_cannot_run(v), "");
}

TEST(HostCpu, CpuidAgreesWithTheCompilersViewOfThisHost) {
  // gcc -march=native (the exporter's view) and cpuid + XCR0 (the runtime's) on the features code generation
  // for torch's ISAs can use.
  const auto python = python_view();
  std::set<std::string> relevant;
  for (const auto& [isa, features] : python.at("torch_isa_features").items()) {
    for (const auto& f : features) relevant.insert(f.get<std::string>());
  }
  std::set<std::string> from_compiler, from_cpuid;
  for (const auto& f : python.at("host_features")) {
    if (relevant.count(f.get<std::string>())) from_compiler.insert(f.get<std::string>());
  }
  for (const auto& f : pt2rt::host_cpu_features()) {
    if (relevant.count(f)) from_cpuid.insert(f);
  }
  EXPECT_EQ(from_cpuid, from_compiler);
}

// OMP_NUM_THREADS where set to a count, else the affinity mask (this test cannot rely on a cgroup quota): what
// pt2serve divides between its instances and pt2run bench between its threads.
TEST(HostCpu, UsableCoresFollowOmpNumThreadsElseTheAffinityMask) {
  const char* saved = std::getenv("OMP_NUM_THREADS");
  const std::string before = saved ? saved : "";
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  ::unsetenv("OMP_NUM_THREADS");
  const int unset = pt2rt::usable_cores();
  EXPECT_GE(unset, 1);
  EXPECT_LE(unset, CPU_COUNT(&allowed));
  for (const auto& [value, expected] : std::vector<std::pair<std::string, int>>{
           {"6", 6}, {"1", 1}, {"100000", pt2rt::kMaxIntraOpThreads}, {"0", unset}, {"-3", unset}, {"two", unset}}) {
    ::setenv("OMP_NUM_THREADS", value.c_str(), 1);
    EXPECT_EQ(pt2rt::usable_cores(), expected) << "OMP_NUM_THREADS=" << value;
  }
  if (saved) {
    ::setenv("OMP_NUM_THREADS", before.c_str(), 1);
  } else {
    ::unsetenv("OMP_NUM_THREADS");
  }
}

TEST(Variants, SyntheticFeatureSets) {
  EXPECT_EQ(pt2rt::why_variant_cannot_run(variant("default", {})), "");
  EXPECT_EQ(pt2rt::why_variant_cannot_run(variant("avx2", {"avx", "avx2", "fma"})), "");
  EXPECT_EQ(pt2rt::why_variant_cannot_run(variant("x", {"avx2", "avx5124fmaps"})), "this CPU lacks avx5124fmaps");
  EXPECT_EQ(pt2rt::why_variant_cannot_run(variant("x", {"avx2", "warp_drive", "avx5124fmaps"})),
            "it needs CPU features this runtime does not know: warp_drive");
  EXPECT_EQ(pt2rt::why_variant_cannot_run(variant("native", {}, "aarch64")), "it is for aarch64, this host is x86_64");
}

TEST(Variants, TheMostSpecialisedRunnableOneIsSelected) {
  const auto spec = spec_of({variant("default", {}), variant("avx2", {"avx", "avx2", "fma"}),
                             variant("knm", {"avx2", "avx512f", "avx5124fmaps"}), variant("arm", {}, "aarch64")});
  EXPECT_EQ(spec.variants[pt2rt::select_variant(spec)].isa, "avx2");
  EXPECT_EQ(spec.variants[pt2rt::select_variant(spec, "default")].isa, "default");
  try {
    pt2rt::select_variant(spec, "knm");
    ADD_FAILURE() << "a variant this CPU cannot run was selected";
  } catch (const pt2rt::Error& e) {
    EXPECT_EQ(e.code(), pt2rt::ErrorCode::Package);
    // an AVX2-only host lacks avx512f as well
    EXPECT_EQ(std::string(e.what()), std::string("CPU variant knm was asked for, but this CPU lacks ") +
                                         (has("avx512f") ? "" : "avx512f, ") +
                                         "avx5124fmaps (the package has: default, avx2, knm, arm)");
  }
  const auto none = spec_of({variant("knm", {"avx5124fmaps"}), variant("arm", {}, "aarch64")});
  try {
    pt2rt::select_variant(none);
    ADD_FAILURE() << "no variant runs here, yet one was selected";
  } catch (const pt2rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CPU variant of the package runs on this host (knm: this CPU lacks "
                                         "avx5124fmaps; arm: it is for aarch64"),
              std::string::npos)
        << e.what();
  }
}

TEST(Variants, WeightsPackedForAnotherOneDnnClassAreNotRunHere) {
  const bool avx512 = has("avx512f") && has("avx512bw") && has("avx512dq") && has("avx512vl");
  const std::string here = pt2rt::onednn_cpu_class();
  EXPECT_EQ(here, avx512 ? "avx512" : has("avx2") && has("fma") ? "avx2" : "");
  const auto packed = [](const std::string& cls) {
    pt2rt::Variant v = variant("native", {});
    v.packed_for = cls;
    return v;
  };
  const std::string other = here == "avx512" ? "avx2" : "avx512";
  if (!here.empty()) EXPECT_EQ(pt2rt::why_variant_cannot_run(packed(here)), "");
  EXPECT_EQ(pt2rt::why_variant_cannot_run(packed(other)).rfind("its weights are packed for oneDNN's " + other +
                                                                   " code and oneDNN runs its " +
                                                                   (here.empty() ? "baseline" : here) + " code here",
                                                               0),
            0u)
      << pt2rt::why_variant_cannot_run(packed(other));
  // the unpacked variant beside one packed for another class, though that one may use more features
  const auto spec = spec_of({variant("default", {}), packed(other)});
  EXPECT_EQ(spec.variants[pt2rt::select_variant(spec)].isa, "default");
  // oneDNN's cap ($ONEDNN_MAX_CPU_ISA, else $DNNL_MAX_CPU_ISA), as oneDNN reads it
  setenv("ONEDNN_MAX_CPU_ISA", "SSE41", 1);
  EXPECT_EQ(pt2rt::onednn_cpu_class(), "");
  if (!here.empty()) EXPECT_NE(pt2rt::why_variant_cannot_run(packed(here)), "");
  setenv("ONEDNN_MAX_CPU_ISA", "avx2_vnni", 1);
  EXPECT_EQ(pt2rt::onednn_cpu_class(), here.empty() ? "" : "avx2");
  setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX", 1);
  EXPECT_EQ(pt2rt::onednn_cpu_class(), here);
  setenv("ONEDNN_MAX_CPU_ISA", "avx-2", 1);  // not one of oneDNN's names: it caps nothing
  EXPECT_EQ(pt2rt::onednn_cpu_class(), here);
  unsetenv("ONEDNN_MAX_CPU_ISA");
  setenv("DNNL_MAX_CPU_ISA", "AVX2", 1);
  EXPECT_EQ(pt2rt::onednn_cpu_class(), here.empty() ? "" : "avx2");
  unsetenv("DNNL_MAX_CPU_ISA");
  EXPECT_EQ(pt2rt::onednn_cpu_class(), here);
}

TEST(Variants, PackageLoadsTheBestVariantAndEachCanBeForced) {
  const pt2rt::Spec spec = pt2rt::Runtime::read_spec(kNet);
  ASSERT_EQ(spec.variants.size(), 3u);
  const std::string best = has("avx512f") ? "avx512" : "avx2";
  EXPECT_EQ(pt2rt::Runtime::load(kNet, with("")).variant().isa, best);
  at::manual_seed(3);
  const at::Tensor x = at::randn({5, 3, 32, 32});
  std::vector<at::Tensor> outputs;
  for (const auto& v : spec.variants) {
    const std::string why = pt2rt::why_variant_cannot_run(v);
    if (!why.empty()) {  // only AVX-512 on an AVX2 host: refused, exit-3 class, naming what is missing
      EXPECT_EQ(v.isa, "avx512");
      try {
        pt2rt::Runtime::load(kNet, with(v.isa));
        ADD_FAILURE() << "loaded variant " << v.isa << " that this CPU cannot run";
      } catch (const pt2rt::Error& e) {
        EXPECT_EQ(e.code(), pt2rt::ErrorCode::Package);
        EXPECT_NE(std::string(e.what()).find("this CPU lacks avx512"), std::string::npos) << e.what();
      }
      continue;
    }
    const pt2rt::Runtime rt = pt2rt::Runtime::load(kNet, with(v.isa));
    EXPECT_EQ(rt.variant().isa, v.isa);
    EXPECT_TRUE(rt.verify().passed()) << v.isa;
    outputs.push_back(pt2rt::run(rt, {x}).at(0));
  }
  for (size_t i = 1; i < outputs.size(); ++i) EXPECT_TRUE(at::allclose(outputs[i], outputs[0], 1e-5, 1e-5));
}

TEST(Variants, Pt2runInfoJsonListsVariantsAndTheSelectedOne) {
  const auto j = nlohmann::json::parse(output_of(pt2run_command() + " info --json " + kNet));
  ASSERT_EQ(j.at("variants").size(), 3u);
  for (const auto& v : j.at("variants")) {
    for (const char* key : {"isa", "model", "arch", "cpu_features", "record", "sha256", "size"}) {
      EXPECT_TRUE(v.contains(key)) << key;
    }
  }
  EXPECT_EQ(j.at("selected"), has("avx512f") ? "avx512" : "avx2");
  const auto forced = nlohmann::json::parse(output_of("PT2RT_CPU_ISA=default " + pt2run_command() + " info --json " + kNet));
  EXPECT_EQ(forced.at("selected"), "default");
  const auto none = nlohmann::json::parse(output_of("PT2RT_CPU_ISA=sse9 " + pt2run_command() + " info --json " + kNet));
  EXPECT_TRUE(none.at("selected").is_null());
  EXPECT_NE(none.at("selected_error").get<std::string>().find("has no CPU variant sse9"), std::string::npos);
  const std::string text = output_of(pt2run_command() + " info " + kNet);
  EXPECT_NE(text.find("selected     " + std::string(has("avx512f") ? "avx512" : "avx2")), std::string::npos) << text;
}

TEST(Variants, Pt2runInfoJsonIsThePackagesSpecAsPythonReadsIt) {
  // Read by another reader (export_tools.read_spec, through Python's zipfile), plus what this host selects.
  const std::vector<std::string> names{"net_dynamic.pt2", "multi_io.pt2", "probe.pt2"};
  std::string paths;
  for (const auto& n : names) paths += " " + kPackages + "/" + n;
  const auto python = nlohmann::json::parse(output_of(
      std::string(PT2RT_PYTHON) +
      " -c 'import json, sys; from export_tools import read_spec; print(json.dumps([read_spec(p) for p in sys.argv[1:]]))'" +
      paths));
  ASSERT_EQ(python.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    auto j = nlohmann::json::parse(output_of(pt2run_command() + " info --json " + kPackages + "/" + names[i]));
    EXPECT_TRUE(j.at("selected").is_string()) << names[i];
    j.erase("selected");
    EXPECT_EQ(j, python[i]) << names[i];
  }
}

TEST(Variants, Pt2runHostJsonIsWhatTheRuntimeSees) {
  const auto j = nlohmann::json::parse(output_of(pt2run_command() + " host --json"));
  EXPECT_EQ(j.at("arch"), pt2rt::host_arch());
  EXPECT_EQ(j.at("cpu_features").get<std::vector<std::string>>(), pt2rt::host_cpu_features());
  EXPECT_EQ(j.at("known_cpu_features").get<std::vector<std::string>>(), pt2rt::known_cpu_features());
  EXPECT_EQ(j.at("onednn_class"), pt2rt::onednn_cpu_class());
  EXPECT_EQ(j.at("mkl_code"), pt2rt::mkl_code_path());
}

#if defined(__x86_64__)
TEST(Variants, MklRunsTheCodeOfTheCpusInstructionSetsOnAmdToo) {
  const std::string here = pt2rt::mkl_code_path();
  if (here.empty()) GTEST_SKIP() << "this libtorch has no MKL";
  unsigned a = 0, b = 0, c = 0, d = 0;
  __get_cpuid(0, &a, &b, &c, &d);
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  const bool intel = std::string(vendor) == "GenuineIntel", amd = std::string(vendor) == "AuthenticAMD";
  // MKL alone runs its generic code on every CPU but Intel's; libpt2rt's answer to its vendor check lets it run the
  // AVX2 / AVX-512 code on an AMD CPU with AVX2 + FMA
  if ((intel || amd) && has("avx2") && has("fma")) {
    EXPECT_TRUE(here == "avx2" || here.rfind("avx512", 0) == 0) << vendor << ": " << here;
  }
  // PT2RT_MKL_VENDOR_CHECK=1 leaves MKL its own answer
  const auto kept = nlohmann::json::parse(output_of("PT2RT_MKL_VENDOR_CHECK=1 " + pt2run_command() + " host --json"));
  EXPECT_EQ(kept.at("mkl_code"), intel ? here : std::string("generic")) << vendor;
  const auto other = nlohmann::json::parse(output_of("PT2RT_MKL_VENDOR_CHECK=0 " + pt2run_command() + " host --json"));
  EXPECT_EQ(other.at("mkl_code"), here);
}
#endif

TEST(Variants, TheLibraryReadsNoEnvironmentOnlyItsOptions) {
  // $PT2RT_CPU_ISA is pt2run's and pt2serve's (pt2run's: the tests above); an embedding program decides itself
  const std::string best = pt2rt::Runtime::load(kNet, with("")).variant().isa;
  setenv("PT2RT_CPU_ISA", best == "default" ? "avx2" : "default", 1);
  EXPECT_EQ(pt2rt::Runtime::load(kNet, with("")).variant().isa, best);
  EXPECT_EQ(pt2rt::Runtime::load(kNet, with("avx2")).variant().isa, "avx2");
  unsetenv("PT2RT_CPU_ISA");
}

}  // namespace
