// Delivery of encoded OTLP requests (OTLP/HTTP, protobuf): a bounded queue drained by one sender
// thread that POSTs with libcurl, gzips, retries 429/502/503/504 and connection errors with
// exponential backoff and jitter (honouring Retry-After), gives up after a bounded time and
// counts every request, failure and dropped point. enqueue() never blocks on the network: the
// window loop and the tracer never wait for a receiver.
// The libcurl side is http_client.h; gzip, Retry-After and partial_success are wire.h.
// Thread-safety: enqueue(), stats() and flush() may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "trace/snapshot.h"
#include "metrics/otlp/wire.h"  // gzip_compress, parse_retry_after, rejected_in_response

namespace stallwatch::otlp {

enum class Signal : std::uint8_t { kMetrics, kLogs };
const char* signal_name(Signal s);  // "metrics", "logs"

using Headers = std::vector<std::pair<std::string, std::string>>;

// One export request, encoded but not compressed.
struct Payload {
  Signal signal = Signal::kMetrics;
  std::string body;        // serialized ExportMetricsServiceRequest / ExportLogsServiceRequest
  std::uint64_t points = 0;  // data points (metrics) or log records (logs) in it
};

// TLS files of one signal's requests (PEM paths; "" = libcurl's defaults): the OpenTelemetry
// exporter spec's OTEL_EXPORTER_OTLP_{,METRICS_,LOGS_}{CERTIFICATE,CLIENT_KEY,CLIENT_CERTIFICATE}.
struct TlsFiles {
  std::string certificate;         // CA bundle that verifies the receiver (else the system's)
  std::string client_certificate;  // mutual TLS: ours, with client_key
  std::string client_key;
  bool operator==(const TlsFiles&) const = default;
};

struct DeliveryOptions {
  std::string metrics_url;  // full URL, e.g. http://127.0.0.1:4318/v1/metrics; "" = not sent
  std::string logs_url;     // full URL of /v1/logs; "" = logs are not sent
  Headers headers;          // sent with every metrics request (secrets: never logged)
  Headers logs_headers;     // sent with every logs request
  TlsFiles tls, logs_tls;   // of the metrics and the logs requests
  bool gzip = true;         // Content-Encoding: gzip
  std::chrono::milliseconds timeout{10000};          // per request, connect included
  std::chrono::milliseconds initial_backoff{1000};   // first retry after ~this
  std::chrono::milliseconds max_backoff{30000};      // backoff ceiling
  std::chrono::milliseconds max_retry_time{120000};  // give up on a request this long after its first try
  std::size_t max_queue_bytes = 32u << 20;           // uncompressed bytes queued; oldest dropped past it
  std::string user_agent = "stallwatch";
};

// Cumulative counters (stallwatch_otlp_* self-metrics): the snapshot's OtlpStats, so the
// pipeline can publish them as they are (`enabled` is the pipeline's to set).
using DeliveryStats = OtlpStats;

class Delivery {
 public:
  explicit Delivery(DeliveryOptions options);  // starts the sender thread
  ~Delivery();  // flush(5 s), then stops; what is left is counted as dropped (shutdown)

  // Queues a request; drops the oldest queued ones (counted, queue_full) to stay under
  // max_queue_bytes. Never blocks on I/O.
  void enqueue(Payload p);

  // Waits until the queue is empty and nothing is in flight, or the deadline passes.
  // Returns true when everything queued before the call was sent or dropped.
  bool flush(std::chrono::milliseconds deadline);

  DeliveryStats stats() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace stallwatch::otlp
