// Causal chains → OTLP log records (ExportLogsServiceRequest, protobuf), so that a backend
// without Prometheus (Datadog logs, an OpenTelemetry Collector) can alert on them: one record
// when a chain opens, when its severity changes and when it closes; severity number from the
// chain's severity (low INFO 9, medium WARN 13, high ERROR 17, critical FATAL 21), body = the
// chain's summary line, attributes = the chain's identity, numbers and evidence. Records go
// under the workload's resource, the same one its metrics use.
// Not thread-safe: one ChainLog per pusher thread; encode_chain_logs is pure.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "chains/chain.h"
#include "metrics/otlp/delivery.h"
#include "metrics/otlp/encoding.h"

namespace stallwatch::otlp {

struct ChainEvent {
  chains::Chain chain;
  std::string state;  // opened, updated (severity changed), closed
  std::uint64_t observed_ns = 0;
};

// Picks the changes worth a record out of each window's changed chains: a chain seen for the
// first time, one whose severity moved, one that closed. Remembers the open chains it reported.
class ChainLog {
 public:
  std::vector<ChainEvent> select(const std::vector<chains::Chain>& changed,
                                 std::uint64_t now_ns);
  size_t tracked() const { return reported_.size(); }

 private:
  std::map<std::string, chains::Severity> reported_;  // open chains by id
};

// OTLP severity number and text of a chain severity.
int severity_number(chains::Severity s);
std::string_view severity_text(chains::Severity s);

std::vector<Payload> encode_chain_logs(const std::vector<ChainEvent>& events,
                                       const ResourceSettings& resource, std::string_view version,
                                       size_t max_request_bytes);

}  // namespace stallwatch::otlp
