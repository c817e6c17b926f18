// pt2rt-lite's ArchiveReader: the zip archives torch's writers make (packages, torch.save files) - one root folder,
// records stored uncompressed, zip64 where sizes need it. Every offset and size the directory claims is checked
// against the archive's own size before anything is read or allocated.
#include "../src/common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>

namespace pt2rt::detail {

namespace {

[[noreturn]] void bad(const std::string& what) { throw std::runtime_error("not a readable zip archive: " + what); }

uint64_t le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Where the bytes come from: a file read with pread, or borrowed memory.
class Source {
 public:
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  virtual void read(uint64_t pos, void* out, size_t n) const = 0;  // within size(), checked by the caller
};

class FileSource final : public Source {
 public:
  explicit FileSource(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
    struct stat st {};
    if (fstat(fd_, &st) != 0) {
      ::close(fd_);
      throw std::runtime_error("cannot stat " + path + ": " + std::strerror(errno));
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~FileSource() override { ::close(fd_); }
  uint64_t size() const override { return size_; }
  void read(uint64_t pos, void* out, size_t n) const override {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(pos));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) throw std::runtime_error("the archive file ended early or could not be read");
      p += got;
      pos += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
  }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

class MemorySource final : public Source {
 public:
  MemorySource(const void* bytes, size_t size) : bytes_(static_cast<const char*>(bytes)), size_(size) {}
  uint64_t size() const override { return size_; }
  void read(uint64_t pos, void* out, size_t n) const override { std::memcpy(out, bytes_ + pos, n); }

 private:
  const char* bytes_;
  size_t size_;
};

struct Entry {
  uint64_t data = 0;  // offset of the stored bytes
  uint64_t size = 0;
};

class ZipArchive final : public ArchiveReader {
 public:
  explicit ZipArchive(std::unique_ptr<Source> source) : src_(std::move(source)) { scan(); }

  std::vector<std::string> records() override {
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const auto& [name, e] : entries_) out.push_back(name);
    return out;
  }
  uint64_t size_of(const std::string& name) override { return entry(name).size; }
  void read(const std::string& name, char* out, size_t size) override {
    const Entry& e = entry(name);
    if (size > e.size) bad("record " + name + " read past its end");
    src_->read(e.data, out, size);
  }

 private:
  std::unique_ptr<Source> src_;
  std::map<std::string, Entry> entries_;

  const Entry& entry(const std::string& name) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) throw std::runtime_error("no record " + name);
    return it->second;
  }

  std::vector<unsigned char> bytes(uint64_t pos, uint64_t n) const {
    if (pos > src_->size() || n > src_->size() - pos) bad("a structure reaches past the end of the archive");
    std::vector<unsigned char> out(static_cast<size_t>(n));
    if (n) src_->read(pos, out.data(), out.size());
    return out;
  }

  void scan() {
    const uint64_t size = src_->size();
    if (size < 22) bad("too short");
    // the end-of-central-directory record: within the last 64 KiB + 22 bytes (its comment is at most 64 KiB)
    const uint64_t tail_len = std::min<uint64_t>(size, 65557);
    const std::vector<unsigned char> tail = bytes(size - tail_len, tail_len);
    int64_t eocd = -1;
    for (int64_t i = static_cast<int64_t>(tail.size()) - 22; i >= 0; --i) {
      if (le(&tail[i], 4) == 0x06054b50) {
        eocd = i;
        break;
      }
    }
    if (eocd < 0) bad("no end of central directory");
    const unsigned char* e = &tail[eocd];
    uint64_t count = le(e + 10, 2), dir_size = le(e + 12, 4), dir_offset = le(e + 16, 4);
    const uint64_t eocd_pos = size - tail_len + static_cast<uint64_t>(eocd);
    if (count == 0xffff || dir_size == 0xffffffff || dir_offset == 0xffffffff) {
      // zip64: the locator right before the record points at the zip64 end-of-central-directory record
      if (eocd_pos < 20) bad("a zip64 archive without its locator");
      const auto loc = bytes(eocd_pos - 20, 20);
      if (le(&loc[0], 4) != 0x07064b50) bad("a zip64 archive without its locator");
      const auto z = bytes(le(&loc[8], 8), 56);
      if (le(&z[0], 4) != 0x06064b50) bad("no zip64 end of central directory");
      count = le(&z[32], 8);
      dir_size = le(&z[40], 8);
      dir_offset = le(&z[48], 8);
    }
    if (count > dir_size / 46) bad("more records claimed than the directory holds");
    const std::vector<unsigned char> dir = bytes(dir_offset, dir_size);
    std::string root;
    size_t p = 0;
    for (uint64_t i = 0; i < count; ++i) {
      if (p + 46 > dir.size() || le(&dir[p], 4) != 0x02014b50) bad("a damaged central directory");
      const unsigned char* h = &dir[p];
      const uint64_t method = le(h + 10, 2), name_len = le(h + 28, 2), extra_len = le(h + 30, 2),
                     comment_len = le(h + 32, 2);
      uint64_t csize = le(h + 20, 4), usize = le(h + 24, 4), local = le(h + 42, 4);
      if (p + 46 + name_len + extra_len + comment_len > dir.size()) bad("a damaged central directory");
      std::string name(reinterpret_cast<const char*>(h + 46), name_len);
      // zip64 sizes and offset, for the fields that say 0xffffffff, in this order
      for (size_t x = p + 46 + name_len; x + 4 <= p + 46 + name_len + extra_len;) {
        const uint64_t id = le(&dir[x], 2), len = le(&dir[x + 2], 2);
        if (x + 4 + len > p + 46 + name_len + extra_len) bad("a damaged extra field");
        if (id == 0x0001) {
          size_t f = x + 4;
          auto take = [&](uint64_t& v) {
            if (v != 0xffffffff) return;
            if (f + 8 > x + 4 + len) bad("a damaged zip64 field");
            v = le(&dir[f], 8);
            f += 8;
          };
          take(usize);
          take(csize);
          take(local);
        }
        x += 4 + len;
      }
      p += 46 + name_len + extra_len + comment_len;
      if (method != 0) {
        throw std::runtime_error("record " + name + " is compressed (method " + std::to_string(method) +
                                 "); pt2rt-lite reads archives of stored records, as torch and export_tools write them");
      }
      if (csize != usize) bad("record " + name + " is stored with two sizes");
      // the local header: its own name and extra lengths say where the bytes start
      const auto lh = bytes(local, 30);
      if (le(&lh[0], 4) != 0x04034b50) bad("record " + name + " has no local header");
      const uint64_t data = local + 30 + le(&lh[26], 2) + le(&lh[28], 2);
      if (data > size || usize > size - data) bad("record " + name + " reaches past the end of the archive");
      // records are named below one root folder, which torch's reader drops (and so does this one)
      const size_t slash = name.find('/');
      if (slash == std::string::npos || slash == 0) bad("record " + name + " is outside the archive's root folder");
      if (root.empty()) root = name.substr(0, slash + 1);
      if (name.compare(0, root.size(), root) != 0) bad("records under two root folders (" + root + ", " + name + ")");
      if (!entries_.emplace(name.substr(root.size()), Entry{data, usize}).second) {
        throw std::runtime_error("two records named " + name.substr(root.size()));
      }
    }
  }
};

}  // namespace

std::unique_ptr<ArchiveReader> open_archive(const std::string& path) {
  return std::make_unique<ZipArchive>(std::make_unique<FileSource>(path));
}

std::unique_ptr<ArchiveReader> open_archive(const void* bytes, size_t size) {
  return std::make_unique<ZipArchive>(std::make_unique<MemorySource>(bytes, size));
}

}  // namespace pt2rt::detail
