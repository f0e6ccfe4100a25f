#include "metrics/otlp/delivery.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <random>
#include <set>

#include "common/guard.h"
#include "common/log.h"
#include "common/privileges.h"
#include "metrics/otlp/config.h"
#include "metrics/otlp/http_client.h"

namespace stallwatch::otlp {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

}  // namespace

const char* signal_name(Signal s) { return s == Signal::kLogs ? "logs" : "metrics"; }

struct Delivery::State {
  explicit State(DeliveryOptions o) : options(std::move(o)) {}

  struct Queued {
    Payload payload;
    std::uint64_t seq = 0;
  };

  const std::string& url(Signal s) const {
    return s == Signal::kLogs ? options.logs_url : options.metrics_url;
  }
  const Headers& sent_headers(Signal s) const {
    return s == Signal::kLogs ? options.logs_headers : options.headers;
  }

  void run();
  bool send(HttpClient& http, const curl_slist* headers, const Payload& p);
  bool wait_to_retry(Clock::time_point at);
  milliseconds jitter(milliseconds backoff);
  void record_attempt(Signal s, const char* failure);
  void on_success(const Payload& p, const Response& r);
  void on_rejected(const Payload& p, const Response& r);
  void on_retryable_failure(Signal s, const Response& r);
  void on_give_up(const Payload& p, Clock::time_point first);
  bool flush_until(Clock::time_point deadline, bool end_when_hopeless);

  const DeliveryOptions options;

  mutable std::mutex mu;
  std::condition_variable work;       // the sender: something queued, or stop
  std::condition_variable idle;       // flush(): something finished or was dropped
  std::atomic<bool> stopping{false};  // written under mu; curl's progress callback reads it too
  std::deque<Queued> queue;
  std::uint64_t queued_bytes = 0;
  std::uint64_t next_seq = 0;
  std::optional<std::uint64_t> in_flight;     // seq of the payload the sender holds
  std::optional<Clock::time_point> retry_at;  // while the sender waits to retry it
  std::uint64_t abandoned_requests = 0;       // in flight when stopped
  std::uint64_t abandoned_points = 0;
  DeliveryStats stats;

  // Sender thread only.
  std::array<std::uint64_t, 2> failed_attempts{};  // consecutive, by signal; 0 = healthy
  std::array<bool, 2> give_up_logged{};            // once per failing spell
  std::array<bool, 2> partial_logged{};
  std::set<long> rejected_logged;  // HTTP statuses
  std::mt19937_64 rng{std::random_device{}()};

  std::thread thread;
};

void Delivery::State::run() {
  // A thread that talks to the network holds no capabilities (common/privileges.h).
  if (auto dropped = drop_thread_capabilities("sw-otlp-send"); !dropped) {
    SW_LOG(kWarn) << dropped.error().message;
  }
  // One handle per signal: each keeps its connection alive and has its own TLS files.
  std::array<HttpClient, 2> http = {HttpClient(options, &stopping, options.tls),
                                    HttpClient(options, &stopping, options.logs_tls)};
  const std::array<SlistPtr, 2> headers = {header_list(options.headers, options.gzip),
                                           header_list(options.logs_headers, options.gzip)};
  std::unique_lock lock(mu);
  for (;;) {
    work.wait(lock, [this] { return stopping.load() || !queue.empty(); });
    if (stopping) return;  // the destructor counts what is still queued
    Queued q = std::move(queue.front());
    queue.pop_front();
    queued_bytes -= q.payload.body.size();
    in_flight = q.seq;
    lock.unlock();
    const bool finished =
        send(http[static_cast<size_t>(q.payload.signal)],
             headers[static_cast<size_t>(q.payload.signal)].get(), q.payload);
    lock.lock();
    if (!finished) {
      ++abandoned_requests;
      abandoned_points += q.payload.points;
      stats.points_dropped["shutdown"] += q.payload.points;
    }
    in_flight.reset();
    idle.notify_all();
  }
}

// Retries one payload until it is sent, rejected or out of time; false when abandoned on stop.
bool Delivery::State::send(HttpClient& http, const curl_slist* headers, const Payload& p) {
  std::string compressed;
  const std::string& body = options.gzip ? (compressed = gzip_compress(p.body)) : p.body;
  const auto first = Clock::now();
  milliseconds backoff = std::max(options.initial_backoff, milliseconds(1));
  for (;;) {
    if (stopping) return false;
    const Response r = http.post(url(p.signal), headers, body);
    if (r.code == CURLE_ABORTED_BY_CALLBACK) return false;  // stopping: not the receiver's fault
    const char* failure = failure_reason(r);
    record_attempt(p.signal, failure);
    if (!failure) {
      on_success(p, r);
      return true;
    }
    if (!retryable(r)) {
      on_rejected(p, r);
      return true;
    }
    on_retryable_failure(p.signal, r);
    // A Retry-After of 0 (or a past date) says nothing usable; the backoff still applies then,
    // so a confused proxy cannot make us spin.
    const auto hint = parse_retry_after(r.retry_after, std::chrono::system_clock::now());
    const milliseconds wait = hint && hint->count() > 0 ? milliseconds(*hint) : jitter(backoff);
    backoff = std::min(backoff * 2, std::max(options.max_backoff, backoff));
    const auto next = Clock::now() + wait;
    if (next > first + options.max_retry_time) {
      on_give_up(p, first);
      return true;
    }
    if (!wait_to_retry(next)) return false;
  }
}

// Waits on the condition variable so that the destructor wakes it; false when stopping.
bool Delivery::State::wait_to_retry(Clock::time_point at) {
  std::unique_lock lock(mu);
  retry_at = at;
  idle.notify_all();  // a flush that cannot succeed before its deadline may end now
  const bool stopped = work.wait_until(lock, at, [this] { return stopping.load(); });
  retry_at.reset();
  return !stopped;
}

milliseconds Delivery::State::jitter(milliseconds backoff) {
  std::uniform_int_distribution<std::int64_t> d(backoff.count() / 2, backoff.count());
  return milliseconds(d(rng));
}

void Delivery::State::record_attempt(Signal s, const char* failure) {
  std::lock_guard lock(mu);
  ++stats.requests[std::string(signal_name(s)) + (failure ? "/failure" : "/success")];
  if (failure) ++stats.failures[failure];
}

void Delivery::State::on_success(const Payload& p, const Response& r) {
  const auto sig = static_cast<size_t>(p.signal);
  if (failed_attempts[sig] > 0) {
    SW_LOG(kInfo) << "OTLP export to " << redact_url(url(p.signal)) << " recovered after "
                  << failed_attempts[sig] << " failed attempts";
    failed_attempts[sig] = 0;
    give_up_logged[sig] = false;
  }
  std::string message;
  const std::uint64_t rejected = std::min(rejected_in_response(r.body, &message), p.points);
  {
    std::lock_guard lock(mu);
    stats.points_sent += p.points - rejected;
    if (rejected > 0) stats.points_dropped["partial_success"] += rejected;
  }
  if ((rejected > 0 || !message.empty()) && !partial_logged[sig]) {
    partial_logged[sig] = true;
    SW_LOG(kWarn) << "OTLP receiver at " << redact_url(url(p.signal)) << " rejected " << rejected
                  << " of " << p.points << " " << signal_name(p.signal)
                  << " points: " << printable(message, sent_headers(p.signal))
                  << " (logged once; counted in stallwatch_otlp_points_dropped_total)";
  }
}

void Delivery::State::on_rejected(const Payload& p, const Response& r) {
  {
    std::lock_guard lock(mu);
    stats.points_dropped["rejected"] += p.points;
  }
  if (rejected_logged.insert(r.status).second) {
    SW_LOG(kWarn) << "OTLP export to " << redact_url(url(p.signal)) << " rejected with HTTP "
                  << r.status << ", not retried, points dropped: "
                  << printable(r.body, sent_headers(p.signal));
  }
}

void Delivery::State::on_retryable_failure(Signal s, const Response& r) {
  if (failed_attempts[static_cast<size_t>(s)]++ == 0) {
    SW_LOG(kWarn) << "OTLP export to " << redact_url(url(s))
                  << " failing: " << printable(describe(r), sent_headers(s))
                  << "; retrying with backoff";
  }
}

void Delivery::State::on_give_up(const Payload& p, Clock::time_point first) {
  {
    std::lock_guard lock(mu);
    stats.points_dropped["retries_exhausted"] += p.points;
  }
  const auto sig = static_cast<size_t>(p.signal);
  if (!give_up_logged[sig]) {
    give_up_logged[sig] = true;
    const auto tried = std::chrono::duration_cast<milliseconds>(Clock::now() - first);
    SW_LOG(kWarn) << "OTLP export to " << redact_url(url(p.signal)) << ": gave up on a request "
                  << "after " << tried.count() << " ms of retries, " << p.points
                  << " points dropped (later ones are counted in "
                     "stallwatch_otlp_points_dropped_total)";
  }
}

// end_when_hopeless: also end (false) once the sender waits for a retry past the deadline.
bool Delivery::State::flush_until(Clock::time_point deadline, bool end_when_hopeless) {
  std::unique_lock lock(mu);
  const std::uint64_t target = next_seq;
  auto done = [&] {
    return (queue.empty() || queue.front().seq >= target) && (!in_flight || *in_flight >= target);
  };
  idle.wait_until(lock, deadline, [&] {
    return done() || (end_when_hopeless && retry_at && *retry_at > deadline);
  });
  return done();
}

Delivery::Delivery(DeliveryOptions options) : state_(std::make_unique<State>(std::move(options))) {
  HttpClient::global_init();
  // run() returns at shutdown; should a response make it throw, it is logged once and resumed.
  state_->thread = std::thread([s = state_.get()] {
    while (!run_guarded("OTLP delivery", [s] { s->run(); })) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  });
}

Delivery::~Delivery() {
  State& s = *state_;
  // A receiver that is down would only make shutdown wait the full 5 s: end early then.
  s.flush_until(Clock::now() + std::chrono::seconds(5), true);
  {
    std::lock_guard lock(s.mu);
    s.stopping = true;
  }
  s.work.notify_all();
  s.thread.join();
  std::uint64_t requests = s.abandoned_requests;
  std::uint64_t points = s.abandoned_points;
  for (const auto& q : s.queue) {
    ++requests;
    points += q.payload.points;
    s.stats.points_dropped["shutdown"] += q.payload.points;
  }
  if (requests > 0) {
    SW_LOG(kWarn) << "OTLP delivery stopped with " << requests << " requests (" << points
                  << " points) not delivered";
  }
}

void Delivery::enqueue(Payload p) {
  State& s = *state_;
  if (s.url(p.signal).empty()) return;  // that signal is not exported
  const size_t size = p.body.size();
  bool dropped = false;
  {
    std::lock_guard lock(s.mu);
    if (size > s.options.max_queue_bytes) {
      s.stats.points_dropped["queue_full"] += p.points;
      return;
    }
    while (!s.queue.empty() && s.queued_bytes + size > s.options.max_queue_bytes) {
      s.stats.points_dropped["queue_full"] += s.queue.front().payload.points;
      s.queued_bytes -= s.queue.front().payload.body.size();
      s.queue.pop_front();
      dropped = true;
    }
    s.queue.push_back({std::move(p), s.next_seq++});
    s.queued_bytes += size;
  }
  s.work.notify_one();
  if (dropped) s.idle.notify_all();
}

bool Delivery::flush(std::chrono::milliseconds deadline) {
  return state_->flush_until(Clock::now() + deadline, false);
}

DeliveryStats Delivery::stats() const {
  std::lock_guard lock(state_->mu);
  DeliveryStats out = state_->stats;
  out.queue_requests = state_->queue.size();
  out.queue_bytes = state_->queued_bytes;
  return out;
}

}  // namespace stallwatch::otlp
