#include "grpc_infer.h"

#include <cstring>
#include <limits>
#include <type_traits>

#include "protocol.h"
#include "open_inference_grpc.pb.h"

namespace pt2serve {
namespace {

using pt2rt::DType;
using Contents = inference::InferTensorContents;

// The protocol's typed contents field for each datatype; nullptr: raw_input_contents only (FP16, BF16).
const char* contents_field(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "fp32_contents";
    case DType::Float64: return "fp64_contents";
    case DType::Int64: return "int64_contents";
    case DType::Int32:
    case DType::Int16:
    case DType::Int8: return "int_contents";
    case DType::UInt8: return "uint_contents";
    case DType::Bool: return "bool_contents";
    default: return nullptr;
  }
}

// The typed fields that hold any values, by name.
std::vector<std::pair<const char*, int>> filled_fields(const Contents& c) {
  std::vector<std::pair<const char*, int>> out;
  const std::pair<const char*, int> all[] = {
      {"bool_contents", c.bool_contents_size()},   {"int_contents", c.int_contents_size()},
      {"int64_contents", c.int64_contents_size()}, {"uint_contents", c.uint_contents_size()},
      {"uint64_contents", c.uint64_contents_size()}, {"fp32_contents", c.fp32_contents_size()},
      {"fp64_contents", c.fp64_contents_size()},   {"bytes_contents", c.bytes_contents_size()}};
  for (const auto& f : all)
    if (f.second > 0) out.push_back(f);
  return out;
}

// `values` as elements of To; a value outside To's range (int_contents for INT8/INT16, uint_contents for UINT8)
// is refused, not wrapped.
template <typename To, typename From>
void convert(const google::protobuf::RepeatedField<From>& values, uint8_t* out, const std::string& name,
             const char* field, DType dtype) {
  for (int i = 0; i < values.size(); ++i) {
    const From v = values.Get(i);
    if constexpr (std::is_integral_v<To> && !std::is_same_v<To, From>) {
      if (v < static_cast<From>(std::numeric_limits<To>::min()) ||
          v > static_cast<From>(std::numeric_limits<To>::max())) {
        throw BadRequest("input '" + name + "': element " + std::to_string(i) + " of " + field + " (" +
                         std::to_string(v) + ") is out of the range of " + datatype_name(dtype));
      }
    }
    const To x = static_cast<To>(v);
    std::memcpy(out + sizeof(To) * static_cast<size_t>(i), &x, sizeof(To));
  }
}

// An input's bytes from its typed contents: the datatype's field only, as many values as its shape has elements.
void from_contents(const Contents& c, DType dtype, const std::string& name, size_t count, uint8_t* out) {
  const char* field = contents_field(dtype);
  if (!field) {
    throw BadRequest("input '" + name + "': " + datatype_name(dtype) + " tensors go in raw_input_contents");
  }
  int size = 0;
  for (const auto& [other, n] : filled_fields(c)) {
    if (std::strcmp(other, field) != 0) {
      throw BadRequest("input '" + name + "' is " + datatype_name(dtype) + ": its values go in " + field + ", not " +
                       other);
    }
    size = n;
  }
  if (static_cast<size_t>(size) != count) {
    throw BadRequest("input '" + name + "': " + field + " holds " + std::to_string(size) +
                     " elements, its shape " + std::to_string(count));
  }
  switch (dtype) {
    case DType::Float32: convert<float>(c.fp32_contents(), out, name, field, dtype); break;
    case DType::Float64: convert<double>(c.fp64_contents(), out, name, field, dtype); break;
    case DType::Int64: convert<int64_t>(c.int64_contents(), out, name, field, dtype); break;
    case DType::Int32: convert<int32_t>(c.int_contents(), out, name, field, dtype); break;
    case DType::Int16: convert<int16_t>(c.int_contents(), out, name, field, dtype); break;
    case DType::Int8: convert<int8_t>(c.int_contents(), out, name, field, dtype); break;
    case DType::UInt8: convert<uint8_t>(c.uint_contents(), out, name, field, dtype); break;
    case DType::Bool: convert<bool>(c.bool_contents(), out, name, field, dtype); break;
    default: break;  // refused above
  }
}

}  // namespace

GrpcInferRequest parse_grpc_infer(const pt2rt::Spec& spec, const inference::ModelInferRequest& q, size_t max_bytes) {
  const bool raw = q.raw_input_contents_size() > 0;
  if (raw && q.raw_input_contents_size() != q.inputs_size()) {
    throw BadRequest("raw_input_contents has " + std::to_string(q.raw_input_contents_size()) + " entries for " +
                     std::to_string(q.inputs_size()) + " inputs");
  }
  RequestInputs inputs(spec, max_bytes);
  std::vector<uint8_t> buffer;
  for (int k = 0; k < q.inputs_size(); ++k) {
    const auto& in = q.inputs(k);
    const auto slot = inputs.check(in.name(), in.datatype(), {in.shape().begin(), in.shape().end()});
    if (raw) {
      if (!filled_fields(in.contents()).empty()) {
        throw BadRequest("input '" + in.name() + "' has contents while the request uses raw_input_contents: use one");
      }
      const std::string& blob = q.raw_input_contents(k);
      if (blob.size() != slot.bytes) {
        throw BadRequest("input '" + in.name() + "': raw_input_contents has " + std::to_string(blob.size()) +
                         " bytes, its shape and datatype need " + std::to_string(slot.bytes));
      }
      inputs.set(slot, blob.data());
    } else {
      buffer.resize(slot.bytes);
      from_contents(in.contents(), slot.dtype, in.name(), slot.count, buffer.data());
      inputs.set(slot, buffer.data());
    }
  }
  GrpcInferRequest out;
  out.inputs = inputs.take();
  for (const auto& o : q.outputs()) out.outputs.push_back(output_index(spec, o.name()));
  if (out.outputs.empty()) {
    for (size_t i = 0; i < spec.outputs.size(); ++i) out.outputs.push_back(i);
  }
  return out;
}

}  // namespace pt2serve
