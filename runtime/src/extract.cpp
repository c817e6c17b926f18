// The chosen variant of a package, extracted by us into a private directory that AOTInductor loads from: no
// process-global state (AOTInductor's own extraction reads $TMPDIR, which would have to be changed under a lock
// for every load), record names checked before anything is written, sizes bounded, and the SHA-256 checked on
// the very bytes that are written and then dlopen'ed.
#include "common.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace pt2rt {

namespace {

constexpr const char* kPrefix = "pt2rt-";

std::string temp_root() {
  const char* base = std::getenv("TMPDIR");
  return base && *base ? base : "/tmp";
}

void make_dirs(const std::string& root, const std::string& relative) {
  std::string path = root;
  size_t start = 0;
  for (size_t slash; (slash = relative.find('/', start)) != std::string::npos; start = slash + 1) {
    path += "/" + relative.substr(start, slash - start);
    if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
      throw Error(ErrorCode::IO, "cannot create directory " + path + ": " + std::strerror(errno));
    }
  }
}

void write_file(const std::string& path, const std::vector<char>& bytes) {
  // O_EXCL | O_NOFOLLOW: never through a link, never over a file already there.
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0700);
  if (fd < 0) throw Error(ErrorCode::IO, "cannot create " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      close(fd);
      throw Error(ErrorCode::IO, "cannot write " + path + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) throw Error(ErrorCode::IO, "cannot write " + path + ": " + std::strerror(errno));
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::string base_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

// Extractions are shared by content. A model library AOTInductor dlopens is not unloaded when its Runtime is
// destroyed (its generated C++ has GNU-unique symbols, which make glibc keep it), so every load from a new path
// mapped it once more (+0.3 MB per load). Identical content now lands at the same path, <parent>/<SHA-256 of the
// extracted records>, and glibc hands back the mapping it already has: loads and unloads of the same package do
// not grow the process. <parent> is this process's private directory (mode 0700, one name for its life).
// Counted under the one mutex, so the last user's removal and a new load of the same content cannot interleave.
std::mutex g_mutex;
std::map<std::string, int> g_users;  // content hash -> Runtimes using <parent>/<hash>
std::string g_parent;                // "" until the first load
int g_live = 0;                      // directories below the parent, made or being made

std::string parent_locked() {
  struct stat st {};
  if (!g_parent.empty() && lstat(g_parent.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
      (st.st_mode & 0077) == 0) {
    return g_parent;
  }
  if (!g_parent.empty() && mkdir(g_parent.c_str(), 0700) == 0) return g_parent;  // the same name again
  g_parent = detail::make_private_dir();
  return g_parent;
}

int remove_entry(const char* path, const struct stat*, int type, struct FTW*) {
  return type == FTW_DP ? rmdir(path) : unlink(path);
}

// A tree removed with POSIX calls, never following links; true when it is gone. Not std::filesystem::remove_all:
// torch's wheels export copies of it, and a process that finds libtorch first gets theirs (torch 2.11's CUDA
// libtorch.so has one that calls a null function).
bool remove_tree(const std::string& dir) {
  return nftw(dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0;
}

// Removes one directory below the parent, and the parent once it holds none (made again, under the same name,
// by the next load). Under g_mutex.
void discard_locked(const std::string& dir) {
  remove_tree(dir);
  if (--g_live == 0) rmdir(g_parent.c_str());
}

}  // namespace

namespace detail {

std::string make_private_dir() {
  // pt2rt-<pid>-XXXXXX: remove_stale_temp_dirs() can tell a dead process's directory from a live one's.
  std::string pattern = temp_root() + "/" + kPrefix + std::to_string(getpid()) + "-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) {  // mode 0700
    throw Error(ErrorCode::IO, "cannot create a temporary directory " + pattern + ": " + std::strerror(errno));
  }
  return buf.data();
}

Extraction::~Extraction() {
  if (key.empty()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_users[key] > 0) return;
  g_users.erase(key);
  discard_locked(dir);
}

std::shared_ptr<Extraction> extract_variant(const Package& package, const Variant& variant, const Options& options) {
  // a lite variant (no model name) is its library alone; AOTInductor's variants are their model folder and the
  // package's constants and weights
  const bool lite = variant.model.empty();
  const std::string folder = lite ? variant.record : "data/aotinductor/" + variant.model + "/";
  std::vector<std::string> wanted, libraries;
  uint64_t total = 0;
  for (const auto& name : package.records()) {
    const bool own = lite ? name == variant.record : starts_with(name, folder);
    if (!own && (lite || (!starts_with(name, "data/constants/") && !starts_with(name, "data/weights/")))) continue;
    if (own && name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0) libraries.push_back(name);
    wanted.push_back(name);
    total += package.size_of(name);
  }
  // The library that is checked must be the one AOTInductor loads: it dlopens the .so in the model's folder.
  if (libraries != std::vector<std::string>{variant.record}) {
    std::string found;
    for (const auto& l : libraries) found += (found.empty() ? "" : ", ") + l;
    throw Error(ErrorCode::Package, package.path() + ": variant " + variant.isa + " must have exactly its library " +
                                        variant.record + " in " + folder + ", found: " +
                                        (found.empty() ? std::string("none") : found));
  }
  if (total > options.max_extracted_bytes) {
    throw Error(ErrorCode::Package, package.path() + ": variant " + variant.isa + " would extract " +
                                        std::to_string(total) + " bytes; at most " +
                                        std::to_string(options.max_extracted_bytes) +
                                        " are accepted (Options::max_extracted_bytes)");
  }
  std::string dir;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    const std::string parent = parent_locked();
    std::vector<char> buf(parent.begin(), parent.end());
    const std::string tail = "/new-XXXXXX";
    buf.insert(buf.end(), tail.begin(), tail.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) {
      throw Error(ErrorCode::IO, "cannot create a temporary directory in " + parent + ": " + std::strerror(errno));
    }
    dir = buf.data();
    ++g_live;  // the parent stays while this extraction is being made
  }
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> content(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(content.get(), EVP_sha256(), nullptr);
  try {
    for (const auto& name : wanted) {
      const std::vector<char> bytes = package.read(name);
      std::string digest;  // the library's, when checked: it stands for its bytes in the content hash too
      if (name == variant.record && options.check_sha256) {
        digest = sha256_hex(bytes.data(), bytes.size());
        if (digest != variant.sha256 || static_cast<int64_t>(bytes.size()) != variant.size) {
          throw Error(ErrorCode::Package, package.path() + ": the compiled model library is damaged (variant " +
                                              variant.isa + ": SHA-256 " + digest + ", " +
                                              std::to_string(bytes.size()) + " bytes; the spec says " +
                                              variant.sha256 + ", " + std::to_string(variant.size) + " bytes)");
        }
      }
      make_dirs(dir, name);
      write_file(dir + "/" + name, bytes);
      const uint64_t size = bytes.size();
      EVP_DigestUpdate(content.get(), name.c_str(), name.size() + 1);
      EVP_DigestUpdate(content.get(), &size, sizeof size);
      if (digest.empty()) {
        EVP_DigestUpdate(content.get(), bytes.data(), bytes.size());
      } else {
        EVP_DigestUpdate(content.get(), digest.data(), digest.size());  // the library is hashed once, not twice
      }
      // AOTInductor's proxy executor opens custom objects next to the model library.
      if (starts_with(name, "data/constants/")) write_file(dir + "/" + folder + base_name(name), bytes);
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_mutex);
    discard_locked(dir);
    throw;
  }
  unsigned char hash[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(content.get(), hash, &len);
  const std::string key = sha256_hex(hash, len);  // a short, fixed-length name for the content hash
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string final_dir = g_parent + "/" + key;
  auto extraction = std::make_shared<Extraction>();
  extraction->key = key;
  extraction->dir = final_dir;
  if (g_users[key]++ > 0) {  // the same content is extracted already: share it
    discard_locked(dir);
    return extraction;
  }
  if (rename(dir.c_str(), final_dir.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    discard_locked(dir);
    g_users.erase(key);
    extraction->key.clear();  // nothing to release
    throw Error(ErrorCode::IO, "cannot rename " + dir + " to " + final_dir + ": " + why);
  }
  return extraction;
}

}  // namespace detail

int remove_stale_temp_dirs() {
  const std::string root = temp_root();
  DIR* d = opendir(root.c_str());
  if (!d) return 0;
  int removed = 0;
  const std::string mine = std::string(kPrefix) + std::to_string(getpid()) + "-";
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (!starts_with(name, kPrefix) || starts_with(name, mine)) continue;
    const std::string rest = name.substr(std::strlen(kPrefix));
    char* end = nullptr;
    const long pid = std::strtol(rest.c_str(), &end, 10);
    if (pid <= 0 || end == rest.c_str() || *end != '-') continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    struct stat st {};
    const std::string path = root + "/" + name;
    if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
    if (remove_tree(path)) ++removed;
  }
  closedir(d);
  return removed;
}

}  // namespace pt2rt
