// Byte parser: a package's AOTI metadata record -> its pt2rt Spec (docs/package-format.md). Fuzzed (fuzz_spec).
#include "common.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

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

bool is_integer_dtype(DType d) {
  return d == DType::Int64 || d == DType::Int32 || d == DType::Int16 || d == DType::Int8 || d == DType::UInt8;
}

TensorSpec parse_tensor(const nlohmann::json& j, const std::string& path) {
  TensorSpec t;
  t.name = j.at("name").get<std::string>();
  const auto dtype_text = j.at("dtype").get<std::string>();
  const auto dtype = dtype_from_name(dtype_text);
  if (!dtype) malformed(path, "tensor " + t.name + " has unsupported dtype '" + dtype_text + "'");
  t.dtype = *dtype;
  t.shape = integers(j.at("shape"), "tensor " + t.name + " shape", path);
  if (j.contains("values")) {
    const auto& v = j.at("values");
    ValueRange r;
    r.min = integer(v.at("min"), "tensor " + t.name + " values min", path);
    r.max = integer(v.at("max"), "tensor " + t.name + " values max", path);
    r.indexes = v.at("indexes").get<std::string>();
    if (r.max < r.min) malformed(path, "tensor " + t.name + " has an empty values range");
    if (!is_integer_dtype(t.dtype)) malformed(path, "tensor " + t.name + " has a values range but dtype " + dtype_text);
    t.values = r;
  }
  for (const auto& d : j.at("dynamic_dims")) {
    DynamicDim dim;
    const int64_t index = integer(d.at("dim"), "tensor " + t.name + " dynamic dim", path);
    dim.name = d.at("name").get<std::string>();
    dim.min = d.contains("min") ? integer(d.at("min"), "dynamic dim " + dim.name + " min", path) : 0;
    if (d.contains("max") && !d.at("max").is_null()) dim.max = integer(d.at("max"), "dynamic dim " + dim.name + " max", path);
    if (dim.min < 0 || (dim.max && *dim.max < dim.min)) {
      malformed(path, "dynamic dim " + dim.name + " has an empty or negative range");
    }
    if (d.contains("of")) {
      dim.of = d.at("of").get<std::string>();
      dim.scale = integer(d.at("scale"), "dynamic dim " + dim.name + " scale", path);
      dim.offset = integer(d.at("offset"), "dynamic dim " + dim.name + " offset", path);
      if (dim.of.empty() || dim.of == dim.name || dim.scale < 1 || dim.scale > (int64_t{1} << 32) ||
          dim.offset < -(int64_t{1} << 32) || dim.offset > (int64_t{1} << 32)) {
        malformed(path, "dynamic dim " + dim.name + " is derived from '" + dim.of + "' with scale " +
                            std::to_string(dim.scale) + " offset " + std::to_string(dim.offset) +
                            "; expected another dim, 1 <= scale <= 2^32, |offset| <= 2^32");
      }
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
  if (j.contains("packed_for")) v.packed_for = j.at("packed_for").get<std::string>();
  return v;
}

// A lite variant (export --lite): a library outside the model folders, under pt2rt/lite/; no model name.
Variant parse_lite_variant(const nlohmann::json& j, const std::string& path) {
  Variant v;
  v.isa = j.at("isa").get<std::string>();
  v.arch = j.at("arch").get<std::string>();
  v.vec_isa = j.at("vec_isa").get<std::string>();
  v.compile_flags = j.at("compile_flags").get<std::vector<std::string>>();
  v.cpu_features = j.at("cpu_features").get<std::vector<std::string>>();
  v.record = j.at("record").get<std::string>();
  if (v.record.rfind("pt2rt/lite/", 0) != 0 || v.record.find("..") != std::string::npos) {
    malformed(path, "lite variant " + v.isa + ": its library " + v.record + " is outside pt2rt/lite/");
  }
  v.sha256 = j.at("sha256").get<std::string>();
  v.size = integer(j.at("size"), "lite variant " + v.isa + " size", path);
  if (v.size < 0) malformed(path, "lite variant " + v.isa + " size is negative");
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
  if (j.contains("lite_library")) c.lite_library = j.at("lite_library").get<std::string>();
  return c;
}

}  // namespace

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
    std::vector<std::string> named = s.libraries;  // and the lite builds pt2rt-lite loads
    for (const auto& c : s.custom_ops) {
      if (c.lite_library.empty()) continue;
      // the library's lite build by its one name (lib<x>_lite.so): never another library, a full one say
      const bool so = c.library.size() > 3 && c.library.compare(c.library.size() - 3, 3, ".so") == 0;
      const std::string lite = (so ? c.library.substr(0, c.library.size() - 3) : c.library) + "_lite.so";
      if (c.lite_library != lite) {
        malformed(path, "custom op " + c.name + ": its lite_library '" + c.lite_library + "' is not " + c.library +
                            "'s lite build (" + lite + ")");
      }
      named.push_back(c.lite_library);
    }
    for (const auto& lib : named) {
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
    if (j.contains("lite_variants")) {
      for (const auto& v : j.at("lite_variants")) s.lite_variants.push_back(parse_lite_variant(v, path));
      for (size_t a = 0; a < s.lite_variants.size(); ++a)
        for (size_t b = a + 1; b < s.lite_variants.size(); ++b)
          if (s.lite_variants[a].isa == s.lite_variants[b].isa)
            malformed(path, "lite variant " + s.lite_variants[a].isa + " appears twice");
    }
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
    if (golden.contains("degenerate_outputs")) {
      for (int64_t o : integers(golden.at("degenerate_outputs"), "golden degenerate_outputs", path)) {
        if (o < 0 || o >= static_cast<int64_t>(s.outputs.size())) {
          malformed(path, "golden degenerate_outputs names output " + std::to_string(o) + " of " +
                              std::to_string(s.outputs.size()));
        }
        s.degenerate_outputs.push_back(static_cast<int>(o));
      }
    }
    for (const auto& [dtype, tol] : golden.at("tolerances").items()) {
      Tolerance t{tol.at("rtol").get<double>(), tol.at("atol").get<double>(), std::nullopt};
      if (tol.contains("atol_rel")) t.atol_rel = tol.at("atol_rel").get<double>();
      if (!(t.rtol >= 0 && t.atol >= 0 && t.atol_rel.value_or(0) >= 0)) {
        malformed(path, "tolerances for " + dtype + " must not be negative");
      }
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

}  // namespace pt2rt::detail
