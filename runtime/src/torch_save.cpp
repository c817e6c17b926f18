// Reading torch.save (zip) bytes from users: torch's own readers trust the sizes a file claims (found by
// tests/fuzz), so every claim is checked against what exists before torch acts on it.
#include "parsers.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/storage_context.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace pt2rt::detail {

namespace {

// torch's in-memory reader copies whatever range the zip's directory asks for, past the end of the buffer on a
// damaged file; this one reads only what exists.
class BoundedReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedReader(const std::vector<char>& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = static_cast<size_t>(std::min<uint64_t>(n, bytes_.size() - pos));
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::vector<char>& bytes_;
};

[[noreturn]] void damaged(const std::string& what) { throw DamagedFile("damaged pickle: " + what); }

constexpr int kMaxDepth = 256;  // containers nest a few levels in any file we read; IValue teardown recurses

// Walks a pickle's opcodes without building anything, so that torch's unpickler never sees a length that
// exceeds the data (it allocates what a length claims before reading), a memo id a pickler could not have
// written (it grows its memo table to the id), nesting deep enough to overflow the stack, or an opcode it
// does not know. Simulates the stack's container depth; torch's unpickler still does the real checks.
void check_pickle(const char* data, size_t size) {
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  size_t pos = 0;
  constexpr int kMark = -1;
  std::vector<int> stack;   // container depth of each value; kMark for marks
  std::vector<int> memo;    // depth of each memoised value
  auto need = [&](size_t n, const char* op) {
    if (n > size - pos) damaged(std::string(op) + " needs " + std::to_string(n) + " bytes, " + std::to_string(size - pos) + " left");
  };
  auto le = [&](size_t n, const char* op) {
    need(n, op);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[pos + i]) << (8 * i);
    pos += n;
    return v;
  };
  auto line = [&](const char* op) {
    const void* nl = std::memchr(p + pos, '\n', size - pos);
    if (!nl) damaged(std::string(op) + " has no end of line");
    pos = static_cast<const unsigned char*>(nl) - p + 1;
  };
  auto pop = [&]() {
    if (stack.empty() || stack.back() == kMark) damaged("stack underflow");
    const int d = stack.back();
    stack.pop_back();
    return d;
  };
  auto pop_to_mark = [&]() {
    int d = 0;
    while (true) {
      if (stack.empty()) damaged("no mark");
      const int v = stack.back();
      stack.pop_back();
      if (v == kMark) return d;
      d = std::max(d, v);
    }
  };
  auto push = [&](int d) {
    if (d > kMaxDepth) damaged("containers nested deeper than " + std::to_string(kMaxDepth));
    stack.push_back(d);
  };
  auto into_top = [&](int d) {  // a value (depth d) goes into the container on top
    if (stack.empty() || stack.back() == kMark) damaged("no container");
    push(std::max(pop(), d + 1));
  };
  auto put = [&](uint64_t id) {
    if (stack.empty() || stack.back() == kMark) damaged("memo of nothing");
    if (id > memo.size()) damaged("memo id " + std::to_string(id) + " skips ids");
    if (id == memo.size()) memo.push_back(stack.back()); else memo[id] = stack.back();
  };
  auto get = [&](uint64_t id) {
    if (id >= memo.size()) damaged("memo id " + std::to_string(id) + " was never written");
    push(memo[id]);
  };
  while (true) {
    need(1, "opcode");
    const unsigned char op = p[pos++];
    switch (op) {
      case 0x80: le(1, "PROTO"); break;
      case 0x95: le(8, "FRAME"); break;
      case '.': if (stack.size() != 1) damaged("STOP with " + std::to_string(stack.size()) + " values on the stack");
        return;
      case '(': stack.push_back(kMark); break;
      case '0': pop(); break;
      case '1': pop_to_mark(); break;
      case '2': { const int d = pop(); push(d); push(d); break; }
      case 'N': case 0x88: case 0x89: push(0); break;                      // NONE NEWTRUE NEWFALSE
      case 'K': le(1, "BININT1"); push(0); break;
      case 'M': le(2, "BININT2"); push(0); break;
      case 'J': le(4, "BININT"); push(0); break;
      case 'G': le(8, "BINFLOAT"); push(0); break;
      case 0x8a: { const auto n = le(1, "LONG1"); need(n, "LONG1"); pos += n; push(0); break; }
      case 0x8b: { const auto n = le(4, "LONG4"); need(n, "LONG4"); pos += n; push(0); break; }
      case 'X': case 'T': case 'B': { const auto n = le(4, "string"); need(n, "string"); pos += n; push(0); break; }
      case 0x8c: case 'U': case 'C': { const auto n = le(1, "string"); need(n, "string"); pos += n; push(0); break; }
      case 0x8d: case 0x8e: case 0x96: { const auto n = le(8, "string"); need(n, "string"); pos += n; push(0); break; }
      case 'I': case 'L': case 'F': case 'S': case 'V': line("text argument"); push(0); break;
      case 'c': line("GLOBAL"); line("GLOBAL"); push(0); break;
      case 0x93: pop(); pop(); push(0); break;                              // STACK_GLOBAL
      case ']': case '}': case ')': case 0x8f: push(0); break;              // empty list, dict, tuple, set
      case 'q': put(le(1, "BINPUT")); break;
      case 'r': put(le(4, "LONG_BINPUT")); break;
      case 0x94: put(memo.size()); break;                                   // MEMOIZE
      case 'h': get(le(1, "BINGET")); break;
      case 'j': get(le(4, "LONG_BINGET")); break;
      case 'a': into_top(pop()); break;                                     // APPEND
      case 'e': case 'u': case 0x90: into_top(pop_to_mark()); break;        // APPENDS SETITEMS ADDITEMS
      case 's': { const int v = pop(); const int k = pop(); into_top(std::max(k, v)); break; }
      case 't': case 'l': case 'd': case 0x91: push(pop_to_mark() + 1); break;  // TUPLE LIST DICT FROZENSET
      case 0x85: push(pop() + 1); break;
      case 0x86: { const int a = pop(); const int b = pop(); push(std::max(a, b) + 1); break; }
      case 0x87: { const int a = pop(); const int b = pop(); const int c = pop(); push(std::max({a, b, c}) + 1); break; }
      case 'Q': push(pop()); break;                                         // BINPERSID
      case 'R': case 0x81: { const int args = pop(); pop(); push(args + 1); break; }  // REDUCE NEWOBJ
      case 'b': { const int state = pop(); into_top(state); break; }       // BUILD
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        damaged(std::string("unsupported opcode ") + hex + " at byte " + std::to_string(pos - 1));
      }
    }
  }
}

int64_t storage_extent(const at::Tensor& t) {  // elements of its storage a tensor reaches, from offset 0
  if (t.numel() == 0) return 0;
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) < 0) throw DamagedFile("a tensor has a negative stride");
    last += (t.size(d) - 1) * t.stride(d);
  }
  return last + 1;
}

void check_tensors(const c10::IValue& v, int depth) {
  if (depth > kMaxDepth) throw DamagedFile("values nested too deeply");
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.has_storage() || storage_extent(t) * static_cast<int64_t>(t.itemsize()) >
                                static_cast<int64_t>(t.storage().nbytes())) {
      throw DamagedFile("a tensor reaches past the end of its storage");
    }
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) check_tensors(e, depth + 1);
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) check_tensors(e, depth + 1);
  } else if (v.isGenericDict()) {
    for (const auto& e : v.toGenericDict()) {
      check_tensors(e.key(), depth + 1);
      check_tensors(e.value(), depth + 1);
    }
  }
}

// torch.save stores records uncompressed: none can be larger than the file. torch's reader allocates what a record
// claims as it opens the archive (its version record), so the claims are read from the zip's central directory
// first (a 3 KB file claiming a 4 GiB record made it allocate 4 GiB). An archive whose directory is not found here
// is left to torch's reader, which refuses it.
void check_record_sizes(const std::vector<char>& bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  const auto u16 = [&](size_t at) { return static_cast<uint32_t>(p[at] | p[at + 1] << 8); };
  const auto u32 = [&](size_t at) { return u16(at) | u16(at + 2) << 16; };
  const auto u64 = [&](size_t at) { return uint64_t{u32(at)} | uint64_t{u32(at + 4)} << 32; };
  constexpr size_t kEnd = 22;  // the end of central directory record, before its comment
  if (n < kEnd) return;
  size_t end = n - kEnd + 1;
  const size_t lowest = n > kEnd + 0xffff ? n - kEnd - 0xffff : 0;
  do {
    --end;
  } while (end > lowest && u32(end) != 0x06054b50);
  if (u32(end) != 0x06054b50) return;
  uint64_t entries = u16(end + 10), size = u32(end + 12), offset = u32(end + 16);
  if (size == 0xffffffff || offset == 0xffffffff || entries == 0xffff) {
    // zip64: the directory's place and size are in the zip64 end record, which its locator (just before the end
    // record) points to - torch's reader follows them, so they are checked here too
    const size_t locator = end >= 20 ? end - 20 : 0;
    if (end < 20 || u32(locator) != 0x07064b50) return;  // none: torch's reader takes the end record as it is
    const uint64_t record = u64(locator + 8);
    if (record > n || n - record < 56 || u32(static_cast<size_t>(record)) != 0x06064b50) {
      throw DamagedFile("a damaged zip64 end record");
    }
    entries = u64(static_cast<size_t>(record) + 32);
    size = u64(static_cast<size_t>(record) + 40);
    offset = u64(static_cast<size_t>(record) + 48);
  }
  if (offset > n || size > n - offset) throw DamagedFile("the zip directory reaches past the end of the file");
  if (entries > size / 46) throw DamagedFile("the zip directory claims more entries than it holds");
  size_t at = offset;
  for (size_t i = 0; i < entries; ++i) {
    if (at + 46 > offset + size || u32(at) != 0x02014b50) throw DamagedFile("a damaged zip directory entry");
    const size_t name_len = u16(at + 28), extra_len = u16(at + 30), comment_len = u16(at + 32);
    if (at + 46 + name_len + extra_len + comment_len > offset + size) {
      throw DamagedFile("a zip directory entry reaches past the directory");
    }
    uint64_t sizes[2] = {u32(at + 20), u32(at + 24)};  // compressed, uncompressed
    if (sizes[0] == 0xffffffff || sizes[1] == 0xffffffff) {  // zip64: the real sizes in the extra field
      size_t x = at + 46 + name_len;
      const size_t x_end = x + extra_len;
      bool found = false;
      while (x + 4 <= x_end && !found) {
        const size_t id = u16(x), len = u16(x + 2);
        if (x + 4 + len > x_end) break;
        if (id == 1) {
          size_t v = x + 4;
          for (int k : {1, 0}) {  // the extra field holds the uncompressed size first
            if (sizes[k] != 0xffffffff) continue;
            if (v + 8 > x + 4 + len) throw DamagedFile("a damaged zip64 size");
            sizes[k] = u64(v);
            v += 8;
          }
          found = true;
        }
        x += 4 + len;
      }
      if (!found) throw DamagedFile("a zip directory entry without its zip64 sizes");
    }
    if (sizes[0] > n || sizes[1] > n) {
      throw DamagedFile("record " + std::string(reinterpret_cast<const char*>(p + at + 46), name_len) +
                        " claims more bytes than the file has");
    }
    at += 46 + name_len + extra_len + comment_len;
  }
}

}  // namespace

c10::IValue unpickle(const std::vector<char>& bytes) {
  check_record_sizes(bytes);
  caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BoundedReader>(bytes));
  // the same once more from torch's reading of the directory
  for (const auto& name : reader.getAllRecords()) {
    if (reader.getRecordSize(name) > bytes.size()) {
      throw DamagedFile("record " + name + " claims more bytes than the file has");
    }
  }
  if (!reader.hasRecord("data.pkl")) throw DamagedFile("no data.pkl record");
  auto [pickle, pickle_size] = reader.getRecord("data.pkl");
  check_pickle(static_cast<const char*>(pickle.get()), pickle_size);
  auto storages = std::make_shared<torch::jit::DeserializationStorageContext>();
  c10::IValue value = torch::jit::readArchiveAndTensors("data", "", "", std::nullopt, std::nullopt, std::nullopt,
                                                        reader, torch::jit::Unpickler::defaultTypeParser, storages);
  // A storage's size comes from the pickle, its memory from the record: the record must hold it.
  for (const auto& name : reader.getAllRecords()) {
    if (name.rfind("data/", 0) != 0) continue;
    const std::string key = name.substr(5);
    if (storages->hasStorage(key) && storages->getStorage(key).nbytes() > reader.getRecordSize(name)) {
      throw DamagedFile("storage " + key + " is larger than its record");
    }
  }
  check_tensors(value, 0);
  return value;
}

}  // namespace pt2rt::detail
