// A served model version: its runtime, its dynamic batcher and its counters. Transport-free; repository.h finds
// and loads them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <pt2rt/pt2rt.h>

#include "protocol.h"

namespace pt2serve {

// The ranges of config.json's integers.
constexpr int64_t kMaxBatchSize = int64_t{1} << 20;
constexpr int64_t kMaxInstances = pt2rt::kMaxRunners;  // each a runner (and, batching, a thread)
constexpr int64_t kMaxQueue = int64_t{1} << 20;   // each waiting request holds its inputs
constexpr int64_t kMaxQueueDelayUs = 60'000'000;  // a minute

struct ModelConfig {
  int64_t max_batch_size = 0;            // 0: the package's batch range decides
  bool dynamic_batching = true;          // only where every input and output has the same dynamic dim 0
  int64_t max_queue_delay_us = 500;
  std::vector<int64_t> preferred_batch_size;
  int instance_count = 1;                // runners
  int intra_op_threads = 0;              // each run's; 0: the repository's share (repository.h)
  std::vector<std::string> ops_libraries;
  size_t max_queue = 256;                // requests waiting, beyond which a request is Unavailable
};

// A model version's books, kept by Model (every transport's requests alike) and read by /metrics.
struct Stats {
  std::atomic<uint64_t> requests{0}, failures{0}, batches{0}, batch_rows{0};
  std::atomic<uint64_t> queue_ns{0}, compute_ns{0};
  // an HTTP inference's time from parse to answer, smoothed (0: none yet): the HTTP front's choice to run one
  // inline (a small model with a large answer is not quick)
  std::atomic<uint64_t> recent_request_ns{0};
  static constexpr int kBuckets = 8;  // batch rows <= 1, 2, 4, 8, 16, 32, 64, more
  std::atomic<uint64_t> batch_size_counts[kBuckets] = {};
};

// A version's state as the repository index tells it: READY, or UNAVAILABLE with the reason (its load error).
enum class ModelState { Ready, Unavailable };
const char* state_name(ModelState s);

class Model {
 public:
  // Loads the package; a failure (or a config_error) leaves the model not ready, with its error.
  Model(std::string name, std::string version, std::string path, ModelConfig config, std::string config_error = {});
  ~Model();

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const std::string& path() const { return path_; }
  ModelState state() const { return runtime_ ? ModelState::Ready : ModelState::Unavailable; }
  bool ready() const { return state() == ModelState::Ready; }
  const std::string& load_error() const { return load_error_; }  // why it is Unavailable
  const pt2rt::Spec& spec() const { return runtime_->spec(); }
  std::string variant() const { return runtime_ ? runtime_->variant().isa : ""; }
  bool batching() const { return batch_max_ > 1; }
  int64_t max_batch_size() const { return batch_max_; }
  const ModelConfig& config() const { return config_; }
  int intra_op_threads() const { return intra_op_threads_; }  // each run's, as loaded
  const Stats& stats() const { return stats_; }

  // The model keeps the books of every request a transport hands it (requests, failures, times): infer() and
  // submit() count theirs; a transport tells of the rest with the two calls below.
  // Runs one request (inputs in the spec's order, owned). Batched with others when the model batches.
  // Throws BadRequest (pt2rt Input/Usage errors), Unavailable, or pt2rt::Error for failures inside the model.
  std::vector<pt2rt::Tensor> infer(std::vector<pt2rt::Tensor> inputs);
  // A queued request's end: its outputs, or (outputs null) the failure infer() would throw. Runs on a batcher
  // thread; must not throw.
  using Completion = std::function<void(std::vector<pt2rt::Tensor>* outputs, std::exception_ptr failure)>;
  // Queues a request for the batcher and returns at once; `done` runs when its batch has run. False (the inputs
  // left as they were, nothing counted) when the request cannot join a batch - the model does not batch, or its
  // rows do not fit - and must run through infer(). Throws Unavailable as infer() does.
  bool submit(std::vector<pt2rt::Tensor>& inputs, Completion done);
  // A request for this model whose inputs could not be read from its message: a request, failed.
  void count_unreadable_request();
  // A request that ran, but whose answer could not be made: a failure.
  void count_unanswered_request();
  // The HTTP front's measure of an inference it answered, parse to answer, smoothed into recent_request_ns.
  void note_http_request_time(uint64_t ns);
  // Stops taking requests and finishes the queued ones.
  void drain();
  // The server is stopping: from now on a batch runs as soon as a worker takes it, with the rows it has (requests
  // still arriving are taken and run; none waits out the batch delay).
  void stop_waiting_for_rows();

 private:
  struct Pending {
    std::vector<pt2rt::Tensor> inputs;
    int64_t rows = 0;
    std::chrono::steady_clock::time_point queued;
    Completion done;
  };
  bool joinable(const std::vector<pt2rt::Tensor>& inputs) const;
  std::vector<pt2rt::Tensor> run_alone(const std::vector<pt2rt::Tensor>& inputs);
  bool enqueue(std::vector<pt2rt::Tensor>& inputs, Completion done);
  void worker();
  void run_batch(std::vector<std::unique_ptr<Pending>>& batch);
  std::vector<pt2rt::Tensor> run_timed(const std::vector<pt2rt::TensorView>& views, int64_t rows);

  std::string name_, version_, path_;
  ModelConfig config_;
  std::optional<pt2rt::Runtime> runtime_;
  pt2rt::Spec request_spec_;  // the spec one request of a batch is checked against: any rows in the batch dim
  std::string load_error_;
  int64_t batch_max_ = 0;
  int intra_op_threads_ = 0;
  Stats stats_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Pending>> queue_;
  bool stopping_ = false;
  bool no_waiting_ = false;  // stop_waiting_for_rows()
  std::vector<std::thread> workers_;
};

using ModelPtr = std::shared_ptr<Model>;

}  // namespace pt2serve
