// pt2rt: run a model.pt2 made by export_tools from C++, without Python.
//
// This header needs C++17 and nothing else: no torch header. Link pt2rt::pt2rt (libpt2rt.so).
//
//   pt2rt::Options opts;
//   opts.num_runners = 2;
//   pt2rt::Runtime rt = pt2rt::Runtime::load("model.pt2", opts);
//   std::vector<pt2rt::Tensor> out = rt.run({pt2rt::TensorView{ptr, {1, 3, 224, 224}, pt2rt::DType::Float32}});
//
// Ownership: a TensorView / OutputView borrows the caller's memory for the duration of one call, nothing keeps it
// afterwards. A Tensor owns its memory (shared by its copies); run() hands out storage nothing else holds, whatever
// the model returns. Load bytes (load_from_memory) are read during the call only.
// Threads: Runtime::load and load_from_memory may run concurrently (also for the same package); one Runtime's
// run(), run_into(), verify(), example_inputs() and accessors may be called from many threads at once. Moving or
// destroying a Runtime while another thread uses it is the caller's error. A Tensor may be read from any thread;
// writing through mutable_data() while another thread reads that storage is the caller's race. set_num_threads
// and keep_freed_memory are process-wide; keep_freed_memory before starting threads that run models.
// Errors: failures throw pt2rt::Error, whose code() is the class of failure (ErrorCode below) and whose what() is
// one line naming what was wrong and what was expected (std::bad_alloc when memory runs out). Accessors (spec(),
// variant(), ops_libraries(), Tensor's getters) do not throw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#define PT2RT_API __attribute__((visibility("default")))

namespace pt2rt {

enum class DType { Float32, Float64, Float16, BFloat16, Int64, Int32, Int16, Int8, UInt8, Bool };

// "float32", "bfloat16", ... (the names of the spec); size of one element in bytes.
PT2RT_API const char* dtype_name(DType dtype);
PT2RT_API std::size_t dtype_size(DType dtype);
PT2RT_API std::optional<DType> dtype_from_name(std::string_view name);

enum class Device { CPU, CUDA };
PT2RT_API const char* device_name(Device device);  // "cpu", "cuda" (as specs and torch name them)

// Error classes. The CLI maps each to its exit code (exit_code()); docs/runtime.md lists them.
enum class ErrorCode {
  Usage,       // a bad argument to the API or the CLI
  Package,     // the package is missing, damaged, not ours, or cannot run on this host (ISA, torch, device)
  OpsLibrary,  // an ops library is missing, does not load, or lacks an op or class the package needs
  Input,       // an input does not match the spec (count, dtype, rank, shape, range, device)
  IO,          // a tensor file cannot be read or written
  Runtime,     // the model failed while it ran
};
PT2RT_API int exit_code(ErrorCode code);  // 2 usage, 3 package, 4 ops library, 5 input, 6 I/O, 7 runtime
PT2RT_API const char* error_code_name(ErrorCode code);

class PT2RT_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Borrowed memory: a dense, contiguous, row-major tensor. The caller keeps `data` alive during run(). Memory on
// another device than the package's is copied there by run() (host memory for a CUDA package, and back).
struct TensorView {
  const void* data = nullptr;
  std::vector<int64_t> shape;
  DType dtype = DType::Float32;
  Device device = Device::CPU;
  int device_index = 0;
};

// Memory of the caller that run_into() writes an output into: dense, contiguous, row-major, of the output's shape
// and dtype. The caller keeps `data` alive during run_into().
struct OutputView {
  void* data = nullptr;
  std::vector<int64_t> shape;
  DType dtype = DType::Float32;
  Device device = Device::CPU;
  int device_index = 0;
};

namespace detail {
struct TensorAccess;
struct RuntimeAccess;
}

// Owned memory: an output of run(), or a tensor read from a file. Copies of a Tensor share its storage (a copy is
// cheap): what mutable_data() writes, every copy sees. run() never hands out storage that anything else holds.
class PT2RT_API Tensor {
 public:
  Tensor();
  // A contiguous copy of `view` on the CPU.
  static Tensor copy_of(const TensorView& view);

  const void* data() const;
  void* mutable_data();
  const std::vector<int64_t>& shape() const;
  DType dtype() const;
  Device device() const;
  int64_t numel() const;
  std::size_t nbytes() const;
  TensorView view() const;
  // A contiguous copy on the CPU (this tensor itself when it is on the CPU already).
  Tensor to_cpu() const;
  // A contiguous copy on `device` (this tensor itself when it is there already); an Input error when the device
  // is a GPU this build or host does not have.
  Tensor to(Device device, int device_index = 0) const;


 private:
  friend struct detail::TensorAccess;
  struct Impl;
  explicit Tensor(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// What a package says about itself: docs/package-format.md.
struct DynamicDim {
  int dim = 0;
  std::string name;
  int64_t min = 0;
  std::optional<int64_t> max;  // none: unbounded
  // A dim derived from another: size = scale * <of> + offset (torch's Dim arithmetic, scale >= 1); of empty: none.
  std::string of;
  int64_t scale = 1;
  int64_t offset = 0;
};

// The values an integer input may hold, where it indexes a table (an embedding's token ids): min..max inclusive.
struct ValueRange {
  int64_t min = 0;
  int64_t max = 0;
  std::string indexes;  // what it indexes, e.g. "aten.embedding of 500 rows"
};

struct TensorSpec {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;  // -1 where dynamic
  std::vector<DynamicDim> dynamic_dims;
  std::optional<ValueRange> values;  // inputs only; run() refuses an element outside it
};

struct CustomOpSpec {
  std::string name;       // "acme::scale2" (an op), "acme::Scaler" (a class)
  std::string library;    // "libacme_ops.so"
  std::vector<std::string> methods;  // classes only
  // What the package was exported against, checked after loading (empty in packages that predate them):
  std::string overload;  // ops: the overload name, "" for the default
  std::string schema;    // ops: "acme::scale2(Tensor x) -> Tensor"
  std::map<std::string, std::string> method_schemas;  // classes: method name -> schema
  // ops of a package with lite variants: the library's lite build that pt2rt-lite loads ("libacme_ops_lite.so")
  std::string lite_library;
};

// One compile of the model for one kind of CPU (export --cpu-isa): a package holds one or more.
struct Variant {
  std::string isa;     // "native", "avx512", "avx2", "default"
  std::string model;   // its AOTInductor model name inside the package ("" for a lite variant)
  std::string arch;    // "x86_64", "aarch64"
  std::string vec_isa;  // inductor's name for its vector code
  std::vector<std::string> compile_flags;
  std::vector<std::string> cpu_features;  // what its code may use (host_cpu_features() vocabulary)
  std::string record;  // its compiled library inside the package
  std::string sha256;
  int64_t size = 0;
  // The oneDNN class its packed weights are laid out for ("avx2", "avx512"; onednn_cpu_class()), "" for none: on a
  // CPU where oneDNN runs another class each packed call takes a reference kernel, so such a variant is not run there.
  std::string packed_for;
};

// An output passes when |actual - expected| <= atol' + rtol * |expected| elementwise, with atol' = atol_rel * the
// largest finite |value| of expected and actual (atol without atol_rel, and for Spec::degenerate_outputs).
struct Tolerance {
  double rtol = 0;
  double atol = 0;
  std::optional<double> atol_rel;
};

struct Spec {
  std::string format;
  std::string model;
  Device device = Device::CPU;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<CustomOpSpec> custom_ops;
  std::vector<CustomOpSpec> custom_classes;
  std::vector<std::string> libraries;
  std::string torch_version;
  std::string cuda_version;        // empty for CPU packages
  std::string compute_capability;  // empty for CPU packages
  std::vector<Variant> variants;
  // Libraries that need no libtorch (export --lite), which pt2rt-lite runs: variants with no model name, their
  // record under pt2rt/lite/. Empty when the package has none.
  std::vector<Variant> lite_variants;
  std::string golden_record;
  std::vector<std::string> golden_names;
  std::map<std::string, Tolerance> tolerances;  // per output dtype name
  std::vector<int> degenerate_outputs;           // exported although constant in every case: fixed atol
  std::map<std::string, std::string> metadata;
  std::string created_by;
  std::string json;  // the spec as stored
};

// The most model instances one Runtime holds (Options::num_runners).
constexpr int kMaxRunners = 1024;
// The most intra-op threads a run may be given (Options::intra_op_threads, set_num_threads).
constexpr int kMaxIntraOpThreads = 1024;

struct Options {
  // Ops libraries to load first. Then the files the spec names whose items are still unregistered (and whose
  // names are not among these), searched in the directory of libpt2rt.so, then in each directory of PT2RT_OPS_PATH
  // (':'-separated), then (ops_from_package_dir) next to the package. Nothing is loaded once everything the
  // package needs is registered.
  std::vector<std::string> ops_libraries;
  // Model instances that serve concurrent run() calls: 1..kMaxRunners.
  int num_runners = 1;
  // Refuse a package exported with a newer torch minor version than the runtime's, or before 2.11: a model library
  // runs under the libtorch that made it or a newer one (AOTInductor's C shim keeps old functions).
  bool check_torch_version = true;
  // Check the compiled model library's SHA-256 against the spec.
  bool check_sha256 = true;
  // Also look for the ops libraries the spec names in the package's own directory. Off: opening a package must
  // not run code from wherever the package was downloaded to.
  bool ops_from_package_dir = false;
  // Bounds on what a package can make load() read and write (a damaged or hostile package fails with
  // Error(Package) instead): one record, uncompressed; the spec's metadata record; everything extracted for the
  // chosen variant.
  std::uint64_t max_record_bytes = std::uint64_t{4} << 30;
  std::uint64_t max_metadata_bytes = std::uint64_t{16} << 20;
  std::uint64_t max_extracted_bytes = std::uint64_t{16} << 30;
  // The CPU variant to load ("avx2", ...). Empty: the most specialised variant this CPU runs. (The library reads
  // no environment variable; pt2run and pt2serve pass $PT2RT_CPU_ISA here.) A variant the package lacks or this CPU cannot run is an Error(Package).
  std::string cpu_isa;
  // CUDA device for CUDA packages; -1: the current device.
  int device_index = -1;
  // Keep the package file open for the Runtime's life, so that verify() and example_inputs() read the golden
  // cases of the very file that was loaded, even if another is renamed over its path. Off: no file is held once
  // load() returns (a server with many versions loaded holds no file per version); verify() and example_inputs()
  // open the path again and throw Error(Package) when it is not the file that was loaded (another file, or another
  // size or modification time).
  bool keep_package_open = true;
  // Reuse the CPU memory of earlier runs: the buffers a run allocates on its calling thread (outputs and
  // intermediates) come from the blocks earlier runs of this Runtime freed, so a model whose shapes do not change
  // allocates nothing per run_into() once warm (run(): nothing but the outputs the caller keeps) - for a loop that
  // must not take the process's malloc locks or page faults. Each run in flight at once holds about one run's
  // buffers between runs; blocks a run did not reuse are freed at its end. Off by default: it is not faster (docs/
  // runtime.md: ResNet-18 +10 %, small models +-1 %). The cache is a c10 CPU allocator put in front of torch's
  // (priority 0); one registered with a higher priority keeps its place and then nothing is cached.
  bool reuse_run_memory = false;
  // Intra-op threads of this Runtime's runs, 1..kMaxIntraOpThreads: each run() sizes its calling thread's OpenMP
  // team (and MKL's) to this for the run and gives the thread back its own setting afterwards, so models loaded
  // with different counts can share threads. 0: set_num_threads' process-wide count (torch's default: one per
  // core). A process running several models at once divides its cores among them (pt2serve: cores / instances).
  int intra_op_threads = 0;
};

struct CaseReport {
  std::string name;
  bool passed = false;
  double max_abs_error = 0;
  double max_rel_error = 0;     // elementwise |actual - expected| / |expected|
  double max_scaled_error = 0;  // |actual - expected| / max |expected| of its output
  std::string reason;  // why it failed; empty when it passed
};

struct VerifyReport {
  std::vector<CaseReport> cases;
  bool passed() const {
    for (const auto& c : cases)
      if (!c.passed) return false;
    return !cases.empty();
  }
};

class PT2RT_API Runtime {
 public:
  // Reads the spec, loads and checks the ops libraries, checks the package against this host, loads the model.
  static Runtime load(const std::string& package_path, const Options& options = {});
  // The same from a package in memory (read from an archive, fetched from a store): validated as a file is, no
  // package file needed. The bytes are only read during the call and may be freed once it returns. The model's
  // own files go to a private directory (mode 0700, under $TMPDIR) that the last Runtime using them removes:
  // AOTInductor loads a model from a folder. Messages name the package "the package in memory (N bytes)";
  // Options::ops_from_package_dir has no folder to look in. keep_package_open keeps the golden cases (a copy of
  // that record only) for verify() and example_inputs(); off, they throw Error(Package).
  static Runtime load_from_memory(const void* bytes, std::size_t size, const Options& options = {});
  // Only the spec, loading nothing.
  static Spec read_spec(const std::string& package_path);

  Runtime(Runtime&&) noexcept;
  Runtime& operator=(Runtime&&) noexcept;
  ~Runtime();

  // Validated against the spec, then run. Safe to call from many threads at once.
  std::vector<Tensor> run(const std::vector<TensorView>& inputs) const;
  // Runs like run() and writes output i into outputs[i] instead of returning new tensors (a game loop's buffers,
  // reused every frame). Error(Usage), with nothing written, when the number of views, a view's dtype or rank, a
  // static dim, a missing buffer or a device differs from what the package returns, or when a buffer overlaps an
  // input or another output; when a dynamic dim turns out to differ after the run, Error(Usage) naming both shapes
  // and nothing written either. A view may be on the CPU or on the package's device. Thread-safe like run().
  void run_into(const std::vector<TensorView>& inputs, const std::vector<OutputView>& outputs) const;
  const Spec& spec() const;
  // Runs the package's golden cases here.
  VerifyReport verify() const;
  // The inputs of the package's first golden case (the example the model was exported with), on its device.
  std::vector<Tensor> example_inputs() const;
  // The ops library files that were loaded for this package (absolute paths).
  const std::vector<std::string>& ops_libraries() const;
  // The CPU variant that was loaded.
  const Variant& variant() const;

 private:
  struct Impl;
  friend struct detail::RuntimeAccess;
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Tensor files in torch.save's (zip) format: read what torch.save wrote, write what torch.load reads (with its
// default weights_only=True). A file read holds one tensor, or a list or tuple of tensors; save_tensors writes one
// tensor as a tensor, several as a tuple.
// max_bytes: the most the file's tensors may take together once made contiguous (checked before any copy; a
// stride-0 tensor in a 1 KB file can claim gigabytes). Error(IO) beyond it.
PT2RT_API std::vector<Tensor> load_tensors(const std::string& path, std::size_t max_bytes = std::size_t{4} << 30);
PT2RT_API void save_tensors(const std::string& path, const std::vector<Tensor>& tensors);

// This host as the package checks see it: "x86_64" / "aarch64", and its CPU features (cpuid / getauxval,
// including what the OS enables) among known_cpu_features(), the features this runtime can check.
PT2RT_API const char* host_arch();
PT2RT_API std::vector<std::string> host_cpu_features();
PT2RT_API std::vector<std::string> known_cpu_features();
// The class of code oneDNN runs on this host, which packed weights are laid out for: "avx512" (AVX-512 F/BW/DQ/VL),
// "avx2" (AVX2 + FMA) or "" (neither, or not x86-64), capped as oneDNN caps it by $ONEDNN_MAX_CPU_ISA
// ($DNNL_MAX_CPU_ISA).
PT2RT_API std::string onednn_cpu_class();
// The code MKL (inside libtorch on x86-64) runs in this process: "avx2", "avx512", "avx512_e1" (VNNI), "generic",
// ...; "" without MKL (aarch64, pt2rt-lite). On AMD, MKL itself runs "generic"; libpt2rt tells it the CPU is as good
// as an Intel one with the same instruction sets when it has AVX2 + FMA (PT2RT_MKL_VENDOR_CHECK=1: not), docs/runtime.md.
PT2RT_API std::string mkl_code_path();
// Why this host cannot run a variant (another arch, CPU features it lacks or this runtime does not know, weights
// packed for another oneDNN class); "" if it can.
PT2RT_API std::string why_variant_cannot_run(const Variant& variant);
// The index of the variant Runtime::load would take with Options::cpu_isa = cpu_isa (see there); Error(Package)
// naming the package's variants when none fits.
PT2RT_API std::size_t select_variant(const Spec& spec, const std::string& cpu_isa = "");

// The cores this process may use: OMP_NUM_THREADS where the operator set it, else its CPU affinity (taskset, a
// cpuset) within its cgroup's CPU quota (a container's CPU limit), at least 1 and at most kMaxIntraOpThreads. What
// a process that runs several runtimes at once divides between their Options::intra_op_threads.
PT2RT_API int usable_cores();

// Removes the temporary directories (pt2rt-<pid>-*, under $TMPDIR) that processes of this user which are no
// longer running left behind (a process killed while a Runtime was loaded); returns how many. pt2run calls it.
PT2RT_API int remove_stale_temp_dirs();

PT2RT_API const char* version();
PT2RT_API const char* torch_version();
// Throws the Error (ErrorCode::Input) run() would for these inputs - count, dtype, shape, dynamic ranges, values -
// without running: a server checks each request alone before it joins a batch.
PT2RT_API void check_inputs(const Spec& spec, const std::vector<TensorView>& inputs);
// True in pt2rt-lite (a libpt2rt without libtorch: it loads a package's lite variants, Spec::lite_variants).
PT2RT_API bool is_lite();
// Threads each run() may use inside torch's kernels (torch's intra-op threads; default: one per core), 1..
// kMaxIntraOpThreads. Process-wide, like torch's own setting: every thread's next run() of a Runtime loaded without
// Options::intra_op_threads uses it (its OpenMP and MKL threads), whichever thread set it. With several threads
// calling run(), threads x this <= cores avoids oversubscription.
PT2RT_API void set_num_threads(int threads);
PT2RT_API int num_threads();

// Process-wide malloc policy for serving (glibc's malloc; elsewhere - another libc, jemalloc in the process as in
// pt2run and pt2serve - it changes nothing and returns false). Buffers then
// come from malloc's heaps instead of mmaps of their own (any size from the main arena; from a thread's arena,
// up to its heaps' 64 MiB), and freed memory stays mapped instead of going back to the OS: all but what lies free
// past retain_bytes at the top of a heap (with retain_bytes >= 64 MiB, a thread arena's heaps past its first stay
// mapped once empty too). Without it, glibc hands a model's per-call buffers back to the OS and faults them in again on
// the next call - from threads other than main, on every call (2.4x per call at batch 32 of the example model,
// docs/runtime.md). The price: the process keeps its peak working set mapped. pt2run calls it; a process that
// serves models should too, once, before it starts threads.
PT2RT_API bool keep_freed_memory(std::size_t retain_bytes = std::size_t{256} << 20);

}  // namespace pt2rt
