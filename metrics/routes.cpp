#include "metrics/routes.h"

#include <mutex>

#include "common/json.h"
#include "metrics/proto_format.h"
#include "metrics/text_format.h"
#include "metrics/otlp/wire.h"
#include "trace/calls.h"
#include "trace/histogram.h"
#include "trace/records.h"

namespace stallwatch::metrics {

// The exposition of the latest snapshot, rendered once per format however many scrapers ask
// (an HA pair of Prometheus servers, a person with curl) and gzip'd once for those that accept
// it; nothing is rendered in a format nobody asked for. A scrape that finds a newer snapshot
// renders it; concurrent scrapes of the same one wait for that render instead of repeating it.
// A gzip'd text form is written through the compressor in pieces, so the text (~60x larger) is
// never held whole; the protobuf form (a fifth of the text) is rendered, gzip'd with libdeflate
// and let go. Only what was asked for is kept: a plain request after a gzip'd one renders
// again (Prometheus always asks for gzip).
class Routes::ExpositionCache {
 public:
  using Bytes = std::shared_ptr<const std::string>;
  enum Format { kText = 0, kProtobuf = 1, kOpenMetrics = 2 };

  Bytes get(const std::shared_ptr<const Snapshot>& snap, const BuildInfo& build, Format format,
            bool classic, const ExpositionOptions& options, bool gzip) {
    std::lock_guard lock(mu_);
    if (snapshot_ != snap) {
      snapshot_ = snap;  // kept, so its address is never reused while it is the key
      for (auto& e : entries_) e = Entry{};
    }
    Entry& e = entries_[format];
    if (gzip && e.gzip) return e.gzip;
    if (!gzip && e.plain) return e.plain;
    if (gzip && format != kProtobuf) {
      e.gzip = std::make_shared<const std::string>(
          render_exposition_gzip(*snap, build, options, format == kOpenMetrics, 1));
      return e.gzip;
    }
    auto plain = std::make_shared<const std::string>(render(*snap, build, format, classic, options));
    if (!gzip) return e.plain = plain;
    e.gzip = std::make_shared<const std::string>(otlp::gzip_compress(*plain, 1));
    return e.gzip;
  }

 private:
  struct Entry {
    Bytes plain, gzip;
  };
  static std::string render(const Snapshot& snap, const BuildInfo& build, Format format,
                            bool classic, const ExpositionOptions& options) {
    if (format != kProtobuf) return render_exposition(snap, build, options, format == kOpenMetrics);
    std::vector<Family> families = build_model(snap, build);
    std::deque<identity::Identity> stripped;
    shape_families(families, options, stripped);
    return render_protobuf(families, classic, options.ladder_step);
  }
  std::mutex mu_;
  std::shared_ptr<const Snapshot> snapshot_;
  Entry entries_[3];
};


// The host evidence of a series (issue 4): what explains a memory, I/O, network or NCCL chain,
// by process where the snapshot has it.
static void add_host_json(Json& o, const Series& s) {
  auto calls = trace::all_calls();
  o["starvation_ratio"] = json_value(s.starvation_ratio);
  o["reclaim"] = {{"direct_ns", s.reclaim.direct_ns},
                  {"direct_count", s.reclaim.direct_count},
                  {"memcg_ns", s.reclaim.memcg_ns},
                  {"memcg_count", s.reclaim.memcg_count},
                  {"cuda_ns", s.reclaim.cuda_ns}};
  o["oom_kills"] = s.oom_kills;
  o["oom_kills_cuda"] = s.oom_kills_cuda;
  Json& victims = o["oom_victims"] = Json::array();
  for (const OomKill& k : s.oom_victims) {
    victims.push_back({{"pid", k.pid}, {"comm", k.comm}, {"cuda", k.cuda}, {"at_ns", k.at_ns}});
  }
  o["tcp_retransmits"] = {{"ipv4", s.tcp_retransmits_ipv4}, {"ipv6", s.tcp_retransmits_ipv6}};
  Json& io = o["io_processes"] = Json::array();
  for (const ProcessIo& p : s.io_processes) {
    io.push_back({{"pid", p.pid},
                  {"comm", p.comm},
                  {"device", p.key.device},
                  {"op", p.key.op},
                  {"count", p.totals.count},
                  {"bytes", p.totals.bytes},
                  {"sum_ns", p.totals.sum_ns}});
  }
  Json& nccl = o["nccl_processes"] = Json::array();
  for (const ProcessNccl& p : s.nccl_processes) {
    if (p.key.call_id >= calls.size()) continue;
    nccl.push_back({{"pid", p.pid},
                    {"op", calls[p.key.call_id].name},
                    {"rank", p.key.rank},
                    {"world_size", p.key.world_size},
                    {"count", p.totals.count},
                    {"bytes", p.totals.bytes},
                    {"sum_ns", p.totals.sum_ns}});
  }
  // Calls that have not returned, oldest first.
  Json& inflight = o["inflight"] = Json::array();
  for (const InflightCall& c : s.inflight) {
    if (c.call_id >= calls.size()) continue;
    Json j = {{"pid", c.pid},
              {"tid", c.tid},
              {"thread", c.thread},
              {"call", calls[c.call_id].name},
              {"depth", c.depth},
              {"age_ns", c.age_ns},
              {"runnable_ns", c.runnable_ns},
              {"blocked_ns", c.blocked_ns},
              {"preemptions", c.preemptions},
              {"on_cpu", c.on_cpu}};
    if (c.world_size > 0) {
      j["rank"] = c.rank;
      j["world_size"] = c.world_size;
    }
    inflight.push_back(std::move(j));
  }
}

std::string snapshot_json(const Snapshot& snap) {
  auto calls = trace::all_calls();
  Json o = {{"sequence", snap.sequence},
            {"ready", snap.ready},
            {"traced_processes", snap.traced_processes},
            {"attached_libraries", snap.attached_libraries},
            {"attached_probes", snap.attached_probes},
            {"outliers", snap.outliers}};
  Json& lost = o["lost"] = Json::object();
  for (unsigned i = 0; i < trace::kLostSources; ++i) lost[trace::lost_source_name(i)] = snap.lost[i];
  Json& series = o["series"] = Json::array();
  for (const auto& [label, s] : snap.series) {
    Json j = {{"cgroup", label},
              {"container_id", s.identity.container_id},
              {"offcpu",
               {{"runnable_ns", s.offcpu.runnable_ns},
                {"blocked_ns", s.offcpu.blocked_ns},
                {"oncpu_ns", s.offcpu.oncpu_ns},
                {"preemptions", s.offcpu.preemptions},
                {"runnable_ratio", json_value(s.runnable_ratio)},
                {"blocked_ratio", json_value(s.blocked_ratio)}}}};
    Json& jc = j["calls"] = Json::array();
    for (const auto& [id, t] : s.calls) {
      if (id >= calls.size()) continue;
      jc.push_back({{"call", calls[id].name},
                    {"api", trace::api_name(calls[id].api)},
                    {"count", t.count},
                    {"sum_ns", t.sum_ns},
                    {"runnable_ns", t.runnable_ns},
                    {"blocked_ns", t.blocked_ns},
                    {"max_ns", t.max_ns},
                    {"p50_s", json_value(trace::quantile_upper_seconds(t.buckets, 0.5))},
                    {"p99_s", json_value(trace::quantile_upper_seconds(t.buckets, 0.99))}});
    }
    Json& jp = j["processes"] = Json::array();
    for (const auto& p : s.processes) {
      if (p.call_id >= calls.size()) continue;
      Json row = {{"pid", p.pid},
                  {"call", calls[p.call_id].name},
                  {"count", p.totals.count},
                  {"runnable_ns", p.totals.runnable_ns}};
      if (trace::is_allocating_call(p.call_id)) {
        row["memory"] = {{"kind", trace::mem_kind_name(trace::mem_kind(p.call_id))},
                         {"allocated_bytes", p.totals.alloc_bytes},
                         {"freed_bytes", p.totals.freed_bytes},
                         {"live_bytes", p.totals.live_bytes()},
                         {"alloc_failures", p.totals.alloc_failures}};
      }
      jp.push_back(std::move(row));
    }
    Json& pre = j["preemptors"] = Json::array();
    for (const auto& p : s.preemptors) {
      if (pre.size() == 10) break;  // the heaviest, cumulative
      pre.push_back({{"pid", p.pid},
                     {"comm", p.comm},
                     {"cgroup", p.cgroup},
                     {"victim_pid", p.victim_pid},
                     {"runnable_ns", p.runnable_ns},
                     {"count", p.count},
                     {"thread", p.thread},
                     {"ppid", p.ppid},
                     {"kernel_thread", p.kernel_thread}});
    }
    add_host_json(j, s);
    series.push_back(std::move(j));
  }
  return dump_json(o) + "\n";
}

HttpResponse text_response(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::make_shared<const std::string>(std::move(body));
  return r;
}

Routes::Routes(const SnapshotBoard& board, BuildInfo build, bool enable_debug,
               bool classic_histograms, ExpositionOptions exposition, std::string telemetry_path)
    : board_(board),
      build_(std::move(build)),
      enable_debug_(enable_debug),
      classic_histograms_(classic_histograms),
      exposition_(exposition),
      telemetry_path_(std::move(telemetry_path)),
      cache_(std::make_unique<ExpositionCache>()) {}

Routes::~Routes() = default;

HttpResponse Routes::handle(const HttpRequest& request) const {
  if (request.method != "GET" && request.method != "HEAD") {
    return text_response(405, "only GET and HEAD\n");
  }
  if (request.path == telemetry_path_) {
    HttpResponse r;
    // Protobuf for a scraper that takes it (native histograms), else OpenMetrics when asked
    // for, else text 0.0.4.
    ExpositionCache::Format format = ExpositionCache::kText;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    if (accepts_protobuf(request.accept)) {
      format = ExpositionCache::kProtobuf;
      r.content_type = kProtobufContentType;
    } else if (accepts_openmetrics(request.accept)) {
      format = ExpositionCache::kOpenMetrics;
      r.content_type = kOpenMetricsContentType;
    }
    r.gzip = request.accepts_gzip;
    r.body = cache_->get(board_.current(), build_, format, classic_histograms_, exposition_,
                         r.gzip);
    return r;
  }
  if (request.path == "/healthz") {
    if (board_.current()->ready) return text_response(200, "ok\n");
    return text_response(503, "starting: probes not attached yet\n");
  }
  if (request.path == "/debug/snapshot") {
    if (!enable_debug_) {
      return text_response(404, "/debug/snapshot is off: it shows the pids, comms and cgroups "
                                "of every workload; start run with --web.enable-debug\n");
    }
    HttpResponse r;
    r.content_type = "application/json";
    r.body = std::make_shared<const std::string>(snapshot_json(*board_.current()));
    return r;
  }
  if (request.path == "/") {
    return text_response(200, "stallwatch " + build_.version + ": " + telemetry_path_ +
                                  ", /healthz" +
                                  std::string(enable_debug_ ? ", /debug/snapshot" : "") + "\n");
  }
  return text_response(404, "not found: " + telemetry_path_ + ", /healthz\n");
}

}  // namespace stallwatch::metrics
