// The OTLP push: every interval, the newest published snapshot becomes metrics requests and
// the chains that opened, changed severity or closed become log records; both go to the
// delivery queue. Runs on its own thread: the window loop only hands over a pointer and a copy
// of the window's changed chains, and never waits for encoding or the network.
// Thread-safety: offer() and stats() from any thread.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "chains/chain.h"
#include "trace/snapshot.h"
#include "metrics/model.h"
#include "metrics/otlp/config.h"
#include "metrics/otlp/delivery.h"
#include "metrics/otlp/logs_encoder.h"
#include "metrics/otlp/metrics_encoder.h"

namespace stallwatch::otlp {

class Pusher {
 public:
  // Construct it when the daemon starts: that is the start time of cumulative points.
  Pusher(PushConfig config, metrics::BuildInfo build);
  // Sends the newest snapshot and pending chain records once more, then lets delivery flush
  // for a bounded time (Delivery's destructor).
  ~Pusher();

  void offer(std::shared_ptr<const Snapshot> snap, const std::vector<chains::Chain>& changed);

  OtlpStats stats() const;

 private:
  void loop();
  void export_now();  // logs, then the newest snapshot
  void send_logs();

  PushConfig config_;
  metrics::BuildInfo build_;
  MetricsEncoder metrics_;
  ChainLog chain_log_;
  std::unique_ptr<Delivery> delivery_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::shared_ptr<const Snapshot> latest_;
  std::vector<ChainEvent> pending_logs_;
  std::thread thread_;
};

}  // namespace stallwatch::otlp
