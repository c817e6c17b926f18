// pt2serve: the models of a repository behind the Open Inference Protocol (KServe v2) over HTTP/REST
// (http_service.cpp) and gRPC (grpc_service.cpp). main: the flags, the start and the stop. docs/serving.md.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <pthread.h>
#include <sys/resource.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <pt2rt/pt2rt.h>

#include "grpc_service.h"
#include "http_service.h"
#include "log.h"
#include "repository.h"
#include "protocol.h"

namespace pt2serve {
namespace {

// Each connection is a file descriptor: the soft limit (often 1024) raised to the hard one, so that many idle or
// slow clients do not keep new ones out.
void raise_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// A PEM file's contents; one that cannot be read, or is empty, throws (an empty one would mean "no TLS" to gRPC).
std::string read_pem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::string text(std::istreambuf_iterator<char>(in), {});
  if (text.empty()) throw std::runtime_error(path + " is empty: expected PEM");
  return text;
}
}  // namespace
}  // namespace pt2serve

int main(int argc, char** argv) {
  using namespace pt2serve;
  CLI::App app{"pt2serve: the models of a repository over the Open Inference Protocol (KServe v2)"};
  std::string repository, host = "127.0.0.1";
  int http_port = 8000, grpc_port = 8001, threads = 64;
  double max_request_mb = 64, shutdown_seconds = 30, poll_seconds = 15;
  std::string model_control = "none";
  app.add_option("--model-repository", repository, "DIR/<model>/<version>/model.pt2 (+ DIR/<model>/config.json)")
      ->required();
  app.add_option("--http-port", http_port, "HTTP port (0: pick one and log it)")->capture_default_str();
  app.add_option("--grpc-port", grpc_port, "gRPC port (0: pick one and log it; -1: no gRPC)")->capture_default_str();
  app.add_option("--host", host, "address to listen on")->capture_default_str();
  // connections cost no thread (one event loop holds them); a request runs on a worker until it is answered,
  // waiting for its batch there, so the workers bound the HTTP requests in the models at once
  app.add_option("--http-threads", threads, "HTTP worker threads: the HTTP requests handled at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-request-mb", max_request_mb, "largest request body, once decoded")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 2047.0));  // gRPC's message limit is an int
  double max_buffered_mb = 0;
  app.add_option("--max-buffered-mb", max_buffered_mb,
                 "request bytes the HTTP front holds at once (requests being received, bodies waiting for a worker); "
                 "past it the connection that has sent the most is closed (default: 8 x --max-request-mb, at least 512)")
      ->check(CLI::Range(0.001, 1048576.0));
  app.add_option("--shutdown-seconds", shutdown_seconds, "on SIGTERM, how long in-flight requests may take")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--model-control-mode", model_control,
                 "none: the models loaded at start serve until exit; explicit: POST /v2/repository/models/{m}/load "
                 "and /unload (re)load and unload them while serving; poll: follow the repository folder (new, "
                 "changed and removed models and versions) every --repository-poll-secs")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "explicit", "poll"}));
  app.add_option("--repository-poll-secs", poll_seconds, "how often --model-control-mode poll reads the repository")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  std::string tls_cert, tls_key, tls_client_ca;
  auto* cert_opt = app.add_option("--tls-cert", tls_cert, "PEM certificate (chain): HTTPS and gRPC over TLS")
                       ->check(CLI::ExistingFile);
  auto* key_opt = app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert")->check(CLI::ExistingFile);
  cert_opt->needs(key_opt);
  key_opt->needs(cert_opt);
  app.add_option("--tls-client-ca", tls_client_ca,
                 "PEM CA certificates: clients must present a certificate one of them signed (mutual TLS)")
      ->check(CLI::ExistingFile)
      ->needs(cert_opt);
  app.set_version_flag("--version", std::string("pt2serve ") + PT2SERVE_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // --help and --version: 0
    return code == 0 ? 0 : 2;
  }
  if (max_buffered_mb == 0) {
    max_buffered_mb = std::max(512.0, 8 * max_request_mb);
  } else if (max_buffered_mb < max_request_mb) {
    std::cerr << "--max-buffered-mb: " << max_buffered_mb << " is below --max-request-mb " << max_request_mb
              << ": expected at least one request's worth\n";
    return 2;
  }
  // a write to a connection that is gone (its client left, or the HTTP front closed it) fails with EPIPE: by
  // default SIGPIPE would end the process
  std::signal(SIGPIPE, SIG_IGN);
  // SIGTERM and SIGINT are taken by one thread (sigwait): blocked here, before any other thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // TLS first: a bad certificate stops the start before any model loads
  TlsPem tls;
  if (!tls_cert.empty()) {
    try {
      tls = {read_pem(tls_cert), read_pem(tls_key), tls_client_ca.empty() ? "" : read_pem(tls_client_ca)};
      HttpService::check_tls(tls_cert, tls_key, tls_client_ca);
    } catch (const std::exception& e) {
      log("error", e.what(), {{"tls_cert", tls_cert}, {"tls_key", tls_key}, {"tls_client_ca", tls_client_ca}});
      return 2;
    }
  }
  const ModelControl control = model_control == "explicit" ? ModelControl::Explicit
                               : model_control == "poll"   ? ModelControl::Poll
                                                           : ModelControl::None;
  raise_file_limit();
  std::vector<ModelPtr> models;
  try {
    if (control != ModelControl::Poll) {
      models = load_repository(repository);
    } else if (!std::filesystem::is_directory(repository)) {
      throw std::runtime_error("model repository " + repository + " is not a directory");
    }
  } catch (const std::exception& e) {
    log("error", e.what());
    return 2;
  }
  const size_t max_request_bytes = static_cast<size_t>(max_request_mb * 1024 * 1024);
  Registry registry(repository, std::move(models), control);
  if (control == ModelControl::Poll) registry.poll();  // the first poll loads every model
  HttpOptions http_options;
  http_options.host = host;
  http_options.port = http_port;
  http_options.workers = static_cast<size_t>(threads);
  http_options.max_request_bytes = max_request_bytes;
  http_options.max_buffered_bytes = static_cast<size_t>(max_buffered_mb * 1024 * 1024);
  http_options.tls_cert = tls_cert;
  http_options.tls_key = tls_key;
  http_options.tls_client_ca = tls_client_ca;
  std::unique_ptr<HttpService> http;
  try {
    http = std::make_unique<HttpService>(registry, http_options);
  } catch (const std::exception& e) {
    log("error", e.what(), {{"host", host}, {"port", std::to_string(http_port)}});
    return 2;
  }
  const int port = http->port();
  std::unique_ptr<GrpcServer> grpc_server;
  if (grpc_port >= 0) {
    grpc_server = std::make_unique<GrpcServer>(registry, host, grpc_port, max_request_bytes, tls);
    if (grpc_server->port() <= 0) {
      log("error", "cannot listen (gRPC)", {{"host", host}, {"port", std::to_string(grpc_port)}});
      return 2;
    }
  }
  std::mutex poll_mu;
  std::condition_variable poll_cv;
  bool poll_stop = false;
  std::thread poller;
  if (control == ModelControl::Poll) {
    poller = std::thread([&] {
      std::unique_lock<std::mutex> lock(poll_mu);
      while (!poll_cv.wait_for(lock, std::chrono::duration<double>(poll_seconds), [&] { return poll_stop; })) {
        lock.unlock();
        registry.poll();
        lock.lock();
      }
    });
  }
  log("info", "listening", {{"host", host}, {"http_port", std::to_string(port)},
                            {"grpc_port", std::to_string(grpc_server ? grpc_server->port() : -1)},
                            {"tls", tls_cert.empty() ? "off" : tls_client_ca.empty() ? "on" : "mutual"}});
  std::atomic<bool> listening_ended{false};
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (listening_ended) return;
    log("info", "stopping: no new connections, finishing the requests in flight",
        {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}, {"bound_seconds", std::to_string(shutdown_seconds)}});
    // past the bound, exit anyway (still 0: the stop was asked for)
    std::thread([shutdown_seconds] {
      std::this_thread::sleep_for(std::chrono::duration<double>(shutdown_seconds));
      log("warning", "requests still in flight after the shutdown bound; exiting");
      std::_Exit(0);
    }).detach();
    http->stop();  // stops accepting; the workers finish the requests they hold
    for (const auto& model : registry.models()) model->stop_waiting_for_rows();  // queued batches run now
    if (grpc_server) grpc_server->shutdown(shutdown_seconds);
  });
  const bool ok = http->run();
  listening_ended = true;
  if (poller.joinable()) {  // a poll in progress finishes its load first
    {
      std::lock_guard<std::mutex> lock(poll_mu);
      poll_stop = true;
    }
    poll_cv.notify_all();
    poller.join();
  }
  pthread_kill(stopper.native_handle(), SIGTERM);  // a stop that came from elsewhere: wake the stopper
  stopper.join();
  if (grpc_server) {
    grpc_server->shutdown(0);  // a no-op after the stopper's; else the HTTP side ended on its own
    grpc_server->wait();
  }
  if (!ok) {
    log("error", "the HTTP server stopped with an error");
    return 1;
  }
  log("info", "stopped");
  return 0;
}
