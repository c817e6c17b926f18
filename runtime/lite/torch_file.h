// torch.save's format without torch: the zip archive, its pickle (the opcodes torch.save and torch's C++ pickler
// write), tensors rebuilt from their storages. What pt2-lite reads: tensor files (pt2run) and golden cases.
#pragma once

#include <pt2rt/pt2rt.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pt2rt::lite {

struct Value;
using ValuePtr = std::shared_ptr<const Value>;

struct Value {
  // Global and Storage only while a pickle is read (a callable, a storage's record)
  enum class Kind { None, Bool, Int, Float, String, List, Tuple, Dict, Tensor, Global, Storage } kind = Kind::None;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                                         // String; Global "module.name"; Storage its key
  DType dtype = DType::Float32;                          // Storage
  std::vector<ValuePtr> items;                           // List, Tuple
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;    // Dict, in order
  std::optional<Tensor> tensor;                          // Tensor: a contiguous copy
  // while the pickle is read: containers nested inside it, and whether it is inside another (then it is final: a
  // pickle that would add to it, or nest a container in itself, is refused - no cycles, nesting bounded)
  int depth = 0;
  bool nested = false;
};

// Thrown by load() when the tensors pass max_bytes: what() is how many bytes they would take.
struct BoundExceeded : std::runtime_error {
  explicit BoundExceeded(const std::string& bytes);
};

// The value a torch.save file holds. Throws std::runtime_error naming what is wrong (damaged, or something other
// than tensors in lists, tuples and dicts of strings and numbers). max_bytes bounds the tensors, contiguous.
ValuePtr load(const void* bytes, std::size_t size, std::size_t max_bytes);

// torch.save's bytes for one tensor (a tensor) or several (a tuple): what torch.load(weights_only=True) reads.
std::vector<char> save(const std::vector<Tensor>& tensors);

}  // namespace pt2rt::lite
