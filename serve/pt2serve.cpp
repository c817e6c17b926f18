// pt2serve: the models of a repository behind the Open Inference Protocol (KServe v2) over HTTP/REST
// (http_server.cpp + http_api.cpp) and gRPC (grpc_service.cpp). main: the start and the stop. docs/serving.md.
#include <csignal>
#include <pthread.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

#include <pt2rt/pt2rt.h>

#include "allocator.h"
#include "grpc_service.h"
#include "http_api.h"
#include "http_server.h"
#include "log.h"
#include "options.h"
#include "repository.h"
#include "tls.h"

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

}  // namespace

int main(int argc, char** argv) {
  using namespace pt2serve;
  ServeOptions o;
  if (const auto exit_status = parse_serve_options(argc, argv, o)) return *exit_status;
  // a write to a connection that is gone fails with EPIPE: by default SIGPIPE would end the process
  std::signal(SIGPIPE, SIG_IGN);
  // SIGTERM and SIGINT are taken by one thread (sigwait): blocked here, before any other thread starts
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  pt2rt::keep_freed_memory();  // a serving process, before its threads start (pt2rt.h; glibc's malloc: allocator.cpp)
  if (!o.http.tls.cert.empty()) {  // a bad certificate stops the start before any model loads
    try {
      check_tls(o.http.tls);
    } catch (const std::exception& e) {
      log("error", e.what(), {{"tls_files", o.tls_files}});
      return 2;
    }
  }
  raise_file_limit();
  std::unique_ptr<Registry> registry;
  try {
    registry = std::make_unique<Registry>(o.repository, o.control);
  } catch (const std::exception& e) {
    log("error", e.what());
    return 2;
  }
  HttpApi api(*registry, o.http.max_request_bytes);
  std::unique_ptr<HttpServer> http;
  try {
    http = std::make_unique<HttpServer>(api, o.http);
  } catch (const std::exception& e) {
    log("error", e.what(), {{"host", o.http.host}, {"port", std::to_string(o.http.port)}});
    return 2;
  }
  std::unique_ptr<GrpcServer> grpc;
  if (o.grpc_on) {
    grpc = std::make_unique<GrpcServer>(*registry, o.grpc);
    if (grpc->port() <= 0) {
      log("error", "cannot listen (gRPC)", {{"host", o.grpc.host}, {"port", std::to_string(o.grpc.port)}});
      return 2;
    }
  }
  if (o.control == ModelControl::Poll) registry->poll_every(o.poll_seconds);
  log("info", "listening", {{"host", o.http.host}, {"http_port", std::to_string(http->port())},
                            {"grpc_port", std::to_string(grpc ? grpc->port() : -1)},
                            {"tls", o.http.tls.cert.empty() ? "off" : o.http.tls.client_ca.empty() ? "on" : "mutual"},
                            {"allocator", pt2rt::cli::allocator_name()}});
  std::atomic<bool> listening_ended{false};
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (listening_ended) return;
    log("info", "stopping: no new connections, finishing the requests in flight",
        {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}, {"bound_seconds", std::to_string(o.shutdown_seconds)}});
    std::thread([seconds = o.shutdown_seconds] {  // past the bound, exit anyway (still 0: the stop was asked for)
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
      log("warning", "requests still in flight after the shutdown bound; exiting");
      std::_Exit(0);
    }).detach();
    http->stop();  // stops accepting; the workers finish the requests they hold
    for (const auto& model : registry->models()) model->stop_waiting_for_rows();  // queued batches run now
    if (grpc) grpc->shutdown(o.shutdown_seconds);
  });
  const bool ok = http->run();
  listening_ended = true;
  registry->stop_polling();  // a poll in progress finishes its load first
  pthread_kill(stopper.native_handle(), SIGTERM);  // a stop that came from elsewhere: wake the stopper
  stopper.join();
  if (grpc) {
    grpc->shutdown(0);  // a no-op after the stopper's; else the HTTP side ended on its own
    grpc->wait();
  }
  if (!ok) {
    log("error", "the HTTP server stopped with an error");
    return 1;
  }
  log("info", "stopped");
  return 0;
}
