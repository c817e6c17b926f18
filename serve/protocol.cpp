#include "protocol.h"

#include <pt2rt/pt2rt.h>

#include <cstring>
#include <map>

namespace pt2serve {

Failure current_failure() {
  try {
    throw;
  } catch (const NotFound& e) {
    return {ErrorKind::NotFound, clip(e.what())};
  } catch (const BadRequest& e) {
    return {ErrorKind::InvalidArgument, clip(e.what())};
  } catch (const TooLarge& e) {
    return {ErrorKind::TooLarge, clip(e.what())};
  } catch (const Unavailable& e) {
    return {ErrorKind::Unavailable, clip(e.what())};
  } catch (const pt2rt::Error& e) {
    const bool client = e.code() == pt2rt::ErrorCode::Input || e.code() == pt2rt::ErrorCode::Usage;
    return {client ? ErrorKind::InvalidArgument : ErrorKind::Internal, clip(e.what())};
  } catch (const std::bad_alloc&) {
    return {ErrorKind::Unavailable, "out of memory for this request"};
  } catch (const std::exception& e) {
    return {ErrorKind::Internal, clip(e.what())};
  } catch (...) {
    return {ErrorKind::Internal, "internal error"};
  }
}

int http_status(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument: return 400;
    case ErrorKind::NotFound: return 404;
    case ErrorKind::TooLarge: return 413;
    case ErrorKind::Unavailable: return 503;
    case ErrorKind::Internal: break;
  }
  return 500;
}

std::string clip(std::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  const std::string tail = "... (" + std::to_string(text.size()) + " bytes)";
  size_t keep = max > tail.size() ? max - tail.size() : 0;
  // back to the first byte of a UTF-8 character (continuation bytes are 10xxxxxx)
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
  return std::string(text.substr(0, keep)) + tail;
}

void check_json_depth(const char* begin, const char* end, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false;
  for (const char* p = begin; p < end; ++p) {
    const char c = *p;
    if (in_string) {
      if (c == '\\') {
        ++p;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        throw BadRequest("the JSON nests lists and objects deeper than " + std::to_string(max_depth) +
                         " levels (at byte " + std::to_string(p - begin) + ")");
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

namespace {
const std::map<pt2rt::DType, const char*>& datatypes() {
  using pt2rt::DType;
  static const std::map<DType, const char*> m = {
      {DType::Float32, "FP32"}, {DType::Float64, "FP64"}, {DType::Float16, "FP16"}, {DType::BFloat16, "BF16"},
      {DType::Int64, "INT64"},  {DType::Int32, "INT32"},  {DType::Int16, "INT16"},  {DType::Int8, "INT8"},
      {DType::UInt8, "UINT8"},  {DType::Bool, "BOOL"}};
  return m;
}
}  // namespace

const char* datatype_name(pt2rt::DType d) { return datatypes().at(d); }

RequestInputs::RequestInputs(const pt2rt::Spec& spec, size_t max_bytes)
    : spec_(spec), max_bytes_(max_bytes), tensors_(spec.inputs.size()) {}

RequestInputs::Slot RequestInputs::check(const std::string& name, const std::string& datatype,
                                         const std::vector<int64_t>& shape) {
  Slot slot;
  while (slot.index < spec_.inputs.size() && spec_.inputs[slot.index].name != name) ++slot.index;
  if (slot.index == spec_.inputs.size()) {
    std::string have;
    for (const auto& t : spec_.inputs) have += (have.empty() ? "" : ", ") + t.name;
    throw BadRequest("unknown input '" + name + "' (the model's inputs: " + have + ")");
  }
  if (tensors_[slot.index]) throw BadRequest("input '" + name + "' is given twice");
  slot.dtype = spec_.inputs[slot.index].dtype;
  if (datatype != datatype_name(slot.dtype)) {
    throw BadRequest("input '" + name + "' has datatype " + datatype + ", the model expects " +
                     datatype_name(slot.dtype));
  }
  slot.shape = shape;
  slot.count = 1;
  const size_t limit = max_bytes_ / pt2rt::dtype_size(slot.dtype);
  size_t span = 1;  // the dims' product with zeros as ones: an empty tensor's other dims are bounded too
  for (const int64_t d : shape) {
    if (d < 0) throw BadRequest("input '" + name + "': negative dim in its shape");
    // span * d <= limit, asked without overflowing
    if (d > 1 && span > limit / static_cast<size_t>(d)) {
      throw BadRequest("input '" + name + "' is larger than the request limit of " + std::to_string(max_bytes_) +
                       " bytes (--max-request-mb)");
    }
    span *= static_cast<size_t>(std::max<int64_t>(d, 1));
    slot.count *= static_cast<size_t>(d);
  }
  slot.bytes = slot.count * pt2rt::dtype_size(slot.dtype);
  return slot;
}

void RequestInputs::set(const Slot& slot, const void* data) {
  tensors_[slot.index] = pt2rt::Tensor::copy_of(pt2rt::TensorView{data, slot.shape, slot.dtype});
}

std::vector<pt2rt::Tensor> RequestInputs::take() {
  std::vector<pt2rt::Tensor> out;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!tensors_[i]) throw BadRequest("input '" + spec_.inputs[i].name + "' is missing");
    out.push_back(std::move(*tensors_[i]));
  }
  return out;
}

size_t output_index(const pt2rt::Spec& spec, const std::string& name) {
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    if (spec.outputs[i].name == name) return i;
  }
  throw BadRequest("unknown output '" + name + "'");
}


}  // namespace pt2serve
