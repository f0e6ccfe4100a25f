#include "cli/explain.h"

#include <unistd.h>

#include <cmath>
#include <iostream>

#include "cli/explain_render.h"
#include "cli/flags.h"
#include "common/duration.h"
#include "common/json.h"
#include "store/report.h"

namespace stallwatch::cli {

namespace {

using store::ProcessStats;
using store::Report;
using store::ReportChain;

// Host averages are means of many windows: four decimals say all there is.
double round4(double v) { return std::round(v * 1e4) / 1e4; }

std::string jnum_or_null(double v, bool known) { return known ? json_number(v) : "null"; }

std::string jtime(std::int64_t ns) { return ns > 0 ? json_string(rfc3339(ns)) : "null"; }

std::string jkey(const char* k) { return json_string(k) + ":"; }

std::string json_chain(const ReportChain& c) {
  std::string o = "{" + jkey("id") + json_string(c.id) + "," + jkey("kind") + json_string(c.kind) +
                  "," + jkey("severity") + json_string(c.severity) + "," + jkey("peak") +
                  json_string(c.peak) + "," + jkey("open") + (c.open ? "true" : "false") + "," +
                  jkey("cgroup") + json_string(c.cgroup) + "," + jkey("container_id") +
                  json_string(c.container_id) + "," + jkey("pod_uid") + json_string(c.pod_uid) +
                  "," + jkey("pod") + json_string(c.pod) + "," + jkey("namespace") +
                  json_string(c.pod_namespace) + "," + jkey("container") +
                  json_string(c.container) +
                  "," + jkey("pid") + std::to_string(c.pid) + "," + jkey("comm") +
                  json_string(c.comm) + "," + jkey("call") + json_string(c.call) + "," +
                  jkey("api") + json_string(c.api);
  const std::pair<const char*, double> nums[] = {{"p50_s", c.p50_s},
                                                 {"p99_s", c.p99_s},
                                                 {"baseline_p50_s", c.baseline_p50_s},
                                                 {"baseline_p99_s", c.baseline_p99_s},
                                                 {"ratio", c.ratio}};
  for (const auto& [k, v] : nums) o += "," + jkey(k) + json_number(v);
  o += "," + jkey("opened") + jtime(c.opened_ns) + "," + jkey("updated") + jtime(c.updated_ns) +
       "," + jkey("closed") + (c.open ? "null" : jtime(c.closed_ns)) + "," + jkey("windows") +
       std::to_string(c.windows) + "," + jkey("summary") + json_string(c.summary) + "," +
       jkey("root_cause") + json_string(c.root_cause) + "," + jkey("effect") +
       json_string(c.effect) + "," + jkey("contributors") + "[";
  for (size_t i = 0; i < c.contributors.size(); i++) {
    const auto& k = c.contributors[i];
    o += std::string(i ? "," : "") + "{" + jkey("comm") + json_string(k.comm) + "," + jkey("pid") +
         std::to_string(k.pid) + "," + jkey("cgroup") + json_string(k.cgroup) + "," + jkey("role") +
         json_string(k.role) + "," + jkey("cpu_s") +
         json_number(static_cast<double>(k.cpu_ns) / 1e9) + "," + jkey("count") +
         std::to_string(k.count) + "}";
  }
  o += "]," + jkey("evidence") + "{";
  for (size_t i = 0; i < c.evidence.size(); i++) {
    o += std::string(i ? "," : "") + json_string(c.evidence[i].first) + ":" +
         json_number(c.evidence[i].second);
  }
  return o + "}," + jkey("recommendation") + json_string(c.recommendation) + "}";
}

std::string json_process(const ProcessStats& p) {
  auto secs = [](std::uint64_t ns) { return json_number(static_cast<double>(ns) / 1e9); };
  std::string o = "{" + jkey("pid") + std::to_string(p.pid) + "," + jkey("comm") +
                  json_string(p.comm) + "," + jkey("cgroup") + json_string(p.cgroup) + "," +
                  jkey("calls") + "[";
  for (size_t i = 0; i < p.calls.size(); i++) {
    const auto& c = p.calls[i];
    o += std::string(i ? "," : "") + "{" + jkey("call") + json_string(c.call) + "," + jkey("api") +
         json_string(c.api) + "," + jkey("count") + std::to_string(c.count) + "," + jkey("p50_s") +
         json_number(c.p50_s) + "," + jkey("p99_s") + json_number(c.p99_s) + "," + jkey("max_s") +
         json_number(c.max_s) + "}";
  }
  o += "]," + jkey("offcpu_s") + secs(p.offcpu_ns()) + "," + jkey("runnable_s") +
       secs(p.runnable_ns) + "," + jkey("blocked_s") + secs(p.blocked_ns) + "," + jkey("wall_s") +
       secs(p.wall_ns) + "," + jkey("offcpu_share") +
       jnum_or_null(
           p.wall_ns ? static_cast<double>(p.offcpu_ns()) / static_cast<double>(p.wall_ns) : 0,
           p.wall_ns > 0) +
       "," + jkey("preemptions") + std::to_string(p.preemptions) + "," + jkey("worst_stall_s") +
       secs(p.worst_stall_ns) + "," + jkey("preemptors") + "[";
  for (size_t i = 0; i < p.preemptors.size(); i++) {
    const auto& k = p.preemptors[i];
    o += std::string(i ? "," : "") + "{" + jkey("comm") + json_string(k.comm) + "," + jkey("pid") +
         std::to_string(k.pid) + "," + jkey("cgroup") + json_string(k.cgroup) + "," +
         jkey("cpu_s") + secs(k.cpu_ns) + "," + jkey("count") + std::to_string(k.count) + "}";
  }
  return o + "]}";
}

}  // namespace

std::string render_explain_json(const Report& r) {
  const auto& h = r.host;
  const std::int64_t now = r.query.now_ns;
  std::string o = "{" + jkey("period") + "{" + jkey("since") + jtime(now - r.query.since_ns) + "," +
                  jkey("until") + jtime(now) + "," + jkey("seconds") +
                  json_number(static_cast<double>(r.query.since_ns) / 1e9) + "}," + jkey("cgroup") +
                  (r.query.cgroup.empty() ? "null" : json_string(r.query.cgroup)) + "," +
                  jkey("host") + "{" + jkey("hostname") + json_string(h.hostname) + "," +
                  jkey("windows") + std::to_string(h.windows) + "," + jkey("newest_data") +
                  jtime(h.newest_ns) + "," + jkey("cpu_busy") +
                  jnum_or_null(round4(h.cpu_busy), h.cpu_busy >= 0) + "," + jkey("mem_used") +
                  jnum_or_null(round4(h.mem_used), h.mem_used >= 0) + "," + jkey("load1") +
                  jnum_or_null(round4(h.load1), h.load1 >= 0) + "," + jkey("cpus") +
                  (h.cpus > 0 ? std::to_string(h.cpus) : "null") + "," + jkey("swap_used_bytes") +
                  jnum_or_null(std::round(h.swap_used_bytes), h.swap_used_bytes >= 0) + "}," +
                  jkey("chains") + "[";
  for (size_t i = 0; i < r.chains.size(); i++) o += (i ? "," : "") + json_chain(r.chains[i]);
  o += "]," + jkey("traced") + "[";
  for (size_t i = 0; i < r.traced.size(); i++) {
    const auto& t = r.traced[i];
    o += std::string(i ? "," : "") + "{" + jkey("cgroup") + json_string(t.cgroup) + "," +
         jkey("processes") + std::to_string(t.processes) + "," + jkey("calls") +
         std::to_string(t.calls) + "}";
  }
  o += "]";
  if (r.query.per_process) {
    o += "," + jkey("processes") + "[";
    for (size_t i = 0; i < r.processes.size(); i++)
      o += (i ? "," : "") + json_process(r.processes[i]);
    o += "]";
  }
  return o + "}";
}

const char* const kExplainUsage =
    "usage: stallwatch explain [--db PATH] [--since DURATION] [--cgroup PATH] [--per-process]\n"
    "                          [--json]\n"
    "\n"
    "The incident report: causal chains (what slowed the CUDA calls, who caused it, the fix)\n"
    "over the last DURATION, from the database `stallwatch run` writes.\n"
    "\n"
    "  --db PATH        database (default /var/lib/stallwatch/stallwatch.db); read-only, also\n"
    "                   while the daemon writes it, and a copy of it\n"
    "  --since DURATION period to report, e.g. 15m, 1h, 2d (default 1h)\n"
    "  --cgroup PATH    only this cgroup and the cgroups below it\n"
    "  --per-process    add per-process CUDA call latency (p50/p99 of the merged histograms),\n"
    "                   off-CPU time, preemptions and the top preemptors\n"
    "  --json           one JSON object instead of text\n";

Result<ExplainOptions> parse_explain_options(const std::vector<std::string>& args) {
  po::options_description desc;
  // clang-format off
  desc.add_options()
    ("help,h", "")
    ("db", po::value<std::string>(), "")
    ("since", po::value<std::string>(), "")
    ("cgroup", po::value<std::string>(), "")
    ("per-process", "")
    ("json", "");
  // clang-format on
  auto vm = parse_flags(args, desc);
  if (!vm) return vm.error();
  ExplainOptions o;
  o.help = vm->count("help") > 0;
  if (vm->count("db")) {
    o.db = (*vm)["db"].as<std::string>();
    if (o.db.empty()) return make_error("--db needs a path");
  }
  if (vm->count("since")) {
    auto d = parse_duration((*vm)["since"].as<std::string>());
    if (!d) return make_error("--since: " + d.error().message);
    if (d->count() <= 0) return make_error("--since must be longer than 0");
    o.since = *d;
  }
  if (vm->count("cgroup")) o.cgroup = (*vm)["cgroup"].as<std::string>();
  o.per_process = vm->count("per-process") > 0;
  o.json = vm->count("json") > 0;
  return o;
}

int run_explain(const ExplainOptions& o, std::int64_t now_ns, const std::string& hostname,
                std::ostream& out, std::ostream& err) {
  auto db = store::open_report_db(o.db);
  if (!db) {
    err << "stallwatch explain: " << db.error().message << "\n";
    return 1;
  }
  if (!db->note.empty()) err << "stallwatch explain: " << db->note << "\n";
  store::ReportQuery q;
  q.now_ns = now_ns;
  q.since_ns = o.since.count();
  q.cgroup = o.cgroup;
  q.per_process = o.per_process;
  auto report = store::load_report(db->db.get(), q);
  if (!report) {
    err << "stallwatch explain: reading " << o.db << ": " << report.error().message << "\n";
    return 1;
  }
  report->host.hostname = hostname;
  out << (o.json ? render_explain_json(*report) + "\n" : render_explain_text(*report));
  out.flush();
  return out ? 0 : 1;
}

int explain_main(const std::vector<std::string>& args) {
  auto o = parse_explain_options(args);
  if (!o) {
    std::cerr << "stallwatch explain: " << o.error().message << "\n" << kExplainUsage;
    return 2;
  }
  if (o->help) {
    std::cout << kExplainUsage;
    return 0;
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return run_explain(*o, std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(), host,
                     std::cout, std::cerr);
}

}  // namespace stallwatch::cli
