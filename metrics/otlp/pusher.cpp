#include "metrics/otlp/pusher.h"

#include <chrono>

#include "common/guard.h"
#include "common/log.h"

namespace stallwatch::otlp {
namespace {

// Chain records waiting for the next export, at most: a storm of chain changes while the
// pusher thread is stuck must not grow without bound (the queue behind it is capped too).
constexpr size_t kMaxPendingLogs = 4096;

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

MetricsEncoderOptions encoder_options(const PushConfig& c, const metrics::BuildInfo& build,
                                      std::uint64_t start_ns) {
  MetricsEncoderOptions o;
  o.temporality = c.temporality;
  o.histogram = c.histogram;
  o.resource = c.resource;
  o.version = build.version;
  o.start_ns = start_ns;
  o.per_call = c.per_call;
  return o;
}

DeliveryOptions delivery_options(const PushConfig& c) {
  DeliveryOptions d = c.delivery;
  d.logs_headers = c.logs_headers;
  return d;
}

}  // namespace

Pusher::Pusher(PushConfig config, metrics::BuildInfo build)
    : config_(std::move(config)),
      build_(std::move(build)),
      metrics_(encoder_options(config_, build_, now_ns())),
      delivery_(std::make_unique<Delivery>(delivery_options(config_))) {
  thread_ = std::thread([this] { loop(); });
}

Pusher::~Pusher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  export_now();
  delivery_.reset();
}

void Pusher::offer(std::shared_ptr<const Snapshot> snap,
                   const std::vector<chains::Chain>& changed) {
  bool logs = false;
  {
    std::lock_guard lock(mu_);
    latest_ = std::move(snap);
    for (auto& e : chain_log_.select(changed, now_ns())) {
      if (pending_logs_.size() >= kMaxPendingLogs) pending_logs_.erase(pending_logs_.begin());
      pending_logs_.push_back(std::move(e));
      logs = true;
    }
  }
  // A chain is news: send its record now rather than at the next metrics interval.
  if (logs) wake_.notify_all();
}

OtlpStats Pusher::stats() const {
  OtlpStats s = delivery_->stats();
  s.enabled = true;
  return s;
}

void Pusher::send_logs() {
  std::vector<ChainEvent> logs;
  {
    std::lock_guard lock(mu_);
    logs.swap(pending_logs_);
  }
  for (auto& p : encode_chain_logs(logs, config_.resource, build_.version, kMaxRequestBytes)) {
    delivery_->enqueue(std::move(p));
  }
}

void Pusher::export_now() {
  send_logs();
  std::shared_ptr<const Snapshot> snap;
  {
    std::lock_guard lock(mu_);
    snap = latest_;
  }
  if (!snap) return;
  for (auto& p : metrics_.encode(*snap, build_)) delivery_->enqueue(std::move(p));
}

void Pusher::loop() {
  auto next = std::chrono::steady_clock::now() + config_.interval;
  std::unique_lock lock(mu_);
  while (!stop_) {
    wake_.wait_until(lock, next, [&] { return stop_ || !pending_logs_.empty(); });
    if (stop_) break;
    const bool due = std::chrono::steady_clock::now() >= next;
    if (due) next += config_.interval;
    lock.unlock();
    // A chain record goes at once; the snapshot waits for its interval.
    if (due) {
      run_guarded("OTLP export", [this] { export_now(); });
    } else {
      run_guarded("OTLP export", [this] { send_logs(); });
    }
    lock.lock();
  }
}

}  // namespace stallwatch::otlp
