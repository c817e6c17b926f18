#include "repository.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "log.h"
#include "protocol.h"

namespace fs = std::filesystem;

namespace pt2serve {

ModelConfig read_config(const std::string& path) {
  ModelConfig c;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) return c;
  // a FIFO or device would block the start (or a load) on its open or read
  if (ec || status.type() != fs::file_type::regular) throw std::runtime_error(path + " is not a regular file");
  constexpr uintmax_t kMaxConfigBytes = 1 << 20;
  if (fs::file_size(path, ec) > kMaxConfigBytes || ec) {
    throw std::runtime_error(path + " is larger than " + std::to_string(kMaxConfigBytes) + " bytes");
  }
  std::ifstream in(path, std::ios::binary);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  nlohmann::json j;
  try {
    check_json_depth(text.data(), text.data() + text.size());
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + " is not JSON: " + e.what());
  }
  if (!j.is_object()) throw std::runtime_error(path + ": expected a JSON object");
  // every integer with the range it is used in: an out-of-range value is refused, never wrapped or clamped
  const auto integer = [&](const nlohmann::json& v, const std::string& key, int64_t lo, int64_t hi) {
    const bool in_range = v.is_number_unsigned()  ? v.get<uint64_t>() <= static_cast<uint64_t>(hi) &&
                                                        static_cast<int64_t>(v.get<uint64_t>()) >= lo
                          : v.is_number_integer() ? v.get<int64_t>() >= lo && v.get<int64_t>() <= hi
                                                  : false;
    if (!in_range) {
      throw std::runtime_error(path + ": " + key + " must be an integer from " + std::to_string(lo) + " to " +
                               std::to_string(hi) + ", got " + clip(v.dump(), 64));
    }
    return v.get<int64_t>();
  };
  for (const auto& [key, v] : j.items()) {
    if (key == "max_batch_size") {
      c.max_batch_size = integer(v, "max_batch_size", 0, kMaxBatchSize);
    } else if (key == "instance_count") {
      c.instance_count = static_cast<int>(integer(v, "instance_count", 1, kMaxInstances));
    } else if (key == "max_queue") {
      c.max_queue = static_cast<size_t>(integer(v, "max_queue", 1, kMaxQueue));
    } else if (key == "intra_op_threads") {
      c.intra_op_threads = static_cast<int>(integer(v, "intra_op_threads", 1, pt2rt::kMaxIntraOpThreads));
    } else if (key == "ops_libraries") {
      if (!v.is_array()) throw std::runtime_error(path + ": ops_libraries must be a list of paths");
      for (const auto& p : v) {
        if (!p.is_string()) throw std::runtime_error(path + ": ops_libraries must be a list of paths");
        const fs::path lib = p.get<std::string>();
        c.ops_libraries.push_back(lib.is_absolute() ? lib.string() : (fs::path(path).parent_path() / lib).string());
      }
    } else if (key == "dynamic_batching") {
      if (v.is_boolean()) {
        c.dynamic_batching = v.get<bool>();
      } else if (v.is_object()) {
        for (const auto& [k, w] : v.items()) {
          if (k == "max_queue_delay_microseconds") {
            c.max_queue_delay_us = integer(w, "dynamic_batching.max_queue_delay_microseconds", 0, kMaxQueueDelayUs);
          } else if (k == "preferred_batch_size") {
            if (!w.is_array()) throw std::runtime_error(path + ": preferred_batch_size must be a list of integers");
            for (const auto& s : w) c.preferred_batch_size.push_back(integer(s, "preferred_batch_size", 1, kMaxBatchSize));
          } else {
            throw std::runtime_error(path + ": unknown key dynamic_batching." + k +
                                     " (expected max_queue_delay_microseconds, preferred_batch_size)");
          }
        }
      } else {
        throw std::runtime_error(path + ": dynamic_batching must be false or an object");
      }
    } else {
      throw std::runtime_error(path + ": unknown key " + key +
                               " (expected max_batch_size, dynamic_batching, instance_count, intra_op_threads, "
                               "max_queue, ops_libraries)");
    }
  }
  return c;
}

namespace {
// A model folder's <version>/model.pt2, by version number.
std::vector<std::pair<long, fs::path>> version_folders(const fs::path& m) {
  std::vector<std::pair<long, fs::path>> versions;
  for (const auto& e : fs::directory_iterator(m)) {
    const std::string v = e.path().filename().string();
    if (e.is_directory() && !v.empty() && v.size() < 10 && std::all_of(v.begin(), v.end(), ::isdigit) &&
        fs::is_regular_file(e.path() / "model.pt2")) {
      versions.emplace_back(std::stol(v), e.path());
    }
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

std::vector<ModelPtr> load_model_dir(const fs::path& m, int default_threads) {
  ModelConfig config;
  std::string config_error;
  try {
    config = read_config((m / "config.json").string());
  } catch (const std::exception& e) {
    config_error = e.what();
  }
  if (config.intra_op_threads == 0) config.intra_op_threads = default_threads;
  const auto versions = version_folders(m);
  if (versions.empty()) {
    log("warning", "no <version>/model.pt2 in this model folder; skipped", {{"model", m.filename().string()}});
  }
  std::vector<ModelPtr> models;
  for (const auto& [number, path] : versions) {
    const auto start = std::chrono::steady_clock::now();
    auto model = std::make_shared<Model>(m.filename().string(), std::to_string(number),
                                         (path / "model.pt2").string(), config, config_error);
    if (model->ready()) {
      log("info", "model loaded", {{"model", model->name()}, {"version", model->version()},
                                   {"variant", model->variant()}, {"batching", model->batching() ? "on" : "off"},
                                   {"instances", std::to_string(model->config().instance_count)},
                                   {"intra_op_threads", std::to_string(model->intra_op_threads())},
                                   {"max_batch_size", std::to_string(model->max_batch_size())},
                                   {"seconds", std::to_string(std::chrono::duration<double>(
                                                   std::chrono::steady_clock::now() - start).count())}});
    } else {
      log("error", "model not loaded", {{"model", model->name()}, {"version", model->version()},
                                        {"error", model->load_error()}});
    }
    models.push_back(std::move(model));
  }
  return models;
}

// A model's name is a plain folder name: letters, digits, '_', '-', '.', not starting with '.'. Requests name models
// by it, and /metrics carries it in its labels.
bool is_model_name(const std::string& name) {
  const bool plain = !name.empty() && name.size() <= 255 && name[0] != '.' &&
                     std::all_of(name.begin(), name.end(), [](unsigned char c) {
                       return std::isalnum(c) || c == '_' || c == '-' || c == '.';
                     });
  return plain;
}

// The model folders of a repository, by name. A name starting with '.' is not a model (a VCS folder, or a Kubernetes
// volume's ..data link and its timestamped folders); any other folder whose name is not a model name (a quote, a
// newline, a space) is not served either, and said once.
std::vector<fs::path> model_folders(const fs::path& dir) {
  static std::mutex said_mu;
  static std::set<std::string> said;
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_directory()) continue;
    const std::string name = e.path().filename().string();
    if (is_model_name(name)) {
      out.push_back(e.path());
    } else if (name[0] != '.') {
      std::lock_guard<std::mutex> lock(said_mu);
      if (said.insert(name).second) {
        log("warning", "a folder whose name is not a model name is not served (expected letters, digits, '_', '-', "
                       "'.', not starting with '.')", {{"folder", clip(name, 64)}});
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// What poll() compares: config.json and each <version>/model.pt2 as (name, size, modification time).
std::string folder_state(const fs::path& m) {
  std::string state;
  const auto add = [&state](const fs::path& file, const std::string& key) {
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) return;
    const auto size = fs::file_size(file, ec);
    const auto time = fs::last_write_time(file, ec).time_since_epoch().count();
    state += key + ":" + std::to_string(size) + ":" + std::to_string(time) + ";";
  };
  add(m / "config.json", "config");
  std::vector<std::string> versions;
  for (const auto& e : fs::directory_iterator(m)) {
    if (e.is_directory()) versions.push_back(e.path().filename().string());
  }
  std::sort(versions.begin(), versions.end());
  for (const auto& v : versions) add(m / v / "model.pt2", v);
  return state;
}
}  // namespace

int threads_per_instance(const std::string& dir) {
  int64_t instances = 0;
  try {
    for (const auto& m : model_folders(dir)) {
      int per_version = 1;
      try {
        per_version = read_config((m / "config.json").string()).instance_count;
      } catch (const std::exception&) {  // that model will not load: it counts as one
      }
      instances += per_version * static_cast<int64_t>(version_folders(m).size());
    }
  } catch (const std::exception&) {  // an unreadable repository loads nothing either
  }
  const int share = pt2rt::usable_cores() / static_cast<int>(std::max<int64_t>(instances, 1));
  return std::clamp(share, 1, pt2rt::kMaxIntraOpThreads);
}

Registry::Registry(std::string dir, ModelControl control) : dir_(std::move(dir)), control_(control) {
  if (control_ != ModelControl::Poll) {
    for (auto& m : load_repository(dir_)) by_name_[m->name()][std::stol(m->version())] = m;
    return;
  }
  if (!fs::is_directory(dir_)) throw std::runtime_error("model repository " + dir_ + " is not a directory");
  poll();  // loads every model
}

ModelPtr Registry::find(const std::string& name, const std::string& version, bool need_ready) const {
  ModelPtr m;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) throw NotFound("unknown model '" + name + "'");
    if (version.empty()) {  // the highest ready version; the highest when none is ready (for its error)
      m = it->second.rbegin()->second;
      for (auto v = it->second.rbegin(); v != it->second.rend(); ++v) {
        if (v->second->ready()) {
          m = v->second;
          break;
        }
      }
    } else {
      for (const auto& [number, model] : it->second) {
        if (model->version() == version) m = model;
      }
      if (!m) throw NotFound("model '" + name + "' has no version '" + version + "'");
    }
  }
  if (need_ready && !m->ready()) {
    throw Unavailable("model " + m->name() + " version " + m->version() + " is not ready: " + m->load_error());
  }
  return m;
}

std::vector<std::string> Registry::versions(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  const auto it = by_name_.find(name);
  if (it != by_name_.end()) {
    for (const auto& [number, model] : it->second) out.push_back(model->version());
  }
  return out;
}

std::vector<ModelPtr> Registry::models() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ModelPtr> out;
  for (const auto& [name, versions] : by_name_) {
    for (const auto& [number, model] : versions) out.push_back(model);
  }
  return out;
}

namespace {
// A model name from a request is used as a folder name under the repository: a plain name only.
void check_model_name(const std::string& name) {
  if (!is_model_name(name)) {
    throw BadRequest("model name '" + clip(name, 64) + "' is not a model folder name of the repository (expected " +
                     "letters, digits, '_', '-', '.', not starting with '.')");
  }
}
}  // namespace

namespace {
void check_parameters(const std::vector<std::string>& parameters, const char* allowed) {
  for (const auto& key : parameters) {
    if (allowed && key == allowed) continue;
    throw BadRequest("parameter '" + key + "' is not supported (pt2serve loads what the repository folder holds)");
  }
}
}  // namespace

void Registry::check_model_control() const {
  if (control_ == ModelControl::Poll) {
    throw BadRequest("pt2serve follows the model repository (--model-control-mode poll): change the folder to load "
                     "or unload models, or start it with --model-control-mode explicit");
  }
  if (control_ != ModelControl::Explicit) {
    throw BadRequest("loading and unloading models is off: start pt2serve with --model-control-mode explicit");
  }
}

std::vector<Registry::IndexEntry> Registry::index(bool ready_only) const {
  std::vector<IndexEntry> out;
  for (const auto& m : models()) {
    if (ready_only && !m->ready()) continue;
    out.push_back({m->name(), m->version(), state_name(m->state()), m->ready() ? "" : m->load_error()});
  }
  return out;
}

void Registry::load(const std::string& name, const std::vector<std::string>& parameters) {
  check_model_control();
  check_parameters(parameters, nullptr);
  check_model_name(name);
  std::lock_guard<std::mutex> serial(load_mu_);
  load_folder(name);
}

bool Registry::load_folder(const std::string& name) {
  const fs::path folder = fs::path(dir_) / name;
  if (!fs::is_directory(folder)) throw NotFound("the model repository has no folder '" + name + "'");
  std::vector<ModelPtr> loaded = load_model_dir(folder, threads_per_instance(dir_));
  std::map<long, ModelPtr> versions;
  std::string errors;
  bool any_ready = false, all_ready = true;
  for (auto& m : loaded) {
    any_ready = any_ready || m->ready();
    all_ready = all_ready && m->ready();
    if (!m->ready()) errors += (errors.empty() ? "" : "; ") + ("version " + m->version() + ": " + m->load_error());
    versions[std::stol(m->version())] = m;
  }
  if (!any_ready) {
    const std::string why = loaded.empty() ? std::string("no <version>/model.pt2 in its folder") : errors;
    bool serving = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto it = by_name_.find(name);
      serving = it != by_name_.end() && std::any_of(it->second.begin(), it->second.end(),
                                                    [](const auto& v) { return v.second->ready(); });
      if (!serving && !versions.empty()) by_name_[name] = std::move(versions);  // listed, not ready (as at start)
    }
    throw BadRequest("model '" + name + "' not loaded (" + why + ")" +
                     (serving ? "; the versions served before serve on" : ""));
  }
  std::map<long, ModelPtr> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = by_name_[name];
    old.swap(slot);
    slot = std::move(versions);
  }
  log("info", "model (re)loaded", {{"model", name}, {"versions", std::to_string(loaded.size())},
                                   {"replaced", std::to_string(old.size())}});
  // `old` goes out of scope here; requests still running on those models keep them until they finish
  return all_ready;
}

void Registry::unload(const std::string& name, const std::vector<std::string>& parameters) {
  check_model_control();
  check_parameters(parameters, "unload_dependents");
  std::lock_guard<std::mutex> serial(load_mu_);
  unload_served(name);
}

void Registry::unload_served(const std::string& name) {
  std::map<long, ModelPtr> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) throw NotFound("unknown model '" + name + "'");
    old.swap(it->second);
    by_name_.erase(it);
  }
  log("info", "model unloaded", {{"model", name}, {"versions", std::to_string(old.size())}});
}

void Registry::poll() {
  std::lock_guard<std::mutex> serial(load_mu_);
  std::map<std::string, std::string> now;
  try {
    for (const auto& m : model_folders(dir_)) now[m.filename().string()] = folder_state(m);
  } catch (const std::exception& e) {
    log("warning", "cannot read the model repository; nothing changed", {{"error", e.what()}});
    return;
  }
  const auto now_time = std::chrono::steady_clock::now();
  for (const auto& [name, state] : now) {
    const auto seen = polled_.find(name);
    const bool changed = seen == polled_.end() || seen->second.state != state;
    if (!changed && (seen->second.failures == 0 || now_time < seen->second.retry_at)) continue;
    Polled& entry = polled_[name];
    entry.state = state;  // before loading: a file that changes while it loads is loaded again next time
    if (changed) entry.failures = 0;
    bool ready = false;
    std::string error;  // none: some versions serve, another is not ready (the index says why)
    try {
      ready = load_folder(name);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (ready) {
      entry.failures = 0;
      continue;
    }
    ++entry.failures;
    const int delay = std::min(kMaxRetrySeconds, 1 << std::min(entry.failures - 1, 16));
    entry.retry_at = now_time + std::chrono::seconds(delay);
    std::map<std::string, std::string> fields{
        {"model", name}, {"attempt", std::to_string(entry.failures)}, {"retry_in_s", std::to_string(delay)}};
    if (!error.empty()) fields["error"] = error;
    log("error", error.empty() ? "model folder loaded, a version not ready" : "model folder not loaded", fields);
  }
  for (auto it = polled_.begin(); it != polled_.end();) {
    if (now.count(it->first)) {
      ++it;
      continue;
    }
    try {
      unload_served(it->first);
    } catch (const NotFound&) {  // it was never served
    }
    it = polled_.erase(it);
  }
}

void Registry::poll_every(double seconds) {
  if (poller_.joinable()) return;
  poller_ = std::thread([this, seconds] {
    std::unique_lock<std::mutex> lock(poller_mu_);
    while (!poller_cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return poller_stop_; })) {
      lock.unlock();
      poll();
      lock.lock();
    }
  });
}

void Registry::stop_polling() {
  {
    std::lock_guard<std::mutex> lock(poller_mu_);
    poller_stop_ = true;
  }
  poller_cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

Registry::~Registry() { stop_polling(); }

std::vector<ModelPtr> load_repository(const std::string& dir) {
  if (!fs::is_directory(dir)) throw std::runtime_error("model repository " + dir + " is not a directory");
  const int threads = threads_per_instance(dir);
  std::vector<ModelPtr> models;
  for (const auto& m : model_folders(dir)) {
    for (auto& model : load_model_dir(m, threads)) models.push_back(std::move(model));
  }
  return models;
}

}  // namespace pt2serve
