#include "metrics.h"

namespace pt2serve {

std::string prometheus_label(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

std::string prometheus_text(const std::vector<ModelPtr>& models) {
  std::string s;
  const auto labels = [](const Model& m) {
    return "model=\"" + prometheus_label(m.name()) + "\",version=\"" + prometheus_label(m.version()) + "\"";
  };
  const auto family = [&](const char* name, const char* type, const char* help, auto value) {
    s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const auto& m : models) s += std::string(name) + "{" + labels(*m) + "} " + value(*m) + "\n";
  };
  family("pt2serve_model_ready", "gauge", "1 when the model version is loaded", [](const Model& m) {
    return std::string(m.ready() ? "1" : "0");
  });
  family("pt2serve_requests_total", "counter", "inference requests", [](const Model& m) {
    return std::to_string(m.stats().requests.load());
  });
  family("pt2serve_request_failures_total", "counter", "inference requests that failed", [](const Model& m) {
    return std::to_string(m.stats().failures.load());
  });
  family("pt2serve_queue_seconds_total", "counter", "time requests waited for a batch", [](const Model& m) {
    return std::to_string(m.stats().queue_ns.load() / 1e9);
  });
  family("pt2serve_compute_seconds_total", "counter", "time in the model", [](const Model& m) {
    return std::to_string(m.stats().compute_ns.load() / 1e9);
  });
  family("pt2serve_batches_total", "counter", "model executions", [](const Model& m) {
    return std::to_string(m.stats().batches.load());
  });
  family("pt2serve_intra_op_threads", "gauge", "threads each run of the model uses", [](const Model& m) {
    return std::to_string(m.intra_op_threads());
  });
  s += "# HELP pt2serve_batch_size rows per model execution\n# TYPE pt2serve_batch_size histogram\n";
  for (const auto& m : models) {
    const std::string l = labels(*m);
    uint64_t cumulative = 0;
    for (int b = 0; b < Stats::kBuckets; ++b) {
      cumulative += m->stats().batch_size_counts[b].load();
      const std::string le = b == Stats::kBuckets - 1 ? "+Inf" : std::to_string(1 << b);
      s += "pt2serve_batch_size_bucket{" + l + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
    }
    s += "pt2serve_batch_size_sum{" + l + "} " + std::to_string(m->stats().batch_rows.load()) + "\n";
    s += "pt2serve_batch_size_count{" + l + "} " + std::to_string(m->stats().batches.load()) + "\n";
  }
  return s;
}

}  // namespace pt2serve
