#include "metrics/otlp/logs_encoder.h"

#include <map>

namespace stallwatch::otlp {
namespace {

// logs.v1.LogRecord { time = 1; severity_number = 2; severity_text = 3; body = 5;
//   attributes = 6; observed_time = 11 }
std::string encode_record(const ChainEvent& e) {
  const chains::Chain& c = e.chain;
  ProtoWriter r;
  const std::int64_t at = e.state == "closed" && c.closed_ns ? c.closed_ns
                          : e.state == "opened"              ? c.opened_ns
                                                             : c.updated_ns;
  r.fixed64_field(1, static_cast<std::uint64_t>(at > 0 ? at : 0));
  r.uint64_field(2, static_cast<std::uint64_t>(severity_number(c.severity)));
  r.string_field(3, severity_text(c.severity));
  ProtoWriter body;
  body.string_field(1, c.summary);
  r.message_field(5, body);
  auto text = [&r](std::string_view key, std::string_view value) {
    if (!value.empty()) write_attribute(r, 6, key, value);
  };
  auto number = [&r](std::string_view key, double value) { write_attribute(r, 6, key, value); };
  text("stallwatch.chain.id", c.id);
  text("stallwatch.chain.kind", chains::kind_name(c.kind));
  text("stallwatch.chain.severity", chains::severity_name(c.severity));
  text("stallwatch.chain.peak_severity", chains::severity_name(c.peak));
  text("stallwatch.chain.state", e.state);
  write_attribute(r, 6, "stallwatch.chain.windows", static_cast<std::int64_t>(c.windows));
  text("stallwatch.chain.root_cause", c.root_cause);
  text("stallwatch.chain.effect", c.effect);
  text("stallwatch.chain.recommendation", c.recommendation);
  text("stallwatch.cuda.api", c.api);
  text("stallwatch.cuda.call", c.call);
  if (c.pid > 0) {
    write_attribute(r, 6, "process.pid", static_cast<std::int64_t>(c.pid));
    text("process.executable.name", c.comm);
  }
  if (c.p99_s > 0) {
    number("stallwatch.latency.p50", c.p50_s);
    number("stallwatch.latency.p99", c.p99_s);
  }
  if (c.baseline_p99_s > 0) {
    number("stallwatch.latency.baseline_p50", c.baseline_p50_s);
    number("stallwatch.latency.baseline_p99", c.baseline_p99_s);
    number("stallwatch.latency.ratio", c.ratio);
  }
  for (const auto& [name, value] : c.evidence) number("stallwatch.evidence." + name, value);
  std::string contributors;
  for (const auto& who : c.contributors) {
    if (!contributors.empty()) contributors += "; ";
    contributors += who.comm + " (pid " + std::to_string(who.pid) + ", " + who.role + ")";
  }
  text("stallwatch.chain.contributors", contributors);
  // The top call site as OpenTelemetry's code attributes (semantic conventions 1.33+): its
  // user frame (sites.h); the whole stack, innermost first, one frame per line.
  if (!c.sites.empty()) {
    const chains::CallSite& site = c.sites.front();
    const chains::SiteFrame* top = site.user_frame();
    if (top) {
      text("code.function.name", top->function);
      text("code.file.path", top->python ? top->file : top->module);
      if (top->line > 0) write_attribute(r, 6, "code.line.number", std::int64_t{top->line});
    }
    std::string stack;
    for (const auto& f : site.frames) stack += (stack.empty() ? "" : "\n") + f.text();
    text("code.stacktrace", stack);
    text("stallwatch.site", site.text());
    number("stallwatch.site.share", site.share);
  }
  r.fixed64_field(11, e.observed_ns);
  return r.take();
}

}  // namespace

int severity_number(chains::Severity s) {
  switch (s) {
    case chains::Severity::kLow:
      return 9;  // INFO
    case chains::Severity::kMedium:
      return 13;  // WARN
    case chains::Severity::kHigh:
      return 17;  // ERROR
    case chains::Severity::kCritical:
      return 21;  // FATAL
  }
  return 0;
}

std::string_view severity_text(chains::Severity s) {
  switch (s) {
    case chains::Severity::kLow:
      return "INFO";
    case chains::Severity::kMedium:
      return "WARN";
    case chains::Severity::kHigh:
      return "ERROR";
    case chains::Severity::kCritical:
      return "FATAL";
  }
  return "";
}

std::vector<ChainEvent> ChainLog::select(const std::vector<chains::Chain>& changed,
                                         std::uint64_t now_ns) {
  std::vector<ChainEvent> out;
  for (const auto& c : changed) {
    auto it = reported_.find(c.id);
    if (!c.open) {
      // A chain can open and close within one window (a cold start): it still opened.
      if (it == reported_.end()) {
        out.push_back({c, "opened", now_ns});
      } else {
        reported_.erase(it);
      }
      out.push_back({c, "closed", now_ns});
    } else if (it == reported_.end()) {
      reported_.emplace(c.id, c.severity);
      out.push_back({c, "opened", now_ns});
    } else if (it->second != c.severity) {
      it->second = c.severity;
      out.push_back({c, "updated", now_ns});
    }
  }
  return out;
}

std::vector<Payload> encode_chain_logs(const std::vector<ChainEvent>& events,
                                       const ResourceSettings& resource, std::string_view version,
                                       size_t max_request_bytes) {
  if (events.empty()) return {};
  // One resource per workload, records in event order within it.
  std::vector<std::string> resources;
  std::map<std::string, size_t> resource_of;
  std::vector<GroupSizes> groups;
  std::vector<std::vector<std::string>> records;
  for (const auto& e : events) {
    auto [it, added] = resource_of.emplace(e.chain.identity.cgroup, resources.size());
    if (added) {
      resources.push_back(encode_resource(resource, &e.chain.identity));
      groups.push_back({it->second, 0, {}});
      records.emplace_back();
    }
    records[it->second].push_back(encode_record(e));
    groups[it->second].items.push_back(records[it->second].back().size());
  }
  std::vector<size_t> resource_sizes;
  for (const auto& r : resources) resource_sizes.push_back(r.size());
  const std::string scope = encode_scope(version);
  std::vector<Payload> out;
  for (const auto& slices : pack(resource_sizes, scope.size(), groups, max_request_bytes)) {
    // ExportLogsServiceRequest { resource_logs = 1 } → ResourceLogs { resource = 1;
    // scope_logs = 2 } → ScopeLogs { scope = 1; log_records = 2 }
    ProtoWriter request;
    Payload payload;
    payload.signal = Signal::kLogs;
    for (const Slice& s : slices) {
      ProtoWriter scope_logs;
      scope_logs.bytes_field(1, scope);
      for (size_t k = s.begin; k < s.end; ++k) scope_logs.bytes_field(2, records[s.group][k]);
      ProtoWriter resource_logs;
      resource_logs.bytes_field(1, resources[groups[s.group].resource]);
      resource_logs.message_field(2, scope_logs);
      request.message_field(1, resource_logs);
      payload.points += s.end - s.begin;
    }
    payload.body = request.take();
    out.push_back(std::move(payload));
  }
  return out;
}

}  // namespace stallwatch::otlp
