// pt2run: run, inspect, verify and benchmark model.pt2 packages from the command line. No Python.
#include <pt2rt/pt2rt.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "allocator.h"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>
#include <thread>

namespace {

constexpr int kExitOk = 0;
constexpr int kExitMismatch = 1;

// Text from a package (names, metadata, messages quoting them) printed as it is could end a line early or drive
// the terminal: control characters are written as \xNN.
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string dims(const pt2rt::TensorSpec& t) {
  std::vector<std::string> d;
  for (auto s : t.shape) d.push_back(std::to_string(s));
  for (const auto& dd : t.dynamic_dims) {
    d[dd.dim] = dd.name + "[" + std::to_string(dd.min) + ".." + (dd.max ? std::to_string(*dd.max) : "inf") + "]";
  }
  std::string out = std::string(pt2rt::dtype_name(t.dtype)) + "[";
  for (size_t i = 0; i < d.size(); ++i) out += (i ? ", " : "") + d[i];
  return out + "]";
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

// The spec with every string made printable (one line per field, whatever the package holds).
pt2rt::Spec printable_spec(pt2rt::Spec s) {
  for (auto* f : {&s.format, &s.model, &s.torch_version, &s.cuda_version, &s.compute_capability,
                  &s.golden_record, &s.created_by}) {
    *f = printable(*f);
  }
  for (auto* list : {&s.inputs, &s.outputs}) {
    for (auto& t : *list) {
      t.name = printable(t.name);
      for (auto& d : t.dynamic_dims) {
        d.name = printable(d.name);
        d.of = printable(d.of);
      }
    }
  }
  for (auto* list : {&s.custom_ops, &s.custom_classes}) {
    for (auto& c : *list) {
      c.name = printable(c.name);
      c.library = printable(c.library);
      for (auto& m : c.methods) m = printable(m);
    }
  }
  for (auto* list : {&s.variants, &s.lite_variants}) {
    for (auto& v : *list) {
      for (auto* f : {&v.isa, &v.model, &v.arch, &v.record, &v.sha256, &v.packed_for}) *f = printable(*f);
      for (auto& f : v.cpu_features) f = printable(f);
    }
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [k, v] : s.metadata) metadata[printable(k)] = printable(v);
  s.metadata = std::move(metadata);
  return s;
}

std::string g_cpu_isa;  // --cpu-isa, else $PT2RT_CPU_ISA

int cmd_info(const std::string& package, bool json) {
  const pt2rt::Spec raw = pt2rt::Runtime::read_spec(package);
  const pt2rt::Spec spec = json ? raw : printable_spec(raw);
  // Which variant this host would load (pt2rt-lite: among the lite variants), or why none.
  std::string selected, none_reason;
  try {
    pt2rt::Spec choice = raw;
    if (pt2rt::is_lite()) choice.variants = raw.lite_variants;
    if (choice.variants.empty()) throw pt2rt::Error(pt2rt::ErrorCode::Package, "the package has no lite variants (export --lite)");
    selected = choice.variants[pt2rt::select_variant(choice, g_cpu_isa)].isa;
  } catch (const pt2rt::Error& e) {
    none_reason = json ? e.what() : printable(e.what());
  }
  if (json) {
    nlohmann::json j = nlohmann::json::parse(spec.json);
    j["selected"] = selected.empty() ? nlohmann::json(nullptr) : nlohmann::json(selected);
    if (!none_reason.empty()) j["selected_error"] = none_reason;
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::ostringstream os;
  os << "package      " << spec.model << "  (" << spec.format << ", " << spec.created_by << ")\n"
            << "device       " << pt2rt::device_name(spec.device)
            << (spec.cuda_version.empty() ? "" : "  (CUDA " + spec.cuda_version + ", sm " + spec.compute_capability + ")")
            << "\n"
            << "torch        " << spec.torch_version << "  (this runtime: " << pt2rt::torch_version() << ")\n";
  for (const auto& t : spec.inputs) os << "input        " << t.name << ": " << dims(t) << "\n";
  for (const auto& t : spec.outputs) os << "output       " << t.name << ": " << dims(t) << "\n";
  for (const auto& o : spec.custom_ops) {
    os << "custom op    " << o.name << "  <- " << o.library;
    if (!o.lite_library.empty()) os << ", lite: " << o.lite_library;
    os << "\n";
  }
  for (const auto& c : spec.custom_classes) os << "custom class " << c.name << "  <- " << c.library << "\n";
  for (const bool lite : {false, true}) {
    const auto& list = lite ? spec.lite_variants : spec.variants;
    const auto& raw_list = lite ? raw.lite_variants : raw.variants;
    for (const auto& v : list) {
      const std::string why = printable(pt2rt::why_variant_cannot_run(raw_list[static_cast<size_t>(&v - list.data())]));
      os << (lite ? "lite variant " : "variant      ") << v.isa
         << (v.isa == selected && lite == pt2rt::is_lite() ? "  (selected here)" : "") << "  " << v.arch
         << (lite ? std::string() : ", model " + v.model) << ", " << v.record << "  sha256 " << v.sha256 << "\n"
         << "  features   " << (v.cpu_features.empty() ? "(baseline " + v.arch + ")" : join(v.cpu_features, " "))
         << "\n";
      if (!v.packed_for.empty()) os << "  packed     weights laid out for oneDNN's " << v.packed_for << " code\n";
      if (!why.empty()) os << "  not here   " << why << "\n";
    }
  }
  os << "selected     " << (selected.empty() ? "none: " + none_reason : selected) << "\n"
            << "golden       " << spec.golden_names.size() << " cases in " << spec.golden_record << "\n";
  for (const auto& [k, v] : spec.metadata) os << "metadata     " << k << " = " << v << "\n";
  std::cout << os.str();
  return kExitOk;
}

int cmd_host(bool json) {
  const auto have = pt2rt::host_cpu_features(), known = pt2rt::known_cpu_features();
  if (json) {
    std::cout << nlohmann::json{{"arch", pt2rt::host_arch()}, {"cpu_features", have}, {"known_cpu_features", known},
                                {"onednn_class", pt2rt::onednn_cpu_class()}, {"mkl_code", pt2rt::mkl_code_path()},
                                {"torch", pt2rt::torch_version()}, {"pt2rt", pt2rt::version()}}
                     .dump(2)
              << "\n";
    return kExitOk;
  }
  std::cout << "arch         " << pt2rt::host_arch() << "\n"
            << "cpu features " << join(have, " ") << "\n"
            << "oneDNN class " << (pt2rt::onednn_cpu_class().empty() ? "baseline" : pt2rt::onednn_cpu_class()) << "\n"
            << "MKL code     " << (pt2rt::mkl_code_path().empty() ? "none" : pt2rt::mkl_code_path()) << "\n"
            << "runtime      " << (pt2rt::is_lite() ? "pt2rt-lite " : "pt2rt ") << pt2rt::version() << ", torch "
            << pt2rt::torch_version() << "\n";
  return kExitOk;
}

bool g_ops_from_package_dir = false;  // --ops-from-package-dir
bool g_reuse_run_memory = false;      // bench --reuse-run-memory
bool g_keeps_freed_memory = false;    // what keep_freed_memory said at start (false beside jemalloc)
int g_intra_op_threads = 0;           // --intra-op-threads (Options::intra_op_threads)

pt2rt::Options options_for(const std::vector<std::string>& ops, int runners) {
  pt2rt::Options o;
  o.cpu_isa = g_cpu_isa;
  o.ops_from_package_dir = g_ops_from_package_dir;
  o.ops_libraries = ops;
  o.num_runners = runners;
  o.reuse_run_memory = g_reuse_run_memory;
  o.intra_op_threads = g_intra_op_threads;
  return o;
}

void check_writable(const std::string& path) {
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    throw pt2rt::Error(pt2rt::ErrorCode::IO, "cannot write " + path + ": directory " + dir + ": " + std::strerror(errno));
  }
}

// The most bytes the package's inputs can take (every dynamic dim at its maximum); 4 GiB when one is unbounded.
std::size_t max_input_bytes(const pt2rt::Spec& spec) {
  std::size_t total = 0;
  for (const auto& t : spec.inputs) {
    std::size_t bytes = pt2rt::dtype_size(t.dtype);
    for (size_t d = 0; d < t.shape.size(); ++d) {
      int64_t size = t.shape[d];
      for (const auto& dd : t.dynamic_dims) {
        if (static_cast<size_t>(dd.dim) == d) size = dd.max.value_or(-1);
      }
      if (size < 0 || __builtin_mul_overflow(bytes, static_cast<std::size_t>(size), &bytes)) return std::size_t{4} << 30;
    }
    if (__builtin_add_overflow(total, bytes, &total)) return std::size_t{4} << 30;
  }
  return total;
}

std::size_t input_file_limit(const pt2rt::Spec& spec) {
  const std::size_t max = max_input_bytes(spec);
  return std::max(max > SIZE_MAX / 2 ? max : 2 * max, std::size_t{256} << 20);
}

// Tensor files, none much larger than the package's inputs can be (checked before anything is copied; a
// slightly larger one still reaches the spec check and its precise message).
std::vector<pt2rt::Tensor> read_inputs(const std::vector<std::string>& files, std::size_t max_bytes = std::size_t{4} << 30) {
  std::vector<pt2rt::Tensor> inputs;
  for (const auto& f : files) {
    auto ts = pt2rt::load_tensors(f, max_bytes);
    inputs.insert(inputs.end(), ts.begin(), ts.end());
  }
  return inputs;
}

// Tensor files hold CPU tensors. Runtime::run copies them to a CUDA package's GPU on every call; bench puts them
// there once, so that it times the model and not the copies.
void to_package_device(std::vector<pt2rt::Tensor>& tensors, const pt2rt::Spec& spec) {
  for (auto& t : tensors) t = t.to(spec.device);
}

std::vector<pt2rt::TensorView> views_of(const std::vector<pt2rt::Tensor>& ts) {
  std::vector<pt2rt::TensorView> v;
  for (const auto& t : ts) v.push_back(t.view());
  return v;
}

// AOTInductor's generated model code writes "Error: <call> API call failed at <file>, line <n>" to std::cerr
// before a failing run throws; the exception pt2run reports says what failed. Held back while one thread runs
// (run, verify) and printed only when the run did not fail or PT2RT_VERBOSE is set, so an error stays one line.
class ModelStderr {
 public:
  ModelStderr() : saved_(std::cerr.rdbuf(&held_)) {}
  ~ModelStderr() {
    std::cerr.rdbuf(saved_);
    if ((!failed_ && std::uncaught_exceptions() == 0) || std::getenv("PT2RT_VERBOSE")) std::cerr << held_.str();
  }
  void failed() { failed_ = true; }  // the caller reports the failure itself
  ModelStderr(const ModelStderr&) = delete;
  ModelStderr& operator=(const ModelStderr&) = delete;

 private:
  std::stringbuf held_;
  std::streambuf* saved_;
  bool failed_ = false;
};

int cmd_run(const std::string& package, const std::vector<std::string>& input_files, const std::string& output,
            const std::vector<std::string>& ops) {
  check_writable(output);
  auto inputs = read_inputs(input_files, input_file_limit(pt2rt::Runtime::read_spec(package)));
  const pt2rt::Runtime rt = pt2rt::Runtime::load(package, options_for(ops, 1));
  std::vector<pt2rt::Tensor> outputs;
  {
    const ModelStderr quiet;
    outputs = rt.run(views_of(inputs));
  }
  for (auto& t : outputs) t = t.to_cpu();
  pt2rt::save_tensors(output, outputs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::vector<int64_t> shape = outputs[i].shape();
    std::string s;
    for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
    std::cerr << "pt2run: output " << i << ": " << pt2rt::dtype_name(outputs[i].dtype()) << "[" << s << "] -> "
              << output << "\n";
  }
  return kExitOk;
}

int cmd_verify(const std::string& package, const std::vector<std::string>& ops) {
  const pt2rt::Runtime rt = pt2rt::Runtime::load(package, options_for(ops, 1));
  pt2rt::VerifyReport report;
  {
    ModelStderr quiet;
    report = rt.verify();
    if (!report.passed()) quiet.failed();  // a case whose run failed has a FAIL line with the reason
  }
  for (const auto& c : report.cases) {
    std::printf("%s %-24s max abs %.3g  max err/scale %.3g%s%s\n", c.passed ? "ok  " : "FAIL", c.name.c_str(),
                c.max_abs_error, c.max_scaled_error, c.reason.empty() ? "" : "  ", c.reason.c_str());
  }
  const auto passed = std::count_if(report.cases.begin(), report.cases.end(), [](const auto& c) { return c.passed; });
  std::printf("%s: %ld of %zu golden cases passed on this machine (CPU variant %s)\n",
              report.passed() ? "verified" : "MISMATCH", static_cast<long>(passed), report.cases.size(),
              rt.variant().isa.c_str());
  return report.passed() ? kExitOk : kExitMismatch;
}

int count_process_threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// Each thread's CPU time (ns) by thread id, from its per-thread CPU clock (Linux encodes a thread's clock id from
// its tid: ~tid << 3 | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED). Which threads did the work is a fact about threads,
// where the process's CPU share depends on what else the machine runs.
std::map<long, int64_t> thread_cpu_ns() {
  std::map<long, int64_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    const long tid = std::strtol(entry.path().filename().c_str(), nullptr, 10);
    const auto clock = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6u);
    timespec ts{};
    if (clock_gettime(clock, &ts) == 0) out[tid] = int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  }
  return out;
}

// The process's CPU time, every thread's (the model's intra-op threads too), user and system.
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

// The most memory this program has held in RAM (package, model, runs), in MiB: VmHWM, the high-water mark of its
// own address space. Not ru_maxrss, which keeps the forking process's peak across exec (a benchmark's Python).
double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  }
  return 0.0;
}

double percentile(std::vector<double> sorted, double p) {
  if (sorted.empty()) return 0;
  const double idx = p * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(idx);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (idx - static_cast<double>(lo));
}

int cmd_bench(const std::string& package, const std::vector<std::string>& ops, const std::vector<std::string>& input_files,
              int warmup, int iters, int threads, int runners, bool json) {
  // Several callers: split the cores between them unless told otherwise (oversubscription costs throughput).
  if (g_intra_op_threads == 0 && threads > 1) g_intra_op_threads = std::max(1, pt2rt::usable_cores() / threads);
  const pt2rt::Runtime rt = pt2rt::Runtime::load(package, options_for(ops, runners));
  auto inputs = input_files.empty() ? rt.example_inputs() : read_inputs(input_files, input_file_limit(rt.spec()));
  to_package_device(inputs, rt.spec());
  const auto views = views_of(inputs);

  // Every run happens on the bench threads, warm-up included: each thread that runs a model gets an OpenMP team
  // of its own, and a team left idle on another thread (warming up on main did this) makes libgomp stop
  // spin-waiting once its threads outnumber the cores - every call then waits for its threads to wake.
  std::vector<double> latencies(static_cast<size_t>(iters));
  std::atomic<int> next{0}, done{0}, warm{0};
  int process_threads = 0;  // when measuring ends: main, the callers and their OpenMP teams
  std::map<long, int64_t> threads_at_start, threads_at_end;  // CPU time per thread around the measured runs
  int finished = 0;
  const bool tty = isatty(STDERR_FILENO) && !json;
  std::chrono::steady_clock::time_point start;
  double cpu_start = 0;
  std::mutex error_mutex, start_mutex;
  std::condition_variable started;
  std::exception_ptr error;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        for (int i = t; i < warmup; i += threads) rt.run(views);
        {
          std::unique_lock<std::mutex> lock(start_mutex);
          if (++warm == threads) {
            threads_at_start = thread_cpu_ns();
            cpu_start = process_cpu_seconds();
            start = std::chrono::steady_clock::now();
            started.notify_all();
          } else {
            started.wait(lock, [&] { return warm.load() == threads; });
          }
        }
        for (int i; (i = next.fetch_add(1)) < iters;) {
          const auto t0 = std::chrono::steady_clock::now();
          rt.run(views);
          latencies[static_cast<size_t>(i)] =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          ++done;
        }
        // The last caller counts the process's threads while every caller (and its team) still exists.
        std::unique_lock<std::mutex> lock(start_mutex);
        if (++finished == threads) {
          process_threads = count_process_threads();
          threads_at_end = thread_cpu_ns();
          started.notify_all();
        } else {
          started.wait(lock, [&] { return finished >= threads; });
        }
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(error_mutex);
          error = std::current_exception();
          next = iters;
        }
        std::lock_guard<std::mutex> lock(start_mutex);  // never leave the others waiting for this one
        warm = threads;
        finished = threads;
        started.notify_all();
      }
    });
  }
  if (tty) {
    while (done.load() < iters && !error) {
      std::fprintf(stderr, "\rpt2run bench: %d/%d runs", done.load(), iters);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::fprintf(stderr, "\r%60s\r", "");
  }
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu_s = process_cpu_seconds() - cpu_start;
  const double cores_busy = wall_s > 0 ? cpu_s / wall_s : 0.0;
  std::sort(latencies.begin(), latencies.end());
  const double mean = std::accumulate(latencies.begin(), latencies.end(), 0.0) / std::max(iters, 1);
  const double p50 = percentile(latencies, 0.5), p90 = percentile(latencies, 0.9), p99 = percentile(latencies, 0.99);
  const double throughput = iters / wall_s;
  // The CPU seconds each thread spent in the measured runs, most first (threads that never ran left out).
  std::vector<double> thread_cpu_s;
  for (const auto& [tid, ns] : threads_at_end) {
    const auto before = threads_at_start.find(tid);
    const int64_t spent = ns - (before == threads_at_start.end() ? 0 : before->second);
    if (spent > 0) thread_cpu_s.push_back(static_cast<double>(spent) / 1e9);
  }
  std::sort(thread_cpu_s.rbegin(), thread_cpu_s.rend());
  if (json) {
    nlohmann::json j = {{"latency_ms", {{"p50", p50}, {"p90", p90}, {"p99", p99}, {"mean", mean}}},
                        {"throughput_per_s", throughput},
                        {"cpu_s", cpu_s}, {"wall_s", wall_s}, {"cores_busy", cores_busy},
                        {"iters", iters}, {"threads", threads}, {"runners", runners}, {"warmup", warmup},
                        {"intra_op_threads", g_intra_op_threads > 0 ? g_intra_op_threads : pt2rt::num_threads()}, {"process_threads", process_threads},
                        {"thread_cpu_s", thread_cpu_s}, {"peak_rss_mib", peak_rss_mib()},
                        {"allocator", pt2rt::cli::allocator_name()}, {"keeps_freed_memory", g_keeps_freed_memory},
                        {"allocated_mib", static_cast<double>(pt2rt::cli::allocated_bytes()) / (1 << 20)}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf("%d runs, %d threads, %d runners: p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  mean %.3f ms  %.1f runs/s  "
                "%.2f cores busy  peak RSS %.0f MiB\n",
                iters, threads, runners, p50, p90, p99, mean, throughput, cores_busy, peak_rss_mib());
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  // pt2run owns its process: per-call model buffers stay mapped between runs (see keep_freed_memory; glibc's
  // malloc only: where pt2run links jemalloc, cli/allocator.cpp sets its policy and this changes nothing).
  g_keeps_freed_memory = pt2rt::keep_freed_memory();
  // Directories a killed pt2run (or any process of this user using libpt2rt) left in $TMPDIR.
  pt2rt::remove_stale_temp_dirs();
  // the library reads no environment: the CLI passes $PT2RT_CPU_ISA as the option it stands for
  if (const char* isa = std::getenv("PT2RT_CPU_ISA")) g_cpu_isa = isa;
  CLI::App app{"pt2run: run model.pt2 packages made by export_tools, without Python.\n"
               "Exit codes: 0 ok, 1 verification mismatch, 2 usage, 3 package, 4 ops library, 5 input, 6 I/O, "
               "7 runtime."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("pt2run ") + pt2rt::version() + " (torch " + pt2rt::torch_version() +
                                         ", " + pt2rt::cli::allocator_name() + ")");

  std::string package, output;
  std::vector<std::string> ops, inputs;
  bool json = false;
  int warmup = 10, iters = 100, threads = 1, runners = 1;

  auto* info = app.add_subcommand("info", "print the spec of a package (reads it; loads nothing)");
  info->add_option("package", package, "the .pt2 package")->required();
  info->add_flag("--json", json, "the spec as JSON");

  auto* host = app.add_subcommand("host", "print this host's arch and CPU features as packages are checked against");
  host->add_flag("--json", json, "as JSON, with the features this runtime knows");

  auto* run = app.add_subcommand("run", "run a package on inputs from tensor files (torch.save format)");
  run->add_option("package", package, "the .pt2 package")->required();
  run->add_option("--input,-i", inputs, "a tensor file per model input, in order (torch.save of a tensor, or of a "
                                        "list of tensors)")->required();
  run->add_option("--output,-o", output, "where to write the outputs (torch.load reads it)")->required();
  run->add_option("--ops", ops, "ops library to load first (the package's other libraries are then searched "
                                "next to libpt2rt.so, then in PT2RT_OPS_PATH)");

  auto* verify = app.add_subcommand("verify", "run the package's golden cases on this machine (exit 1 on mismatch)");
  verify->add_option("package", package, "the .pt2 package")->required();
  verify->add_option("--ops", ops, "ops library to load");
  for (auto* sub : {run, verify}) {
    sub->add_option("--cpu-isa", g_cpu_isa, "load this CPU variant of the package (default: $PT2RT_CPU_ISA, else the "
                                            "best one this CPU runs)");
  }

  auto* bench = app.add_subcommand("bench", "measure latency and throughput");
  bench->option_defaults()->always_capture_default();  // --help shows each default
  bench->add_option("package", package, "the .pt2 package")->required();
  bench->add_option("--ops", ops, "ops library to load");
  bench->add_option("--cpu-isa", g_cpu_isa, "load this CPU variant of the package (default: $PT2RT_CPU_ISA, else "
                                            "the best one this CPU runs)");
  bench->add_option("--input,-i", inputs, "tensor files (default: the package's example input)");
  bench->add_option("--warmup", warmup, "runs before measuring")->check(CLI::NonNegativeNumber);
  bench->add_option("--iters", iters, "measured runs")->check(CLI::PositiveNumber);
  bench->add_option("--threads", threads, "threads calling run")->check(CLI::Range(1, 256));
  bench->add_option("--runners", runners, "model instances (num_runners)")->check(CLI::Range(1, pt2rt::kMaxRunners));
  bench->add_flag("--reuse-run-memory", g_reuse_run_memory,
                  "runs reuse the memory earlier runs freed (Options::reuse_run_memory): no allocation per run");
  bench->add_flag("--json", json, "print {\"latency_ms\": {...}, \"throughput_per_s\": ...}");
  for (auto* sub : {run, verify, bench}) {
    sub->add_option("--intra-op-threads", g_intra_op_threads,
                    sub == bench ? "threads per run inside the model's kernels (default: all usable cores for one "
                                   "caller, cores / --threads for several)"
                                 : "threads the run uses inside the model's kernels (default: one per usable core)")
        ->check(CLI::Range(1, pt2rt::kMaxIntraOpThreads))
        ->default_str("");
    sub->add_flag("--ops-from-package-dir", g_ops_from_package_dir,
                  "also look for the ops libraries the package names in its own directory (off: a package must not "
                  "run code from where it was downloaded)");
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    const std::string first = argc > 1 ? argv[1] : "";
    if (!first.empty() && first[0] != '-' && first != "info" && first != "run" && first != "verify" &&
        first != "bench" && first != "host") {
      what = std::string("unknown subcommand '") + argv[1] + "'; expected info, run, verify, bench or host";
    }
    std::cerr << "pt2run: error (usage): " << what << " (see pt2run --help)\n";
    return pt2rt::exit_code(pt2rt::ErrorCode::Usage);
  }

  const bool verbose = std::getenv("PT2RT_VERBOSE") != nullptr;
  try {
    if (info->parsed()) return cmd_info(package, json);
    if (host->parsed()) return cmd_host(json);
    if (run->parsed()) return cmd_run(package, inputs, output, ops);
    if (verify->parsed()) return cmd_verify(package, ops);
    if (bench->parsed()) return cmd_bench(package, ops, inputs, warmup, iters, threads, runners, json);
  } catch (const pt2rt::Error& e) {
    std::cerr << "pt2run: error (" << pt2rt::error_code_name(e.code()) << "): " << printable(e.what()) << "\n";
    return pt2rt::exit_code(e.code());
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (!verbose && what.find('\n') != std::string::npos) what.resize(what.find('\n'));
    std::cerr << "pt2run: error (runtime): " << printable(what) << "\n";
    return pt2rt::exit_code(pt2rt::ErrorCode::Runtime);
  }
  return pt2rt::exit_code(pt2rt::ErrorCode::Usage);
}
