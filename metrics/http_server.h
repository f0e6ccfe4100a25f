// The HTTP listener (libmicrohttpd with GnuTLS, docs/http.md says why not CivetWeb): serves
// metrics/routes.h. A few epoll threads carry every connection, so idle or slow clients cannot
// starve /metrics and /healthz the way a thread per connection is starved:
// - one client address holds at most max_connections_per_address connections (a quarter of
//   --web.max-connections by default); more are refused at accept (metrics/connection_guard.h);
// - a connection that has not sent a whole request within the header deadline (5 s; 30 s
//   between the requests of a kept-alive connection) is closed;
// - a response not delivered (acknowledged by the client) within 15 s of its request is reset,
//   so a reader that takes it a byte at a time, or never, does not hold its socket;
// - beyond --web.max-connections open connections, requests are answered 503 and closed;
//   beyond twice that, connections are refused at accept;
// - TLS and basic auth come from --web.config.file (metrics/web_config.h), re-read when it or
//   a certificate changes, so certificates rotate without a restart; a config that no longer
//   parses is logged and the last good one kept. Wrong passwords are throttled per address
//   before bcrypt runs, good ones remembered (metrics/basic_auth.h).
// The listener's threads run without capabilities (common/privileges.h); the socket is bound
// by the caller's thread first, so a privileged port still works.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"
#include "metrics/exposition.h"
#include "metrics/routes.h"

namespace stallwatch::metrics {

struct HttpOptions {
  std::string listen = "0.0.0.0:9464";
  std::string web_config_file;  // "" = plain HTTP, no authentication
  std::string telemetry_path = "/metrics";  // --web.telemetry-path
  bool enable_debug = false;    // serve /debug/snapshot
  bool classic_histograms = true;  // classic buckets beside the native ones in protobuf
  ExpositionOptions exposition;    // identity labels and bucket ladder of /metrics
  unsigned max_connections = 64;
  unsigned max_connections_per_address = 0;  // 0: max(2, max_connections / 4)
  std::chrono::milliseconds header_timeout{5000};
  std::chrono::milliseconds idle_timeout{30000};
  std::chrono::milliseconds request_timeout{15000};  // request head to response delivered
};

// What the listener turned away or cut since it started (for tests and the log).
struct HttpCounters {
  std::uint64_t refused_per_address = 0;  // connections refused at accept
  std::uint64_t over_cap = 0;             // requests answered 503 (--web.max-connections)
  std::uint64_t cut_idle = 0;             // closed at the header or idle deadline
  std::uint64_t cut_request = 0;          // reset at the request deadline
  std::uint64_t evicted = 0;              // cut to let a newcomer in under the cap
  std::uint64_t auth_bcrypts = 0;         // login attempts that ran bcrypt
  std::uint64_t auth_denied = 0;          // answered 401 after bcrypt
  std::uint64_t auth_throttled = 0;       // answered 429 without bcrypt
};

class HttpServer {
 public:
  // Binds now and loads the web config; the error names the address in use, or the config
  // file and what is wrong in it.
  static Result<std::unique_ptr<HttpServer>> start(const HttpOptions& options,
                                                   const SnapshotBoard& board, BuildInfo build);
  // Plain HTTP on `listen`, no debug endpoint (demo, benchmarks).
  static Result<std::unique_ptr<HttpServer>> start(const std::string& listen,
                                                   const SnapshotBoard& board, BuildInfo build);
  ~HttpServer();

  // The port bound (useful with port 0).
  int port() const;
  HttpCounters counters() const;

  struct Impl;

 private:
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stallwatch::metrics
