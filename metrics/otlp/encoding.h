// What the OTLP metrics and logs encoders share: the settings both take, the resource of a
// workload (one per cgroup series, plus one for the daemon's own series), attribute encoding,
// and the packing of encoded items into requests under the size limit.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "identity/cgroup_identity.h"
#include "metrics/model.h"
#include "metrics/otlp/protobuf.h"

namespace stallwatch::otlp {

// Temporality of sums and histograms. lowmemory follows the OpenTelemetry SDK preference of
// that name: delta for counters and histograms (all stallwatch's sums and histograms are
// counters and histograms), so for stallwatch it sends what delta sends.
enum class Temporality : std::uint8_t { kCumulative, kDelta, kLowMemory };
enum class HistogramFormat : std::uint8_t { kExplicit, kExponential };

// Uncompressed size an export request stays under.
inline constexpr size_t kMaxRequestBytes = 500 * 1000;

std::string_view temporality_name(Temporality t);
std::string_view histogram_format_name(HistogramFormat h);

// Attributes of every resource: host.name, service.name, service.version and the
// OTEL_RESOURCE_ATTRIBUTES ones, already merged by the configuration.
struct ResourceSettings {
  metrics::LabelPairs attributes;
};

// The resource attributes of a workload: the host ones, then stallwatch.cgroup, container.id,
// k8s.pod.uid, k8s.pod.name, k8s.namespace.name, k8s.container.name (those known).
metrics::LabelPairs workload_attributes(const identity::Identity& id);

// KeyValue messages (string values) as `field` of the enclosing message.
void write_attributes(ProtoWriter& w, std::uint32_t field, const metrics::LabelPairs& attrs);
void write_attribute(ProtoWriter& w, std::uint32_t field, std::string_view key,
                     std::string_view value);
void write_attribute(ProtoWriter& w, std::uint32_t field, std::string_view key, double value);
void write_attribute(ProtoWriter& w, std::uint32_t field, std::string_view key,
                     std::int64_t value);

// An encoded Resource message: the settings' attributes, then the workload's (null: none).
std::string encode_resource(const ResourceSettings& settings, const identity::Identity* workload);
// An encoded InstrumentationScope: name "stallwatch", the daemon's version.
std::string encode_scope(std::string_view version);

// Packing: items grouped under resources (metrics: the data points of one Metric; logs: the
// records of one resource), cut into requests of at most `max_bytes`. Groups come ordered by
// resource. A slice is a run of one group's items that goes into one request.
struct GroupSizes {
  size_t resource = 0;  // index into the resource sizes
  size_t overhead = 0;  // encoded bytes the group adds besides its items (a Metric's header)
  std::vector<size_t> items;
};
struct Slice {
  size_t group = 0;
  size_t begin = 0;
  size_t end = 0;
};
// Every item lands in exactly one slice, in order. A single item above the limit gets a request
// of its own (it cannot be cut).
std::vector<std::vector<Slice>> pack(const std::vector<size_t>& resource_sizes,
                                     size_t scope_size, const std::vector<GroupSizes>& groups,
                                     size_t max_bytes);

}  // namespace stallwatch::otlp
