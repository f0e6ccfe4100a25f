#include "cli/options.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "cli/flags.h"
#include "cli/version.h"
#include "common/duration.h"
#include "common/file_trust.h"
#include "common/size.h"
#include "common/strings.h"

namespace stallwatch::cli {

namespace {

constexpr const char* kDefaultConfig = "/etc/stallwatch/stallwatch.conf";

constexpr const char* kEpilogue =
    "\nEvery flag but --help and --version can also be set as STALLWATCH_<FLAG>: upper case, '.'\n"
    "and '-' as '_', e.g. STALLWATCH_OUTLIER_THRESHOLD=2ms, STALLWATCH_LOG_LEVEL=debug; a\n"
    "repeatable flag takes a comma-separated list, a switch true or false. Precedence: flag >\n"
    "STALLWATCH_* > OTEL_* (the OTLP settings) > --config file > default.\n";

// A value flag whose --help line shows `--name PLACEHOLDER` (DURATION, SIZE, PATH, on|off).
po::typed_value<std::string>* value(const char* placeholder) {
  return po::value<std::string>()->value_name(placeholder);
}

// The placeholders of the --otlp-* flags (metrics/otlp/config.h owns their names and text).
const char* otlp_placeholder(std::string_view name) {
  static constexpr std::pair<std::string_view, const char*> kPlaceholders[] = {
      {"otlp-endpoint", "URL"},
      {"otlp-logs-endpoint", "URL|none"},
      {"otlp-header", "KEY=VALUE"},
      {"otlp-headers-file", "FILE"},
      {"otlp-temporality", "TEMPORALITY"},
      {"otlp-histogram", "explicit|exponential"},
      {"otlp-interval", "DURATION"},
      {"otlp-compression", "gzip|none"},
      {"otlp-timeout", "DURATION"},
      {"otlp-max-retry-time", "DURATION"},
      {"otlp-max-queue", "SIZE"},
      {"otlp-certificate", "FILE"},
      {"otlp-client-certificate", "FILE"},
      {"otlp-client-key", "FILE"},
  };
  for (const auto& [flag, placeholder] : kPlaceholders) {
    if (flag == name) return placeholder;
  }
  return "VALUE";
}

// --help groups the flags by what they set, as the exporters' --help does; run_flag_names() and
// the config file see one list (the groups in this order).
po::options_description run_options_description() {
  constexpr unsigned kWidth = 100, kMinDescription = 50;
  po::options_description desc(
      "stallwatch run [options]\n\nTrace CUDA calls and the scheduler; "
      "serve /metrics, /healthz and /debug/snapshot; push OTLP when configured.\n\nGeneral",
      kWidth, kMinDescription);
  po::options_description web("Web", kWidth, kMinDescription);
  po::options_description metrics("Metrics", kWidth, kMinDescription);
  po::options_description store("Store", kWidth, kMinDescription);
  po::options_description tracing("Tracing", kWidth, kMinDescription);
  po::options_description gpu("GPU", kWidth, kMinDescription);
  po::options_description kube("Kubernetes", kWidth, kMinDescription);
  po::options_description otlp("OTLP", kWidth, kMinDescription);
  po::options_description logging("Logging", kWidth, kMinDescription);
  po::options_description paths("Paths", kWidth, kMinDescription);
  add_help_flags(desc);
  // clang-format off
  desc.add_options()
    ("config", value("FILE"), "read options from FILE (`name = value` lines; flags "
     "win; default /etc/stallwatch/stallwatch.conf when it exists; none: no file)")
    ("lock-file", value("PATH"), "one daemon per node: a second one that finds this "
     "file locked exits naming the first's PID (default /run/stallwatch/stallwatch.lock; none: "
     "no lock, "
     "for tests)");
  web.add_options()
    ("web.listen-address", value("ADDR:PORT"), "ADDR:PORT for /metrics, /healthz "
     "(default 0.0.0.0:9464)")
    ("listen", value("ADDR:PORT"), "the same as --web.listen-address (older name)")
    ("web.telemetry-path", value("PATH"), "the path of the metrics (default /metrics)")
    ("web.config.file", value("FILE"), "TLS and basic auth for --listen, in "
     "exporter-toolkit's YAML (as node_exporter); re-read when it changes (docs/http.md)")
    ("web.enable-debug", "serve /debug/snapshot: pids, comms and cgroups of every workload and "
     "preemptor (off by default)")
    ("web.max-connections", value("N"), "open HTTP connections served; more get "
     "503 (4 to 10000, default 64)")
    ("web.classic-histograms", value("BOOL"), "true (default): the protobuf "
     "exposition carries classic buckets beside the native histograms; false: native only");
  metrics.add_options()
    ("metrics.identity-labels", value("LIST"), "identity labels on every series "
     "beside the short workload key: a comma list of pod, namespace, container, container_id, "
     "cgroup (the full path), or none (default pod,namespace,container; stallwatch_cgroup_info "
     "keeps them all for joins)")
    ("metrics.calls", value("class|call"), "CUDA call series: class (default: one per "
     "class of call: launch, sync, copy, memory, graph_build, nccl, other) or call (one per call)")
    ("metrics.histogram-ladder", value("x4|x2|x16"), "classic histogram bounds: x4 "
     "(default: every 2nd power of two, 14 bounds), x2 (every power, 27) or x16 (every 4th, 7)")
    ("max-cgroups", value("N"), "cgroups with their own series; the rest fold into "
     "cgroup=\"_overflow\" (default 256)");
  store.add_options()
    ("db", value("PATH"), "chain store path (default /var/lib/stallwatch/stallwatch.db; "
     "\"none\" keeps no store)")
    ("max-db", value("SIZE"), "prune the oldest data past this size: 2GiB, 500MiB "
     "(default 2GiB)")
    ("retention", value("DURATION"), "delete data older than this: 12h, 7d (default 7d)");
  tracing.add_options()
    ("window", value("DURATION"), "snapshot window: 500ms, 5s, 1m (default 5s)")
    ("outlier-threshold", value("DURATION"),
     "calls at least this long are sent to user space one by one (default 1ms)")
    ("stacks", value("on|off"), "on (default) or off: the native and Python stack of "
     "each outlier call, for the call sites of chains and `stallwatch stacks`")
    ("hang-threshold", value("DURATION"),
     "a synchronize, copy or NCCL op still open this long opens a critical call_hang chain "
     "(1s to 24h, default 60s)")
    ("rescan-interval", value("DURATION"),
     "full /proc rescan for CUDA libraries (default 30s; mappings are also caught as they happen)")
    ("detach-linger", value("DURATION"),
     "keep probes on a library this long after the last process unmapped it (default 30s)")
    ("max-libraries", value("N"), "CUDA library files (container image copies) "
     "traced at once, ~42 probes each; more are refused, logged and counted (default 128)")
    ("library-dirs", value("DIR[,DIR]"), "comma list of directories whose CUDA library "
     "files get probes at start and at each rescan, before any process maps them (no first "
     "calls lost after a dlopen)")
    ("cgroup-roots", value("PATH[,PATH]"), "comma list of up to 8 cgroups, as paths from "
     "the cgroup2 mount (/kubepods.slice, /slurm.slice): only processes in them or below are "
     "traced; others cost a flag test per CUDA call (default: every cgroup)")
    ("attach-on-disk", value("true|false|auto"), "true: also attach the CUDA libraries of the "
     "standard directories (CUDA toolkit, distribution, conda, pip wheels) at start, so no call "
     "right after a dlopen is lost; false: each file is attached when a process first maps it; "
     "auto (default): true where the kernel has multi-uprobe links, false elsewhere")
    ("launch-layer", value("LAYER"), "whose kernel launches get probes: driver "
     "(cuLaunchKernel*, one probe pair per launch, also launches that skip the runtime), runtime "
     "(cudaLaunchKernel only), both (two pairs per runtime launch), none (no launch probed: no "
     "trap per launch for launch-bound jobs; no launch rate or latency) (default driver)")
    ("probe-sites", value("auto|entry"), "auto (default): each probe on the first "
     "instruction of its function that this kernel emulates (measured at start), past endbr64 "
     "and compares, e.g. the je of NVIDIA's driver stubs instead of their single-stepped compare "
     "(~10x cheaper a call); entry: every probe at its symbol's first byte")
    ("cost-budget", value("PERCENT"), "the most a workload pays in probes, as a share of "
     "its CUDA-issuing threads' CPU time: above it its kernel launches' probes are duty-cycled "
     "(counts scaled back; synchronize, copy, allocation and NCCL calls keep every probe), e.g. "
     "0.5%; 0: no budget (default 1%)")
    ("uprobe-multi", value("on|off"), "on: one multi-uprobe link per library file and "
     "direction where the kernel has them (Linux 6.6; attach and detach in milliseconds); off: "
     "one link per probe, as on older kernels (default on)");
  gpu.add_options()
    ("gpu-monitor", value("on|off"), "on (default): read each GPU's clocks, throttle "
     "reasons, temperature, power and processes through NVML, and Xid errors from /dev/kmsg, for "
     "the gpu_throttle and gpu_xid chains; off: neither")
    ("nvml-library", value("PATH"), "the NVML library to load (default "
     "libnvidia-ml.so.1 as the dynamic loader finds it); absent, GPU readings are off and the "
     "daemon goes on")
    ("gpu-sample-interval", value("DURATION"), "how often NVML is read (50ms to 10s, "
     "default 250ms)");
  kube.add_options()
    ("kube-api", value("URL|none"), "Kubernetes API server for pod/namespace/container "
     "names (default: in a pod, the in-cluster address; \"none\" turns it off)")
    ("kube-node", value("NAME"), "this node's name, whose pods are listed (default "
     "$NODE_NAME, else the hostname)")
    ("kube-refresh", value("DURATION"), "list the node's pods this often (default 60s; a "
     "new pod is looked up at once, at most every 5s)");
  paths.add_options()
    ("path.procfs", value("PATH"), "the host's procfs mount point (default /proc; "
     "e.g. /host/proc in a container)")
    ("path.sysfs", value("PATH"), "the host's sysfs mount point (default /sys)");
  // clang-format on
  add_log_flags(logging);
  for (const auto& f : otlp::push_flag_infos()) {
    const char* placeholder = otlp_placeholder(f.name);
    if (f.repeatable) {
      otlp.add_options()(
          f.name, po::value<std::vector<std::string>>()->composing()->value_name(placeholder),
          f.help);
    } else {
      otlp.add_options()(f.name, value(placeholder), f.help);
    }
  }
  for (const auto* group :
       {&web, &metrics, &store, &tracing, &gpu, &kube, &otlp, &logging, &paths}) {
    desc.add(*group);
  }
  return desc;
}

// The string value of `name` from the first layer that has it; `source` names it in errors.
Result<double> parse_cost_budget(std::string_view text) {
  const char* why =
      "expected a percentage of CPU time from 0.1% to 50% (e.g. 1%), or 0 for no budget";
  if (text == "0" || text == "0%") return 0.0;
  if (text.size() < 2 || text.back() != '%') return make_error(why);
  const std::string number(text.substr(0, text.size() - 1));
  char* end = nullptr;
  errno = 0;
  const double percent = std::strtod(number.c_str(), &end);
  if (errno != 0 || end != number.c_str() + number.size() || !(percent >= 0.1 && percent <= 50)) {
    return make_error(why);
  }
  return percent / 100;
}

const std::string* text_flag(const LayeredFlags& flags, const char* name, std::string* source) {
  const po::variable_value* v = flags.find(name, source);
  return v ? &v->as<std::string>() : nullptr;
}

// A two-valued flag: `yes` (or true) sets `out`, `no` (or false) clears it; absent leaves it.
Result<Ok> switch_flag(const LayeredFlags& flags, const char* name, const char* yes,
                       const char* no, bool& out) {
  std::string source;
  const std::string* v = text_flag(flags, name, &source);
  if (!v) return Ok{};
  if (*v == yes || *v == "true") {
    out = true;
  } else if (*v == no || *v == "false") {
    out = false;
  } else {
    return make_error(source + " " + *v + ": expected " + yes + " or " + no);
  }
  return Ok{};
}

// The documented range of every duration flag of run (README "Flag ranges"): a value outside
// it is refused at parse time, so `--window 1ns` or `--retention 100000d` never reach the
// daemon.
struct DurationRange {
  const char* name;
  std::chrono::nanoseconds min, max;
};
using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
constexpr DurationRange kDurationRanges[] = {
    {"window", milliseconds(100), hours(1)},
    {"outlier-threshold", microseconds(10), hours(1)},
    {"hang-threshold", seconds(1), hours(24)},
    {"gpu-sample-interval", milliseconds(50), seconds(10)},
    {"rescan-interval", seconds(1), hours(24)},
    {"retention", minutes(1), hours(24 * 3650)},
    {"detach-linger", seconds(0), hours(24)},
    {"kube-refresh", seconds(1), hours(24)},
};

}  // namespace

Result<Ok> set_identity_labels(const std::string& value, const std::string& source,
                               metrics::ExpositionOptions& e) {
  e.cgroup = e.container_id = e.pod = e.pod_namespace = e.container = false;
  if (value == "none") return Ok{};
  size_t start = 0;
  while (start <= value.size()) {
    size_t end = value.find(',', start);
    if (end == std::string::npos) end = value.size();
    const std::string name = value.substr(start, end - start);
    if (name == "cgroup") {
      e.cgroup = true;
    } else if (name == "container_id") {
      e.container_id = true;
    } else if (name == "pod") {
      e.pod = true;
    } else if (name == "namespace") {
      e.pod_namespace = true;
    } else if (name == "container") {
      e.container = true;
    } else {
      return make_error(source + " " + value + ": unknown label '" + name +
                        "' (pod, namespace, container, container_id, cgroup, or none)");
    }
    start = end + 1;
  }
  return Ok{};
}

Result<Ok> set_histogram_ladder(const std::string& value, const std::string& source,
                                metrics::ExpositionOptions& e) {
  if (value == "x2") {
    e.ladder_step = 1;
  } else if (value == "x4") {
    e.ladder_step = 2;
  } else if (value == "x16") {
    e.ladder_step = 4;
  } else {
    return make_error(source + " " + value + ": expected x4, x2 or x16");
  }
  return Ok{};
}

Result<Ok> set_metric_calls(const std::string& value, const std::string& source,
                            metrics::ExpositionOptions& e) {
  if (value != "class" && value != "call") {
    return make_error(source + " " + value + ": expected class or call");
  }
  e.per_call = value == "call";
  return Ok{};
}

namespace {

Result<std::chrono::nanoseconds> duration_flag(const LayeredFlags& flags, const char* name,
                                               std::chrono::nanoseconds fallback) {
  std::string source;
  const std::string* text = text_flag(flags, name, &source);
  if (!text) return fallback;
  auto d = parse_duration(*text);
  if (!d) return make_error(source + ": " + d.error().message);
  for (const auto& r : kDurationRanges) {
    if (std::string_view(r.name) != name) continue;
    if (*d < r.min || *d > r.max) {
      return make_error(source + " " + *text + " is out of range: use " +
                        (r.min.count() == 0 ? std::string("0") : format_duration(r.min)) +
                        " to " + format_duration(r.max));
    }
  }
  return *d;
}

// A whole number in [min, max]; `source` names the flag or variable in the error.
Result<std::int64_t> bounded_count(const std::string& text, const std::string& source,
                                   std::int64_t min, std::int64_t max) {
  std::int64_t n = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, n);
  if (ec != std::errc() || p != end) {
    return make_error(source + ": expected a whole number, not '" + text + "'");
  }
  if (n < min || n > max) {
    return make_error(source + " " + text + " is out of range: use " + std::to_string(min) +
                      " to " + std::to_string(max));
  }
  return n;
}

// The non-empty items of a comma list ("a,,b" is a, b).
std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

bool valid_listen(const std::string& s) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon + 1 >= s.size()) return false;
  std::string port = s.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5) return false;
  int p = std::stoi(port);
  return p > 0 && p < 65536;
}

// The --otlp-* flags: the first of the command line and the environment into o.otlp, else the
// config file's into o.otlp_file. A repeatable flag adds up: the file's, then the
// environment's, then the command line's (later headers override earlier ones by key).
Result<Ok> otlp_flags(const LayeredFlags& flags, size_t file_layer, RunOptions& o) {
  for (const auto& f : otlp::push_flag_infos()) {
    for (size_t n = 0; n < flags.layers(); ++n) {
      const size_t i = f.repeatable ? flags.layers() - 1 - n : n;
      const po::variables_map& vm = flags.layer(i);
      if (!vm.count(f.name)) continue;
      std::vector<std::string> values;
      if (f.repeatable) {
        values = vm[f.name].as<std::vector<std::string>>();
      } else {
        values.push_back(vm[f.name].as<std::string>());
      }
      const std::string source = flags.source(i, f.name);
      for (const auto& v : values) {
        auto set = otlp::set_push_flag(i == file_layer ? o.otlp_file : o.otlp, f.name, v);
        if (!set) return make_error(LayeredFlags::relabel(set.error().message, f.name, source));
      }
      if (!f.repeatable) break;
    }
  }
  return Ok{};
}

Result<RunOptions> resolve(const LayeredFlags& flags, size_t file_layer, RunOptions o) {
  // Which flags the environment set, for messages of later checks.
  for (size_t i = 0; i < flags.layers(); ++i) {
    if (i == file_layer) continue;  // a config file's values are named FILE:LINE where they err
    for (const auto& [name, value] : flags.layer(i)) {
      if (flags.find(name) != &value) continue;  // a higher layer set it
      const std::string source = flags.source(i, name);
      if (source != "--" + name) o.from_env[name] = source;
    }
  }
  std::string source;
  if (const std::string* listen = text_flag(flags, "web.listen-address", &source)) {
    o.listen = *listen;
  } else if (const std::string* old = text_flag(flags, "listen", &source)) {
    o.listen = *old;
  }
  if (!valid_listen(o.listen)) {
    return make_error((source.empty() ? "--web.listen-address" : source) + " " + o.listen +
                      ": expected ADDR:PORT, e.g. 127.0.0.1:9464");
  }
  if (const std::string* path = text_flag(flags, "web.telemetry-path", &source)) {
    if (path->empty() || (*path)[0] != '/' || *path == "/" || *path == "/healthz" ||
        path->starts_with("/debug/") || path->find_first_of("?# \t") != std::string::npos) {
      return make_error(source + " " + *path +
                        ": expected a path of its own, e.g. /metrics (not /, /healthz or /debug/)");
    }
    o.telemetry_path = *path;
  }
  if (const std::string* lock = text_flag(flags, "lock-file", &source)) {
    if (*lock != "none" && (lock->empty() || (*lock)[0] != '/')) {
      return make_error(source + " " + *lock + ": expected an absolute path, or none");
    }
    o.lock_file = *lock;
  }
  if (const std::string* web = text_flag(flags, "web.config.file", &source)) {
    o.web_config_file = *web;
  }
  o.web_enable_debug = flags.find("web.enable-debug") != nullptr;
  if (const std::string* ids = text_flag(flags, "metrics.identity-labels", &source)) {
    if (auto r = set_identity_labels(*ids, source, o.exposition); !r) return r.error();
  }
  if (const std::string* ladder = text_flag(flags, "metrics.histogram-ladder", &source)) {
    if (auto r = set_histogram_ladder(*ladder, source, o.exposition); !r) return r.error();
  }
  if (const std::string* calls = text_flag(flags, "metrics.calls", &source)) {
    if (auto r = set_metric_calls(*calls, source, o.exposition); !r) return r.error();
  }
  if (auto r = switch_flag(flags, "web.classic-histograms", "true", "false",
                           o.web_classic_histograms);
      !r) {
    return r.error();
  }
  if (auto r = switch_flag(flags, "stacks", "on", "off", o.stacks); !r) return r.error();
  if (const std::string* max = text_flag(flags, "web.max-connections", &source)) {
    auto n = bounded_count(*max, source, 4, 10000);
    if (!n) return n.error();
    o.web_max_connections = static_cast<unsigned>(*n);
  }
  if (const std::string* db = text_flag(flags, "db", &source)) o.db = *db;
  if (const std::string* max_db = text_flag(flags, "max-db", &source)) {
    auto size = parse_size(*max_db);
    if (!size) return make_error(source + ": " + size.error().message);
    if (*size < (1u << 20) || *size > (1ull << 50)) {
      return make_error(source + " " + *max_db + " is out of range: use 1MiB to 1PiB");
    }
    o.max_db = *size;
  }
  auto retention = duration_flag(flags, "retention", o.retention);
  if (!retention) return retention.error();
  o.retention = *retention;
  if (const std::string* max_cgroups = text_flag(flags, "max-cgroups", &source)) {
    auto n = bounded_count(*max_cgroups, source, 1, 100000);
    if (!n) return n.error();
    o.max_cgroups = static_cast<size_t>(*n);
  }
  if (const std::string* max_libraries = text_flag(flags, "max-libraries", &source)) {
    auto n = bounded_count(*max_libraries, source, 1, 4096);
    if (!n) return n.error();
    o.max_libraries = static_cast<size_t>(*n);
  }
  if (const std::string* dirs = text_flag(flags, "library-dirs", &source)) {
    for (std::string& d : comma_list(*dirs)) {
      if (d[0] != '/') return make_error(source + ": " + d + " is not an absolute path");
      o.library_dirs.push_back(std::move(d));
    }
  }
  if (const std::string* roots = text_flag(flags, "cgroup-roots", &source)) {
    for (std::string& r : comma_list(*roots)) {
      while (r.size() > 1 && r.back() == '/') r.pop_back();
      if (r[0] != '/' || r.find("/../") != std::string::npos || r.ends_with("/..") ||
          r.find('\0') != std::string::npos) {
        return make_error(source + ": " + r +
                          " is not a cgroup path from the cgroup2 mount (e.g. /kubepods.slice)");
      }
      if (std::find(o.cgroup_roots.begin(), o.cgroup_roots.end(), r) == o.cgroup_roots.end()) {
        o.cgroup_roots.push_back(std::move(r));
      }
    }
    if (o.cgroup_roots.size() > 8) {
      return make_error(source + ": at most 8 cgroups (" + std::to_string(o.cgroup_roots.size()) +
                        " given); name a common parent instead");
    }
  }
  if (const std::string* v = text_flag(flags, "attach-on-disk", &source); v && *v != "auto") {
    bool on = false;
    if (auto r = switch_flag(flags, "attach-on-disk", "true", "false", on); !r) {
      return make_error(r.error().message + " or auto");
    }
    o.attach_on_disk = on;
  }
  if (const std::string* v = text_flag(flags, "launch-layer", &source)) {
    auto layer = trace::parse_launch_layer(*v);
    if (!layer) return make_error(source + " " + *v + ": expected driver, runtime, both or none");
    o.launch_layer = *layer;
  }
  if (auto r = switch_flag(flags, "uprobe-multi", "on", "off", o.uprobe_multi); !r) return r.error();
  if (const std::string* v = text_flag(flags, "cost-budget", &source)) {
    auto share = parse_cost_budget(*v);
    if (!share) return make_error(source + " " + *v + ": " + share.error().message);
    o.cost_budget = *share;
  }
  if (auto r = switch_flag(flags, "probe-sites", "auto", "entry", o.move_probe_sites); !r) {
    return r.error();
  }
  auto log = log_settings(flags);
  if (!log) return log.error();
  o.log = *log;
  o.verbose = o.log.level == LogLevel::kDebug;
  auto window = duration_flag(flags, "window", o.window);
  if (!window) return window.error();
  o.window = *window;
  auto outlier = duration_flag(flags, "outlier-threshold", o.outlier_threshold);
  if (!outlier) return outlier.error();
  o.outlier_threshold = *outlier;
  auto hang = duration_flag(flags, "hang-threshold", o.hang_threshold);
  if (!hang) return hang.error();
  o.hang_threshold = *hang;
  if (auto r = switch_flag(flags, "gpu-monitor", "on", "off", o.gpu_monitor); !r) return r.error();
  if (const std::string* v = text_flag(flags, "nvml-library", &source)) {
    if (v->empty()) return make_error(source + ": expected the path of libnvidia-ml.so.1");
    o.nvml_library = *v;
  }
  auto gpu_interval = duration_flag(flags, "gpu-sample-interval", o.gpu_sample_interval);
  if (!gpu_interval) return gpu_interval.error();
  o.gpu_sample_interval = *gpu_interval;
  auto rescan = duration_flag(flags, "rescan-interval", o.rescan_interval);
  if (!rescan) return rescan.error();
  o.rescan_interval = *rescan;
  if (const std::string* api = text_flag(flags, "kube-api", &source)) o.kube_api = *api;
  if (const std::string* node = text_flag(flags, "kube-node", &source)) o.kube_node = *node;
  auto kube_refresh = duration_flag(flags, "kube-refresh", o.kube_refresh);
  if (!kube_refresh) return kube_refresh.error();
  o.kube_refresh = *kube_refresh;
  for (auto [name, into] : {std::pair{"path.procfs", &o.procfs}, std::pair{"path.sysfs", &o.sysfs}}) {
    const std::string* path = text_flag(flags, name, &source);
    if (!path) continue;
    if (path->empty() || (*path)[0] != '/') {
      return make_error(source + ": expected an absolute path, e.g. /host/proc");
    }
    *into = path->size() > 1 && path->back() == '/' ? path->substr(0, path->size() - 1) : *path;
  }
  auto linger = duration_flag(flags, "detach-linger", o.detach_linger);
  if (!linger) return linger.error();
  o.detach_linger = *linger;
  if (auto set = otlp_flags(flags, file_layer, o); !set) return set.error();
  return o;
}

}  // namespace

std::vector<std::string> run_flag_names() {
  const po::options_description desc = run_options_description();
  std::vector<std::string> names;
  for (const auto& d : desc.options()) names.push_back(d->long_name());
  return names;
}

std::string name_run_flag_source(const RunOptions& o, const std::string& message) {
  for (const auto& [flag, var] : o.from_env) {
    const std::string spelled = "--" + flag;
    if (!message.starts_with(spelled)) continue;
    if (message.size() > spelled.size() &&
        (std::isalnum(static_cast<unsigned char>(message[spelled.size()])) ||
         message[spelled.size()] == '-' || message[spelled.size()] == '.')) {
      continue;  // a longer flag
    }
    return LayeredFlags::relabel(message, flag, var);
  }
  return message;
}

namespace {

// Levenshtein distance, for the suggestion.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The closest of `names` to `name` (at most 3 edits away), or "".
std::string closest(const std::string& name, const std::vector<std::string>& names) {
  size_t best = 4;
  std::string out;
  for (const auto& k : names) {
    const size_t d = edit_distance(name, k);
    if (d < best) {
      best = d;
      out = k;
    }
  }
  return out;
}

// Every line of a config file is blank, a comment or `name = value` naming a flag of run;
// otherwise one error naming FILE:LINE and the closest flag. `lines` gets each name's line.
Result<Ok> check_config_lines(const std::string& text, const std::string& file,
                              const po::options_description& desc,
                              std::map<std::string, int>& lines) {
  std::vector<std::string> names;
  for (const auto& opt : desc.options()) {
    const std::string& name = opt->long_name();
    if (name != "help" && name != "version" && name != "config") names.push_back(name);
  }
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    const std::string where = file + ":" + std::to_string(n) + ": ";
    const size_t eq = line.find('=');
    if (line[first] == '[') {
      return make_error(where + "sections are not used; write `name = value` lines");
    }
    if (eq == std::string::npos) {
      return make_error(where + "expected `name = value`, e.g. window = 5s");
    }
    std::string name = line.substr(first, eq - first);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
    if (name.starts_with("--")) name.erase(0, 2);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      const std::string near = closest(name, names);
      return make_error(where + "unknown option '" + escape_line(name) + "'" +
                        (near.empty() ? std::string(" (see `stallwatch run --help`)")
                                      : " (did you mean '" + near + "'?)"));
    }
    const po::option_description* opt = desc.find_nothrow(name, false);
    const bool repeatable = opt && opt->semantic() && opt->semantic()->is_composing();
    if (auto [it, fresh] = lines.emplace(name, n); !fresh && !repeatable) {
      return make_error(where + name + " is set twice (first on line " +
                        std::to_string(it->second) + ")");
    }
  }
  return Ok{};
}

}  // namespace

std::vector<std::string> unknown_run_variables(const std::vector<std::string>& env) {
  std::vector<std::string> known;
  for (const auto& name : run_flag_names()) {
    if (name != "help" && name != "version") known.push_back(env_var_name(kRunEnvPrefix, name));
  }
  std::vector<std::string> out;
  for (const auto& entry : env) {
    const std::string name = entry.substr(0, entry.find('='));
    if (!name.starts_with(kRunEnvPrefix) || name == "STALLWATCH_OPTS") continue;
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    std::string line = name + " sets nothing and is ignored";
    size_t best = 3;  // suggest only close names
    std::string suggestion;
    for (const auto& k : known) {
      const size_t d = edit_distance(name, k);
      if (d < best) {
        best = d;
        suggestion = k;
      }
    }
    line += suggestion.empty() ? "; every flag of `stallwatch run --help` has its "
                                 "STALLWATCH_<FLAG> variable"
                               : " (did you mean " + suggestion + "?)";
    out.push_back(line);
  }
  return out;
}

Result<RunOptions> parse_run_options(const std::vector<std::string>& args, std::string* usage) {
  return parse_run_options(args, {}, usage);
}

Result<RunOptions> parse_run_options(const std::vector<std::string>& args,
                                     const std::vector<std::string>& env, std::string* usage) {
  RunOptions o;
  const po::options_description desc = run_options_description();
  std::ostringstream u;
  u << desc << kEpilogue;
  if (usage) *usage = u.str();

  // run keeps what it did before the other subcommands moved to Boost: unambiguous
  // abbreviations are accepted, a flag given twice is an error.
  auto command_line = parse_flags(args, desc, nullptr, po::command_line_style::default_style,
                                  /*last_wins=*/false);
  if (!command_line) {
    return make_error(command_line.error().message + " (see `stallwatch run --help`)");
  }
  // --version answers whatever the environment and the config file hold. --help comes after
  // both are read: `run OPTIONS --help` checks OPTIONS, the config file and the environment
  // (tests/deploy/systemd_test.sh checks the unit's sample files so).
  if (command_line->count("version") && !command_line->count("help")) {
    o.help = true;
    o.version = true;
    if (usage) *usage = version_text();
    return o;
  }
  auto environment = parse_environment(env, desc, kRunEnvPrefix, {"help", "version"});
  if (!environment) {
    return make_error(environment.error().message + " (see `stallwatch run --help`)");
  }
  LayeredFlags flags;
  flags.add(std::move(*command_line));
  flags.add(std::move(*environment), kRunEnvPrefix);

  size_t file_layer = SIZE_MAX;
  std::string config_source;
  const std::string* config = text_flag(flags, "config", &config_source);
  std::string default_config;
  if (!config && ::access(kDefaultConfig, F_OK) == 0) {
    default_config = kDefaultConfig;  // the packaged file, when it is there
    config = &default_config;
    config_source = "the default --config";
  }
  if (config && *config == "none") config = nullptr;
  if (config) {
    o.config = *config;
    const std::string named = config_source == "--config" ? "" : " named by " + config_source;
    // A regular file of bounded size, which only root (or the user running this) can change:
    // a directory, a FIFO or /dev/zero must not hang or exhaust the daemon, and a file another
    // user can write would set root's options (its --nvml-library runs that user's code).
    const int fd = ::open(o.config.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
      return make_error("cannot read config file " + o.config + named +
                        " (check the path and permissions)");
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return make_error("config file " + o.config + named +
                        " is not a regular file (pass a file of `name = value` lines)");
    }
    const std::string source = "config file " + o.config + named;
    auto trusted = check_file_owner(st, source, ::geteuid(), "it sets what stallwatch does as root");
    if (trusted) {
      trusted = check_parent_dirs("/proc/self/fd/" + std::to_string(fd), source, ::geteuid());
    }
    if (!trusted) {
      ::close(fd);
      return trusted.error();
    }
    constexpr std::size_t kMaxConfigBytes = 1 << 20;
    std::string text;
    char buf[4096];
    bool too_large = false;
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      text.append(buf, static_cast<std::size_t>(n));
      if (text.size() > kMaxConfigBytes) {
        too_large = true;
        break;
      }
    }
    ::close(fd);
    if (too_large) return make_error("config file " + o.config + named + " is larger than 1 MiB");
    std::map<std::string, int> lines;
    if (auto checked = check_config_lines(text, o.config, desc, lines); !checked) {
      return checked.error();
    }
    std::istringstream in(text);
    try {
      po::variables_map file;
      po::store(po::parse_config_file(in, desc), file);
      flags.add_file(std::move(file), o.config, std::move(lines));
    } catch (const po::error& e) {
      return make_error(o.config + ": " + po_error_message(e) + " (see `stallwatch run --help`)");
    }
    file_layer = flags.layers() - 1;
  }
  if (flags.layer(0).count("help")) {
    o.help = true;
    return o;
  }
  return resolve(flags, file_layer, std::move(o));
}

}  // namespace stallwatch::cli
