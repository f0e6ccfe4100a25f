#include "metrics/otlp/encoding.h"

namespace stallwatch::otlp {
namespace {

// Bytes a length-delimited wrapper adds at most: one tag byte and a length below 2^35.
constexpr size_t kNest = 6;

// common.v1: KeyValue { key = 1; value = 2 }, AnyValue { string = 1; int = 3; double = 4 }.
template <typename WriteValue>
void write_key_value(ProtoWriter& w, std::uint32_t field, std::string_view key, WriteValue value) {
  ProtoWriter any;
  value(any);
  ProtoWriter kv;
  kv.string_field(1, key);
  kv.message_field(2, any);
  w.message_field(field, kv);
}

}  // namespace

std::string_view temporality_name(Temporality t) {
  switch (t) {
    case Temporality::kCumulative:
      return "cumulative";
    case Temporality::kDelta:
      return "delta";
    case Temporality::kLowMemory:
      return "lowmemory";
  }
  return "?";
}

std::string_view histogram_format_name(HistogramFormat h) {
  return h == HistogramFormat::kExplicit ? "explicit" : "exponential";
}

metrics::LabelPairs workload_attributes(const identity::Identity& id) {
  // The `workload` label of /metrics (issue #37), then the whole identity: a resource is sent
  // once per request, so nothing here is repeated per point.
  metrics::LabelPairs a{
      {"stallwatch.workload", id.workload.empty() ? identity::workload_key(id) : id.workload},
      {"stallwatch.cgroup", id.cgroup}};
  for (const auto& [key, value] : {std::pair{"container.id", &id.container_id},
                                   std::pair{"k8s.pod.uid", &id.pod_uid},
                                   std::pair{"k8s.pod.name", &id.pod},
                                   std::pair{"k8s.namespace.name", &id.pod_namespace},
                                   std::pair{"k8s.container.name", &id.container}}) {
    if (!value->empty()) a.emplace_back(key, *value);
  }
  return a;
}

void write_attribute(ProtoWriter& w, std::uint32_t field, std::string_view key,
                     std::string_view value) {
  write_key_value(w, field, key, [&](ProtoWriter& any) { any.string_field(1, value); });
}

void write_attribute(ProtoWriter& w, std::uint32_t field, std::string_view key, double value) {
  write_key_value(w, field, key, [&](ProtoWriter& any) { any.double_field(4, value); });
}

void write_attribute(ProtoWriter& w, std::uint32_t field, std::string_view key,
                     std::int64_t value) {
  write_key_value(w, field, key, [&](ProtoWriter& any) { any.int64_field(3, value); });
}

void write_attributes(ProtoWriter& w, std::uint32_t field, const metrics::LabelPairs& attrs) {
  for (const auto& [key, value] : attrs) write_attribute(w, field, key, std::string_view(value));
}

std::string encode_resource(const ResourceSettings& settings, const identity::Identity* workload) {
  // resource.v1.Resource { attributes = 1 }
  ProtoWriter r;
  write_attributes(r, 1, settings.attributes);
  if (workload) write_attributes(r, 1, workload_attributes(*workload));
  return r.take();
}

std::string encode_scope(std::string_view version) {
  // common.v1.InstrumentationScope { name = 1; version = 2 }
  ProtoWriter s;
  s.string_field(1, "stallwatch");
  s.string_field(2, version);
  return s.take();
}

std::vector<std::vector<Slice>> pack(const std::vector<size_t>& resource_sizes,
                                     size_t scope_size, const std::vector<GroupSizes>& groups,
                                     size_t max_bytes) {
  std::vector<std::vector<Slice>> requests;
  std::vector<Slice> current;
  size_t used = 0;
  size_t current_resource = SIZE_MAX;
  auto flush = [&] {
    if (!current.empty()) requests.push_back(std::move(current));
    current.clear();
    used = 0;
    current_resource = SIZE_MAX;
  };
  for (size_t g = 0; g < groups.size(); ++g) {
    const GroupSizes& group = groups[g];
    bool group_open = false;
    for (size_t i = 0; i < group.items.size(); ++i) {
      // What this item costs given what the request already holds: the resource and scope
      // wrappers when the request has not got this resource yet, the group's header when this
      // request has not got this group yet.
      auto cost = [&] {
        size_t c = group.items[i] + kNest;
        if (!group_open) c += group.overhead + kNest;
        if (current_resource != group.resource) {
          c += resource_sizes[group.resource] + scope_size + 4 * kNest;
        }
        return c;
      };
      if (!current.empty() && used + cost() > max_bytes) {
        flush();
        group_open = false;
      }
      used += cost();
      current_resource = group.resource;
      if (!group_open) {
        current.push_back({g, i, i + 1});
        group_open = true;
      } else {
        current.back().end = i + 1;
      }
    }
  }
  flush();
  return requests;
}

}  // namespace stallwatch::otlp
