#include "cli/explain_render.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <string_view>
#include <vector>

#include "common/duration.h"
#include "common/strings.h"
#include "identity/cgroup_identity.h"

namespace stallwatch::cli {
namespace {

using store::ProcessStats;
using store::Report;
using store::ReportChain;

constexpr std::int64_t kNsPerS = 1000000000;
constexpr int kMaxProcesses = 30;  // text only; JSON carries them all

template <typename... Args>
std::string fmt(const char* f, Args... args) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, args...);
  return buf;
}

// Pads to `width` columns; counts UTF-8 code points, not bytes ("µs" is one column wider).
std::string pad(std::string s, size_t width, bool right = false) {
  size_t cols = 0;
  for (unsigned char c : s) cols += (c & 0xC0) != 0x80;
  if (cols >= width) return s;
  return right ? std::string(width - cols, ' ') + s : s + std::string(width - cols, ' ');
}

std::string percent(double share) { return fmt("%.1f%%", share * 100); }

std::string human_bytes(double b) {
  if (b < 1024) return fmt("%.0f B", b);
  if (b < 1024.0 * 1024) return short_number(b / 1024) + " KiB";
  if (b < 1024.0 * 1024 * 1024) return short_number(b / 1024 / 1024) + " MiB";
  return short_number(b / 1024 / 1024 / 1024) + " GiB";
}

std::string ratio_text(double r) {
  return r >= 10 ? thousands(static_cast<std::uint64_t>(std::llround(r))) + "x" : fmt("%.1fx", r);
}

std::tm utc_tm(std::int64_t unix_ns) {
  std::time_t t = static_cast<std::time_t>(unix_ns / kNsPerS);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return tm;
}

std::string strftime_utc(std::int64_t unix_ns, const char* f) {
  const std::tm tm = utc_tm(unix_ns);
  char buf[64];
  std::strftime(buf, sizeof buf, f, &tm);
  return buf;
}

// HH:MM:SS when on the same UTC day as `ref`, else the full date and time.
std::string when(std::int64_t unix_ns, std::int64_t ref_ns) {
  const std::tm a = utc_tm(unix_ns), b = utc_tm(ref_ns);
  if (a.tm_yday == b.tm_yday && a.tm_year == b.tm_year) return strftime_utc(unix_ns, "%H:%M:%S");
  return utc_datetime(unix_ns);
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (!line.empty()) out.emplace_back(line);
    start = end + 1;
  }
  return out;
}

// "  Label:        first line" and the rest aligned under it.
void field(std::string& out, std::string_view label, const std::vector<std::string>& lines) {
  constexpr size_t kWidth = 14;
  for (size_t i = 0; i < lines.size(); i++) {
    std::string head(i == 0 ? std::string(label) + ":" : "");
    head.resize(kWidth, ' ');
    out += "  " + head + lines[i] + "\n";
  }
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Evidence numbers by their name's unit: *_s durations, *_share percentages, *_bytes sizes.
std::string evidence_item(std::string name, double v) {
  std::string value;
  if (ends_with(name, "_s")) {
    name.resize(name.size() - 2);
    value = human_seconds(v);
  } else if (ends_with(name, "_ns")) {
    name.resize(name.size() - 3);
    value = human_seconds(v / 1e9);
  } else if (ends_with(name, "share")) {
    value = percent(v);
  } else if (ends_with(name, "_bytes")) {
    name.resize(name.size() - 6);
    value = human_bytes(v);
  } else if (v >= 0 && v < 1e15 && v == std::floor(v)) {
    value = thousands(static_cast<std::uint64_t>(v));
  } else {
    value = fmt("%.3g", v);
  }
  std::replace(name.begin(), name.end(), '_', ' ');
  return name + " " + value;
}

std::string latency_line(const ReportChain& c) {
  std::string s = c.call + " p99 ";
  if (c.baseline_p99_s > 0) {
    const double ratio = c.ratio > 0 ? c.ratio : c.p99_s / c.baseline_p99_s;
    if (ratio_text(ratio) == "1.0x") {
      // The chain's effect is elsewhere (fewer calls per window, a slower job): say that the
      // latency did not move rather than "61µs -> 61µs (1.0x)".
      s += human_seconds(c.p99_s);
      if (c.p50_s > 0) s += ", p50 " + human_seconds(c.p50_s);
      return s + ", as in the baseline";
    }
    s += human_seconds(c.baseline_p99_s) + " -> " + human_seconds(c.p99_s) + " (" +
         ratio_text(ratio) + ")";
    if (c.p50_s > 0) {
      s += ", p50 " + (c.baseline_p50_s > 0 ? human_seconds(c.baseline_p50_s) + " -> " : "") +
           human_seconds(c.p50_s);
    }
    return s;
  }
  s += human_seconds(c.p99_s);
  if (c.p50_s > 0) s += ", p50 " + human_seconds(c.p50_s);
  return s + " (baseline unknown)";
}

using Names = std::map<std::string, store::WorkloadNames>;

// "pod NAMESPACE/NAME, container C" when the daemon knew the Kubernetes names, else "".
std::string kube_label(const std::string& pod, const std::string& ns,
                       const std::string& container) {
  if (pod.empty()) return {};
  return "pod " + (ns.empty() ? "" : ns + "/") + pod +
         (container.empty() ? "" : ", container " + container);
}

// The name a person knows a cgroup by: its pod and container by name, else its container (and
// pod UID), Slurm job or systemd unit; the path itself when none of them is in it.
std::string unescaped_label(const std::string& cgroup, const Names& names) {
  if (auto it = names.find(cgroup); it != names.end()) {
    return kube_label(it->second.pod, it->second.pod_namespace, it->second.container);
  }
  const identity::Identity id = identity::parse_cgroup_path(cgroup);
  if (!id.container_id.empty()) {
    return "container " + id.container_id.substr(0, 12) +
           (id.pod_uid.empty() ? "" : ", pod " + id.pod_uid);
  }
  if (!id.pod_uid.empty()) return "pod " + id.pod_uid;
  if (!id.slurm_job.empty()) {
    return "Slurm job " + id.slurm_job + (id.slurm_step.empty() ? "" : " step " + id.slurm_step);
  }
  if (!id.systemd_unit.empty()) return id.systemd_unit;
  return cgroup;
}

// The same, escaped: a cgroup, pod or unit name is any local user's choice.
std::string workload_label(const std::string& cgroup, const Names& names) {
  return escape_line(unescaped_label(cgroup, names));
}

std::string process_name(const std::string& comm, int pid) {
  return (comm.empty() ? std::string() : comm + " ") + "PID " + std::to_string(pid);
}

// "settle() at /app/train.py:87  <- epoch() at /app/train.py:120   cudaStreamSynchronize, 83% of
// the stalled time", and with --stacks every frame under it, innermost first.
std::vector<std::string> site_lines(const std::vector<chains::CallSite>& sites, bool stacks) {
  std::vector<std::string> lines;
  for (const auto& s : sites) {
    lines.push_back(s.text() + "   " + s.call + ", " + percent(s.share) + " of the stalled time (" +
                    thousands(s.count) + (s.count == 1 ? " call)" : " calls)"));
    if (!stacks) continue;
    for (const auto& f : s.frames) lines.push_back("    " + f.text());
  }
  return lines;
}

void render_chain(std::string& out, const ReportChain& c, std::int64_t ref_ns, const Names& names,
                  bool stacks) {
  out += "[" + upper(c.severity) + "] " + c.kind + "  ";
  std::string extra = thousands(c.windows) + (c.windows == 1 ? " window" : " windows");
  if (c.peak != c.severity && !c.peak.empty()) extra += ", peak " + upper(c.peak);
  if (c.open) {
    out += "OPEN since " + when(c.opened_ns, ref_ns) + " (" + extra + ")\n";
  } else {
    out += when(c.opened_ns, ref_ns) + " to " + when(c.closed_ns, ref_ns) + ", closed (" + extra +
           ")\n";
  }
  // The chain row's own identity first (a chain outlives its cgroup's row in the store).
  std::string label = kube_label(c.pod, c.pod_namespace, c.container);
  if (label.empty() && !c.container_id.empty()) {
    label = "container " + c.container_id.substr(0, 12) +
            (c.pod_uid.empty() ? "" : ", pod " + c.pod_uid);
  }
  label = label.empty() ? workload_label(c.cgroup, names) : escape_line(label);
  const std::string cgroup = escape_line(c.cgroup);
  field(
      out, "Workload",
      label == cgroup ? std::vector<std::string>{cgroup} : std::vector<std::string>{label, cgroup});
  if (c.pid != 0) field(out, "Process", {escape_line(process_name(c.comm, c.pid))});
  field(out, "Root", lines_of(c.root_cause));
  std::vector<std::string> effect;
  if (!c.call.empty() && c.p99_s > 0) effect.push_back(latency_line(c));
  for (auto& l : lines_of(c.effect)) effect.push_back(std::move(l));
  field(out, "Effect", effect);
  if (!c.evidence.empty()) {
    std::string ev;
    for (const auto& [name, v] : c.evidence)
      ev += (ev.empty() ? "" : ", ") + evidence_item(name, v);
    field(out, "Evidence", {ev});
  }
  std::vector<std::string> contrib;
  for (const auto& k : c.contributors) {
    std::string l = process_name(k.comm, k.pid);
    if (!k.thread.empty()) l += " thread " + k.thread;
    if (!k.cgroup.empty() && k.cgroup != c.cgroup) l += " in " + workload_label(k.cgroup, names);
    if (!k.role.empty()) l += " (" + k.role + ")";
    // What cpu_ns and count mean depends on the role (chain.h).
    const char* cpu = " CPU";
    const char* count = " events";
    if (k.role.rfind("preemptor", 0) == 0) {
      cpu = " of CPU taken while it waited";
      count = " waits";
    } else if (k.role == "I/O submitter") {
      cpu = " waiting on requests";
      count = " requests";
    } else if (k.role == "peer rank") {
      cpu = " in the op";
      count = " calls";
    } else if (k.role.find("CUDA") != std::string::npos ||
               k.role.find("workload") != std::string::npos) {
      cpu = " in CUDA calls";
      count = " calls";
    }
    std::vector<std::string> nums;
    if (k.cpu_ns) nums.push_back(human_ns(k.cpu_ns) + cpu);
    if (k.count) nums.push_back(thousands(k.count) + count);
    for (size_t i = 0; i < nums.size(); i++) l += (i == 0 ? ": " : ", ") + nums[i];
    contrib.push_back(std::move(l));
  }
  field(out, "Contributing", contrib);
  field(out, "Site", site_lines(c.sites, stacks));
  field(out, "Fix", lines_of(c.recommendation));
}

std::string call_line(const store::CallStats& c, size_t name_width) {
  return pad(c.call, name_width) + "  " + pad(thousands(c.count) + " calls", 13, true) + "  p50 " +
         pad(human_seconds(c.p50_s), 7) + " p99 " + pad(human_seconds(c.p99_s), 7) + " max " +
         human_seconds(c.max_s);
}

void render_process(std::string& out, const ProcessStats& p, const Names& names) {
  out += escape_line(process_name(p.comm, p.pid)) + "  " + workload_label(p.cgroup, names) + "\n";
  size_t width = 0;
  for (const auto& c : p.calls) width = std::max(width, c.call.size());
  for (const auto& c : p.calls) out += "  " + call_line(c, width) + "\n";
  if (p.thread_ns() > 0) {
    field(out, "Off-CPU",
          {human_ns(p.offcpu_ns()) + " of " + human_ns(p.thread_ns()) + " thread time (" +
           percent(static_cast<double>(p.offcpu_ns()) / static_cast<double>(p.thread_ns())) +
           "): runnable " + human_ns(p.runnable_ns) + ", blocked " + human_ns(p.blocked_ns)});
  }
  if (p.preemptions) field(out, "Preemptions", {thousands(p.preemptions)});
  if (p.worst_stall_ns) field(out, "Worst stall", {human_ns(p.worst_stall_ns)});
  if (const store::MemoryStats& m = p.memory; m.any()) {
    std::string held = human_bytes(static_cast<double>(m.live())) + " held at the end";
    std::vector<std::string> kinds;
    if (m.live_device) kinds.push_back("device " + human_bytes(static_cast<double>(m.live_device)));
    if (m.live_managed)
      kinds.push_back("managed " + human_bytes(static_cast<double>(m.live_managed)));
    if (m.live_host)
      kinds.push_back("pinned host " + human_bytes(static_cast<double>(m.live_host)));
    for (size_t i = 0; i < kinds.size(); i++) held += (i == 0 ? " (" : ", ") + kinds[i];
    if (!kinds.empty()) held += ")";
    held += ", peak " + human_bytes(static_cast<double>(m.peak)) + "; allocated " +
            human_bytes(static_cast<double>(m.allocated)) + ", freed " +
            human_bytes(static_cast<double>(m.freed));
    if (m.failures) held += "; " + thousands(m.failures) + " out-of-memory failures";
    field(out, "GPU memory", {held});
    if (m.growth) {
      field(out, "memory_growth",
            {"grew from " + human_bytes(static_cast<double>(m.growth->from_bytes)) + " to " +
             human_bytes(static_cast<double>(m.growth->to_bytes)) + " over " +
             human_seconds(m.growth->span_s) + " (" + human_bytes(m.growth->bytes_per_s * 60) +
             "/min) with no plateau: a leak, or a cache that never stops growing"});
    }
  }
  // Each task by the CPU it took on the process's CPU while a thread waited there (its share of
  // the runnable wait; what no task took was interrupts or wake-up latency).
  std::vector<std::string> pre;
  for (const auto& k : p.preemptors) {
    std::string l = process_name(k.comm, k.pid);
    if (!k.cgroup.empty() && k.cgroup != p.cgroup) l += " in " + workload_label(k.cgroup, names);
    l += ": " + human_ns(k.cpu_ns);
    if (p.runnable_ns > 0) {
      l += " (" + percent(static_cast<double>(k.cpu_ns) / static_cast<double>(p.runnable_ns)) +
           " of the runnable wait)";
    }
    pre.push_back(l + " in " + thousands(k.count) + " waits");
  }
  field(out, "CPU taken by", pre);
  field(out, "Sites", site_lines(p.sites, false));
}

// "3h ago" and the --since that would reach it.
std::pair<std::string, std::string> age_and_since(std::int64_t age_ns) {
  const std::int64_t s = std::max<std::int64_t>(age_ns / kNsPerS, 0);
  if (s < 60) return {std::to_string(s) + "s", "1m"};
  if (s < 3600) return {std::to_string(s / 60) + "m", "1h"};
  if (s < 48 * 3600) return {std::to_string(s / 3600) + "h", std::to_string(s / 3600 + 1) + "h"};
  return {std::to_string(s / 86400) + "d", std::to_string(s / 86400 + 1) + "d"};
}

void render_no_data(std::string& out, const Report& r, const std::string& last) {
  if (r.host.newest_ns == 0) {
    out +=
        "The daemon wrote nothing to this database yet (no windows at all): is `stallwatch "
        "run` running with this --db?\n";
    return;
  }
  out +=
      "No data in the " + last + "; newest data is from " + utc_datetime(r.host.newest_ns) + " UTC";
  const std::int64_t age = r.query.now_ns - r.host.newest_ns;
  if (age > 0) {
    auto [ago, since] = age_and_since(age);
    out += " (" + ago + " ago); try --since " + since;
  }
  out += ".\n";
}

}  // namespace

std::string utc_datetime(std::int64_t unix_ns) {
  return strftime_utc(unix_ns, "%Y-%m-%d %H:%M:%S");
}

std::string rfc3339(std::int64_t unix_ns) { return strftime_utc(unix_ns, "%Y-%m-%dT%H:%M:%SZ"); }

namespace {

// What stallwatch's own probes cost here (issue #48), under the System context: nothing when
// the daemon did not measure them (before schema 13, or `demo`).
void render_probe_cost(std::string& out, const store::HostSummary& h) {
  if (h.probe_pair_emulated_s < 0 && h.probe_pair_stepped_s < 0) return;
  std::string sites;
  if (h.probe_pair_emulated_s >= 0)
    sites = human_seconds(h.probe_pair_emulated_s) + " (emulated site)";
  if (h.probe_pair_stepped_s >= 0) {
    sites +=
        (sites.empty() ? "" : ", ") + human_seconds(h.probe_pair_stepped_s) + " (single-stepped)";
  }
  out += "  Probes (stallwatch's own): " + sites + " a traced call; ";
  out += h.probe_cost_max >= 0
             ? "at most " + percent(h.probe_cost_max) + " of a workload's CUDA-thread CPU (mean " +
                   percent(h.probe_cost_mean) + "; --cost-budget bounds it)\n"
             : "no traced workload ran\n";
}

// One line per GPU under the System context (at most 16, then how many more): its SM clock
// against its maximum, the share of the period its clock was held down and why, temperature,
// power against its limit, Xid errors by code.
void render_gpus(std::string& out, const std::vector<store::GpuSummary>& gpus) {
  constexpr size_t kShown = 16;
  for (size_t i = 0; i < gpus.size() && i < kShown; ++i) {
    const auto& g = gpus[i];
    std::string line = "GPU " + std::to_string(g.gpu);
    if (!g.name.empty()) line += " " + escape_line(g.name);
    std::vector<std::string> parts;
    if (g.lost_since_ns > 0) {
      // Its readings stopped then: no clock, power or temperature is current.
      parts.push_back("LOST since " + rfc3339(g.lost_since_ns) +
                      " (NVML: GPU is lost; fallen off the bus: drain the node, reset the GPU)");
    } else if (g.sm_clock_mhz >= 0 && g.sm_clock_max_mhz > 0) {
      parts.push_back(
          "SM " + thousands(static_cast<std::uint64_t>(std::lround(g.sm_clock_mhz))) + " of " +
          thousands(static_cast<std::uint64_t>(std::lround(g.sm_clock_max_mhz))) + " MHz");
    }
    std::string held = "held " + percent(g.held_share);
    if (!g.top_reason.empty() && g.held_share > 0) held += " (" + escape_line(g.top_reason) + ")";
    parts.push_back(held);
    if (g.temperature_max_c >= 0) {
      parts.push_back(std::to_string(std::lround(g.temperature_max_c)) + " C max");
    }
    if (g.power_max_w >= 0) {
      const long lo = std::lround(g.power_limit_min_w), hi = std::lround(g.power_limit_w);
      std::string power = std::to_string(std::lround(g.power_max_w));
      if (g.power_limit_w > 0 && lo > 0 && lo != hi) {
        power += " W max, limit " + std::to_string(lo) + " to " + std::to_string(hi) + " W";
      } else if (g.power_limit_w > 0) {
        power += " of " + std::to_string(hi) + " W max";
      } else {
        power += " W max";
      }
      parts.push_back(power);
    }
    if (!g.xids.empty()) {
      std::string x = "Xid";
      for (size_t k = 0; k < g.xids.size(); ++k) {
        x +=
            (k ? ", " : " ") + std::to_string(g.xids[k].first) + " x" + thousands(g.xids[k].second);
      }
      parts.push_back(x);
    }
    line += ":";
    for (size_t k = 0; k < parts.size(); ++k) line += (k ? " | " : " ") + parts[k];
    out += line + "\n";
  }
  if (gpus.size() > kShown) {
    out += "(" + std::to_string(gpus.size() - kShown) + " more GPUs: explain --json lists all)\n";
  }
}

// Communicators of this node whose collectives waited longer and longer with nothing on this
// node to explain it (store/nccl_waits.h): one block per communicator, then where to look.
void render_nccl_waits(std::string& out, const std::vector<store::NcclWaitGrowth>& waits,
                       const Names& names, const std::string& last) {
  for (size_t i = 0; i < waits.size();) {
    const std::string& comm = waits[i].comm_label;
    std::string job;
    for (size_t j = i; j < waits.size() && waits[j].comm_label == comm; j++) {
      if (job.empty()) job = waits[j].job_id;
    }
    out += "\nCollectives waiting on another node (" + last + "): communicator " + comm +
           (job.empty() ? ", job not known" : ", job " + escape_line(job)) + "\n";
    for (; i < waits.size() && waits[i].comm_label == comm; i++) {
      const store::NcclWaitGrowth& w = waits[i];
      out += "  rank " + std::to_string(w.rank) + " of " + std::to_string(w.world_size) + ", " +
             escape_line(process_name(w.comm, w.pid)) + " in " + workload_label(w.cgroup, names) +
             ": waited " + human_seconds(w.after_s) + " per collective in its last " +
             thousands(w.after_windows) + " windows against " + human_seconds(w.before_s) +
             " in its first " + thousands(w.before_windows) + " (" +
             fmt("%.1fx", w.before_s > 0 ? w.after_s / w.before_s : 0.0) + "; " +
             thousands(w.collectives) + " collectives in " + thousands(w.windows) + " windows)\n";
    }
    out +=
        "  No host cause on this node: the rank that holds these collectives back is on "
        "another node. Look at `stallwatch:nccl_rank_straggler_score{comm=\"" +
        comm +
        "\"}` (or the StallwatchNcclStraggler alert) across nodes, and run explain on the node "
        "it names.\n";
  }
}

}  // namespace

std::string render_explain_text(const Report& r) {
  const std::int64_t now = r.query.now_ns, start = now - r.query.since_ns;
  const std::string last = "last " + format_duration(std::chrono::nanoseconds(r.query.since_ns));
  std::string out = "stallwatch explain: host " +
                    (r.host.hostname.empty() ? std::string("?") : r.host.hostname) + ", " +
                    utc_datetime(start) + " to " + when(now, start) + " UTC (" + last + ")\n";
  if (!r.query.cgroup.empty()) out += "Cgroup: " + escape_line(r.query.cgroup) + " and below\n";
  out += "\n";

  if (r.host.windows == 0 && r.chains.empty()) {
    render_no_data(out, r, last);
    return out;
  }
  const auto& h = r.host;
  auto or_na = [](double v, const std::string& s) { return v < 0 ? std::string("n/a") : s; };
  out += "System context: CPU " + or_na(h.cpu_busy, percent(h.cpu_busy)) + " | Memory " +
         or_na(h.mem_used, percent(h.mem_used)) + " | Load " +
         or_na(h.load1, fmt("%.1f", h.load1)) +
         (h.cpus > 0 ? " (" + std::to_string(h.cpus) + " cores)" : "") + " | Swap " +
         or_na(h.swap_used_bytes, human_bytes(h.swap_used_bytes)) +
         (h.cpu_steal >= 0 ? " | Steal " + percent(h.cpu_steal) : "") +
         (h.cpu_irq >= 0 ? " | IRQ " + percent(h.cpu_irq) : "") + "  (mean of " +
         thousands(h.windows) + (h.windows == 1 ? " window)\n" : " windows)\n");
  render_probe_cost(out, h);
  render_gpus(out, h.gpus);
  out += "\n";

  if (r.chains.empty()) {
    out +=
        "No causal chains in the " + last + ": the traced workloads showed no host-side cause.\n";
    if (r.traced.empty()) {
      out +=
          "Traced: no CUDA process in this period (is the workload running? `stallwatch "
          "check` lists the CUDA libraries it can trace).\n";
    } else {
      out += "Traced:\n";
      for (const auto& t : r.traced) {
        const std::string label = workload_label(t.cgroup, r.names);
        out += "  " + label + ": " + thousands(t.processes) +
               (t.processes == 1 ? " process, " : " processes, ") + thousands(t.calls) +
               " CUDA calls\n";
        if (label != escape_line(t.cgroup)) out += "    " + escape_line(t.cgroup) + "\n";
      }
    }
  } else {
    size_t open = 0;
    for (const auto& c : r.chains) open += c.open ? 1 : 0;
    out += "Causal chains (" + last + "): " + std::to_string(r.chains.size()) + ", " +
           std::to_string(open) + " open\n";
    for (const auto& c : r.chains) {
      out += "\n";
      render_chain(out, c, now, r.names, r.query.stacks);
    }
  }

  render_nccl_waits(out, r.nccl_waits, r.names, last);

  if (r.query.per_process) {
    out += "\nProcess breakdown (" + last + "): " + thousands(r.processes.size()) +
           (r.processes.size() == 1 ? " process" : " processes") +
           (r.processes.size() > kMaxProcesses
                ? ", the " + std::to_string(kMaxProcesses) + " most off-CPU shown (--json has all)"
                : std::string()) +
           "\n";
    for (size_t i = 0; i < r.processes.size() && i < kMaxProcesses; i++) {
      out += "\n";
      render_process(out, r.processes[i], r.names);
    }
  }
  return out;
}

}  // namespace stallwatch::cli
