// pt2serve's model repository: DIR/<model>/<version>/model.pt2 and DIR/<model>/config.json read, loaded and
// served by name and version; loaded again, unloaded, or followed by polling while serving. Transport-free.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model.h"

namespace pt2serve {

// Reads DIR/<model>/config.json (absent: defaults); a malformed one throws std::runtime_error naming the key.
ModelConfig read_config(const std::string& path);

// Each model instance's share of the cores, the intra-op threads of a model whose config.json sets none: the cores
// this process may use (OMP_NUM_THREADS where set, else its CPU affinity within its cgroup's CPU quota) / the
// instances the repository holds (instance_count x versions of every model folder), at
// least 1 - so that instances running at once do not oversubscribe the machine. A model loads with the share of
// the repository as it is then; models loaded earlier keep theirs.
int threads_per_instance(const std::string& dir);

// The loaded repository, looked up by name and version (the highest version when none is named). Lookups hand out
// shared pointers: a request keeps the model it found until it is done, so load() and unload() can replace or
// remove a model while requests run on it (the old one is freed, and its queue finished, by the last of them).
// pt2serve --model-control-mode: none (the models loaded at start serve until exit), explicit (load() and unload()
// through the repository extension), poll (poll() follows the repository folder; load() and unload() refused).
enum class ModelControl { None, Explicit, Poll };

// Every <model>/<version>/model.pt2 under `dir`, loaded (a model that fails to load is kept, not ready, with its
// error). Ordered by name, then version as a number. Folders whose names start with '.' are not models.
std::vector<ModelPtr> load_repository(const std::string& dir);

class Registry {
 public:
  // Loads the repository: every model folder (load_repository), or in poll mode the first poll. Throws
  // std::runtime_error when `dir` is not a directory. load() and unload() run in explicit mode only; otherwise they
  // throw BadRequest saying why.
  Registry(std::string dir, ModelControl control = ModelControl::None);
  ModelPtr find(const std::string& name, const std::string& version, bool need_ready) const;
  std::vector<std::string> versions(const std::string& name) const;
  std::vector<ModelPtr> models() const;  // a snapshot
  // Reads DIR/<name>/ again (config.json and every <version>/model.pt2) and serves what it holds instead of the
  // model's current versions, once at least one new version is ready; otherwise the current ones serve on (a
  // model that served nothing is listed with the versions' errors, not ready) and this throws BadRequest with the
  // load errors. NotFound when DIR has no such folder; BadRequest for a name that is not a plain folder name. One
  // load, unload or poll at a time. `parameters`: the names of the request's load parameters (Triton's config and
  // file overrides), refused rather than ignored.
  void load(const std::string& name, const std::vector<std::string>& parameters = {});
  // Stops serving the model (NotFound when it is not served); of the parameters only unload_dependents is taken
  // (tritonclient sends it; there are no ensembles to unload with it).
  void unload(const std::string& name, const std::vector<std::string>& parameters = {});
  struct IndexEntry {
    std::string name, version, state, reason;  // state: state_name(); reason: the load error of an unavailable one
  };
  std::vector<IndexEntry> index(bool ready_only) const;
  // Poll mode: loads each model folder that is new or changed since the last poll (config.json, a version's
  // model.pt2 added, removed, or of another size or modification time) as load() does, and unloads the models
  // whose folder is gone. Errors are logged, never thrown; a repository that cannot be read changes nothing. A
  // folder whose load left a version not ready is loaded again while unchanged, after 1, 2, 4 ... s (at most every
  // kMaxRetrySeconds): the cause can lie outside it (an ops library deployed later, a full disk).
  void poll();
  static constexpr int kMaxRetrySeconds = 300;
  // Poll mode: poll() every `seconds` on a thread of the registry's until stop_polling() (or destruction); a poll
  // in progress finishes its load first.
  void poll_every(double seconds);
  void stop_polling();
  ~Registry();

 private:
  void check_model_control() const;
  bool load_folder(const std::string& name);  // load() past its checks, true when every version is ready; load_mu_ held
  void unload_served(const std::string& name);  // unload() past its checks; load_mu_ held

  std::string dir_;
  ModelControl control_;
  mutable std::mutex mu_;
  std::mutex load_mu_;
  std::map<std::string, std::map<long, ModelPtr>> by_name_;
  struct Polled {
    std::string state;  // the folder's files as the last poll saw them
    int failures = 0;   // loads of that state in a row that left a version not ready
    std::chrono::steady_clock::time_point retry_at;
  };
  std::map<std::string, Polled> polled_;  // by model folder
  std::mutex poller_mu_;
  std::condition_variable poller_cv_;
  bool poller_stop_ = false;
  std::thread poller_;
};


}  // namespace pt2serve
