#include "model.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <future>

#include "protocol.h"

namespace pt2serve {

namespace {

// The batch dim shared by every input and output as their dim 0, or none.
std::optional<pt2rt::DynamicDim> batch_dim(const pt2rt::Spec& spec) {
  std::optional<pt2rt::DynamicDim> found;
  const auto check = [&](const std::vector<pt2rt::TensorSpec>& tensors) {
    for (const auto& t : tensors) {
      const auto d = std::find_if(t.dynamic_dims.begin(), t.dynamic_dims.end(),
                                  [](const pt2rt::DynamicDim& x) { return x.dim == 0; });
      if (d == t.dynamic_dims.end() || !d->of.empty()) return false;
      if (found && found->name != d->name) return false;
      found = *d;
    }
    return true;
  };
  if (spec.inputs.empty() || !check(spec.inputs) || !check(spec.outputs)) return std::nullopt;
  return found;
}

int bucket_of(int64_t rows) {
  int b = 0;
  for (int64_t limit = 1; b < Stats::kBuckets - 1 && rows > limit; limit *= 2) ++b;
  return b;
}

uint64_t since_ns(std::chrono::steady_clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t).count());
}

}  // namespace

const char* state_name(ModelState s) { return s == ModelState::Ready ? "READY" : "UNAVAILABLE"; }

Model::Model(std::string name, std::string version, std::string path, ModelConfig config, std::string config_error)
    : name_(std::move(name)), version_(std::move(version)), path_(std::move(path)), config_(std::move(config)) {
  if (!config_error.empty()) {
    load_error_ = std::move(config_error);
    return;
  }
  pt2rt::Options options;
  options.num_runners = config_.instance_count;
  options.intra_op_threads = config_.intra_op_threads;
  options.ops_libraries = config_.ops_libraries;
  options.keep_package_open = false;  // no file held per loaded version; golden cases are not read while serving
  if (const char* isa = std::getenv("PT2RT_CPU_ISA")) options.cpu_isa = isa;  // as pt2run: the library reads no environment
  try {
    runtime_.emplace(pt2rt::Runtime::load(path_, options));
  } catch (const std::exception& e) {
    load_error_ = e.what();
    return;
  }
  intra_op_threads_ = config_.intra_op_threads > 0 ? config_.intra_op_threads : pt2rt::num_threads();
  const auto dim = batch_dim(runtime_->spec());
  if (config_.dynamic_batching && dim && config_.max_batch_size != 1) {
    const int64_t package_max = dim->max.value_or(int64_t{1} << 20);
    batch_max_ = config_.max_batch_size > 0 ? std::min(config_.max_batch_size, package_max) : package_max;
  }
  if (batching()) {
    // a request joins others to reach the batch dim's range: alone it may have fewer rows (run() checks the batch)
    request_spec_ = runtime_->spec();
    for (auto& input : request_spec_.inputs)
      for (auto& d : input.dynamic_dims)
        if (d.dim == 0) d.min = std::min<int64_t>(d.min, 1);
    for (int i = 0; i < config_.instance_count; ++i) workers_.emplace_back([this] { worker(); });
  }
}

Model::~Model() { drain(); }

void Model::drain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
}

void Model::stop_waiting_for_rows() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    no_waiting_ = true;
  }
  cv_.notify_all();
}

std::vector<pt2rt::Tensor> Model::run_timed(const std::vector<pt2rt::TensorView>& views, int64_t rows) {
  const auto start = std::chrono::steady_clock::now();
  auto out = runtime_->run(views);
  stats_.compute_ns += since_ns(start);
  stats_.batches++;
  stats_.batch_rows += static_cast<uint64_t>(rows);
  stats_.batch_size_counts[bucket_of(rows)]++;
  for (auto& t : out) t = t.to_cpu();
  return out;
}

bool Model::joinable(const std::vector<pt2rt::Tensor>& inputs) const {
  const int64_t rows = !inputs.empty() && !inputs[0].shape().empty() ? inputs[0].shape()[0] : 0;
  bool ok = batching() && rows >= 1 && rows <= batch_max_;
  for (const auto& t : inputs) ok = ok && !t.shape().empty() && t.shape()[0] == rows;
  return ok;
}

std::vector<pt2rt::Tensor> Model::infer(std::vector<pt2rt::Tensor> inputs) {
  stats_.requests++;
  try {
    if (!ready()) throw Unavailable("model " + name_ + " version " + version_ + " is not loaded: " + load_error_);
    if (!joinable(inputs)) return run_alone(inputs);
    std::promise<std::vector<pt2rt::Tensor>> result;
    auto future = result.get_future();
    enqueue(inputs, [&result](std::vector<pt2rt::Tensor>* outputs, std::exception_ptr failure) {
      if (outputs) {
        result.set_value(std::move(*outputs));
      } else {
        result.set_exception(failure);
      }
    });
    return future.get();
  } catch (...) {
    stats_.failures++;
    throw;
  }
}

// A request that runs alone, on the caller's thread (the runtime validates it).
std::vector<pt2rt::Tensor> Model::run_alone(const std::vector<pt2rt::Tensor>& inputs) {
  const int64_t rows = !inputs.empty() && !inputs[0].shape().empty() ? inputs[0].shape()[0] : 0;
  std::vector<pt2rt::TensorView> views;
  for (const auto& t : inputs) views.push_back(t.view());
  return run_timed(views, rows);
}

void Model::note_http_request_time(uint64_t ns) {
  const uint64_t before = stats_.recent_request_ns.load(std::memory_order_relaxed);
  stats_.recent_request_ns.store(before == 0 ? ns : (before * 3 + ns) / 4,
                                 std::memory_order_relaxed);  // races lose a sample
}

bool Model::submit(std::vector<pt2rt::Tensor>& inputs, Completion done) {
  if (ready() && !joinable(inputs)) return false;
  stats_.requests++;
  try {
    if (!ready()) throw Unavailable("model " + name_ + " version " + version_ + " is not loaded: " + load_error_);
    // a failed batch is counted by its completion: one failure per request
    return enqueue(inputs, [this, done = std::move(done)](std::vector<pt2rt::Tensor>* outputs, std::exception_ptr failure) {
      if (!outputs) stats_.failures++;
      done(outputs, failure);
    });
  } catch (...) {
    stats_.failures++;
    throw;
  }
}

void Model::count_unreadable_request() {
  stats_.requests++;
  stats_.failures++;
}

void Model::count_unanswered_request() { stats_.failures++; }

bool Model::enqueue(std::vector<pt2rt::Tensor>& inputs, Completion done) {
  {  // alone first: one request's bad input fails that request, not the batch it would join
    std::vector<pt2rt::TensorView> views;
    for (const auto& t : inputs) views.push_back(t.view());
    pt2rt::check_inputs(request_spec_, views);
  }
  auto pending = std::make_unique<Pending>();
  pending->rows = inputs[0].shape()[0];
  pending->queued = std::chrono::steady_clock::now();
  pending->done = std::move(done);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw Unavailable("the server is shutting down");
    if (queue_.size() >= config_.max_queue) {
      throw Unavailable("model " + name_ + ": the queue is full (" + std::to_string(config_.max_queue) +
                        " requests waiting; max_queue in config.json)");
    }
    pending->inputs = std::move(inputs);
    queue_.push_back(std::move(pending));
  }
  cv_.notify_one();
  return true;
}

namespace {

bool same_item_shapes(const std::vector<pt2rt::Tensor>& a, const std::vector<pt2rt::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].dtype() != b[i].dtype() || a[i].shape().size() != b[i].shape().size() ||
        !std::equal(a[i].shape().begin() + 1, a[i].shape().end(), b[i].shape().begin() + 1)) {
      return false;
    }
  }
  return true;
}

}  // namespace

void Model::worker() {
  const auto delay = std::chrono::microseconds(config_.max_queue_delay_us);
  const int64_t preferred =
      config_.preferred_batch_size.empty()
          ? batch_max_
          : std::min(batch_max_, *std::max_element(config_.preferred_batch_size.begin(), config_.preferred_batch_size.end()));
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left
    std::vector<std::unique_ptr<Pending>> batch;
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
    int64_t rows = batch[0]->rows;
    const auto deadline = batch[0]->queued + delay;
    // take compatible requests as they come, until the batch is full, preferred, or the first has waited enough
    while (rows < preferred) {
      for (auto it = queue_.begin(); it != queue_.end() && rows < preferred;) {
        if (rows + (*it)->rows <= batch_max_ && same_item_shapes((*it)->inputs, batch[0]->inputs)) {
          rows += (*it)->rows;
          batch.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      if (rows >= preferred || stopping_ || no_waiting_ ||
          cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        break;
      }
    }
    lock.unlock();
    run_batch(batch);
    lock.lock();
  }
}

void Model::run_batch(std::vector<std::unique_ptr<Pending>>& batch) {
  for (auto& p : batch) stats_.queue_ns += since_ns(p->queued);
  std::vector<std::vector<pt2rt::Tensor>> results;  // every caller's, before any is told
  try {
    int64_t rows = 0;
    for (auto& p : batch) rows += p->rows;
    std::vector<std::vector<uint8_t>> joined(batch[0]->inputs.size());
    std::vector<pt2rt::TensorView> views;
    for (size_t i = 0; i < joined.size(); ++i) {
      const auto& first = batch[0]->inputs[i];
      if (batch.size() == 1) {
        views.push_back(first.view());
        continue;
      }
      const size_t row_bytes = first.nbytes() / static_cast<size_t>(first.shape()[0]);
      joined[i].resize(row_bytes * static_cast<size_t>(rows));
      size_t offset = 0;
      for (auto& p : batch) {
        std::memcpy(joined[i].data() + offset, p->inputs[i].data(), p->inputs[i].nbytes());
        offset += p->inputs[i].nbytes();
      }
      auto shape = first.shape();
      shape[0] = rows;
      views.push_back(pt2rt::TensorView{joined[i].data(), shape, first.dtype()});
    }
    auto outputs = run_timed(views, rows);
    if (batch.size() == 1) {
      results.push_back(std::move(outputs));
    } else {
      // each caller gets exactly its rows, in the order they were joined
      int64_t start = 0;
      for (auto& p : batch) {
        std::vector<pt2rt::Tensor> mine;
        for (const auto& out : outputs) {
          const size_t row_bytes = out.shape()[0] > 0 ? out.nbytes() / static_cast<size_t>(out.shape()[0]) : 0;
          auto shape = out.shape();
          shape[0] = p->rows;
          mine.push_back(pt2rt::Tensor::copy_of(pt2rt::TensorView{
              static_cast<const uint8_t*>(out.data()) + row_bytes * static_cast<size_t>(start), shape, out.dtype()}));
        }
        start += p->rows;
        results.push_back(std::move(mine));
      }
    }
  } catch (...) {
    for (auto& p : batch) p->done(nullptr, std::current_exception());
    return;
  }
  for (size_t i = 0; i < batch.size(); ++i) batch[i]->done(&results[i], nullptr);
}

}  // namespace pt2serve
