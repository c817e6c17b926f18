// Internals of libpt2rt shared by its source files; torch lives here, never in the public header.
#pragma once

#include <pt2rt/pt2rt.h>

#include <ATen/ATen.h>

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

at::ScalarType to_scalar_type(DType dtype);
std::optional<DType> from_scalar_type(at::ScalarType t);
Tensor wrap(at::Tensor t);                 // makes it contiguous; no copy when it is already
at::Tensor borrow(const TensorView& view);  // no copy; the view must outlive the result
std::string shape_str(const std::vector<int64_t>& shape);
// The first line of an exception's message, without c10 backtraces.
std::string short_what(const std::exception& e);

// Package records (zip, PT2 archive layout).
std::vector<char> read_record(const std::string& package_path, const std::string& name);
std::string find_metadata_record(const std::string& package_path);
Spec parse_spec(const std::string& json_text, const std::string& package_path);
std::string sha256_hex(const void* data, size_t size);

// Byte parsers (fuzzed: tests/fuzz). Every bad input is a pt2rt::Error, never another exception or a crash.
// torch.save (zip) bytes -> the saved value. What our checks reject throws DamagedFile (its message is for
// users); what torch rejects throws torch's c10::Error.
struct DamagedFile : std::runtime_error {
  using std::runtime_error::runtime_error;
};
c10::IValue unpickle(const std::vector<char>& bytes);
std::vector<Tensor> parse_tensor_file(const std::vector<char>& bytes, const std::string& path);
struct Golden {
  std::vector<std::string> names;
  std::vector<std::vector<at::Tensor>> inputs, outputs;
};
Golden parse_golden(const std::vector<char>& bytes, const std::string& package_path);

// Ops libraries.
std::vector<std::string> load_ops_libraries(const Spec& spec, const std::string& package_path,
                                            const std::vector<std::string>& explicit_libraries);
void check_registered(const Spec& spec, const std::vector<std::string>& loaded);

// Host checks.
void check_host(const Spec& spec, const Options& options);

}  // namespace detail
}  // namespace pt2rt
