// Custom ops in pt2rt-lite: each op a lite variant calls is a C function (pt2rt_op_<ns>_<op>, pt2rt/lite_op.h) in
// its ops library's lite build, which the spec names (custom_ops[].lite_library). Found as the full runtime finds
// ops libraries (docs/runtime.md): the ones given, then next to this library, PT2RT_OPS_PATH, the package's folder
// when asked; loaded once for the process, globally (the model library resolves the entries by name).
#include "ops_libraries.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

#include "../src/common.h"
#include "shim.h"

namespace pt2rt::lite {

namespace {

using detail::absolute_path;
using detail::dirname_of;
using detail::is_regular_file;

std::string basename_of(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&pt2rt_lite_aoti_torch_empty_strided), &info) && info.dli_fname) {
    return dirname_of(absolute_path(info.dli_fname));
  }
  return "";
}

std::mutex g_mutex;
std::map<std::string, void*>& handles() {  // by absolute path; never closed (as in the full runtime)
  static std::map<std::string, void*> loaded;
  return loaded;
}

void* load_one(const std::string& path) {
  if (!is_regular_file(path)) throw Error(ErrorCode::OpsLibrary, "ops library " + path + " does not exist");
  const std::string abs = absolute_path(path);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = handles().find(abs);
  if (it != handles().end()) return it->second;
  void* handle = dlopen(abs.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw Error(ErrorCode::OpsLibrary, "cannot load ops library " + abs + ": " + (why ? why : "unknown error"));
  }
  handles()[abs] = handle;
  return handle;
}

bool builtin(const std::string& op) {
  return op == "pt2rt::rnn_layer" || op == "pt2rt::lstm_layer" || op == "pt2rt::depthwise_conv2d" ||
         op == "pt2rt::depthwise_conv2d_act" || op == "pt2rt::pointwise_conv2d" ||
         op == "pt2rt::linear" ||
         op == "pt2rt::winograd_conv2d" || op == "pt2rt::attention";
}

}  // namespace

std::string op_symbol(const std::string& name) {
  const auto sep = name.find("::");
  if (sep == std::string::npos) return "pt2rt_op_" + name;
  return "pt2rt_op_" + name.substr(0, sep) + "_" + name.substr(sep + 2);
}

std::vector<std::string> load_ops_libraries(const Spec& spec, const std::string& package_path,
                                            const Options& options) {
  const std::string& path = package_path.empty() ? std::string("the package") : package_path;
  if (!spec.custom_classes.empty()) {
    throw Error(ErrorCode::OpsLibrary, path + " needs the TorchBind class " + spec.custom_classes[0].name +
                                           " from an ops library; pt2rt-lite runs no TorchBind classes");
  }
  std::map<std::string, std::vector<const CustomOpSpec*>> wanted;  // lite library -> its ops
  for (const auto& op : spec.custom_ops) {
    if (builtin(op.name)) continue;
    if (op.lite_library.empty()) {
      throw Error(ErrorCode::OpsLibrary, path + " needs " + op.name + " from " + op.library +
                                             ", and names no lite build of it (export it with --lite, with " +
                                             "the library's lite build beside it: docs/lite.md)");
    }
    wanted[op.lite_library].push_back(&op);
  }
  std::vector<std::string> loaded;
  if (wanted.empty()) return loaded;
  // the given libraries by file name; one the package does not name is refused (it may be a full ops library,
  // which would bring libtorch into the process)
  std::map<std::string, std::string> given;
  for (const auto& lib : options.ops_libraries) {
    if (!wanted.count(basename_of(lib))) {
      std::string names;
      for (const auto& [name, ops] : wanted) names += (names.empty() ? "" : ", ") + name;
      throw Error(ErrorCode::OpsLibrary, "ops library " + lib + " is not one the package's lite variants use (" +
                                             names + ")");
    }
    given[basename_of(lib)] = lib;
  }
  const std::vector<std::string> dirs =
      detail::ops_search_path(own_directory(), package_path, options.ops_from_package_dir);
  for (const auto& [name, ops] : wanted) {
    std::string found;
    if (given.count(name)) {
      found = given[name];
    } else {
      for (const auto& dir : dirs) {
        if (is_regular_file(dir + "/" + name)) {
          found = dir + "/" + name;
          break;
        }
      }
    }
    if (found.empty()) {
      std::string where;
      for (const auto& dir : dirs) where += (where.empty() ? "" : ", ") + dir;
      throw Error(ErrorCode::OpsLibrary, "the package needs " + name + " (the lite build of " + ops[0]->library +
                                             "), which was not found in " + (where.empty() ? "no folder" : where) +
                                             " (pass it with --ops / Options::ops_libraries, or set PT2RT_OPS_PATH)");
    }
    void* handle = load_one(found);
    const std::string file = absolute_path(found);
    for (const CustomOpSpec* op : ops) {
      const std::string symbol = op_symbol(op->name);
      void* entry = dlsym(handle, symbol.c_str());
      if (entry == nullptr) {
        throw Error(ErrorCode::OpsLibrary, "ops library " + file + " has no lite entry for " + op->name +
                                               " (it defines no " + symbol + ")");
      }
      // the model library calls the entry by name: the process's first definition must be this one
      Dl_info first{};
      void* global = dlsym(RTLD_DEFAULT, symbol.c_str());
      if (global != entry) {
        const bool named = global != nullptr && dladdr(global, &first) != 0 && first.dli_fname != nullptr;
        throw Error(ErrorCode::OpsLibrary, symbol + " (the lite entry of " + op->name + ") is defined by " +
                                               (named ? std::string(first.dli_fname) : std::string("another library")) +
                                               " before " + file + ", which the package needs");
      }
      const auto* schema = static_cast<const char*>(dlsym(handle, (symbol + "_schema").c_str()));
      if (schema == nullptr) {
        throw Error(ErrorCode::OpsLibrary, "ops library " + file + " does not say which schema its entry for " +
                                               op->name + " takes (it defines no " + symbol +
                                               "_schema: PT2RT_LITE_OP_SCHEMA)");
      }
      if (!op->schema.empty() && op->schema != schema) {
        throw Error(ErrorCode::OpsLibrary, "ops library " + file + "'s entry for " + op->name + " was written for '" +
                                               schema + "', the package was exported against '" + op->schema +
                                               "' - use the lite build of the library it was exported with, or "
                                               "re-export");
      }
    }
    loaded.push_back(file);
  }
  return loaded;
}

}  // namespace pt2rt::lite
