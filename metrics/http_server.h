// The HTTP endpoint (CivetWeb): /metrics (Prometheus text format from the latest snapshot),
// /healthz (200 once probes are attached, 503 before), /debug/snapshot (the snapshot as JSON,
// with per-process calls and preemptors, for humans and tests). Handlers run on CivetWeb's
// threads and only read the published snapshot (an atomic shared_ptr); they never wait for the
// tracer.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/result.h"
#include "trace/snapshot.h"
#include "metrics/exposition.h"

class CivetServer;

namespace stallwatch::metrics {

class SnapshotBoard {
 public:
  void publish(std::shared_ptr<const Snapshot> s) { std::atomic_store(&current_, std::move(s)); }
  std::shared_ptr<const Snapshot> current() const { return std::atomic_load(&current_); }

 private:
  std::shared_ptr<const Snapshot> current_ = std::make_shared<Snapshot>();
};

class HttpServer {
 public:
  // Binds now; the error says when the address is in use or invalid.
  static Result<std::unique_ptr<HttpServer>> start(const std::string& listen,
                                                   const SnapshotBoard& board, BuildInfo build);
  ~HttpServer();

 private:
  struct Handlers;
  HttpServer() = default;
  std::unique_ptr<Handlers> handlers_;
  std::unique_ptr<CivetServer> server_;
};

std::string snapshot_json(const Snapshot& snap);

}  // namespace stallwatch::metrics
