// torch.save's format without torch (torch_file.h). The reader runs the pickle opcodes torch writes on a small
// stack machine that builds only strings, numbers, containers and tensors: any other global is refused by name,
// every length and memo id is checked against the bytes there are, and nesting is bounded.
#include "torch_file.h"

#include <cstring>
#include <map>
#include <stdexcept>

#include "../src/common.h"
#include "lite_tensor.h"

namespace pt2rt::lite {

namespace {

constexpr int kMaxDepth = 256;  // containers nest a few levels in any file we read

[[noreturn]] void damaged(const std::string& what) { throw std::runtime_error(what); }

}  // namespace

BoundExceeded::BoundExceeded(const std::string& bytes) : std::runtime_error(bytes) {}

namespace {

const std::map<std::string, DType>& storage_types() {
  static const std::map<std::string, DType> m = {
      {"FloatStorage", DType::Float32}, {"DoubleStorage", DType::Float64}, {"HalfStorage", DType::Float16},
      {"BFloat16Storage", DType::BFloat16}, {"LongStorage", DType::Int64}, {"IntStorage", DType::Int32},
      {"ShortStorage", DType::Int16}, {"CharStorage", DType::Int8}, {"ByteStorage", DType::UInt8},
      {"BoolStorage", DType::Bool}};
  return m;
}

constexpr std::size_t kMaxValues = 1000000;  // a file of tensors holds a few per tensor
constexpr std::size_t kMaxRank = 64;

// A stack entry: a value, or a MARK.
struct Item {
  enum class Kind { Value, Mark } kind = Kind::Value;
  ValuePtr value;
};

class Unpickler {
 public:
  Unpickler(detail::ArchiveReader& archive, std::string root_prefix, std::size_t max_bytes)
      : archive_(archive), prefix_(std::move(root_prefix)), max_bytes_(max_bytes) {}

  ValuePtr run(const std::vector<char>& pickle) {
    p_ = reinterpret_cast<const unsigned char*>(pickle.data());
    n_ = pickle.size();
    pos_ = 0;
    while (true) {
      const unsigned char op = byte("an opcode");
      switch (op) {
        case 0x80: byte("PROTO"); break;                                   // PROTO
        case 0x95: take(8, "FRAME"); break;                                // FRAME
        case '.': {                                                        // STOP
          if (stack_.size() != 1 || stack_[0].kind != Item::Kind::Value) damaged("the pickle ends with no value");
          return stack_[0].value;
        }
        case '(': stack_.push_back(Item{Item::Kind::Mark}); break;       // MARK
        case 'N': push(make(Value::Kind::None)); break;
        case 0x88: case 0x89: {                                            // NEWTRUE, NEWFALSE
          auto v = make(Value::Kind::Bool);
          v->b = op == 0x88;
          push(v);
          break;
        }
        case 'J': push_int(static_cast<int32_t>(le(4, "BININT"))); break;
        case 'K': push_int(le(1, "BININT1")); break;
        case 'M': push_int(le(2, "BININT2")); break;
        case 0x8a: {                                                       // LONG1
          const size_t len = byte("LONG1");
          if (len > 8) damaged("an integer of more than 64 bits");
          uint64_t v = le(len, "LONG1");
          if (len > 0 && len < 8 && (v >> (8 * len - 1)) & 1) v |= ~uint64_t{0} << (8 * len);  // sign
          push_int(static_cast<int64_t>(v));
          break;
        }
        case 'G': {                                                        // BINFLOAT, big-endian
          const unsigned char* b = take(8, "BINFLOAT");
          uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = bits << 8 | b[i];
          auto v = make(Value::Kind::Float);
          std::memcpy(&v->f, &bits, 8);
          push(v);
          break;
        }
        case 'X': push_string(le(4, "BINUNICODE")); break;
        case 0x8c: push_string(byte("SHORT_BINUNICODE")); break;
        case 'B': push_string(le(4, "BINBYTES")); break;
        case 'C': push_string(byte("SHORT_BINBYTES")); break;
        case 'U': push_string(byte("SHORT_BINSTRING")); break;
        case 'c': {                                                        // GLOBAL: "module\nname\n"
          auto g = make(Value::Kind::Global);
          g->s = line("GLOBAL");
          g->s += "." + line("GLOBAL");
          push(g);
          break;
        }
        case ')': push(make(Value::Kind::Tuple)); break;
        case ']': push(make(Value::Kind::List)); break;
        case '}': push(make(Value::Kind::Dict)); break;
        case 't': push_container(Value::Kind::Tuple, pop_mark()); break;
        case 'l': push_container(Value::Kind::List, pop_mark()); break;
        case 0x85: case 0x86: case 0x87: {                                 // TUPLE1..3
          const size_t k = op - 0x84;
          if (stack_.size() < k) damaged("TUPLE" + std::to_string(k) + " on a short stack");
          std::vector<Item> items(stack_.end() - static_cast<long>(k), stack_.end());
          stack_.resize(stack_.size() - k);
          push_container(Value::Kind::Tuple, std::move(items));
          break;
        }
        case 'a': {                                                        // APPEND
          Item v = pop();
          append(top("APPEND"), {v});
          break;
        }
        case 'e': {                                                        // APPENDS
          auto items = pop_mark();
          append(top("APPENDS"), items);
          break;
        }
        case 's': {                                                        // SETITEM
          Item v = pop(), k = pop();
          set_items(top("SETITEM"), {k, v});
          break;
        }
        case 'u': set_items_mark(); break;                                 // SETITEMS
        case 'q': memo(byte("BINPUT")); break;
        case 'r': memo(le(4, "LONG_BINPUT")); break;
        case 0x94: memo(memo_.size()); break;                              // MEMOIZE
        case 'h': recall(byte("BINGET")); break;
        case 'j': recall(le(4, "LONG_BINGET")); break;
        case 'Q': persistent(); break;                                     // BINPERSID
        case 'R': reduce(); break;                                         // REDUCE
        default: damaged("the pickle opcode 0x" + hex(op) + " is not one torch.save writes");
      }
    }
  }

 private:
  detail::ArchiveReader& archive_;
  std::string prefix_;
  std::size_t max_bytes_;
  std::size_t total_ = 0;
  const unsigned char* p_ = nullptr;
  std::size_t n_ = 0, pos_ = 0;
  std::vector<Item> stack_;
  std::map<uint64_t, Item> memo_;
  std::size_t values_ = 0;
  std::map<std::string, std::vector<char>> records_;  // storage records read so far (views share them)

  static std::string hex(unsigned v) {
    const char* d = "0123456789abcdef";
    return std::string{d[v >> 4 & 15], d[v & 15]};
  }
  std::shared_ptr<Value> make(Value::Kind kind) {
    if (++values_ > kMaxValues) damaged("more than " + std::to_string(kMaxValues) + " values in a file of tensors");
    auto v = std::make_shared<Value>();
    v->kind = kind;
    return v;
  }
  const unsigned char* take(std::size_t k, const char* what) {
    if (k > n_ - pos_) damaged(std::string(what) + " needs " + std::to_string(k) + " bytes, " + std::to_string(n_ - pos_) + " left");
    const unsigned char* at = p_ + pos_;
    pos_ += k;
    return at;
  }
  unsigned char byte(const char* what) { return *take(1, what); }
  uint64_t le(std::size_t k, const char* what) {
    const unsigned char* b = take(k, what);
    uint64_t v = 0;
    for (std::size_t i = 0; i < k; ++i) v |= static_cast<uint64_t>(b[i]) << (8 * i);
    return v;
  }
  std::string line(const char* what) {
    const void* nl = std::memchr(p_ + pos_, '\n', n_ - pos_);
    if (!nl) damaged(std::string(what) + " without its line end");
    const std::size_t len = static_cast<const unsigned char*>(nl) - (p_ + pos_);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len + 1;
    return s;
  }
  void push(std::shared_ptr<Value> v) {
    Item i;
    i.value = std::move(v);
    stack_.push_back(std::move(i));
  }
  void push_int(int64_t x) {
    auto v = make(Value::Kind::Int);
    v->i = x;
    push(v);
  }
  void push_string(std::size_t len) {
    auto v = make(Value::Kind::String);
    const unsigned char* b = take(len, "a string");
    v->s.assign(reinterpret_cast<const char*>(b), len);
    push(v);
  }
  Item pop() {
    if (stack_.empty() || stack_.back().kind == Item::Kind::Mark) damaged("a pop from an empty stack");
    Item i = std::move(stack_.back());
    stack_.pop_back();
    return i;
  }
  Item& top(const char* what) {
    if (stack_.empty() || stack_.back().kind != Item::Kind::Value) damaged(std::string(what) + " with no container");
    return stack_.back();
  }
  std::vector<Item> pop_mark() {
    std::size_t m = stack_.size();
    while (m > 0 && stack_[m - 1].kind != Item::Kind::Mark) --m;
    if (m == 0) damaged("no MARK on the stack");
    std::vector<Item> items(std::make_move_iterator(stack_.begin() + static_cast<long>(m)),
                            std::make_move_iterator(stack_.end()));
    stack_.resize(m - 1);
    return items;
  }
  static const ValuePtr& value_of(const Item& i) {
    if (i.kind != Item::Kind::Value) damaged("a MARK where a value belongs");
    return i.value;
  }
  // Puts `child` inside `parent`: the child becomes final, the parent's nesting grows, never past kMaxDepth.
  static void nest(Value& parent, const ValuePtr& child) {
    if (child.get() == &parent) damaged("a container inside itself");
    Value& c = const_cast<Value&>(*child);
    c.nested = true;
    parent.depth = std::max(parent.depth, c.depth + 1);
    if (parent.depth > kMaxDepth) damaged("containers nested deeper than " + std::to_string(kMaxDepth));
  }
  void push_container(Value::Kind kind, std::vector<Item> items) {
    auto v = make(kind);
    for (const auto& i : items) {
      nest(*v, value_of(i));
      v->items.push_back(value_of(i));
    }
    push(v);
  }
  // Containers are filled in place while the pickle runs (a memoised one is the same object), until they are nested.
  static Value& open_container(Item& i, Value::Kind kind, const char* what) {
    if (i.value->kind != kind) damaged(std::string(what) + " on something that is not a " +
                                       (kind == Value::Kind::List ? "list" : "dict"));
    if (i.value->nested) damaged(std::string(what) + " on a container already inside another");
    return const_cast<Value&>(*i.value);
  }
  void append(Item& list, const std::vector<Item>& items) {
    Value& l = open_container(list, Value::Kind::List, "APPEND");
    for (const auto& i : items) {
      nest(l, value_of(i));
      l.items.push_back(value_of(i));
    }
  }
  void set_items(Item& dict, const std::vector<Item>& kv) {
    Value& d = open_container(dict, Value::Kind::Dict, "SETITEM");
    for (std::size_t i = 0; i + 1 < kv.size(); i += 2) {
      nest(d, value_of(kv[i]));
      nest(d, value_of(kv[i + 1]));
      d.entries.emplace_back(value_of(kv[i]), value_of(kv[i + 1]));
    }
  }
  void set_items_mark() {
    auto kv = pop_mark();
    if (kv.size() % 2) damaged("SETITEMS with an odd number of items");
    set_items(top("SETITEMS"), kv);
  }
  void memo(uint64_t id) {
    if (stack_.empty()) damaged("BINPUT on an empty stack");
    if (id > memo_.size() + 1024) damaged("a memo id no pickler writes");
    memo_[id] = stack_.back();
  }
  void recall(uint64_t id) {
    auto it = memo_.find(id);
    if (it == memo_.end()) damaged("BINGET of a memo id never put");
    stack_.push_back(it->second);
  }
  void persistent() {
    // ('storage', torch.<Type>Storage, key, location, numel)
    const ValuePtr pid = value_of(pop());
    const auto& t = pid->items;
    if (pid->kind != Value::Kind::Tuple || t.size() != 5 || t[0]->kind != Value::Kind::String || t[0]->s != "storage" ||
        t[1]->kind != Value::Kind::Global || t[2]->kind != Value::Kind::String) {
      damaged("a persistent id that is not a storage");
    }
    const std::string type = t[1]->s.rfind("torch.", 0) == 0 ? t[1]->s.substr(6) : t[1]->s;
    auto it = storage_types().find(type);
    if (it == storage_types().end()) damaged("a storage of type " + t[1]->s + ", not one pt2rt reads");
    auto v = make(Value::Kind::Storage);
    v->s = t[2]->s;
    v->dtype = it->second;
    push(v);
  }
  void reduce() {
    Item args = pop();
    const ValuePtr callable = value_of(pop());
    if (callable->kind != Value::Kind::Global) damaged("REDUCE of something not a global");
    const std::string& name = callable->s;
    const ValuePtr& a = value_of(args);
    if (a->kind != Value::Kind::Tuple) damaged("REDUCE without an argument tuple");
    if (name == "collections.OrderedDict") {
      push(make(Value::Kind::Dict));
    } else if (name == "torch._utils._rebuild_tensor_v2") {
      push(rebuild_tensor(*a));
    } else if (name == "torch.jit._pickle.build_tensorlist" || name == "torch.jit._pickle.restore_type_tag") {
      if (a->items.empty()) damaged(name + " without arguments");
      push(std::const_pointer_cast<Value>(a->items[0]));
    } else {
      damaged("the pickle calls " + name + ", which is not in a file of tensors");
    }
  }
  static std::vector<int64_t> ints(const ValuePtr& v, const char* what) {
    if (v->kind != Value::Kind::Tuple) damaged(std::string("a tensor's ") + what + " is not a tuple");
    std::vector<int64_t> out;
    for (const auto& i : v->items) {
      if (i->kind != Value::Kind::Int) damaged(std::string("a tensor's ") + what + " holds a non-integer");
      out.push_back(i->i);
    }
    return out;
  }
  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
  std::shared_ptr<Value> rebuild_tensor(const Value& a) {
    if (a.items.size() < 6 || a.items[0]->kind != Value::Kind::Storage || a.items[1]->kind != Value::Kind::Int)
      damaged("_rebuild_tensor_v2 with arguments it does not take");
    const Value& storage = *a.items[0];
    const int64_t offset = a.items[1]->i;
    const std::vector<int64_t> size = ints(a.items[2], "size"), stride = ints(a.items[3], "stride");
    if (size.size() > kMaxRank) damaged("a tensor of more than " + std::to_string(kMaxRank) + " dims");
    if (size.size() != stride.size()) damaged("a tensor with " + std::to_string(size.size()) + " sizes and " +
                                              std::to_string(stride.size()) + " strides");
    const std::size_t item = dtype_size(storage.dtype);
    // the contiguous size, bounded before anything is allocated
    std::size_t bytes = item;
    bool overflow = false;
    bool empty = false;
    for (int64_t d : size) {
      if (d < 0) damaged("a tensor with a negative size");
      overflow |= __builtin_mul_overflow(bytes, static_cast<std::size_t>(d), &bytes);
      empty |= d == 0;
    }
    overflow |= __builtin_add_overflow(total_, bytes, &total_);
    if (overflow || total_ > max_bytes_) {
      throw BoundExceeded(overflow ? "more than 2^64" : std::to_string(total_));
    }
    // the furthest element the view reaches must be inside the storage record (each record read once)
    const std::string record = prefix_ + "data/" + storage.s;
    auto found = records_.find(record);
    if (found == records_.end()) {
      uint64_t record_size = 0;
      try {
        record_size = archive_.size_of(record);
      } catch (const std::exception&) {
        damaged("the tensor's storage record " + record + " is missing");
      }
      std::vector<char> data(static_cast<std::size_t>(record_size));  // within the archive: its reader checked
      if (record_size) archive_.read(record, data.data(), data.size());
      found = records_.emplace(record, std::move(data)).first;
    }
    const std::vector<char>& data = found->second;
    const uint64_t record_size = data.size();
    Tensor t = detail::new_tensor(size, storage.dtype);
    if (!empty) {
      int64_t lo = offset, hi = offset;  // element range the view touches
      bool far = false;
      for (std::size_t d = 0; d < size.size(); ++d) {
        int64_t reach = 0;
        far |= __builtin_mul_overflow(size[d] - 1, stride[d], &reach);
        far |= __builtin_add_overflow(reach < 0 ? lo : hi, reach, reach < 0 ? &lo : &hi);
      }
      if (far || lo < 0 || hi >= static_cast<int64_t>(record_size / item)) damaged("a tensor reaches past its storage");
      // gather into the contiguous tensor, last dim fastest
      auto* out = static_cast<char*>(const_cast<void*>(t.data()));
      const std::size_t n = t.numel();
      std::vector<int64_t> index(size.size(), 0);
      for (std::size_t k = 0; k < n; ++k) {
        int64_t e = offset;
        for (std::size_t d = 0; d < size.size(); ++d) e += index[d] * stride[d];
        std::memcpy(out + k * item, data.data() + e * static_cast<int64_t>(item), item);
        for (std::size_t d = size.size(); d-- > 0;) {
          if (++index[d] < size[d]) break;
          index[d] = 0;
        }
      }
    }
    auto v = make(Value::Kind::Tensor);
    v->tensor.emplace(std::move(t));
    return v;
  }
};

// A stored zip: each record's bytes 64-byte aligned (torch's writer aligns them too, for mmap).
class ZipWriter {
 public:
  explicit ZipWriter(std::string root) : root_(std::move(root)) {}
  void add(const std::string& name, const std::string& bytes) {
    // no zip64 here: what it would need is refused instead of written wrong
    if (bytes.size() >= 0xffffffffu || out_.size() + bytes.size() + 4096 >= 0xffffffffu || records_.size() >= 0xfffe)
      throw Error(ErrorCode::IO, "cannot write tensors of 4 GiB or more in all, or more than 65533 of them, to one file");
    const std::string full = root_ + name;
    const std::size_t header = 30 + full.size() + 4;  // + the padding field's own header
    const std::size_t pad = (64 - (out_.size() + header) % 64) % 64;
    Record r{full, static_cast<uint32_t>(crc32(bytes)), bytes.size(), out_.size()};
    u32(0x04034b50); u16(20); u16(0); u16(0); u16(0); u16(0x21);  // version, flags, stored, time, date (1980)
    u32(r.crc); u32(static_cast<uint32_t>(bytes.size())); u32(static_cast<uint32_t>(bytes.size()));
    u16(static_cast<uint16_t>(full.size())); u16(static_cast<uint16_t>(4 + pad));
    out_ += full;
    u16(0x4650); u16(static_cast<uint16_t>(pad));  // a padding extra field, as torch's writer names it ("FP")
    out_.append(pad, 'Z');
    out_ += bytes;
    records_.push_back(r);
  }
  std::vector<char> finish() {
    const std::size_t dir = out_.size();
    for (const auto& r : records_) {
      u32(0x02014b50); u16(20); u16(20); u16(0); u16(0); u16(0); u16(0x21);
      u32(r.crc); u32(static_cast<uint32_t>(r.size)); u32(static_cast<uint32_t>(r.size));
      u16(static_cast<uint16_t>(r.name.size())); u16(0); u16(0); u16(0); u16(0); u32(0);
      u32(static_cast<uint32_t>(r.offset));
      out_ += r.name;
    }
    const std::size_t dir_size = out_.size() - dir;
    u32(0x06054b50); u16(0); u16(0); u16(static_cast<uint16_t>(records_.size()));
    u16(static_cast<uint16_t>(records_.size())); u32(static_cast<uint32_t>(dir_size)); u32(static_cast<uint32_t>(dir));
    u16(0);
    return std::vector<char>(out_.begin(), out_.end());
  }

 private:
  struct Record {
    std::string name;
    uint32_t crc;
    std::size_t size, offset;
  };
  std::string root_, out_;
  std::vector<Record> records_;
  void u16(uint16_t v) { out_.push_back(static_cast<char>(v)); out_.push_back(static_cast<char>(v >> 8)); }
  void u32(uint32_t v) { u16(static_cast<uint16_t>(v)); u16(static_cast<uint16_t>(v >> 16)); }
  static uint32_t crc32(const std::string& bytes) {
    static const auto table = [] {
      std::vector<uint32_t> t(256);
      for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        t[i] = c;
      }
      return t;
    }();
    uint32_t c = 0xffffffffu;
    for (unsigned char b : bytes) c = table[(c ^ b) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
  }
};

// The pickle torch.save writes for a tensor: _rebuild_tensor_v2 of its storage (a persistent id) at offset 0.
class Pickler {
 public:
  std::string out;
  void proto() { out += "\x80\x02"; }
  void global(const std::string& module, const std::string& name) { out += "c" + module + "\n" + name + "\n"; }
  void str(const std::string& s) {
    out += 'X';
    u32(static_cast<uint32_t>(s.size()));
    out += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      out += 'K';
      out += static_cast<char>(v);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out += 'J';
      u32(static_cast<uint32_t>(v));
    } else {
      out += "\x8a\x08";
      for (int i = 0; i < 8; ++i) out += static_cast<char>(static_cast<uint64_t>(v) >> (8 * i));
    }
  }
  void tuple_of(const std::vector<int64_t>& v) {
    out += '(';
    for (int64_t x : v) integer(x);
    out += 't';
  }
  void tensor(const Tensor& t, const std::string& key) {
    global("torch._utils", "_rebuild_tensor_v2");
    out += '(';
    out += '(';
    str("storage");
    global("torch", storage_name(t.dtype()));
    str(key);
    str("cpu");
    integer(t.numel());
    out += 't';
    out += 'Q';  // BINPERSID
    integer(0);
    tuple_of(t.shape());
    std::vector<int64_t> strides(t.shape().size());
    int64_t s = 1;
    for (std::size_t d = strides.size(); d-- > 0;) {
      strides[d] = s;
      s *= std::max<int64_t>(t.shape()[d], 1);
    }
    tuple_of(strides);
    out += '\x89';  // requires_grad False
    global("collections", "OrderedDict");
    out += ")R";
    out += "tR";
  }

 private:
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out += static_cast<char>(v >> (8 * i));
  }
  static std::string storage_name(DType d) {
    for (const auto& [name, dtype] : storage_types())
      if (dtype == d) return name;
    throw Error(ErrorCode::IO, std::string("cannot save a tensor of dtype ") + dtype_name(d));
  }
};

}  // namespace

ValuePtr load(const void* bytes, std::size_t size, std::size_t max_bytes) {
  std::unique_ptr<detail::ArchiveReader> archive = detail::open_archive(bytes, size);
  const uint64_t pickle_size = archive->size_of("data.pkl");
  if (pickle_size > size) damaged("data.pkl is larger than the file");
  std::vector<char> pickle(static_cast<std::size_t>(pickle_size));
  archive->read("data.pkl", pickle.data(), pickle.size());
  ValuePtr v = Unpickler(*archive, "", max_bytes).run(pickle);
  return v;
}

std::vector<char> save(const std::vector<Tensor>& tensors) {
  Pickler p;
  p.proto();
  if (tensors.size() != 1) p.out += '(';
  for (std::size_t i = 0; i < tensors.size(); ++i) p.tensor(tensors[i], std::to_string(i));
  if (tensors.size() != 1) p.out += 't';
  p.out += '.';
  ZipWriter zip("archive/");
  zip.add("data.pkl", p.out);
  zip.add("byteorder", "little");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    zip.add("data/" + std::to_string(i), std::string(static_cast<const char*>(t.data()), t.nbytes()));
  }
  zip.add("version", "3\n");
  return zip.finish();
}

}  // namespace pt2rt::lite
