// What the HTTP endpoint answers, independent of the server library (metrics/http_server.h
// runs it): /metrics (Prometheus text format from the latest snapshot, or the protobuf format
// with native histograms for a scraper that asks for it: metrics/proto_format.h), /healthz (200 once
// probes are attached, 503 before) and, only with --web.enable-debug, /debug/snapshot (the
// snapshot as JSON with the pids, comms and cgroups of every workload and preemptor, for
// humans and tests). Handlers only read the published snapshot (an atomic shared_ptr); they
// never wait for the tracer.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "metrics/exposition.h"
#include "trace/snapshot.h"

namespace stallwatch::metrics {

class SnapshotBoard {
 public:
  void publish(std::shared_ptr<const Snapshot> s) { std::atomic_store(&current_, std::move(s)); }
  std::shared_ptr<const Snapshot> current() const { return std::atomic_load(&current_); }

 private:
  std::shared_ptr<const Snapshot> current_ = std::make_shared<Snapshot>();
};

struct HttpRequest {
  std::string_view method;
  std::string_view path;
  bool accepts_gzip = false;
  std::string_view accept;  // the Accept header; "" when absent
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::shared_ptr<const std::string> body;
  bool gzip = false;  // body is gzip'd (Content-Encoding)
};

HttpResponse text_response(int status, std::string body);

class Routes {
 public:
  // `classic_histograms`: the protobuf exposition carries classic buckets beside the native.
  // `telemetry_path`: where the metrics are served (--web.telemetry-path).
  Routes(const SnapshotBoard& board, BuildInfo build, bool enable_debug,
         bool classic_histograms = true, ExpositionOptions exposition = {},
         std::string telemetry_path = "/metrics");
  ~Routes();
  HttpResponse handle(const HttpRequest& request) const;

 private:
  class ExpositionCache;
  const SnapshotBoard& board_;
  BuildInfo build_;
  bool enable_debug_;
  bool classic_histograms_;
  ExpositionOptions exposition_;
  std::string telemetry_path_;
  std::unique_ptr<ExpositionCache> cache_;
};

std::string snapshot_json(const Snapshot& snap);

}  // namespace stallwatch::metrics
