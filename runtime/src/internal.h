// Internals of libpt2rt shared by its source files; torch lives here, never in the public header.
#pragma once

#include <pt2rt/pt2rt.h>

#include <ATen/ATen.h>

namespace caffe2::serialize {
class PyTorchStreamReader;
}

#include <stdexcept>
#include <string>
#include <vector>

namespace pt2rt {

struct Tensor::Impl {
  at::Tensor t;  // contiguous
  std::vector<int64_t> shape;
  DType dtype;
};

namespace detail {

// The library's own access to a Tensor's torch tensor.
struct TensorAccess {
  static const at::Tensor& aten(const Tensor& t) { return t.impl_->t; }
  // `t` must be contiguous.
  static Tensor make(at::Tensor t, DType dtype) {
    auto impl = std::make_shared<Tensor::Impl>();
    impl->shape = t.sizes().vec();
    impl->t = std::move(t);
    impl->dtype = dtype;
    return Tensor(std::move(impl));
  }
};

at::ScalarType to_scalar_type(DType dtype);
std::optional<DType> from_scalar_type(at::ScalarType t);
Tensor wrap(at::Tensor t);                 // makes it contiguous; no copy when it is already
// A Usage error naming `who` for a negative dim or dims that multiply past int64 bytes.
void check_shape(const TensorView& view, const char* who);
at::Tensor borrow(const TensorView& view);  // no copy; the view must outlive the result
std::string shape_str(const std::vector<int64_t>& shape);
// The first line of an exception's message, without c10 backtraces.
std::string short_what(const std::exception& e);

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
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader_;
  std::vector<std::string> records_;

  void open_records();
};

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

// Ops libraries.
std::vector<std::string> load_ops_libraries(const Spec& spec, const std::string& package_path, const Options& options);
void check_registered(const Spec& spec, const std::vector<std::string>& loaded);

// Host checks.
void check_host(const Spec& spec, const Options& options);
// Why a package exported by torch `package_torch` cannot load under `runtime_torch`; "" when it can (compat.cpp).
std::string why_not_loadable(const std::string& package_torch, const std::string& runtime_torch);

// Gives the calling thread's OpenMP (and MKL) team the size set_num_threads set, once per thread and setting:
// torch sizes a thread's team only inside its own parallel ops, and a model made of inductor kernels and oneDNN
// calls never enters one - its runs would take every core whatever was asked.
void apply_num_threads();

}  // namespace detail
}  // namespace pt2rt
