// Reading a package: its records, its spec, its compiled library's hash. Nothing here loads code.
#include "internal.h"

#include <caffe2/serialize/inline_container.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace pt2rt::detail {

namespace {

constexpr const char* kSpecFormat = "pt2rt-spec/2";
constexpr const char* kSpecKey = "pt2rt_spec";
constexpr const char* kModelDir = "data/aotinductor/";

[[noreturn]] void malformed(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::Package, path + ": malformed pt2rt spec: " + what);
}

// JSON nested deeper than any spec is refused while parsing (nlohmann's values are destroyed recursively).
constexpr int kMaxJsonDepth = 32;

nlohmann::json parse_json(const std::string& text, const std::string& path, const char* what) {
  return nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxJsonDepth) {
      throw Error(ErrorCode::Package, path + ": " + what + " is nested deeper than " + std::to_string(kMaxJsonDepth) +
                                          " levels");
    }
    return true;
  });
}

// nlohmann converts a float to an integer with a plain cast (undefined beyond the range; found by tests/fuzz):
// integers in a spec must be JSON integers in range.
int64_t integer(const nlohmann::json& j, const std::string& what, const std::string& path) {
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    malformed(path, what + " is out of range");
  }
  if (!j.is_number_integer()) malformed(path, what + " must be an integer, got " + j.dump());
  return j.get<int64_t>();
}

std::vector<int64_t> integers(const nlohmann::json& j, const std::string& what, const std::string& path) {
  if (!j.is_array()) malformed(path, what + " must be a list of integers");
  std::vector<int64_t> out;
  for (const auto& v : j) out.push_back(integer(v, what, path));
  return out;
}

TensorSpec parse_tensor(const nlohmann::json& j, const std::string& path) {
  TensorSpec t;
  t.name = j.at("name").get<std::string>();
  const auto dtype_text = j.at("dtype").get<std::string>();
  const auto dtype = dtype_from_name(dtype_text);
  if (!dtype) malformed(path, "tensor " + t.name + " has unsupported dtype '" + dtype_text + "'");
  t.dtype = *dtype;
  t.shape = integers(j.at("shape"), "tensor " + t.name + " shape", path);
  for (const auto& d : j.at("dynamic_dims")) {
    DynamicDim dim;
    const int64_t index = integer(d.at("dim"), "tensor " + t.name + " dynamic dim", path);
    dim.name = d.at("name").get<std::string>();
    dim.min = d.contains("min") ? integer(d.at("min"), "dynamic dim " + dim.name + " min", path) : 0;
    if (d.contains("max") && !d.at("max").is_null()) dim.max = integer(d.at("max"), "dynamic dim " + dim.name + " max", path);
    if (dim.min < 0 || (dim.max && *dim.max < dim.min)) {
      malformed(path, "dynamic dim " + dim.name + " has an empty or negative range");
    }
    if (index < 0 || index >= static_cast<int64_t>(t.shape.size()) || t.shape[index] != -1) {
      malformed(path, "tensor " + t.name + ": dynamic dim " + std::to_string(index) + " is not a -1 of its shape");
    }
    dim.dim = static_cast<int>(index);
    t.dynamic_dims.push_back(dim);
  }
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] < -1) malformed(path, "tensor " + t.name + " has a negative dim");
  }
  return t;
}

Variant parse_variant(const nlohmann::json& j, const std::string& path) {
  Variant v;
  v.isa = j.at("isa").get<std::string>();
  v.model = j.at("model").get<std::string>();
  // The model name is a folder name inside the archive and the loader's key: a plain name, nothing else.
  if (v.model.empty() || v.model.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos) {
    malformed(path, "variant model name '" + v.model + "' is not a plain name");
  }
  v.arch = j.at("arch").get<std::string>();
  v.vec_isa = j.at("vec_isa").get<std::string>();
  v.compile_flags = j.at("compile_flags").get<std::vector<std::string>>();
  v.cpu_features = j.at("cpu_features").get<std::vector<std::string>>();
  v.record = j.at("record").get<std::string>();
  if (v.record.rfind(std::string(kModelDir) + v.model + "/", 0) != 0) {
    malformed(path, "variant " + v.isa + ": its library " + v.record + " is outside its model folder");
  }
  v.sha256 = j.at("sha256").get<std::string>();
  v.size = integer(j.at("size"), "variant " + v.isa + " size", path);
  if (v.size < 0) malformed(path, "variant " + v.isa + " size is negative");
  return v;
}

CustomOpSpec parse_custom(const nlohmann::json& j) {
  CustomOpSpec c;
  c.name = j.at("name").get<std::string>();
  (void)j.at("namespace").get<std::string>();  // required by the format; the name's prefix says the same
  c.library = j.at("library").get<std::string>();
  if (j.contains("methods")) c.methods = j.at("methods").get<std::vector<std::string>>();
  if (j.contains("overload")) c.overload = j.at("overload").get<std::string>();
  if (j.contains("schema")) c.schema = j.at("schema").get<std::string>();
  if (j.contains("method_schemas")) c.method_schemas = j.at("method_schemas").get<std::map<std::string, std::string>>();
  return c;
}

}  // namespace

std::string unsafe_record_name(const std::string& name) {
  if (name.empty()) return "an empty name";
  if (name[0] == '/') return "an absolute path";
  for (unsigned char c : name) {
    if (c == '\\') return "a backslash";
    if (c < 0x20 || c == 0x7f) return "a control character";
  }
  size_t start = 0;
  while (start <= name.size()) {
    const size_t end = std::min(name.find('/', start), name.size());
    const std::string part = name.substr(start, end - start);
    if (part == "..") return "a '..' component";
    if (part == "." || (part.empty() && end != name.size())) return "an empty or '.' component";
    start = end + 1;
  }
  return "";
}

Limits limits_of(const Options& options) {
  return Limits{options.max_record_bytes, options.max_metadata_bytes};
}

Package::Package(const std::string& path, const Limits& limits) : path_(path), limits_(limits) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    throw Error(ErrorCode::Package, "cannot open package " + path + ": " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) throw Error(ErrorCode::Package, path + " is a directory; expected a .pt2 package file");
  if (st.st_size == 0) throw Error(ErrorCode::Package, path + " is empty; expected a .pt2 package");
  try {
    reader_ = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    records_ = reader_->getAllRecords();  // torch refuses records outside the archive's root folder
  } catch (const std::exception& e) {
    (void)e;  // torch's reader explains zip internals; the user needs the verdict
    throw Error(ErrorCode::Package, path + " is not a .pt2 package (not a readable zip archive)");
  }
  if (records_.size() > limits_.max_records) {
    throw Error(ErrorCode::Package, path + " has " + std::to_string(records_.size()) + " records; at most " +
                                        std::to_string(limits_.max_records) + " are accepted");
  }
  std::sort(records_.begin(), records_.end());
  const std::vector<std::string>& sorted = records_;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const std::string why = unsafe_record_name(sorted[i]);
    if (!why.empty()) {
      throw Error(ErrorCode::Package, path + " has a record whose name has " + why + " ('" + sorted[i] +
                                          "'); a package's records must stay inside it");
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      throw Error(ErrorCode::Package, path + " has two records named " + sorted[i]);
    }
  }
}

Package::~Package() = default;

uint64_t Package::size_of(const std::string& name) const {
  try {
    return reader_->getRecordSize(name);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::Package, path_ + ": cannot read record " + name + " (damaged archive?): " + short_what(e));
  }
}

std::vector<char> Package::read(const std::string& name, uint64_t limit) const {
  if (!std::binary_search(records_.begin(), records_.end(), name)) {
    throw Error(ErrorCode::Package, path_ + " has no record " + name);
  }
  const uint64_t max = limit ? limit : limits_.max_record_bytes;
  const uint64_t size = size_of(name);
  if (size > max) {
    throw Error(ErrorCode::Package, path_ + ": record " + name + " is " + std::to_string(size) + " bytes; at most " +
                                        std::to_string(max) + " are accepted (Options limits)");
  }
  try {
    std::vector<char> out(static_cast<size_t>(size));
    if (size != 0) reader_->getRecord(name, out.data(), out.size());
    return out;
  } catch (const std::exception& e) {
    throw Error(ErrorCode::Package, path_ + ": cannot read record " + name + " (damaged archive?): " + short_what(e));
  }
}

std::string Package::metadata_record() const {
  std::vector<std::string> found;
  for (const auto& name : records_) {
    if (name.rfind(kModelDir, 0) == 0 && name.size() > 14 && name.compare(name.size() - 14, 14, "_metadata.json") == 0)
      found.push_back(name);
  }
  if (found.empty()) {
    throw Error(ErrorCode::Package, path_ + " is not an AOTInductor package (no " + kModelDir +
                                        "<model>/*_metadata.json inside)");
  }
  std::sort(found.begin(), found.end());
  return found.front();
}

Spec Package::spec() const {
  const std::vector<char> bytes = read(metadata_record(), limits_.max_metadata_bytes);
  return parse_spec(std::string(bytes.begin(), bytes.end()), path_);
}

Spec parse_spec(const std::string& json_text, const std::string& path) {
  nlohmann::json metadata;
  try {
    metadata = parse_json(json_text, path, "the AOTI metadata");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorCode::Package, path + ": the AOTI metadata is not JSON: " + short_what(e));
  }
  if (!metadata.is_object() || !metadata.contains(kSpecKey) || !metadata[kSpecKey].is_string()) {
    throw Error(ErrorCode::Package, path + " has no pt2rt spec in its metadata: it was not made by export_tools");
  }
  Spec s;
  s.json = metadata[kSpecKey].get<std::string>();
  nlohmann::json j;
  try {
    j = parse_json(s.json, path, "the pt2rt spec");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    malformed(path, short_what(e));
  }
  try {
    s.format = j.at("format").get<std::string>();
    if (s.format != kSpecFormat) {
      throw Error(ErrorCode::Package, path + ": spec format '" + s.format + "' is not supported; this runtime reads " +
                                          kSpecFormat);
    }
    s.model = j.at("model").get<std::string>();
    const std::string device = j.at("device").get<std::string>();
    if (device != "cpu" && device != "cuda") malformed(path, "device '" + device + "' is neither cpu nor cuda");
    s.device = device == "cuda" ? Device::CUDA : Device::CPU;
    for (const auto& t : j.at("inputs")) s.inputs.push_back(parse_tensor(t, path));
    for (const auto& t : j.at("outputs")) s.outputs.push_back(parse_tensor(t, path));
    for (const auto& c : j.at("custom_ops")) s.custom_ops.push_back(parse_custom(c));
    for (const auto& c : j.at("custom_classes")) s.custom_classes.push_back(parse_custom(c));
    s.libraries = j.at("libraries").get<std::vector<std::string>>();
    // Library entries are file names, searched in the documented places; a path would load code from anywhere.
    for (const auto* list : {&s.custom_ops, &s.custom_classes}) {
      for (const auto& c : *list) s.libraries.push_back(c.library);
    }
    for (const auto& lib : s.libraries) {
      if (lib.empty() || lib == "." || lib == ".." || lib.find('/') != std::string::npos ||
          std::any_of(lib.begin(), lib.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; })) {
        malformed(path, "library '" + lib + "' is not a plain file name");
      }
    }
    std::sort(s.libraries.begin(), s.libraries.end());
    s.libraries.erase(std::unique(s.libraries.begin(), s.libraries.end()), s.libraries.end());
    s.torch_version = j.at("torch_version").get<std::string>();
    if (j.contains("cuda") && j.at("cuda").is_object()) {
      s.cuda_version = j.at("cuda").value("version", "");
      s.compute_capability = j.at("cuda").value("compute_capability", "");
    }
    for (const auto& v : j.at("variants")) s.variants.push_back(parse_variant(v, path));
    if (s.variants.empty()) malformed(path, "the package has no variants");
    for (size_t a = 0; a < s.variants.size(); ++a) {
      for (size_t b = 0; b < a; ++b) {
        if (s.variants[a].isa == s.variants[b].isa || s.variants[a].model == s.variants[b].model) {
          malformed(path, "variant " + s.variants[a].isa + " (model " + s.variants[a].model + ") appears twice");
        }
      }
    }
    const auto& golden = j.at("golden");
    if (!golden.is_object()) malformed(path, "golden is missing");
    s.golden_record = golden.at("record").get<std::string>();
    s.golden_names = golden.at("names").get<std::vector<std::string>>();
    for (const auto& [dtype, tol] : golden.at("tolerances").items()) {
      const Tolerance t{tol.at("rtol").get<double>(), tol.at("atol").get<double>()};
      if (!(t.rtol >= 0 && t.atol >= 0)) malformed(path, "tolerances for " + dtype + " must not be negative");
      s.tolerances[dtype] = t;
    }
    if (j.contains("metadata")) s.metadata = j.at("metadata").get<std::map<std::string, std::string>>();
    s.created_by = j.value("created_by", "");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    malformed(path, short_what(e));
  }
  return s;
}

std::string sha256_hex(const void* data, size_t size) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data, size, digest, &len, EVP_sha256(), nullptr) != 1) {
    throw Error(ErrorCode::Runtime, "SHA-256 failed (OpenSSL)");
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

}  // namespace pt2rt::detail
