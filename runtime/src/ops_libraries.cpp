// Loading ops libraries before a model, and checking that they registered what the package needs.
#include "internal.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/custom_class.h>

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>

namespace pt2rt::detail {

namespace {

bool is_file(const std::string& path) { return is_regular_file(path); }
std::string absolute(const std::string& path) { return absolute_path(path); }

// The directory libpt2rt.so was loaded from.
std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&pt2rt::version), &info) && info.dli_fname) return dirname_of(absolute(info.dli_fname));
  return "";
}

// Libraries stay loaded for the life of the process: their registrations cannot be undone safely.
std::mutex g_mutex;
std::unordered_map<std::string, void*>& loaded_handles() {
  static std::unordered_map<std::string, void*> handles;
  return handles;
}

bool loaded_before(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return loaded_handles().count(absolute(path)) > 0;
}

std::string load_one(const std::string& path) {
  if (!is_file(path)) throw Error(ErrorCode::OpsLibrary, "ops library " + path + " does not exist");
  const std::string abs = absolute(path);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (loaded_handles().count(abs)) return abs;
  void* handle = dlopen(abs.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* err = dlerror();
    throw Error(ErrorCode::OpsLibrary, "cannot load ops library " + abs + ": " + (err ? err : "unknown error"));
  }
  loaded_handles()[abs] = handle;
  return abs;
}

std::vector<std::string> search_path(const std::string& package_path, bool package_dir) {
  return ops_search_path(own_directory(), package_path, package_dir);
}

std::string qualified_class(const std::string& name) {
  const auto sep = name.find("::");
  return "__torch__.torch.classes." + name.substr(0, sep) + "." + name.substr(sep == std::string::npos ? 0 : sep + 2);
}

bool op_registered(const CustomOpSpec& op) {
  return c10::Dispatcher::singleton().findSchema(c10::OperatorName(op.name, op.overload)).has_value();
}

template <typename T>
std::string printed(const T& value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

// Registered, but with other schemas than the package was exported against: another build of the library.
std::vector<std::string> schema_mismatches(const Spec& spec) {
  std::vector<std::string> out;
  const auto differs = [&](const CustomOpSpec& item, const std::string& exported, const std::string& have) {
    out.push_back(item.name + " (from " + item.library + "): the package was exported against '" + exported +
                  "', the loaded library registers '" + have + "'");
  };
  for (const auto& op : spec.custom_ops) {
    const auto handle = c10::Dispatcher::singleton().findSchema(c10::OperatorName(op.name, op.overload));
    if (op.schema.empty() || !handle) continue;
    const std::string have = printed(handle->schema());
    if (have != op.schema) differs(op, op.schema, have);
  }
  for (const auto& cls : spec.custom_classes) {
    const auto type = torch::getCustomClass(qualified_class(cls.name));
    if (!type) continue;
    for (const auto& [method, exported] : cls.method_schemas) {
      const auto* fn = type->findMethod(method);
      const std::string have = fn ? printed(fn->getSchema()) : "no method " + method;
      if (have != exported) differs(cls, exported, have);
    }
  }
  return out;
}

bool class_registered(const std::string& name) { return torch::getCustomClass(qualified_class(name)) != nullptr; }

std::string namespace_of(const std::string& name) { return name.substr(0, name.find("::")); }

// What the spec needs that is not registered yet, as "op ns::x (from libY.so)".
std::vector<std::string> missing_items(const Spec& spec) {
  std::vector<std::string> missing;
  for (const auto& op : spec.custom_ops) {
    if (!op_registered(op)) missing.push_back("op " + op.name + " (from " + op.library + ")");
  }
  for (const auto& cls : spec.custom_classes) {
    if (!class_registered(cls.name)) missing.push_back("class " + cls.name + " (from " + cls.library + ")");
  }
  return missing;
}

// A second library registering a namespace that is already registered aborts the process (TORCH_LIBRARY throws
// during dlopen): refuse before loading when a namespace the package still lacks items of already has ops. Only the
// namespaces of the items the spec names `provides` for (a library the caller gives: "", any of them): the kernels
// library does not register my_ops, whatever my_ops lacks.
void check_no_second_copy(const Spec& spec, const std::string& library, const std::string& provides) {
  std::set<std::string> lacking;
  for (const auto& op : spec.custom_ops) {
    if (!op_registered(op) && (provides.empty() || op.library == provides)) lacking.insert(namespace_of(op.name));
  }
  for (const auto& cls : spec.custom_classes) {
    if (!class_registered(cls.name) && (provides.empty() || cls.library == provides))
      lacking.insert(namespace_of(cls.name));
  }
  for (const auto& name : c10::Dispatcher::singleton().getAllOpNames()) {
    const std::string ns = namespace_of(name.name);
    if (lacking.count(ns)) {
      throw Error(ErrorCode::OpsLibrary, "namespace " + ns + " is already registered in this process (e.g. " +
                                             name.name + ") by another library, which lacks what the package needs; "
                                             "loading " + library + " as well would register " + ns +
                                             " twice, which aborts the process");
    }
  }
}

}  // namespace

std::vector<std::string> load_ops_libraries(const Spec& spec, const std::string& package_path, const Options& options) {
  std::vector<std::string> loaded;
  // Everything already registered (an earlier load, or the host program's own copy): load nothing more.
  if (missing_items(spec).empty()) return loaded;
  auto load_checked = [&](const std::string& path, const std::string& provides) {
    if (!missing_items(spec).empty()) {
      if (!loaded_before(path)) check_no_second_copy(spec, path, provides);
      loaded.push_back(load_one(path));
    }
  };
  // The caller's libraries first; the default lookup then finds the spec's libraries that still have items missing
  // (a model naming its own new library can use a library the runtime finds for everyone, whatever loaded before).
  std::set<std::string> given;
  for (const auto& lib : options.ops_libraries) {
    load_checked(lib, "");
    given.insert(lib.substr(lib.find_last_of('/') + 1));
  }
  const auto still_needed = [&] {
    std::set<std::string> libs;
    for (const auto& op : spec.custom_ops)
      if (!op_registered(op)) libs.insert(op.library);
    for (const auto& cls : spec.custom_classes)
      if (!class_registered(cls.name)) libs.insert(cls.library);
    return libs;
  };
  const auto dirs = search_path(package_path, options.ops_from_package_dir);
  for (const auto& name : spec.libraries) {
    if (given.count(name) || !still_needed().count(name)) continue;
    std::string found;
    for (const auto& dir : dirs) {
      if (is_file(dir + "/" + name)) {
        found = dir + "/" + name;
        break;
      }
    }
    if (found.empty()) {
      std::string where, named;
      for (const auto& dir : dirs) where += (where.empty() ? "" : ", ") + dir;
      for (const auto& lib : options.ops_libraries) named += (named.empty() ? "" : ", ") + lib;
      throw Error(ErrorCode::OpsLibrary,
                  "the package needs " + name + ", which was not found in " + (where.empty() ? "no folder" : where) +
                      (named.empty() ? std::string(" (pass it with --ops / Options::ops_libraries, or set PT2RT_OPS_PATH)")
                                     : " and is not among the ops libraries given (" + named +
                                           "; pass it too, or set PT2RT_OPS_PATH)"));
    }
    load_checked(found, name);
  }
  return loaded;
}

void check_registered(const Spec& spec, const std::vector<std::string>& loaded) {
  std::string libs;
  for (const auto& l : loaded) libs += (libs.empty() ? "" : ", ") + l;
  if (libs.empty()) libs = "no library (all were loaded before)";
  const std::vector<std::string> missing = missing_items(spec);
  if (!missing.empty()) {
    std::string what;
    for (const auto& m : missing) what += (what.empty() ? "" : ", ") + m;
    throw Error(ErrorCode::OpsLibrary, "not registered after loading " + libs + ": " + what);
  }
  const std::vector<std::string> stale = schema_mismatches(spec);
  if (!stale.empty()) {
    std::string what;
    for (const auto& m : stale) what += (what.empty() ? "" : "; ") + m;
    throw Error(ErrorCode::OpsLibrary, "the ops libraries are not the builds the package was exported with (loaded " +
                                           libs + "): " + what + " - use those builds, or re-export");
  }
}

}  // namespace pt2rt::detail
