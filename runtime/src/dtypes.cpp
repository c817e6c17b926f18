// DTypes: names, sizes, and c10's ScalarType numbering (which AOTInductor's C shim passes as dtype codes).
#include "common.h"

#include <string>

namespace pt2rt {

namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  std::size_t size;
  int32_t code;  // c10::ScalarType
};

constexpr DTypeInfo kDTypes[] = {
    {DType::Float32, "float32", 4, 6}, {DType::Float64, "float64", 8, 7}, {DType::Float16, "float16", 2, 5},
    {DType::BFloat16, "bfloat16", 2, 15}, {DType::Int64, "int64", 8, 4}, {DType::Int32, "int32", 4, 3},
    {DType::Int16, "int16", 2, 2}, {DType::Int8, "int8", 1, 1}, {DType::UInt8, "uint8", 1, 0},
    {DType::Bool, "bool", 1, 11},
};

const DTypeInfo& info(DType dtype) {
  for (const auto& i : kDTypes)
    if (i.dtype == dtype) return i;
  throw Error(ErrorCode::Usage, "unknown pt2rt::DType " + std::to_string(static_cast<int>(dtype)));
}

}  // namespace

const char* dtype_name(DType dtype) { return info(dtype).name; }
const char* device_name(Device device) { return device == Device::CUDA ? "cuda" : "cpu"; }
std::size_t dtype_size(DType dtype) { return info(dtype).size; }
std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kDTypes)
    if (name == i.name) return i.dtype;
  return std::nullopt;
}

namespace detail {

int32_t dtype_code(DType dtype) { return info(dtype).code; }

std::optional<DType> dtype_of_code(int32_t code) {
  for (const auto& i : kDTypes)
    if (i.code == code) return i.dtype;
  return std::nullopt;
}

}  // namespace detail
}  // namespace pt2rt
