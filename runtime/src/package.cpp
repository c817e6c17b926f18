// Reading a package: its records, its spec record, its compiled library's hash. Nothing here loads code (nor
// needs torch: the zip archive comes through ArchiveReader).
#include "common.h"

#include <openssl/evp.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace pt2rt::detail {

namespace {

constexpr const char* kModelDir = "data/aotinductor/";

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

FileIdentity file_identity(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    throw Error(ErrorCode::Package, "cannot open package " + path + ": " + std::strerror(errno));
  }
  return FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                      static_cast<uint64_t>(st.st_size),
                      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

Package::Package(const std::string& path, const Limits& limits) : path_(path), limits_(limits) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    throw Error(ErrorCode::Package, "cannot open package " + path + ": " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) throw Error(ErrorCode::Package, path + " is a directory; expected a .pt2 package file");
  if (st.st_size == 0) throw Error(ErrorCode::Package, path + " is empty; expected a .pt2 package");
  try {
    reader_ = open_archive(path);
  } catch (const std::exception& e) {
    (void)e;  // the reader explains zip internals; the user needs the verdict
    throw Error(ErrorCode::Package, path + " is not a .pt2 package (not a readable zip archive)");
  }
  open_records();
}

Package::Package(const void* bytes, size_t size, const std::string& name, const Limits& limits)
    : path_(name), limits_(limits) {
  if (bytes == nullptr && size != 0) throw Error(ErrorCode::Usage, name + ": the bytes are NULL");
  if (size == 0) throw Error(ErrorCode::Package, name + " is empty; expected a .pt2 package");
  try {
    reader_ = open_archive(bytes, size);
  } catch (const std::exception& e) {
    (void)e;
    throw Error(ErrorCode::Package, name + " is not a .pt2 package (not a readable zip archive)");
  }
  open_records();
}

void Package::open_records() {
  const std::string& path = path_;
  try {
    records_ = reader_->records();  // the readers refuse records outside the archive's root folder
  } catch (const std::exception& e) {
    (void)e;
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
    return reader_->size_of(name);
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
    if (size != 0) reader_->read(name, out.data(), out.size());
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

void check_intra_op_threads(int threads, const char* who) {
  if (threads < 1 || threads > kMaxIntraOpThreads) {
    throw Error(ErrorCode::Usage, std::string(who) + " must be in 1.." + std::to_string(kMaxIntraOpThreads) +
                                      ", got " + std::to_string(threads));
  }
}

void check_options(const Options& options) {
  if (options.num_runners < 1 || options.num_runners > kMaxRunners) {
    // each runner is a model instance: an unbounded count would load until memory runs out
    throw Error(ErrorCode::Usage, "num_runners must be in 1.." + std::to_string(kMaxRunners) + ", got " +
                                      std::to_string(options.num_runners));
  }
  if (options.intra_op_threads < 0 || options.intra_op_threads > kMaxIntraOpThreads) {
    throw Error(ErrorCode::Usage, "intra_op_threads must be in 1.." + std::to_string(kMaxIntraOpThreads) +
                                      " (0: set_num_threads' count), got " + std::to_string(options.intra_op_threads));
  }
}

std::unique_ptr<Package> open_package(const std::string& path, const Limits& limits, bool keep_open,
                                      FileIdentity& identity) {
  if (keep_open) return std::make_unique<Package>(path, limits);
  // the identity of the file opened, to know it again: the path's before and after opening, the same
  for (int attempt = 0;; ++attempt) {
    identity = file_identity(path);
    auto package = std::make_unique<Package>(path, limits);
    if (file_identity(path) == identity) return package;
    if (attempt == 2) throw Error(ErrorCode::Package, path + " kept being replaced while it was opened");
  }
}

std::vector<char> golden_record(const Package* package, bool from_memory, const std::vector<char>& kept,
                                const std::string& path, const FileIdentity& identity, const Limits& limits,
                                const Spec& spec) {
  if (package) return package->read(spec.golden_record);
  if (from_memory) {
    if (kept.empty()) {
      throw Error(ErrorCode::Package, path + " was loaded with keep_package_open off: its golden cases were not kept");
    }
    return kept;
  }
  const auto changed = [&] {
    return Error(ErrorCode::Package, path + " is not the file that was loaded (replaced, or changed since); load it "
                                            "again to read its golden cases");
  };
  FileIdentity now;
  try {
    now = file_identity(path);
  } catch (const Error&) {
    throw changed();
  }
  if (now != identity) throw changed();
  const Package again(path, limits);
  if (file_identity(path) != identity) throw changed();
  return again.read(spec.golden_record);
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
