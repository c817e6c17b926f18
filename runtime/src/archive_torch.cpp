// The full runtime's ArchiveReader: torch's own zip reader (PyTorchStreamReader), as AOTInductor reads packages.
#include "common.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <cstring>

namespace pt2rt::detail {

namespace {

// Borrowed bytes as torch's zip reader reads a file.
class MemoryReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  MemoryReader(const void* bytes, size_t size) : bytes_(static_cast<const char*>(bytes)), size_(size) {}
  size_t size() const override { return size_; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= size_) return 0;
    const size_t count = std::min<uint64_t>(n, size_ - pos);
    std::memcpy(buf, bytes_ + pos, count);
    return count;
  }

 private:
  const char* bytes_;
  size_t size_;
};

class TorchArchive final : public ArchiveReader {
 public:
  explicit TorchArchive(std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader) : reader_(std::move(reader)) {}
  std::vector<std::string> records() override { return reader_->getAllRecords(); }
  uint64_t size_of(const std::string& name) override { return reader_->getRecordSize(name); }
  void read(const std::string& name, char* out, size_t size) override { reader_->getRecord(name, out, size); }

 private:
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader_;
};

}  // namespace

std::unique_ptr<ArchiveReader> open_archive(const std::string& path) {
  return std::make_unique<TorchArchive>(std::make_unique<caffe2::serialize::PyTorchStreamReader>(path));
}

std::unique_ptr<ArchiveReader> open_archive(const void* bytes, size_t size) {
  return std::make_unique<TorchArchive>(
      std::make_unique<caffe2::serialize::PyTorchStreamReader>(std::make_shared<MemoryReader>(bytes, size)));
}

}  // namespace pt2rt::detail
