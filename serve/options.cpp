#include "options.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <iterator>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include "log.h"

namespace pt2serve {
namespace {

// A PEM file's contents; one that cannot be read, or is empty, throws (an empty one would mean "no TLS" to gRPC).
std::string read_pem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::string text(std::istreambuf_iterator<char>(in), {});
  if (text.empty()) throw std::runtime_error(path + " is empty: expected PEM");
  return text;
}

}  // namespace

std::optional<int> parse_serve_options(int argc, char** argv, ServeOptions& o) {
  CLI::App app{"pt2serve: the models of a repository over the Open Inference Protocol (KServe v2)"};
  int http_port = 8000, grpc_port = 8001, threads = 64;
  double max_request_mb = 64, max_buffered_mb = 0;
  std::string host = "127.0.0.1", model_control = "none", tls_cert, tls_key, tls_client_ca;
  app.add_option("--model-repository", o.repository, "DIR/<model>/<version>/model.pt2 (+ DIR/<model>/config.json)")
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
  app.add_option("--max-buffered-mb", max_buffered_mb,
                 "request bytes the HTTP front holds at once (requests being received, bodies waiting for a worker); "
                 "past it the connection that has sent the most is closed (default: 8 x --max-request-mb, at least 512)")
      ->check(CLI::Range(0.001, 1048576.0));
  app.add_option("--shutdown-seconds", o.shutdown_seconds, "on SIGTERM, how long in-flight requests may take")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--model-control-mode", model_control,
                 "none: the models loaded at start serve until exit; explicit: POST /v2/repository/models/{m}/load "
                 "and /unload (re)load and unload them while serving; poll: follow the repository folder (new, "
                 "changed and removed models and versions) every --repository-poll-secs")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "explicit", "poll"}));
  app.add_option("--repository-poll-secs", o.poll_seconds, "how often --model-control-mode poll reads the repository")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
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
  o.control = model_control == "explicit" ? ModelControl::Explicit
              : model_control == "poll"   ? ModelControl::Poll
                                          : ModelControl::None;
  ListenOptions listen;
  listen.host = host;
  listen.max_request_bytes = static_cast<size_t>(max_request_mb * 1024 * 1024);
  if (!tls_cert.empty()) {
    try {
      listen.tls = {read_pem(tls_cert), read_pem(tls_key), tls_client_ca.empty() ? "" : read_pem(tls_client_ca)};
    } catch (const std::exception& e) {
      log("error", e.what(), {{"tls_cert", tls_cert}, {"tls_key", tls_key}, {"tls_client_ca", tls_client_ca}});
      return 2;
    }
    o.tls_files = tls_cert + ", " + tls_key + (tls_client_ca.empty() ? "" : ", " + tls_client_ca);
  }
  static_cast<ListenOptions&>(o.http) = listen;
  o.http.port = http_port;
  o.http.workers = static_cast<size_t>(threads);
  o.http.max_buffered_bytes = static_cast<size_t>(max_buffered_mb * 1024 * 1024);
  o.grpc = listen;
  o.grpc.port = grpc_port;
  o.grpc_on = grpc_port >= 0;
  return std::nullopt;
}

}  // namespace pt2serve
