// CPU features of this host, in the vocabulary of the spec (export_tools.cpu: the compiler's ISA macro names,
// __AVX512BF16__ -> "avx512bf16"), and the choice of a package's CPU variant.
#include "common.h"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <set>
#include <string>
#include <thread>
#include <utility>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace pt2rt {

namespace {

#if defined(__x86_64__)
constexpr const char* kArch = "x86_64";

enum Reg { EAX, EBX, ECX, EDX };
// Register state the OS must save for the feature's instructions to run (XCR0 bits; AMX also needs the
// kernel's permission for tile data).
enum State { None, Ymm, Zmm, Amx };

struct Bit {
  const char* name;
  unsigned leaf, subleaf;
  Reg reg;
  int bit;
  State state;
};

// cpuid bits from the Intel SDM vol. 2A (CPUID) and the AMD APM vol. 3 (appendix E).
constexpr Bit kBits[] = {
    {"sse3", 1, 0, ECX, 0, None},          {"pclmul", 1, 0, ECX, 1, None},
    {"ssse3", 1, 0, ECX, 9, None},         {"fma", 1, 0, ECX, 12, Ymm},
    {"cx16", 1, 0, ECX, 13, None},         {"sse4_1", 1, 0, ECX, 19, None},
    {"sse4_2", 1, 0, ECX, 20, None},       {"crc32", 1, 0, ECX, 20, None},
    {"movbe", 1, 0, ECX, 22, None},        {"popcnt", 1, 0, ECX, 23, None},
    {"aes", 1, 0, ECX, 25, None},          {"xsave", 1, 0, ECX, 26, None},
    {"avx", 1, 0, ECX, 28, Ymm},           {"f16c", 1, 0, ECX, 29, Ymm},
    {"rdrnd", 1, 0, ECX, 30, None},
    {"fsgsbase", 7, 0, EBX, 0, None},      {"sgx", 7, 0, EBX, 2, None},
    {"bmi", 7, 0, EBX, 3, None},           {"avx2", 7, 0, EBX, 5, Ymm},
    {"bmi2", 7, 0, EBX, 8, None},          {"rtm", 7, 0, EBX, 11, None},
    {"avx512f", 7, 0, EBX, 16, Zmm},
    {"avx512dq", 7, 0, EBX, 17, Zmm},      {"rdseed", 7, 0, EBX, 18, None},
    {"adx", 7, 0, EBX, 19, None},          {"avx512ifma", 7, 0, EBX, 21, Zmm},
    {"clflushopt", 7, 0, EBX, 23, None},   {"clwb", 7, 0, EBX, 24, None},
    {"avx512pf", 7, 0, EBX, 26, Zmm},      {"avx512er", 7, 0, EBX, 27, Zmm},
    {"avx512cd", 7, 0, EBX, 28, Zmm},      {"sha", 7, 0, EBX, 29, None},
    {"avx512bw", 7, 0, EBX, 30, Zmm},      {"avx512vl", 7, 0, EBX, 31, Zmm},
    {"prefetchwt1", 7, 0, ECX, 0, None},   {"avx512vbmi", 7, 0, ECX, 1, Zmm},
    {"pku", 7, 0, ECX, 3, None},           {"waitpkg", 7, 0, ECX, 5, None},
    {"avx512vbmi2", 7, 0, ECX, 6, Zmm},    {"shstk", 7, 0, ECX, 7, None},
    {"gfni", 7, 0, ECX, 8, None},          {"vaes", 7, 0, ECX, 9, Ymm},
    {"vpclmulqdq", 7, 0, ECX, 10, Ymm},    {"avx512vnni", 7, 0, ECX, 11, Zmm},
    {"avx512bitalg", 7, 0, ECX, 12, Zmm},  {"avx512vpopcntdq", 7, 0, ECX, 14, Zmm},
    {"rdpid", 7, 0, ECX, 22, None},        {"kl", 7, 0, ECX, 23, None},
    {"cldemote", 7, 0, ECX, 25, None},     {"movdiri", 7, 0, ECX, 27, None},
    {"movdir64b", 7, 0, ECX, 28, None},    {"enqcmd", 7, 0, ECX, 29, None},
    {"avx5124vnniw", 7, 0, EDX, 2, Zmm},   {"avx5124fmaps", 7, 0, EDX, 3, Zmm},
    {"uintr", 7, 0, EDX, 5, None},         {"avx512vp2intersect", 7, 0, EDX, 8, Zmm},
    {"serialize", 7, 0, EDX, 14, None},    {"tsxldtrk", 7, 0, EDX, 16, None},
    {"pconfig", 7, 0, EDX, 18, None},      {"amx_bf16", 7, 0, EDX, 22, Amx},
    {"avx512fp16", 7, 0, EDX, 23, Zmm},    {"amx_tile", 7, 0, EDX, 24, Amx},
    {"amx_int8", 7, 0, EDX, 25, Amx},
    {"avxvnni", 7, 1, EAX, 4, Ymm},        {"avx512bf16", 7, 1, EAX, 5, Zmm},
    {"hreset", 7, 1, EAX, 22, None},
    {"xsaveopt", 0xD, 1, EAX, 0, None},    {"xsavec", 0xD, 1, EAX, 1, None},
    {"xsaves", 0xD, 1, EAX, 3, None},
    {"ptwrite", 0x14, 0, EBX, 4, None},
    {"widekl", 0x19, 0, EBX, 2, None},
    {"lahf_sahf", 0x80000001, 0, ECX, 0, None}, {"abm", 0x80000001, 0, ECX, 5, None},
    {"lzcnt", 0x80000001, 0, ECX, 5, None},     {"sse4a", 0x80000001, 0, ECX, 6, None},
    {"prfchw", 0x80000001, 0, ECX, 8, None},    {"xop", 0x80000001, 0, ECX, 11, Ymm},
    {"lwp", 0x80000001, 0, ECX, 15, None},      {"fma4", 0x80000001, 0, ECX, 16, Ymm},
    {"tbm", 0x80000001, 0, ECX, 21, None},      {"mwaitx", 0x80000001, 0, ECX, 29, None},
    {"clzero", 0x80000008, 0, EBX, 0, None},    {"wbnoinvd", 0x80000008, 0, EBX, 9, None},
};

bool cpuid(unsigned leaf, unsigned subleaf, unsigned (&r)[4]) {
  const unsigned max = __get_cpuid_max(leaf & 0x80000000u, nullptr);
  if (max == 0 || leaf > max) return false;
  __cpuid_count(leaf, subleaf, r[EAX], r[EBX], r[ECX], r[EDX]);
  return true;
}

uint64_t xcr0() {
  unsigned r[4];
  if (!cpuid(1, 0, r) || !(r[ECX] & (1u << 27))) return 0;  // OSXSAVE
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool amx_permitted() {
  // Linux keeps AMX tile data off until a process asks (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
  constexpr int kArchReqXcompPerm = 0x1023, kXtileData = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXtileData) == 0;
}

std::set<std::string> detect() {
  const uint64_t x = xcr0();
  const bool ymm = (x & 0x6) == 0x6, zmm = ymm && (x & 0xe0) == 0xe0, amx = (x & 0x60000) == 0x60000;
  std::set<std::string> out;
  bool amx_ok = false, amx_asked = false;
  for (const Bit& b : kBits) {
    unsigned r[4];
    if (!cpuid(b.leaf, b.subleaf, r) || !(r[b.reg] & (1u << b.bit))) continue;
    if ((b.state == Ymm && !ymm) || (b.state == Zmm && !zmm)) continue;
    if (b.state == Amx) {
      if (!amx_asked) amx_ok = amx && amx_permitted(), amx_asked = true;
      if (!amx_ok) continue;
    }
    out.insert(b.name);
  }
  return out;
}

std::vector<std::string> known() {
  std::set<std::string> names;
  for (const Bit& b : kBits) names.insert(b.name);
  return {names.begin(), names.end()};
}

#elif defined(__aarch64__)
constexpr const char* kArch = "aarch64";

struct Cap {
  const char* name;
  int hwcap;  // 1: AT_HWCAP, 2: AT_HWCAP2
  unsigned long bit;
};
// Linux arch/arm64 uapi hwcap.h.
constexpr Cap kCaps[] = {
    {"neon", 1, 1ul << 1},   {"fp16", 1, 1ul << 10}, {"dotprod", 1, 1ul << 20}, {"sve", 1, 1ul << 22},
    {"sve2", 2, 1ul << 1},   {"i8mm", 2, 1ul << 13}, {"bf16", 2, 1ul << 14},
};

std::set<std::string> detect() {
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  std::set<std::string> out;
  for (const Cap& c : kCaps) {
    if ((c.hwcap == 1 ? hw : hw2) & c.bit) out.insert(c.name);
  }
  return out;
}

std::vector<std::string> known() {
  std::set<std::string> names;
  for (const Cap& c : kCaps) names.insert(c.name);
  return {names.begin(), names.end()};
}

#else
constexpr const char* kArch = "unknown";
std::set<std::string> detect() { return {}; }
std::vector<std::string> known() { return {}; }
#endif

const std::set<std::string>& host_set() {
  static const std::set<std::string> s = detect();
  return s;
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

// A cgroup's CPU quota in whole CPUs, rounded up (v2: cpu.max "200000 100000"; v1: cfs_quota_us / cfs_period_us);
// 0 when there is none.
int cgroup_cpu_quota() {
  const auto read = [](const char* path) {
    std::ifstream in(path);
    std::string a, b;
    in >> a >> b;
    return std::make_pair(a, b);
  };
  const auto quota = [](const std::string& q, const std::string& period) {
    try {
      const double cpus = std::stod(q) / std::stod(period);
      return cpus > 0 ? static_cast<int>(std::ceil(cpus)) : 0;
    } catch (const std::exception&) {  // "max", or nothing
      return 0;
    }
  };
  const auto [v2_quota, v2_period] = read("/sys/fs/cgroup/cpu.max");
  if (!v2_quota.empty()) return quota(v2_quota, v2_period);
  const auto v1_quota = read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").first;
  const auto v1_period = read("/sys/fs/cgroup/cpu/cpu.cfs_period_us").first;
  return v1_quota.empty() || v1_quota[0] == '-' ? 0 : quota(v1_quota, v1_period);
}

}  // namespace

const char* host_arch() { return kArch; }

std::vector<std::string> host_cpu_features() {
  const auto& s = host_set();
  return {s.begin(), s.end()};
}

std::vector<std::string> known_cpu_features() { return known(); }

std::string mkl_code_path() {
  // MKL comes inside libtorch_cpu; RTLD_NOLOAD finds it in whichever scope it was loaded into
  void* torch = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
  if (torch == nullptr) return "";
  auto* auto_branch = reinterpret_cast<int (*)()>(dlsym(torch, "mkl_serv_cbwr_get_auto_branch"));
  const int branch = auto_branch == nullptr ? -1 : auto_branch();
  dlclose(torch);
  // MKL's names of its code paths (mkl_cbwr.h, MKL_CBWR_*)
  switch (branch) {
    case -1: return "";
    case 2:
    case 3: return "generic";
    case 4: return "sse2";
    case 6: return "ssse3";
    case 7: return "sse4_1";
    case 8: return "sse4_2";
    case 9: return "avx";
    case 10: return "avx2";
    case 12: return "avx512";
    case 14: return "avx512_e1";
    // later AVX-512 branches (newer Xeons) by number
    default: return (branch > 14 ? "avx512, MKL branch " : "MKL branch ") + std::to_string(branch);
  }
}

std::string onednn_cpu_class() {
  const auto& have = host_set();
  const auto all = [&have](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&have](const char* n) { return have.count(n) > 0; });
  };
  std::string cls;
  if (std::string(kArch) == "x86_64") {
    cls = all({"avx512f", "avx512bw", "avx512dq", "avx512vl"}) ? "avx512" : all({"avx2", "fma"}) ? "avx2" : "";
  }
  // oneDNN's cap, as oneDNN reads it: lower-cased, one of its ISA names exactly, any other value capping nothing
  // (export_tools.passes.onednn_class reads it the same way)
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (cap == nullptr || *cap == '\0') cap = std::getenv("DNNL_MAX_CPU_ISA");
  if (cap == nullptr || cls.empty()) return cls;
  std::string lower(cap);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "sse41" || lower == "avx") return "";
  if (lower == "avx2" || lower == "avx2_vnni" || lower == "avx2_vnni_2") return "avx2";
  return cls;
}

std::string why_variant_cannot_run(const Variant& v) {
  if (v.arch != kArch) return "it is for " + v.arch + ", this host is " + kArch;
  static const std::vector<std::string> names = known();
  std::vector<std::string> unknown, missing;
  for (const auto& f : v.cpu_features) {
    if (!std::binary_search(names.begin(), names.end(), f)) {
      unknown.push_back(f);
    } else if (!host_set().count(f)) {
      missing.push_back(f);
    }
  }
  if (!unknown.empty()) return "it needs CPU features this runtime does not know: " + join(unknown);
  if (!missing.empty()) return "this CPU lacks " + join(missing);
  if (!v.packed_for.empty()) {
    const std::string here = onednn_cpu_class();
    if (v.packed_for != here) {
      return "its weights are packed for oneDNN's " + v.packed_for + " code and oneDNN runs its " +
             (here.empty() ? "baseline" : here) +
             " code here (each packed call would take a reference kernel; export it on a CPU of this kind, or "
             "with --cpu-isa avx2 for a variant without packed weights)";
    }
  }
  return "";
}

size_t select_variant(const Spec& spec, const std::string& cpu_isa) {
  const std::string& forced = cpu_isa;
  std::vector<std::string> have;
  for (const auto& v : spec.variants) have.push_back(v.isa);
  if (!forced.empty()) {
    for (size_t i = 0; i < spec.variants.size(); ++i) {
      if (spec.variants[i].isa != forced) continue;
      const std::string why = why_variant_cannot_run(spec.variants[i]);
      if (!why.empty()) {
        throw Error(ErrorCode::Package, "CPU variant " + forced + " was asked for, but " + why +
                                            " (the package has: " + join(have) + ")");
      }
      return i;
    }
    throw Error(ErrorCode::Package, "the package has no CPU variant " + forced + " (it has: " + join(have) + ")");
  }
  // The most specialised variant this CPU runs: the one whose code may use the most features.
  std::optional<size_t> best;
  std::vector<std::string> reasons;
  for (size_t i = 0; i < spec.variants.size(); ++i) {
    const Variant& v = spec.variants[i];
    const std::string why = why_variant_cannot_run(v);
    if (!why.empty()) {
      reasons.push_back(v.isa + ": " + why);
      continue;
    }
    if (!best || v.cpu_features.size() > spec.variants[*best].cpu_features.size()) best = i;
  }
  if (!best) {
    throw Error(ErrorCode::Package, "no CPU variant of the package runs on this host (" + join(reasons, "; ") +
                                        "); export it with --cpu-isa default (or avx2) for a portable variant");
  }
  return *best;
}

int usable_cores() {
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(omp, &end, 10);
    if (end != omp && n > 0) return static_cast<int>(std::min<long>(n, kMaxIntraOpThreads));
  }
  cpu_set_t allowed;
  int cores = sched_getaffinity(0, sizeof allowed, &allowed) == 0
                  ? CPU_COUNT(&allowed)
                  : static_cast<int>(std::thread::hardware_concurrency());
  if (const int quota = cgroup_cpu_quota(); quota > 0) cores = std::min(cores, quota);
  return std::clamp(cores, 1, kMaxIntraOpThreads);
}

}  // namespace pt2rt
