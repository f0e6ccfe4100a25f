#include "cli/export.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <tuple>
#include <utility>

#include "cli/flags.h"
#include "cli/open_store.h"
#include "cli/query.h"
#include "cli/version.h"
#include "common/duration.h"
#include "common/json.h"
#include "common/strings.h"
#include "metrics/otlp/protobuf.h"
#include "stallwatch_version.h"

namespace stallwatch::cli {
namespace {

using otlp::ProtoWriter;
using store::Timeline;
using store::TimelineCall;

constexpr const char* kUsage =
    "usage: stallwatch export --format perfetto|chrome-json [--db PATH] [--since DURATION]\n"
    "                         [--cgroup PATH] [--pid PID] [--timeout DURATION] -o FILE\n"
    "\n"
    "Writes the stored evidence of a period as a timeline: one process track per process, one\n"
    "thread track per CUDA-issuing thread with its outlier calls as slices (off-CPU time inside\n"
    "each), a track per causal chain, and per-window counters (off-CPU runnable and blocked\n"
    "shares, p99 of each synchronize call; each GPU's SM clock, held share and power, whatever\n"
    "--cgroup or --pid says). Open it in https://ui.perfetto.dev or chrome://tracing. Reads the\n"
    "database only; no root needed.\n"
    "\n"
    "options:\n"
    "  --format F       perfetto (protobuf trace, .pftrace) or chrome-json (Trace Event Format)\n"
    "  -o, --output F   the file to write (- for standard output)\n"
    "  --db PATH        the database (default /var/lib/stallwatch/stallwatch.db)\n"
    "  --since D        period, ending now (default 1h)\n"
    "  --cgroup PATH    only this cgroup and its descendants\n"
    "  --pid PID        only this process\n"
    "  --timeout D      give up after D (default 30s; 100ms to 24h, 0 for none)\n"
    "  -h, --help       this text\n"
    "  --version        the version (as `stallwatch version`)\n"
    "\n"
    "Slices are the calls at or above the daemon's --outlier-threshold (default 1ms), one row\n"
    "each in the store; faster calls are in the counters' histograms only.\n";

constexpr const char* kPrefix = "stallwatch export: ";

// ---- shared by both formats ----

// The calls of one thread, nested properly: sorted by start (longer first at equal starts),
// and a call that starts inside another but ends after it (clock conversion jitter of a
// microsecond) ends with it.
std::vector<TimelineCall> nested(std::vector<TimelineCall> calls) {
  std::sort(calls.begin(), calls.end(), [](const TimelineCall& a, const TimelineCall& b) {
    return std::tie(a.start_ns, b.end_ns) < std::tie(b.start_ns, a.end_ns);
  });
  std::vector<std::int64_t> open;  // ends of the enclosing calls, innermost last
  for (auto& c : calls) {
    while (!open.empty() && open.back() <= c.start_ns) open.pop_back();
    if (!open.empty() && c.end_ns > open.back()) c.end_ns = open.back();
    if (c.end_ns < c.start_ns) c.end_ns = c.start_ns;
    open.push_back(c.end_ns);
  }
  return calls;
}

// Calls by (pid, tid), each thread's nested.
std::map<std::pair<int, int>, std::vector<TimelineCall>> by_thread(const Timeline& t) {
  std::map<std::pair<int, int>, std::vector<TimelineCall>> out;
  for (const auto& c : t.calls) out[{c.pid, c.tid}].push_back(c);
  for (auto& [key, calls] : out) calls = nested(std::move(calls));
  return out;
}

std::int64_t chain_end(const store::ReportChain& c, const Timeline& t) {
  // An open chain is still going: it lasts to the end of the period.
  const std::int64_t end = c.open ? std::max(t.to_ns, c.updated_ns) : c.closed_ns;
  return std::max(end, c.opened_ns);
}

std::string process_label(const store::TimelineProcess& p) {
  std::string name = p.comm.empty() ? "pid " + std::to_string(p.pid) : escape_name(p.comm);
  if (!p.cgroup.empty()) name += " (" + escape_name(p.cgroup) + ")";
  return name;
}

std::string chain_label(const store::ReportChain& c) {
  return c.kind + " [" + c.severity + "] " + escape_name(c.cgroup);
}

// ---- Perfetto ----

// perfetto.protos field numbers (revision in export.h).
namespace pf {
constexpr std::uint32_t kTracePacket = 1;             // Trace.packet
constexpr std::uint32_t kTimestamp = 8;               // TracePacket.timestamp
constexpr std::uint32_t kSequenceId = 10;             // TracePacket.trusted_packet_sequence_id
constexpr std::uint32_t kTrackEvent = 11;             // TracePacket.track_event
constexpr std::uint32_t kSequenceFlags = 13;          // TracePacket.sequence_flags
constexpr std::uint32_t kTrackDescriptor = 60;        // TracePacket.track_descriptor
constexpr std::uint64_t kSeqIncrementalStateCleared = 1;
constexpr std::uint64_t kSeqNeedsIncrementalState = 2;
constexpr std::uint32_t kTdUuid = 1;                  // TrackDescriptor.uuid
constexpr std::uint32_t kTdName = 2;                  // TrackDescriptor.name
constexpr std::uint32_t kTdProcess = 3;               // TrackDescriptor.process
constexpr std::uint32_t kTdThread = 4;                // TrackDescriptor.thread
constexpr std::uint32_t kTdParentUuid = 5;            // TrackDescriptor.parent_uuid
constexpr std::uint32_t kTdCounter = 8;               // TrackDescriptor.counter
constexpr std::uint32_t kPdPid = 1;                   // ProcessDescriptor.pid
constexpr std::uint32_t kPdProcessName = 6;           // ProcessDescriptor.process_name
constexpr std::uint32_t kThdPid = 1;                  // ThreadDescriptor.pid
constexpr std::uint32_t kThdTid = 2;                  // ThreadDescriptor.tid
constexpr std::uint32_t kThdThreadName = 5;           // ThreadDescriptor.thread_name
constexpr std::uint32_t kCdUnit = 3;                  // CounterDescriptor.unit
constexpr std::uint32_t kCdUnitName = 6;              // CounterDescriptor.unit_name
constexpr std::uint64_t kUnitTimeNs = 1;              // CounterDescriptor.Unit.UNIT_TIME_NS
constexpr std::uint32_t kTeDebugAnnotations = 4;      // TrackEvent.debug_annotations
constexpr std::uint32_t kTeType = 9;                  // TrackEvent.type
constexpr std::uint32_t kTeTrackUuid = 11;            // TrackEvent.track_uuid
constexpr std::uint32_t kTeCategories = 22;           // TrackEvent.categories
constexpr std::uint32_t kTeName = 23;                 // TrackEvent.name
constexpr std::uint32_t kTeCounterValue = 30;         // TrackEvent.counter_value
constexpr std::uint32_t kTeDoubleCounterValue = 44;   // TrackEvent.double_counter_value
constexpr std::uint64_t kSliceBegin = 1;              // TrackEvent.Type
constexpr std::uint64_t kSliceEnd = 2;
constexpr std::uint64_t kCounter = 4;
constexpr std::uint32_t kDaName = 10;                 // DebugAnnotation.name
constexpr std::uint32_t kDaUintValue = 3;             // DebugAnnotation.uint_value
constexpr std::uint32_t kDaDoubleValue = 5;           // DebugAnnotation.double_value
constexpr std::uint32_t kDaStringValue = 6;           // DebugAnnotation.string_value
}  // namespace pf

struct Arg {
  std::string name;
  enum { kUint, kDouble, kString } type;
  std::uint64_t u = 0;
  double d = 0;
  std::string s;
};

Arg uint_arg(std::string name, std::uint64_t v) { return Arg{std::move(name), Arg::kUint, v, 0, {}}; }
Arg double_arg(std::string name, double v) { return Arg{std::move(name), Arg::kDouble, 0, v, {}}; }
Arg string_arg(std::string name, std::string v) {
  return Arg{std::move(name), Arg::kString, 0, 0, std::move(v)};
}

// One TracePacket with a TrackEvent, before sorting by time.
struct PfEvent {
  std::int64_t ts = 0;
  std::string packet;  // TracePacket bytes without timestamp and sequence fields
};

// A counter's unit as Perfetto's CounterDescriptor.unit_name and the Chrome names show it.
const char* unit_name(store::CounterUnit unit) {
  switch (unit) {
    case store::CounterUnit::kMegahertz:
      return "MHz";
    case store::CounterUnit::kWatts:
      return "W";
    case store::CounterUnit::kNanoseconds:
      return "ns";
    case store::CounterUnit::kRatio:
      break;
  }
  return "ratio";
}

class PerfettoWriter {
 public:
  std::uint64_t track(const std::string& name, std::uint64_t parent = 0) {
    ProtoWriter td;
    const std::uint64_t uuid = next_++;
    td.uint64_field(pf::kTdUuid, uuid);
    if (parent) td.uint64_field(pf::kTdParentUuid, parent);
    td.string_field(pf::kTdName, name);
    descriptor(td);
    return uuid;
  }
  std::uint64_t process(int pid, const std::string& name) {
    ProtoWriter pd, td;
    pd.int64_field(pf::kPdPid, pid);
    pd.string_field(pf::kPdProcessName, name);
    const std::uint64_t uuid = next_++;
    td.uint64_field(pf::kTdUuid, uuid);
    td.message_field(pf::kTdProcess, pd);
    descriptor(td);
    return uuid;
  }
  std::uint64_t thread(int pid, int tid, const std::string& name) {
    ProtoWriter thd, td;
    thd.int64_field(pf::kThdPid, pid);
    thd.int64_field(pf::kThdTid, tid);
    thd.string_field(pf::kThdThreadName, name);
    const std::uint64_t uuid = next_++;
    td.uint64_field(pf::kTdUuid, uuid);
    td.message_field(pf::kTdThread, thd);
    descriptor(td);
    return uuid;
  }
  std::uint64_t counter(const std::string& name, std::uint64_t parent, store::CounterUnit unit) {
    ProtoWriter cd, td;
    if (unit == store::CounterUnit::kNanoseconds) {
      cd.uint64_field(pf::kCdUnit, pf::kUnitTimeNs);
    } else {
      cd.string_field(pf::kCdUnitName, unit_name(unit));
    }
    const std::uint64_t uuid = next_++;
    td.uint64_field(pf::kTdUuid, uuid);
    td.uint64_field(pf::kTdParentUuid, parent);
    td.string_field(pf::kTdName, name);
    td.message_field(pf::kTdCounter, cd);
    descriptor(td);
    return uuid;
  }

  void slice(std::uint64_t track, std::int64_t start, std::int64_t end, const std::string& name,
             const char* category, const std::vector<Arg>& args) {
    ProtoWriter begin;
    begin.uint64_field(pf::kTeType, pf::kSliceBegin);
    begin.uint64_field(pf::kTeTrackUuid, track);
    begin.string_field(pf::kTeCategories, category);
    begin.string_field(pf::kTeName, name);
    for (const auto& a : args) {
      ProtoWriter da;
      da.string_field(pf::kDaName, a.name);
      if (a.type == Arg::kUint) da.uint64_field(pf::kDaUintValue, a.u);
      if (a.type == Arg::kDouble) da.double_field(pf::kDaDoubleValue, a.d);
      if (a.type == Arg::kString) da.string_field(pf::kDaStringValue, a.s);
      begin.message_field(pf::kTeDebugAnnotations, da);
    }
    event(start, begin);
    ProtoWriter finish;
    finish.uint64_field(pf::kTeType, pf::kSliceEnd);
    finish.uint64_field(pf::kTeTrackUuid, track);
    event(end, finish);
  }
  void count(std::uint64_t track, std::int64_t ts, double value, bool integer) {
    ProtoWriter te;
    te.uint64_field(pf::kTeType, pf::kCounter);
    te.uint64_field(pf::kTeTrackUuid, track);
    if (integer) {
      te.int64_field(pf::kTeCounterValue, static_cast<std::int64_t>(value + 0.5));
    } else {
      te.double_field(pf::kTeDoubleCounterValue, value);
    }
    event(ts, te);
  }

  // Descriptors first, then the events in time order (a track's own order kept at equal
  // times: a slice's end before the next slice's begin).
  std::string finish(std::int64_t origin) {
    ProtoWriter trace;
    bool first = true;
    auto packet = [&](std::int64_t ts, const std::string& body) {
      ProtoWriter p;
      p.uint64_field(pf::kTimestamp, static_cast<std::uint64_t>(std::max<std::int64_t>(ts, 0)));
      p.uint64_field(pf::kSequenceId, 1);
      p.uint64_field(pf::kSequenceFlags,
                     first ? pf::kSeqIncrementalStateCleared : pf::kSeqNeedsIncrementalState);
      first = false;
      p.append_raw(body);
      trace.message_field(pf::kTracePacket, p);
    };
    for (const auto& d : descriptors_) packet(origin, d);
    std::stable_sort(events_.begin(), events_.end(),
                     [](const PfEvent& a, const PfEvent& b) { return a.ts < b.ts; });
    for (const auto& e : events_) packet(e.ts, e.packet);
    return trace.take();
  }

 private:
  void descriptor(const ProtoWriter& td) {
    ProtoWriter body;
    body.message_field(pf::kTrackDescriptor, td);
    descriptors_.push_back(body.take());
  }
  void event(std::int64_t ts, const ProtoWriter& te) {
    ProtoWriter body;
    body.message_field(pf::kTrackEvent, te);
    events_.push_back(PfEvent{ts, body.take()});
  }

  std::uint64_t next_ = 1;
  std::vector<std::string> descriptors_;
  std::vector<PfEvent> events_;
};

// PID_MAX_LIMIT is 4,194,304: the GPUs' pseudo-process in Chrome JSON is above any real pid.
constexpr int kGpuPseudoPid = 4194305;

// "GPU 0 NVIDIA H100 80GB HBM3 SM clock (MHz)": the name as stored, escaped once more.
std::string gpu_counter_name(const Timeline& t, const store::TimelineGpuSample& s) {
  std::string name = "GPU " + std::to_string(s.gpu);
  if (auto it = t.gpu_names.find(s.gpu); it != t.gpu_names.end() && !it->second.empty()) {
    name += " " + escape_name(it->second);
  }
  name += " " + s.counter;
  if (s.unit == store::CounterUnit::kMegahertz || s.unit == store::CounterUnit::kWatts) {
    name += std::string(" (") + unit_name(s.unit) + ")";
  }
  return name;
}

std::vector<Arg> call_args(const TimelineCall& c) {
  return {string_arg("api", c.api), uint_arg("offcpu_runnable_ns", c.runnable_ns),
          uint_arg("offcpu_blocked_ns", c.blocked_ns), uint_arg("preemptions", c.preemptions)};
}

std::vector<Arg> chain_args(const store::ReportChain& c) {
  std::vector<Arg> a{string_arg("id", c.id), string_arg("kind", c.kind),
                     string_arg("severity", c.severity), string_arg("cgroup", escape_name(c.cgroup)),
                     string_arg("state", c.open ? "open" : "closed")};
  if (!c.call.empty()) a.push_back(string_arg("call", c.call));
  if (c.pid) a.push_back(uint_arg("pid", static_cast<std::uint64_t>(c.pid)));
  if (c.p99_s > 0) a.push_back(double_arg("p99_s", c.p99_s));
  if (c.baseline_p99_s > 0) a.push_back(double_arg("baseline_p99_s", c.baseline_p99_s));
  a.push_back(string_arg("summary", escape_name(c.summary)));
  if (!c.recommendation.empty()) a.push_back(string_arg("fix", escape_name(c.recommendation)));
  return a;
}

// ---- Chrome JSON ----

// Microseconds since `origin` with the nanoseconds kept: "12.345".
Json micros(std::int64_t ns, std::int64_t origin) {
  const std::int64_t d = ns - origin;
  return Json(static_cast<double>(d) / 1000.0);
}

Json chrome_args(const std::vector<Arg>& args) {
  Json o = Json::object();
  for (const auto& a : args) {
    if (a.type == Arg::kUint) o[a.name] = a.u;
    if (a.type == Arg::kDouble) o[a.name] = json_value(a.d);
    if (a.type == Arg::kString) o[a.name] = to_valid_utf8(a.s);
  }
  return o;
}

}  // namespace

std::string perfetto_trace(const Timeline& t) {
  PerfettoWriter w;
  std::map<int, std::uint64_t> process_track;
  for (const auto& p : t.processes) process_track[p.pid] = w.process(p.pid, process_label(p));
  for (const auto& [key, calls] : by_thread(t)) {
    const std::uint64_t track =
        w.thread(key.first, key.second, escape_name(calls.front().thread));
    for (const auto& c : calls) w.slice(track, c.start_ns, c.end_ns, c.call, "cuda", call_args(c));
  }
  std::map<std::pair<int, std::string>, std::uint64_t> counters;
  for (const auto& s : t.samples) {
    const bool ns = s.unit == store::CounterUnit::kNanoseconds;
    auto [it, fresh] = counters.try_emplace({s.pid, s.counter}, 0);
    if (fresh) it->second = w.counter(s.counter, process_track[s.pid], s.unit);
    w.count(it->second, s.ts_ns, s.value, ns);
  }
  if (!t.gpu_samples.empty()) {
    const std::uint64_t root = w.track("GPUs");
    std::map<std::pair<unsigned, std::string>, std::uint64_t> gpu_counters;
    for (const auto& s : t.gpu_samples) {
      auto [it, fresh] = gpu_counters.try_emplace({s.gpu, s.counter}, 0);
      if (fresh) it->second = w.counter(gpu_counter_name(t, s), root, s.unit);
      w.count(it->second, s.ts_ns, s.value, false);
    }
  }
  if (!t.chains.empty()) {
    const std::uint64_t root = w.track("Causal chains");
    for (const auto& c : t.chains) {
      const std::uint64_t track = w.track(chain_label(c) + " " + c.id, root);
      w.slice(track, c.opened_ns, chain_end(c, t), c.kind + " (" + c.severity + ")", "chain",
              chain_args(c));
    }
  }
  return w.finish(t.from_ns);
}

std::string chrome_trace_json(const Timeline& t) {
  Json events = Json::array();
  const std::int64_t origin = t.from_ns;
  for (const auto& p : t.processes) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", p.pid},
                      {"args", {{"name", to_valid_utf8(process_label(p))}}}});
  }
  for (const auto& [key, calls] : by_thread(t)) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", key.first}, {"tid", key.second},
                      {"args", {{"name", to_valid_utf8(escape_name(calls.front().thread))}}}});
    for (const auto& c : calls) {
      events.push_back({{"name", c.call}, {"cat", "cuda"}, {"ph", "X"},
                        {"ts", micros(c.start_ns, origin)},
                        {"dur", static_cast<double>(c.end_ns - c.start_ns) / 1000.0},
                        {"pid", c.pid}, {"tid", c.tid}, {"args", chrome_args(call_args(c))}});
    }
  }
  for (const auto& s : t.samples) {
    const bool ns = s.unit == store::CounterUnit::kNanoseconds;
    events.push_back({{"name", ns ? s.counter + " (ms)" : s.counter}, {"ph", "C"}, {"pid", s.pid},
                      {"ts", micros(s.ts_ns, origin)},
                      {"args", {{"value", json_value(ns ? s.value / 1e6 : s.value)}}}});
  }
  // GPUs: counters of a pseudo-process of their own, a pid no process can have.
  for (const auto& s : t.gpu_samples) {
    events.push_back({{"name", to_valid_utf8(gpu_counter_name(t, s))}, {"ph", "C"},
                      {"pid", kGpuPseudoPid}, {"ts", micros(s.ts_ns, origin)},
                      {"args", {{"value", json_value(s.value)}}}});
  }
  if (!t.gpu_samples.empty()) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", kGpuPseudoPid},
                      {"args", {{"name", "GPUs"}}}});
  }
  // Chains: nestable async slices, one id each, so overlapping chains never nest; a chain
  // without a process sits in a "causal chains" pseudo-process (pid 0).
  bool pseudo = false;
  for (const auto& c : t.chains) {
    pseudo = pseudo || c.pid == 0;
    Json base{{"name", c.kind + " (" + c.severity + ")"}, {"cat", "chain"},
              {"id2", {{"global", c.id}}}, {"pid", c.pid}, {"tid", 0}};
    Json b = base, e = base;
    b["ph"] = "b";
    b["ts"] = micros(c.opened_ns, origin);
    b["args"] = chrome_args(chain_args(c));
    e["ph"] = "e";
    e["ts"] = micros(chain_end(c, t), origin);
    events.push_back(std::move(b));
    events.push_back(std::move(e));
  }
  if (pseudo) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                      {"args", {{"name", "causal chains"}}}});
  }
  Json doc{{"traceEvents", std::move(events)},
           {"displayTimeUnit", "ns"},
           {"otherData",
            {{"generator", std::string("stallwatch ") + STALLWATCH_VERSION},
             {"origin_unix_ns", std::to_string(origin)},
             {"until_unix_ns", std::to_string(t.to_ns)},
             {"calls_left_out", t.calls_left_out}}}};
  return dump_json(doc) + "\n";
}

namespace {

// `bytes` into a new file beside `path`, then renamed over it: a reader never sees half a trace.
// The temporary name is random and created with O_EXCL (mkostemp), which refuses any existing
// name, a symlink included, so a link planted in the directory (FILE.tmp -> /etc/shadow, when
// root exports into /tmp) is never written through; rename() replaces a link at `path` itself,
// not its target. Mode 0600: the trace names the host's processes and cgroups.
Result<Ok> write_replacing(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return make_error("cannot write " + escape_name(path) + ": " + std::strerror(e) +
                          " (creating a temporary file beside it); pass -o in a directory you "
                          "can write",
                      e);
  }
  int e = 0;
  for (size_t done = 0; done < bytes.size() && e == 0;) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno != EINTR) e = errno;
    if (n > 0) done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && e == 0) e = errno;
  if (e == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) e = errno;
  if (e != 0) {
    ::unlink(tmp.c_str());
    return make_error("cannot write " + escape_name(path) + ": " + std::strerror(e), e);
  }
  return Ok{};
}

}  // namespace

int export_main(const std::vector<std::string>& args) {
  po::options_description desc;
  // clang-format off
  add_help_flags(desc);
  desc.add_options()
    ("format", po::value<std::string>(), "")
    ("output,o", po::value<std::string>(), "")
    ("db", po::value<std::string>(), "")
    ("since", po::value<std::string>(), "")
    ("cgroup", po::value<std::string>(), "")
    ("pid", po::value<std::string>(), "")
    ("timeout", po::value<std::string>(), "");
  // clang-format on
  auto usage_error = [](const std::string& m) { return cli::usage_error(std::cerr, "export", m); };
  auto vm = parse_flags(args, desc);
  if (!vm) return usage_error(vm.error().message);
  if (vm->count("help")) {
    std::cout << kUsage;
    return 0;
  }
  if (vm->count("version")) {
    std::cout << version_text();
    return 0;
  }
  if (!vm->count("format")) return usage_error("--format is required (perfetto or chrome-json)");
  const std::string format = (*vm)["format"].as<std::string>();
  if (format != "perfetto" && format != "chrome-json") {
    return usage_error("unknown format '" + format + "' (perfetto or chrome-json)");
  }
  if (!vm->count("output")) return usage_error("-o FILE is required (- for standard output)");
  const std::string output = (*vm)["output"].as<std::string>();
  if (output.empty()) return usage_error("-o needs a file name");
  std::string db = kDefaultDbPath;
  if (vm->count("db")) db = (*vm)["db"].as<std::string>();
  store::TimelineQuery q;
  q.period.since_ns = std::chrono::nanoseconds(std::chrono::hours(1)).count();
  if (vm->count("since")) {
    auto d = parse_duration((*vm)["since"].as<std::string>());
    if (!d) return usage_error("--since: " + d.error().message);
    if (d->count() <= 0) return usage_error("--since must be longer than 0");
    q.period.since_ns = d->count();
  }
  if (vm->count("cgroup")) q.period.cgroup = (*vm)["cgroup"].as<std::string>();
  if (vm->count("pid")) {
    auto pid = read_pid((*vm)["pid"].as<std::string>());
    if (!pid) return usage_error(pid.error().message);
    q.pid = *pid;
  }
  std::chrono::nanoseconds timeout = kDefaultReadTimeout;
  if (vm->count("timeout")) {
    auto t = read_timeout((*vm)["timeout"].as<std::string>(), "--timeout");
    if (!t) return usage_error(t.error().message);
    timeout = *t;
  }
  q.period.now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();

  auto opened = open_store(db, "export");
  if (!opened) {
    std::cerr << kPrefix << opened.error().message << "\n";
    return 1;
  }
  if (!opened->note.empty()) std::cerr << kPrefix << opened->note << "\n";
  Result<store::Timeline> timeline = make_error("not read");
  {
    const store::StatementDeadline deadline(opened->db.get(), timeout);
    timeline = store::load_timeline(opened->db.get(), q);
    if (!timeline && deadline.expired()) {
      std::cerr << kPrefix << "stopped after " << format_duration(timeout)
                << " (--timeout); export a shorter period (--since), one cgroup or one --pid, "
                   "or raise --timeout\n";
      return 1;
    }
  }
  if (!timeline) {
    std::cerr << kPrefix << "reading " << db << ": " << timeline.error().message << "\n";
    return 1;
  }
  const std::string bytes =
      format == "perfetto" ? perfetto_trace(*timeline) : chrome_trace_json(*timeline);
  if (output == "-") {
    std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::cout.flush();
    if (!std::cout) return 1;
  } else if (auto written = write_replacing(output, bytes); !written) {
    std::cerr << kPrefix << written.error().message << "\n";
    return 1;
  }
  const auto& t = *timeline;
  std::cerr << kPrefix << "wrote " << (output == "-" ? std::string("standard output") : output)
            << " (" << format << ", " << bytes.size() << " bytes): " << t.processes.size()
            << " processes, " << t.calls.size() << " calls, " << t.chains.size() << " chains, "
            << t.samples.size() << " counter samples";
  if (!t.gpu_names.empty() || !t.gpu_samples.empty()) {
    std::cerr << ", " << t.gpu_samples.size() << " GPU counter samples";
  }
  if (t.calls_left_out) std::cerr << "; " << t.calls_left_out << " calls past 1000000 left out";
  std::cerr << "\n";
  return 0;
}

}  // namespace stallwatch::cli
