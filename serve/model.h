// pt2serve's models: the repository (DIR/<model>/<version>/model.pt2, DIR/<model>/config.json), each loaded
// version's runtime, its dynamic batcher and its counters. Transport-free: http.cpp speaks the protocol.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <pt2rt/pt2rt.h>

namespace pt2serve {

// A request the server refuses before running it (HTTP 400): what was wrong and what was expected.
struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A request the server cannot take now (HTTP 503): the queue is full, or the server is stopping.
struct Unavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A request body past the server's limit as it arrives (HTTP 413).
struct TooLarge : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The ranges of config.json's integers.
constexpr int64_t kMaxBatchSize = int64_t{1} << 20;
constexpr int64_t kMaxInstances = 256;            // each a runner and a thread
constexpr int64_t kMaxQueue = int64_t{1} << 20;   // each waiting request holds its inputs
constexpr int64_t kMaxQueueDelayUs = 60'000'000;  // a minute

struct ModelConfig {
  int64_t max_batch_size = 0;            // 0: the package's batch range decides
  bool dynamic_batching = true;          // only where every input and output has the same dynamic dim 0
  int64_t max_queue_delay_us = 500;
  std::vector<int64_t> preferred_batch_size;
  int instance_count = 1;                // runners
  std::vector<std::string> ops_libraries;
  size_t max_queue = 256;                // requests waiting, beyond which a request is Unavailable
};

// Reads DIR/<model>/config.json (absent: defaults); a malformed one throws std::runtime_error naming the key.
ModelConfig read_config(const std::string& path);

struct Stats {
  std::atomic<uint64_t> requests{0}, failures{0}, batches{0}, batch_rows{0};
  std::atomic<uint64_t> queue_ns{0}, compute_ns{0};
  static constexpr int kBuckets = 8;  // batch rows <= 1, 2, 4, 8, 16, 32, 64, more
  std::atomic<uint64_t> batch_size_counts[kBuckets] = {};
};

class Model {
 public:
  // Loads the package; a failure (or a config_error) leaves the model not ready, with its error.
  Model(std::string name, std::string version, std::string path, ModelConfig config, std::string config_error = {});
  ~Model();

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const std::string& path() const { return path_; }
  bool ready() const { return runtime_.has_value(); }
  const std::string& load_error() const { return load_error_; }
  const pt2rt::Spec& spec() const { return runtime_->spec(); }
  std::string variant() const { return runtime_ ? runtime_->variant().isa : ""; }
  bool batching() const { return batch_max_ > 1; }
  int64_t max_batch_size() const { return batch_max_; }
  const ModelConfig& config() const { return config_; }
  Stats& stats() { return stats_; }

  // Runs one request (inputs in the spec's order, owned). Batched with others when the model batches.
  // Throws BadRequest (pt2rt Input/Usage errors), Unavailable, or pt2rt::Error for failures inside the model.
  std::vector<pt2rt::Tensor> infer(std::vector<pt2rt::Tensor> inputs);
  // Stops taking requests and finishes the queued ones.
  void drain();

 private:
  struct Pending {
    std::vector<pt2rt::Tensor> inputs;
    int64_t rows = 0;
    std::chrono::steady_clock::time_point queued;
    std::promise<std::vector<pt2rt::Tensor>> result;
  };
  void worker();
  void run_batch(std::vector<std::unique_ptr<Pending>>& batch);
  std::vector<pt2rt::Tensor> run_timed(const std::vector<pt2rt::TensorView>& views, int64_t rows);

  std::string name_, version_, path_;
  ModelConfig config_;
  std::optional<pt2rt::Runtime> runtime_;
  std::string load_error_;
  int64_t batch_max_ = 0;
  Stats stats_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Pending>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

// A model or version that does not exist (HTTP 404, gRPC NOT_FOUND).
struct NotFound : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using ModelPtr = std::shared_ptr<Model>;

// The loaded repository, looked up by name and version (the highest version when none is named). Lookups hand out
// shared pointers: a request keeps the model it found until it is done, so load() and unload() can replace or
// remove a model while requests run on it (the old one is freed, and its queue finished, by the last of them).
// pt2serve --model-control-mode: none (the models loaded at start serve until exit), explicit (load() and unload()
// through the repository extension), poll (poll() follows the repository folder; load() and unload() refused).
enum class ModelControl { None, Explicit, Poll };

class Registry {
 public:
  // load() and unload() run in explicit mode only; otherwise they throw BadRequest saying why.
  Registry(std::string dir, std::vector<ModelPtr> models, ModelControl control = ModelControl::None);
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
    std::string name, version, state, reason;  // state: READY or UNAVAILABLE (reason: its load error)
  };
  std::vector<IndexEntry> index(bool ready_only) const;
  // Poll mode: loads each model folder that is new or changed since the last poll (config.json, a version's
  // model.pt2 added, removed, or of another size or modification time) as load() does, and unloads the models
  // whose folder is gone. Errors are logged, never thrown; a repository that cannot be read changes nothing.
  void poll();

 private:
  void check_model_control() const;
  void load_folder(const std::string& name);  // load() past its checks; load_mu_ held
  void unload_served(const std::string& name);  // unload() past its checks; load_mu_ held

  std::string dir_;
  ModelControl control_;
  mutable std::mutex mu_;
  std::mutex load_mu_;
  std::map<std::string, std::map<long, ModelPtr>> by_name_;
  std::map<std::string, std::string> polled_;  // model folder -> its files as the last poll saw them
};

// The protocol's datatype names ("FP32", ...) and sizes.
const char* datatype_name(pt2rt::DType d);
size_t itemsize(pt2rt::DType d);

// A request's inputs, checked against the spec as they come - the name known and given once, the datatype the
// model's, the shape's bytes within `max_bytes` (overflow included) - then handed over in the spec's order. Both
// transports use it; every failure is a BadRequest naming the input.
class RequestInputs {
 public:
  struct Slot {
    size_t index = 0;
    pt2rt::DType dtype = pt2rt::DType::Float32;
    std::vector<int64_t> shape;
    size_t count = 0;  // elements
    size_t bytes = 0;
  };
  RequestInputs(const pt2rt::Spec& spec, size_t max_bytes);
  Slot check(const std::string& name, const std::string& datatype, const std::vector<int64_t>& shape);
  // `data` holds slot.bytes bytes.
  void set(const Slot& slot, const void* data);
  std::vector<pt2rt::Tensor> take();

 private:
  const pt2rt::Spec& spec_;
  size_t max_bytes_;
  std::vector<std::optional<pt2rt::Tensor>> tensors_;
};

// The index of output `name` in the spec; BadRequest when it has none of that name.
size_t output_index(const pt2rt::Spec& spec, const std::string& name);

// Every <model>/<version>/model.pt2 under `dir`, loaded (a model that fails to load is kept, not ready, with its
// error). Ordered by name, then version as a number. Folders whose names start with '.' are not models.
std::vector<ModelPtr> load_repository(const std::string& dir);

}  // namespace pt2serve
