// Internals of libpt2rt that need no torch: shared by the full runtime and pt2rt-lite (runtime/lite).
#pragma once

#include <pt2rt/pt2rt.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace pt2rt::detail {

// A Usage error naming `who` for a negative dim or dims that multiply past int64 bytes.
void check_shape(const TensorView& view, const char* who);
std::string shape_str(const std::vector<int64_t>& shape);
// "[batch, 3, 224, 224]": a spec's shape with its dynamic dims by name.
std::string dims_str(const TensorSpec& t);
// Inputs against the spec (count, dtype, rank, static dims, dynamic ranges and relations, null data): Error(Input).
// cuda_available: whether a CUDA view can be copied to the package's device on this host.
// values: also each element against its input's value range (false where the views hold shapes only)
void validate_inputs(const Spec& spec, const std::vector<TensorView>& inputs, bool cuda_available, bool values = true);
// A DType's code in c10's ScalarType numbering (AOTInductor's shim passes these), and back.
int32_t dtype_code(DType dtype);
std::optional<DType> dtype_of_code(int32_t code);
// run_into's checks of its output views before anything runs (count, dtype, rank, static dims, device, null data,
// buffers that overlap each other or an input): Error(Usage).
void check_output_views(const Spec& spec, const std::vector<TensorView>& inputs, const std::vector<OutputView>& outputs);
// The golden check of output o: its dtype's tolerance in the spec, `fixed` when its atol is fixed (a degenerate
// output); and the reason a case fails on it.
Tolerance output_tolerance(const Spec& spec, std::optional<DType> dtype, size_t o, bool& fixed);
std::string differs_reason(size_t o, const Tolerance& tol, bool fixed);
// The first line of an exception's message, without c10 backtraces.
std::string short_what(const std::exception& e);

// A run's intra-op threads (Options::intra_op_threads): the calling thread's OpenMP team (and MKL's, in the full
// runtime) sized to `threads` while the object lives, then the thread's own settings back. 0: nothing changes.
class RunThreads {
 public:
  explicit RunThreads(int threads);
  ~RunThreads();
  RunThreads(const RunThreads&) = delete;
  RunThreads& operator=(const RunThreads&) = delete;

 private:
  bool changed_ = false;
  int previous_ = 0;      // the thread's OpenMP setting
  int previous_mkl_ = 0;  // the thread's own MKL setting (0: MKL's process-wide one)
};
// Error(Runtime) when this runtime cannot size a run's threads (full runtime: torch's OpenMP runtime not found);
// a load with Options::intra_op_threads checks it first, rather than run on every core unasked.
void check_run_threads();

// The C API's name of a status (an exit code; 0: "ok"), "unknown" for other values (errors.cpp).
const char* status_identifier(int exit_code);

// A package's metadata record (JSON, with the pt2rt spec as a string inside) -> the spec (parse_spec.cpp).
Spec parse_spec(const std::string& json_text, const std::string& package_path);

// The zip archive under a package: its records by name relative to the archive's root folder. The full runtime's
// reads through torch's reader (archive_torch.cpp), pt2rt-lite's through its own (runtime/lite/archive.cpp).
// Every method may throw anything; Package turns it into Error(Package).
class ArchiveReader {
 public:
  virtual ~ArchiveReader() = default;
  virtual std::vector<std::string> records() = 0;
  virtual uint64_t size_of(const std::string& name) = 0;  // uncompressed
  virtual void read(const std::string& name, char* out, size_t size) = 0;
};
// Throws when it is not a readable zip archive.
std::unique_ptr<ArchiveReader> open_archive(const std::string& path);
std::unique_ptr<ArchiveReader> open_archive(const void* bytes, size_t size);  // borrowed

// A package opened once: every record name checked (relative, no "..", no backslash or control character, no
// duplicate) before anything is read, reads bounded by the limits. Every read of a load goes through this one
// open file, so a package replaced on disk meanwhile cannot mix two packages' records.
struct Limits {
  uint64_t max_record_bytes;
  uint64_t max_metadata_bytes;
  size_t max_records = 100000;
};
Limits limits_of(const Options& options);

// A file as the system knows it (device, inode, size, modification time): a file renamed over a path, or changed
// in place, is another. Error(Package) when it cannot be stat'ed.
struct FileIdentity {
  uint64_t device = 0, inode = 0, size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileIdentity& o) const {
    return device == o.device && inode == o.inode && size == o.size && mtime_ns == o.mtime_ns;
  }
  bool operator!=(const FileIdentity& o) const { return !(*this == o); }
};
FileIdentity file_identity(const std::string& path);

class Package {
 public:
  Package(const std::string& path, const Limits& limits);
  // A package in memory, borrowed: `bytes` must outlive the Package. `name` stands for a path in messages.
  Package(const void* bytes, size_t size, const std::string& name, const Limits& limits);
  ~Package();
  const std::string& path() const { return path_; }
  const std::vector<std::string>& records() const { return records_; }  // relative to the archive root
  uint64_t size_of(const std::string& name) const;                      // uncompressed
  std::vector<char> read(const std::string& name, uint64_t limit = 0) const;  // limit 0: max_record_bytes
  std::string metadata_record() const;  // the first data/aotinductor/<model>/*_metadata.json
  Spec spec() const;

 private:
  std::string path_;
  Limits limits_;
  std::unique_ptr<ArchiveReader> reader_;
  std::vector<std::string> records_;

  void open_records();
};

// A package opened for a load. keep_open off: the file's identity is noted (the same before and after opening, else
// it is opened again; Error(Package) after three tries), for golden_record() to know it again.
std::unique_ptr<Package> open_package(const std::string& path, const Limits& limits, bool keep_open,
                                      FileIdentity& identity);
// The golden cases' record of the package that was loaded: through the package held open, else the copy kept from
// memory, else the path opened again if it still is that file (Error(Package) when it is not, or nothing was kept).
std::vector<char> golden_record(const Package* package, bool from_memory, const std::vector<char>& kept,
                                const std::string& path, const FileIdentity& identity, const Limits& limits,
                                const Spec& spec);

// The two ways into a load, for either runtime's Runtime::Impl (its package_path, limits, package, identity,
// from_memory, golden and spec): the package opened, load_opened(impl, options) run, then the package kept or let
// go as Options::keep_package_open says (from memory: only a copy of the golden cases can be kept).
// Options' counts in their ranges (num_runners, intra_op_threads): Error(Usage) naming the one that is not.
void check_options(const Options& options);
// A count of intra-op threads in 1..kMaxIntraOpThreads, else Error(Usage) naming `who`.
void check_intra_op_threads(int threads, const char* who);
template <class Impl, class LoadOpened>
std::unique_ptr<Impl> load_path(const std::string& path, const Options& options, LoadOpened load_opened) {
  check_options(options);
  auto impl = std::make_unique<Impl>();
  impl->package_path = path;
  impl->limits = limits_of(options);
  impl->package = open_package(path, impl->limits, options.keep_package_open, impl->identity);
  load_opened(*impl, options);
  if (!options.keep_package_open) impl->package.reset();
  return impl;
}
template <class Impl, class LoadOpened>
std::unique_ptr<Impl> load_memory(const void* bytes, size_t size, const Options& options, LoadOpened load_opened) {
  check_options(options);
  auto impl = std::make_unique<Impl>();
  impl->package_path = "the package in memory (" + std::to_string(size) + " bytes)";
  impl->from_memory = true;
  impl->limits = limits_of(options);
  impl->package = std::make_unique<Package>(bytes, size, impl->package_path, impl->limits);
  load_opened(*impl, options);
  // the caller may free its bytes once this returns: what verify() needs is copied, nothing else is kept
  if (options.keep_package_open) impl->golden = impl->package->read(impl->spec.golden_record);
  impl->package.reset();
  return impl;
}

// The variant's model folder (and the package's constants and weights) in a new private directory, mode 0700,
// for AOTInductor to load from; the library's SHA-256 checked on the bytes written (Options::check_sha256).
struct Extraction {
  std::string key;  // content hash; shared by the Runtimes of identical content
  std::string dir;
  ~Extraction();  // the last one removes dir
};
std::shared_ptr<Extraction> extract_variant(const Package& package, const Variant& variant, const Options& options);
std::string make_private_dir();

// Why a record name is unsafe to extract ("" if it is fine).
std::string unsafe_record_name(const std::string& name);
std::string sha256_hex(const void* data, size_t size);

// paths.cpp
bool is_regular_file(const std::string& path);
std::string absolute_path(const std::string& path);  // realpath, or path itself where that fails
std::string dirname_of(const std::string& path);
// Where ops libraries a package names are looked for (docs/runtime.md): own_dir (the runtime library's folder),
// PT2RT_OPS_PATH's folders, then the package's folder when package_dir (and the package came from a file).
std::vector<std::string> ops_search_path(const std::string& own_dir, const std::string& package_path,
                                         bool package_dir);

}  // namespace pt2rt::detail
