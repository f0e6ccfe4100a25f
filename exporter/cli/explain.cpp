#include "cli/explain.h"

#include <unistd.h>

#include <cmath>
#include <iostream>

#include "cli/explain_render.h"
#include "cli/flags.h"
#include "cli/open_store.h"
#include "cli/version.h"
#include "common/duration.h"
#include "common/json.h"
#include "common/strings.h"
#include "store/report.h"

namespace stallwatch::cli {

namespace {

using store::ProcessStats;
using store::Report;
using store::ReportChain;

// Host averages are means of many windows: four decimals say all there is.
double round4(double v) { return std::round(v * 1e4) / 1e4; }
// A measured duration in seconds, to the nanosecond.
double round_ns(double s) { return std::round(s * 1e9) / 1e9; }
double round6(double v) { return std::round(v * 1e6) / 1e6; }

Json num_or_null(double v, bool known) { return known ? json_value(v) : Json(nullptr); }

Json time_or_null(std::int64_t ns) { return ns > 0 ? Json(rfc3339(ns)) : Json(nullptr); }

Json secs(std::uint64_t ns) { return json_value(static_cast<double>(ns) / 1e9); }

Json json_chain(const ReportChain& c) {
  Json o = {{"id", c.id},
            {"kind", c.kind},
            {"severity", c.severity},
            {"peak", c.peak},
            {"open", c.open},
            {"cgroup", c.cgroup},
            {"container_id", c.container_id},
            {"pod_uid", c.pod_uid},
            {"pod", c.pod},
            {"namespace", c.pod_namespace},
            {"container", c.container},
            {"pid", c.pid},
            {"comm", c.comm},
            {"call", c.call},
            {"api", c.api},
            {"p50_s", json_value(c.p50_s)},
            {"p99_s", json_value(c.p99_s)},
            {"baseline_p50_s", json_value(c.baseline_p50_s)},
            {"baseline_p99_s", json_value(c.baseline_p99_s)},
            {"ratio", json_value(c.ratio)},
            {"opened", time_or_null(c.opened_ns)},
            {"updated", time_or_null(c.updated_ns)},
            {"closed", c.open ? Json(nullptr) : time_or_null(c.closed_ns)},
            {"windows", c.windows},
            {"summary", c.summary},
            {"root_cause", c.root_cause},
            {"effect", c.effect}};
  Json& contributors = o["contributors"] = Json::array();
  for (const auto& k : c.contributors) {
    contributors.push_back({{"comm", k.comm},
                            {"pid", k.pid},
                            {"cgroup", k.cgroup},
                            {"role", k.role},
                            {"cpu_s", secs(k.cpu_ns)},
                            {"count", k.count}});
    if (!k.thread.empty()) contributors.back()["thread"] = k.thread;
  }
  Json& evidence = o["evidence"] = Json::object();
  for (const auto& [name, value] : c.evidence) evidence[name] = json_value(value);
  o["recommendation"] = c.recommendation;
  o["sites"] = chains::sites_to_json(c.sites);
  return o;
}

Json json_process(const ProcessStats& p) {
  Json o = {{"pid", p.pid}, {"comm", p.comm}, {"cgroup", p.cgroup}};
  Json& calls = o["calls"] = Json::array();
  for (const auto& c : p.calls) {
    calls.push_back({{"call", c.call},
                     {"api", c.api},
                     {"count", c.count},
                     {"p50_s", json_value(c.p50_s)},
                     {"p99_s", json_value(c.p99_s)},
                     {"max_s", json_value(c.max_s)}});
  }
  o["offcpu_s"] = secs(p.offcpu_ns());
  o["runnable_s"] = secs(p.runnable_ns);
  o["blocked_s"] = secs(p.blocked_ns);
  o["wall_s"] = secs(p.wall_ns);
  o["thread_s"] = secs(p.thread_ns());
  o["offcpu_share"] = num_or_null(
      p.thread_ns() ? static_cast<double>(p.offcpu_ns()) / static_cast<double>(p.thread_ns()) : 0,
      p.thread_ns() > 0);
  o["preemptions"] = p.preemptions;
  o["worst_stall_s"] = secs(p.worst_stall_ns);
  if (const auto& m = p.memory; m.any()) {
    Json mem = {{"allocated_bytes", m.allocated},     {"freed_bytes", m.freed},
                {"alloc_failures", m.failures},       {"live_bytes", m.live()},
                {"live_device_bytes", m.live_device}, {"live_managed_bytes", m.live_managed},
                {"live_host_bytes", m.live_host},     {"peak_bytes", m.peak}};
    if (m.growth) {
      mem["memory_growth"] = {{"from_bytes", m.growth->from_bytes},
                              {"to_bytes", m.growth->to_bytes},
                              {"span_s", m.growth->span_s},
                              {"bytes_per_s", m.growth->bytes_per_s}};
    }
    o["memory"] = std::move(mem);
  }
  Json& preemptors = o["preemptors"] = Json::array();
  for (const auto& k : p.preemptors) {
    preemptors.push_back({{"comm", k.comm},
                          {"pid", k.pid},
                          {"cgroup", k.cgroup},
                          {"cpu_s", secs(k.cpu_ns)},
                          {"count", k.count}});
  }
  o["sites"] = chains::sites_to_json(p.sites);
  return o;
}

}  // namespace

std::string render_explain_json(const Report& r) {
  const auto& h = r.host;
  const std::int64_t now = r.query.now_ns;
  Json o;
  o["period"] = {{"since", time_or_null(now - r.query.since_ns)},
                 {"until", time_or_null(now)},
                 {"seconds", json_value(static_cast<double>(r.query.since_ns) / 1e9)}};
  o["cgroup"] = r.query.cgroup.empty() ? Json(nullptr) : Json(r.query.cgroup);
  o["host"] = {
      {"hostname", h.hostname},
      {"windows", h.windows},
      {"newest_data", time_or_null(h.newest_ns)},
      {"cpu_busy", num_or_null(round4(h.cpu_busy), h.cpu_busy >= 0)},
      {"mem_used", num_or_null(round4(h.mem_used), h.mem_used >= 0)},
      {"load1", num_or_null(round4(h.load1), h.load1 >= 0)},
      {"cpus", h.cpus > 0 ? Json(h.cpus) : Json(nullptr)},
      {"swap_used_bytes", num_or_null(std::round(h.swap_used_bytes), h.swap_used_bytes >= 0)},
      {"cpu_steal", num_or_null(round4(h.cpu_steal), h.cpu_steal >= 0)},
      {"cpu_irq", num_or_null(round4(h.cpu_irq), h.cpu_irq >= 0)},
      {"probe_pair_emulated_s",
       num_or_null(round_ns(h.probe_pair_emulated_s), h.probe_pair_emulated_s >= 0)},
      {"probe_pair_stepped_s",
       num_or_null(round_ns(h.probe_pair_stepped_s), h.probe_pair_stepped_s >= 0)},
      {"probe_cost_max", num_or_null(round4(h.probe_cost_max), h.probe_cost_max >= 0)},
      {"probe_cost_mean", num_or_null(round4(h.probe_cost_mean), h.probe_cost_mean >= 0)}};
  Json& gpus = o["host"]["gpus"] = Json::array();
  for (const auto& g : h.gpus) {
    Json xids = Json::array();
    for (const auto& [code, n] : g.xids) xids.push_back({{"xid", code}, {"errors", n}});
    gpus.push_back(
        {{"gpu", g.gpu},
         {"uuid", g.uuid},
         {"name", g.name},
         {"windows", g.windows},
         {"sm_clock_mhz", num_or_null(std::round(g.sm_clock_mhz), g.sm_clock_mhz >= 0)},
         {"sm_clock_min_mhz", num_or_null(std::round(g.sm_clock_min_mhz), g.sm_clock_min_mhz >= 0)},
         {"sm_clock_max_mhz", num_or_null(std::round(g.sm_clock_max_mhz), g.sm_clock_max_mhz >= 0)},
         {"held_share", round4(g.held_share)},
         {"top_reason", g.top_reason.empty() ? Json(nullptr) : Json(g.top_reason)},
         {"top_reason_share", round4(g.top_reason_share)},
         {"temperature_max_c", num_or_null(g.temperature_max_c, g.temperature_max_c >= 0)},
         {"power_max_w", num_or_null(round4(g.power_max_w), g.power_max_w >= 0)},
         {"power_limit_w", num_or_null(round4(g.power_limit_w), g.power_limit_w >= 0)},
         {"power_limit_min_w", num_or_null(round4(g.power_limit_min_w), g.power_limit_min_w >= 0)},
         {"xids", std::move(xids)},
         {"lost_since", time_or_null(g.lost_since_ns)}});
  }
  Json& chains = o["chains"] = Json::array();
  for (const auto& c : r.chains) chains.push_back(json_chain(c));
  Json& traced = o["traced"] = Json::array();
  for (const auto& t : r.traced) {
    traced.push_back({{"cgroup", t.cgroup}, {"processes", t.processes}, {"calls", t.calls}});
  }
  // Collectives waiting on another node (store/nccl_waits.h); [] when none.
  Json& nccl = o["nccl_waits"] = Json::array();
  for (const auto& w : r.nccl_waits) {
    nccl.push_back(
        {{"comm", w.comm_label},
         {"job_id", w.job_id.empty() ? Json(nullptr) : Json(w.job_id)},
         {"rank", w.rank},
         {"world_size", w.world_size},
         {"cgroup", w.cgroup},
         {"pid", w.pid},
         {"process", w.comm},
         {"windows", w.windows},
         {"collectives", w.collectives},
         {"before_windows", w.before_windows},
         {"after_windows", w.after_windows},
         {"wait_per_collective_before_seconds", round6(w.before_s)},
         {"wait_per_collective_after_seconds", round6(w.after_s)},
         {"look_at", "stallwatch:nccl_rank_straggler_score{comm=\"" + w.comm_label + "\"}"}});
  }
  if (r.query.per_process) {
    Json& processes = o["processes"] = Json::array();
    for (const auto& p : r.processes) processes.push_back(json_process(p));
  }
  return dump_json(o);
}

const char* const kExplainUsage =
    "usage: stallwatch explain [--db PATH] [--since DURATION] [--cgroup PATH] [--per-process]\n"
    "                          [--stacks] [--json] [--timeout DURATION]\n"
    "\n"
    "The incident report: causal chains (what slowed the CUDA calls, who caused it, the fix)\n"
    "over the last DURATION, from the database `stallwatch run` writes.\n"
    "\n"
    "  --db PATH        database (default /var/lib/stallwatch/stallwatch.db); read-only, also\n"
    "                   while the daemon writes it, and a copy of it\n"
    "  --since DURATION period to report, e.g. 15m, 1h, 2d (default 1h)\n"
    "  --cgroup PATH    only this cgroup and the cgroups below it\n"
    "  --per-process    add per-process CUDA call latency (p50/p99 of the merged histograms),\n"
    "                   off-CPU time, preemptions, the top preemptors and call sites\n"
    "  --stacks         under each chain's call sites, all their frames (Python and native)\n"
    "  --json           one JSON object instead of text\n"
    "  --timeout D      give up after D (default 30s; 100ms to 24h, 0 for none)\n"
    "  -h, --help       this text\n"
    "  --version        the version (as `stallwatch version`)\n";

Result<ExplainOptions> parse_explain_options(const std::vector<std::string>& args) {
  po::options_description desc;
  // clang-format off
  add_help_flags(desc);
  desc.add_options()
    ("db", po::value<std::string>(), "")
    ("since", po::value<std::string>(), "")
    ("cgroup", po::value<std::string>(), "")
    ("per-process", "")
    ("stacks", "")
    ("json", "")
    ("timeout", po::value<std::string>(), "");
  // clang-format on
  auto vm = parse_flags(args, desc);
  if (!vm) return vm.error();
  ExplainOptions o;
  o.help = vm->count("help") > 0;
  o.version = vm->count("version") > 0;
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
  o.stacks = vm->count("stacks") > 0;
  o.json = vm->count("json") > 0;
  if (vm->count("timeout")) {
    auto t = read_timeout((*vm)["timeout"].as<std::string>(), "--timeout");
    if (!t) return t.error();
    o.timeout = *t;
  }
  return o;
}

int run_explain(const ExplainOptions& o, std::int64_t now_ns, const std::string& hostname,
                std::ostream& out, std::ostream& err) {
  auto db = open_store(o.db, "explain");
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
  q.stacks = o.stacks;
  const store::StatementDeadline deadline(db->db.get(), o.timeout);
  auto report = store::load_report(db->db.get(), q);
  if (!report && deadline.expired()) {
    err << "stallwatch explain: stopped after " << format_duration(o.timeout)
        << " (--timeout); report a shorter period (--since) or one cgroup, or raise --timeout\n";
    return 1;
  }
  if (!report) {
    err << "stallwatch explain: reading " << o.db << ": " << report.error().message << "\n";
    return 1;
  }
  report->host.hostname = hostname;
  // The text goes to a terminal: whatever a name smuggled past the fields' own escaping cannot
  // drive it (ESC, CSI, bidi overrides).
  out << (o.json ? render_explain_json(*report) + "\n" : escape_text(render_explain_text(*report)));
  out.flush();
  return out ? 0 : 1;
}

int explain_main(const std::vector<std::string>& args) {
  auto o = parse_explain_options(args);
  if (!o) return usage_error(std::cerr, "explain", o.error().message);
  if (o->help) {
    std::cout << kExplainUsage;
    return 0;
  }
  if (o->version) {
    std::cout << version_text();
    return 0;
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return run_explain(*o, std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(), host,
                     std::cout, std::cerr);
}

}  // namespace stallwatch::cli
