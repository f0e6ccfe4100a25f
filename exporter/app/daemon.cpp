#include "app/daemon.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <set>
#include <thread>

#include "chains/budget.h"
#include "chains/format.h"
#include "chains/outliers.h"
#include "common/guard.h"
#include "common/privileges.h"
#include "app/pipeline.h"
#include "app/store_keeper.h"
#include "cli/check.h"
#include "cli/options.h"
#include "common/duration.h"
#include "common/log.h"
#include "common/sd_notify.h"
#include "identity/cgroup_resolver.h"
#include "identity/kube_metadata.h"
#include "common/size.h"
#include "common/strings.h"
#include "metrics/http_server.h"
#include "metrics/otlp/http_client.h"
#include "metrics/otlp/pusher.h"
#include "store/store.h"
#include "trace/collector.h"
#include "trace/sources.h"
#include "trace/discovery.h"
#include "trace/process_names.h"
#include "trace/python.h"
#include "host/gpu_monitor.h"
#include "host/host_sampler.h"
#include "host/self_stats.h"
#include "trace/probe_cost.h"
#include "trace/tracer.h"
#include "stallwatch_version.h"  // generated (cmake/GitVersion.cmake)

extern "C" {
}

namespace stallwatch::cli {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};

void on_signal(int) { g_stop = true; }
void on_hangup(int) { g_reload = true; }

// An exclusive lock on `path` (flock), held while the returned descriptor is open (O_CLOEXEC).
// The holder's PID is written in it. Held by another process: an error naming its PID; a lock
// that cannot be taken for another reason (a read-only /run): -1 and `warning` says why.
Result<int> take_lock(const std::string& path, const std::string& what, std::string& warning) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0644);
  if (fd < 0) {
    warning = "cannot open the lock file " + path + " (" + std::strerror(errno) + "): " + what +
              " is not checked";
    return -1;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) {
      warning = "cannot lock " + path + " (" + std::strerror(err) + "): " + what + " is not checked";
      return -1;
    }
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    pid.erase(std::remove_if(pid.begin(), pid.end(), [](char c) { return c < '0' || c > '9'; }),
              pid.end());
    return make_error("another stallwatch" + (pid.empty() ? std::string() : " (PID " + pid + ")") +
                      " holds " + path + ": " + what);
  }
  const std::string mine = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, mine.data(), mine.size(), 0) < 0) {
    SW_LOG(kDebug) << "cannot write the PID into " << path << ": " << std::strerror(errno);
  }
  return fd;
}

// What the user typed must exist (issue #51: --path.procfs /nope used to say "ready" and trace
// nothing). One line naming the flag and the fix; false to exit 2.
// The checks without which no probe can be loaded; run first so the error names the cause.
bool preflight() {
  bool ok = true;
  for (const auto& item : run_preflight_checks()) {
    if (item.status != Status::kFail) continue;
    SW_LOG(kError) << item.name << ": " << item.detail;
    if (!item.fix.empty()) SW_LOG(kHint) << item.fix;
    ok = false;
  }
  return ok;
}

// Two fds per probe and one per library file, for every container image's copy of libcudart:
// the soft limit (1024 by default) runs out after about a dozen. Raise it to the hard limit.
void raise_fd_limit() {
  rlimit l{};
  if (getrlimit(RLIMIT_NOFILE, &l) != 0 || l.rlim_cur >= l.rlim_max) return;
  const rlim_t was = l.rlim_cur;
  l.rlim_cur = l.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &l) == 0) {
    SW_LOG(kDebug) << "open files limit raised from " << was << " to " << l.rlim_max;
  } else {
    SW_LOG(kWarn) << "cannot raise the open files limit from " << was << ": " << strerror(errno)
                  << "; set LimitNOFILE= in the unit";
  }
}

}  // namespace

int run_main(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::string usage;
  auto parsed = parse_run_options(args, env, &usage);
  if (!parsed) {
    std::cerr << "stallwatch run: " << parsed.error().message << "\n";
    return 2;
  }
  const RunOptions& o = *parsed;
  if (o.help) {
    std::cout << usage;
    return 0;
  }
  apply_log_settings(o.log);
  // No execve of the daemon or of anything it starts gains privileges beyond what it holds (a
  // setuid file, file capabilities, or uid 0 getting back the capabilities a thread dropped):
  // issue #49. Everything the daemon needs it holds already.
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    SW_LOG(kWarn) << "cannot set no_new_privs: " << std::strerror(errno);
  }
  for (const auto& line : unknown_run_variables(env)) SW_LOG(kWarn) << line;
  if (!o.config.empty()) SW_LOG(kInfo) << "config: " << escape_line(o.config);
  if (const CheckItem paths = paths_check(o); paths.status == Status::kFail) {
    SW_LOG(kError) << paths.detail;
    SW_LOG(kHint) << paths.fix;
    return 2;
  }
  if (!preflight()) return 1;
  raise_fd_limit();
  // One daemon per node (each would put its probes on every library, and every call would pay
  // them all), and one per store.
  std::vector<int> locks;
  for (const auto& [path, what] :
       {std::pair{o.lock_file, std::string("one stallwatch per node: stop it (systemctl stop "
                                           "stallwatch), or give each its own --lock-file")},
        std::pair{o.db == "none" ? std::string("none") : o.db + ".lock",
                  std::string("one stallwatch per store: give this one another --db")}}) {
    if (path == "none") continue;
    std::string warning;
    auto fd = take_lock(path, what, warning);
    if (!fd) {
      SW_LOG(kError) << fd.error().message;
      return 1;
    }
    if (*fd < 0) {
      SW_LOG(kWarn) << warning;
      continue;
    }
    locks.push_back(*fd);
  }

  auto push = otlp::push_config_from_environment(o.otlp, o.otlp_file, STALLWATCH_VERSION);
  if (!push) {
    SW_LOG(kError) << name_run_flag_source(o, push.error().message);
    return 2;
  }
  push->per_call = o.exposition.per_call;

  auto kube_settings = identity::resolve_kube_settings(
      o.kube_api, o.kube_node,
      std::chrono::duration_cast<std::chrono::milliseconds>(o.kube_refresh),
      [](const char* name) { return std::getenv(name); });
  if (!kube_settings) {
    SW_LOG(kError) << name_run_flag_source(o, kube_settings.error().message);
    return 2;
  }

  auto mount = identity::find_cgroup2_mount();
  if (!mount) {
    SW_LOG(kError) << "no cgroup2 hierarchy is mounted; cgroup labels need one";
    SW_LOG(kHint) << "mount -t cgroup2 none /sys/fs/cgroup/unified (or boot with "
                     "systemd.unified_cgroup_hierarchy=1)";
    return 1;
  }
  std::vector<std::string> cgroup_root_dirs;
  // --cgroup-roots: each must be a directory of the cgroup2 hierarchy now (a root created later
  // is a restart away; a typo must not trace nothing in silence).
  for (const std::string& root : o.cgroup_roots) {
    const std::string dir = *mount + (root == "/" ? std::string() : root);
    struct statfs fs{};
    struct stat st{};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || ::statfs(dir.c_str(), &fs) != 0 ||
        fs.f_type != CGROUP2_SUPER_MAGIC) {
      SW_LOG(kError) << "--cgroup-roots: " << escape_line(root) << " is not a cgroup (no directory "
                     << escape_line(dir) << " in the cgroup2 hierarchy at " << *mount << ")";
      SW_LOG(kHint) << "name cgroups as paths from the cgroup2 mount, e.g. /kubepods.slice or "
                       "/system.slice/slurmstepd.scope (ls " << *mount << ")";
      return 2;
    }
    cgroup_root_dirs.push_back(dir);
  }
  if (!o.cgroup_roots.empty()) {
    std::string list;
    for (const auto& r : o.cgroup_roots) list += (list.empty() ? "" : ", ") + escape_line(r);
    SW_LOG(kInfo) << "tracing only the cgroups at or below " << list << " (--cgroup-roots)";
  }


  metrics::SnapshotBoard board;
  metrics::BuildInfo build{STALLWATCH_VERSION, STALLWATCH_REVISION};
  metrics::HttpOptions hopts;
  hopts.listen = o.listen;
  hopts.telemetry_path = o.telemetry_path;
  hopts.web_config_file = o.web_config_file;
  hopts.enable_debug = o.web_enable_debug;
  hopts.classic_histograms = o.web_classic_histograms;
  hopts.exposition = o.exposition;
  hopts.max_connections = o.web_max_connections;
  auto http = metrics::HttpServer::start(hopts, board, build);
  if (!http) {
    SW_LOG(kError) << http.error().message;
    return 1;
  }

  // From here on (the listener is bound: a port below 1024 needed CAP_NET_BIND_SERVICE) this
  // thread, and every thread it starts (store writer, ring-buffer intake, discovery), holds
  // only what tracing needs: the set the systemd unit bounds the daemon to. Run as plain root,
  // the threads that parse hostile ELF files, /proc and Python memory no longer hold
  // CAP_SETUID, CAP_SYS_MODULE, CAP_NET_ADMIN and the rest (issue #35; docs/security.md).
  // The kernel log, for Xid errors, is opened while the thread may still hold CAP_SYSLOG
  // (kernel.dmesg_restrict=1 asks it of a reader), which the limit below gives up.
  const int kmsg_fd = o.gpu_monitor ? host::open_kmsg("/dev/kmsg") : -1;
  if (auto dropped = limit_thread_capabilities(kTracingCapabilities); !dropped) {
    SW_LOG(kWarn) << dropped.error().message;
  }

  // The store may fail; tracing and /metrics may not (app/store_keeper.h).
  std::unique_ptr<app::StoreKeeper> keeper;
  if (o.db != "none") {
    store::StoreOptions sopts;
    sopts.path = o.db;
    sopts.max_bytes = o.max_db;
    sopts.retention = o.retention;
    keeper = std::make_unique<app::StoreKeeper>(sopts);
  }
  store::Store* db = keeper ? keeper->get() : nullptr;

  trace::TracerOptions topts;
  topts.cgroup_roots = cgroup_root_dirs;
  topts.outlier_threshold = o.outlier_threshold;
  topts.stacks = o.stacks;
  topts.uprobe_multi = o.uprobe_multi;
  auto tracer = trace::Tracer::open(topts);
  if (!tracer) {
    SW_LOG(kError) << tracer.error().message;
    return 1;
  }
  const trace::CallPrograms programs = (*tracer)->call_programs();
  const auto bpf_programs = (*tracer)->program_states();
  SW_LOG(kInfo) << "call probes: "
                << ((*tracer)->uprobe_multi()
                        ? "one multi-uprobe link per library file and direction"
                        : o.uprobe_multi ? "one link per probe (this kernel has no multi-uprobe links)"
                                         : "one link per probe (--uprobe-multi=off)");
  // Issue #40: the standard directories' libraries are attached at start where a file's probes
  // attach and detach as two links (milliseconds); with one link per probe each detach waits
  // ~100 ms per probe, so there they stay opt-in.
  const bool on_disk = o.attach_on_disk.value_or((*tracer)->uprobe_multi());
  SW_LOG(kInfo) << "CUDA libraries of the standard directories: "
                << (on_disk ? "attached at start, no call after a dlopen is lost"
                            : "attached when a process maps them (calls in the first tens of ms "
                              "after a dlopen are not seen)")
                << (o.attach_on_disk ? " (--attach-on-disk)"
                    : on_disk        ? " (multi-uprobe links)"
                                     : " (one link per probe: --attach-on-disk=true to change)");
  const char* launches = "";
  switch (o.launch_layer) {
    case trace::LaunchLayer::kDriver:
      launches = "probed at the driver (cuLaunchKernel, cuLaunchKernelEx): one probe pair per launch";
      break;
    case trace::LaunchLayer::kRuntime:
      launches = "probed at the runtime (cudaLaunchKernel): launches that skip the runtime are not seen";
      break;
    case trace::LaunchLayer::kBoth:
      launches = "probed at the runtime and the driver (two probe pairs per runtime launch)";
      break;
    case trace::LaunchLayer::kNone:
      launches = "not probed (no launch rate or latency; the other calls are traced)";
      break;
  }
  SW_LOG(kInfo) << "kernel launches: " << launches << " (--launch-layer)";
  SW_LOG(kInfo) << "cost budget: "
                << (o.cost_budget > 0
                        ? chains::percent(o.cost_budget) +
                              " of a workload's CUDA-thread CPU time; above it its launch probes "
                              "are duty-cycled (--cost-budget)"
                        : std::string("none: every launch is probed whatever it costs (--cost-budget 0)"));
  // What a probe costs here and which instructions this kernel emulates, before the first
  // library is attached: the sites depend on it (issue #48, trace/probe_cost.h).
  const trace::ProbeCalibration calibration = trace::calibrate_probes();
  const std::string calibrated =
      "probe sites: " + trace::describe_calibration(calibration) + " (" +
      std::to_string(calibration.took.count()) + " ms)" +
      (o.move_probe_sites ? "" : "; --probe-sites=entry: every probe stays at its symbol");
  if (calibration.error.empty()) {
    SW_LOG(kInfo) << calibrated;
  } else {
    SW_LOG(kWarn) << calibrated;
  }
  trace::SitePolicy site_policy;
  site_policy.emulation = calibration.emulation;
  site_policy.moves = o.move_probe_sites;
  const host::Procfs fs(o.procfs, o.sysfs);
  trace::Discovery discovery(
      programs,
      {std::chrono::duration_cast<std::chrono::milliseconds>(o.rescan_interval),
       std::chrono::duration_cast<std::chrono::milliseconds>(o.detach_linger), o.max_libraries,
       o.library_dirs, on_disk, o.launch_layer, site_policy,
       std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(o.window),
                  std::chrono::milliseconds(1000), std::chrono::milliseconds(10000))},
      fs);
  trace::EventQueue lib_events;
  // Python frames: the registry follows the CUDA processes discovery finds (--stacks=on).
  trace::PythonRegistry python(fs, o.stacks ? (*tracer)->map_fd("py_procs") : -1);
  // Names of the processes found, for the last window of one that exits before the collector
  // reads it alive (issue #51: a job shorter than a window had no rows in the store).
  trace::ProcessNames names;
  discovery.on_processes(
      [&](int pid) {
        names.found(pid, fs.comm(pid), fs.start_tag(pid));
        if (o.stacks) python.seen(pid);
      },
      [&](int pid) {
        names.gone(pid);
        if (o.stacks) python.gone(pid);
      });
  chains::SiteResolver sites(fs, &python);
  chains::OutlierSink outliers;
  (*tracer)->on_outlier([&](const trace::OutlierRecord& e) { outliers.add(e); });
  // The ring-buffer thread only queues: discovery opens the host's files on its own thread.
  (*tracer)->on_lib_map([&](int tgid) { lib_events.push(tgid); });

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGHUP, on_hangup);

  size_t procs = 0;
  run_guarded("discovery", [&] { procs = discovery.scan_all(); });
  identity::CgroupResolver resolver(*mount);
  otlp::HttpClient::global_init();  // before any thread uses curl
  if (!kube_settings->enabled) SW_LOG(kInfo) << kube_settings->why_off;
  if (kube_settings->enabled && !kube_settings->send_token) {
    SW_LOG(kWarn) << "Kubernetes metadata: " << kube_settings->api_url
                  << " is plain http to a non-loopback address: the service account token is "
                     "not sent (use https, or kubectl proxy on 127.0.0.1)";
  }
  identity::KubeMetadata kube(*kube_settings);
  // The node's name on stallwatch_job_info, as the Kubernetes settings name it, also when they
  // are off: --kube-node, $NODE_NAME, else the hostname.
  std::string node = kube_settings->node;
  if (node.empty()) node = o.kube_node;
  if (const char* n = std::getenv("NODE_NAME"); node.empty() && n) node = n;
  if (char host[256] = {}; node.empty() && ::gethostname(host, sizeof(host) - 1) == 0) node = host;
  node = escape_name(node);
  trace::Collector collector(
      trace::default_sources({**tracer, fs, resolver}), resolver, fs,
      {o.max_cgroups, &kube,
       [&names](int pid, std::uint32_t tag) { return names.name(pid, tag); }, node});
  auto counts = [&] {
    return trace::TraceCounts{outliers.total(),
                              discovery.traced_processes(),
                              discovery.attached_libraries(),
                              discovery.attached_probes(),
                              discovery.emulated_probes(),
                              discovery.refused_libraries(),
                              lib_events.dropped(),
                              &calibration,
                              discovery.stepped_calls(),
                              o.cost_budget,
                              discovery.launch_off_ns()};
  };
  std::unique_ptr<otlp::Pusher> pusher;
  if (push->enabled) pusher = std::make_unique<otlp::Pusher>(*push, build);
  app::PipelineOptions popts;
  popts.engine.host_cpus = static_cast<int>(std::thread::hardware_concurrency());
  popts.engine.hang_threshold_ns = static_cast<std::uint64_t>(o.hang_threshold.count());
  popts.otlp = pusher.get();
  popts.http_stats = [server = http->get()] {
    const metrics::HttpCounters c = server->counters();
    HttpStats s;
    s.enabled = true;
    s.refused_per_address = c.refused_per_address;
    s.over_cap = c.over_cap;
    s.header_deadline = c.cut_idle;
    s.request_deadline = c.cut_request;
    s.evicted = c.evicted;
    s.login_throttled = c.auth_throttled;
    s.login_denied = c.auth_denied;
    return s;
  };
  if (keeper) popts.store_stats = [&keeper] { return keeper->stats(); };
  popts.cost_budget = o.cost_budget;
  std::map<std::string, double> budgeted;  // series cycled now, by the duty last logged
  bool said_uncyclable = false;
  popts.launch_duty = [&](const chains::DutyPlan& plan) {
    discovery.set_launch_duty(plan.duty);
    std::map<std::string, double> now;  // the duty last logged, per series cycled now
    for (const chains::SeriesDuty& s : plan.series) {
      auto was = budgeted.find(s.cgroup);
      const bool say = was == budgeted.end() || s.duty > 2 * was->second || s.duty < 0.5 * was->second;
      now[s.cgroup] = say ? s.duty : was->second;
      if (!say) continue;
      SW_LOG(kInfo) << "cost budget: " << escape_name(s.cgroup) << " would pay "
                    << chains::percent(s.unbudgeted) << " of its CUDA threads' CPU time in probes "
                    << "(--cost-budget " << chains::percent(o.cost_budget)
                    << "): its kernel launches are probed " << chains::percent(s.duty)
                    << " of each second, their counts scaled"
                    << (s.others_over ? "; still over: its other calls' probes alone pass the budget"
                        : s.over      ? "; still over: its launches pass it at the least duty (" +
                                       chains::percent(chains::kMinDuty) + ")"
                                      : std::string());
    }
    for (const auto& [cgroup, duty] : budgeted) {
      if (!now.count(cgroup)) {
        SW_LOG(kInfo) << "cost budget: " << escape_name(cgroup)
                      << " is within it again: every launch is probed";
      }
    }
    budgeted = std::move(now);
    if (!said_uncyclable && discovery.uncyclable_processes() > 0) {
      said_uncyclable = true;
      SW_LOG(kWarn) << "cost budget: " << discovery.uncyclable_processes()
                    << " processes are over it, but their launches cannot be duty-cycled on this "
                       "kernel (no multi-uprobe links: Linux 6.6, --uprobe-multi on); "
                       "--launch-layer none stops their launch probes";
    }
  };
  app::Pipeline pipeline(popts, board, db);
  pipeline.set_store(db, keeper != nullptr);
  host::HostSampler host(fs);
  host::GpuMonitorOptions gopts;
  gopts.nvml = o.gpu_monitor;
  gopts.xid = o.gpu_monitor;
  gopts.nvml_library = o.nvml_library;
  gopts.kmsg_fd = kmsg_fd;  // when -1 the monitor tries again and says why it cannot
  gopts.interval = std::chrono::duration_cast<std::chrono::milliseconds>(o.gpu_sample_interval);
  gopts.stale_after = std::max(std::chrono::milliseconds(3000), 4 * gopts.interval);
  host::GpuMonitor gpus(gopts, fs);
  gpus.start();
  std::set<std::string> announced;  // open chains already logged
  auto window = [&](std::chrono::nanoseconds length) {
    if (keeper) pipeline.set_store(keeper->get(), true);  // reopened when due (store_keeper.h)
    auto snap = collector.collect(length, counts());
    snap->self = host::read_self_stats();
    snap->bpf_programs = bpf_programs;
    snap->gpu = gpus.snapshot();
    if (!snap->gpu.gpus.empty()) {
      std::vector<int> pids;
      for (const auto& [label, s] : snap->series) {
        for (const auto& [pid, info] : s.process_info) pids.push_back(pid);
      }
      gpus.map_processes(snap->gpu, pids);
    }
    chains::OutlierWindow drained = outliers.drain();
    const auto naming = std::chrono::steady_clock::now();
    sites.resolve(drained);
    if (const auto took = std::chrono::steady_clock::now() - naming;
        took > std::chrono::milliseconds(250)) {
      // The first stacks through a large library read its symbol table once (cached after).
      SW_LOG(kInfo) << "naming " << drained.sites.size() << " call sites took "
                    << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                    << " ms (symbol tables read for the first time are cached)";
    }
    for (const auto& c : pipeline.window(std::move(snap), drained, host.sample())) {
      if (c.open && announced.insert(c.id).second) SW_LOG(kInfo) << "chain opened: " << c.summary;
      if (!c.open) {
        announced.erase(c.id);
        SW_LOG(kInfo) << "chain closed: " << c.summary;
      }
    }
  };
  run_guarded("window", [&] { window(o.window); });
  auto window_start = std::chrono::steady_clock::now();
  SW_LOG(kInfo) << "ready: listening on " << o.listen << ", window " << format_duration(o.window)
                << ", " << procs << " processes with CUDA libraries, "
                << discovery.attached_libraries() << " library files traced (cgroup2 at " << *mount
                << "), store "
                << (db ? o.db + " (max " + format_size(o.max_db) + ", " +
                             format_duration(o.retention) + ")"
                       : std::string(keeper ? "off until it opens (see the error above)" : "off"))
                << ", OTLP " << otlp::describe(*push);

  sd_notify("READY=1\nSTATUS=tracing " + std::to_string(discovery.attached_libraries()) +
            " library files, serving " + o.listen);
  const auto watchdog = sd_watchdog_interval();
  if (watchdog && std::chrono::nanoseconds(*watchdog) < 2 * o.window) {
    SW_LOG(kWarn) << "the systemd watchdog (WatchdogSec=" << format_duration(*watchdog)
                  << ") is shorter than two windows (" << format_duration(2 * o.window)
                  << "): systemd may restart a healthy daemon";
    SW_LOG(kHint) << "set WatchdogSec= to at least 4 × --window";
  }

  // Ring buffers on one thread and discovery on another: nothing there waits for the collector,
  // and a library file that never answers stalls discovery, never the outlier intake. Records
  // and library events wake their thread at once; the timeouts only bound how late a stop is
  // seen, so they are long enough that an idle daemon does not wake 100 times a second.
  std::atomic<bool> fatal{false};
  // Every thread's step runs guarded (common/guard.h): what a hostile input makes one step
  // throw is logged once and counted, and the thread goes on.
  std::thread events([&] {
    while (!g_stop) {
      run_guarded("ring buffer intake", [&] {
        auto r = (*tracer)->poll(std::chrono::milliseconds(200));
        if (!r) {
          SW_LOG(kError) << r.error().message
                         << "; exiting so that the service manager restarts us";
          fatal = true;
          g_stop = true;
        }
      });
    }
  });
  using SteadyClock = std::chrono::steady_clock;
  std::atomic<SteadyClock::rep> discovery_alive{SteadyClock::now().time_since_epoch().count()};
  std::thread discoverer([&] {
    while (!g_stop) {
      for (int tgid : lib_events.wait(discovery.next_wait())) {
        run_guarded("discovery", [&] { discovery.handle_event(tgid); });
      }
      run_guarded("discovery", [&] { discovery.tick(); });
      discovery_alive = SteadyClock::now().time_since_epoch().count();
    }
  });
  bool discovery_stuck = false;
  auto check_discovery = [&] {
    const auto since = SteadyClock::now() - SteadyClock::time_point(SteadyClock::duration(
                                                 discovery_alive.load()));
    if (since >= std::chrono::seconds(60) && !discovery_stuck) {
      SW_LOG(kWarn) << "discovery has not finished a pass for "
                    << format_duration(std::chrono::duration_cast<std::chrono::nanoseconds>(since))
                    << " (a library file or /proc entry that does not answer?); tracing of the "
                       "libraries already found goes on, new ones wait";
    }
    if (since < std::chrono::seconds(60) && discovery_stuck) SW_LOG(kInfo) << "discovery goes on";
    discovery_stuck = since >= std::chrono::seconds(60);
  };

  // SIGHUP (systemctl reload): the log settings are read again from the flags, the environment
  // and the config file; --web.config.file is re-read whenever it changes anyway; the rest
  // takes a restart, and the line says which of it changed.
  LogSettings logging = o.log;
  auto reload = [&] {
    auto again = parse_run_options(args, env, nullptr);
    if (!again) {
      SW_LOG(kError) << "reload (SIGHUP): " << again.error().message
                     << "; the running settings are kept";
      return;
    }
    const bool log_changed = again->log.level != logging.level || again->log.format != logging.format;
    if (log_changed) {
      apply_log_settings(again->log);
      logging = again->log;
    }
    RunOptions same = *again;  // what differs but the log settings takes a restart
    same.log = o.log;
    same.verbose = o.verbose;
    same.from_env = o.from_env;
    const char* level = logging.level == LogLevel::kDebug  ? "debug"
                        : logging.level == LogLevel::kInfo ? "info"
                        : logging.level == LogLevel::kWarn ? "warn"
                                                           : "error";
    SW_LOG(kInfo) << "reload (SIGHUP): log level " << level
                  << (log_changed ? " (changed)" : " (unchanged)")
                  << "; --web.config.file is re-read when it changes"
                  << (same == o ? std::string("; nothing else changed")
                                : std::string("; other changed settings take a restart"));
  };
  auto next = std::chrono::steady_clock::now() + o.window;
  while (!g_stop) {
    if (g_reload.exchange(false)) run_guarded("reload", reload);
    // Until the window ends, in steps of at most 200 ms to see a stop.
    const auto now = std::chrono::steady_clock::now();
    if (now < next) {
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          next - now, std::chrono::milliseconds(200)));
      continue;
    }
    next += o.window;
    window_start = std::chrono::steady_clock::now();
    run_guarded("window", [&] { window(o.window); });
    check_discovery();
    if (watchdog) sd_notify("WATCHDOG=1");
  }
  sd_notify("STOPPING=1\nSTATUS=storing the last window");
  events.join();
  discoverer.join();
  // The partial window since the last one: what the job did before the stop is stored and
  // published like any window (issue #51), then the store writes what is queued.
  const auto partial = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - window_start);
  run_guarded("window", [&] { window(std::max<std::chrono::nanoseconds>(partial, std::chrono::milliseconds(1))); });
  std::string stored = "no store";
  if (keeper) {
    if (store::Store* st = keeper->get()) {
      st->flush();
      const StoreStats ss = keeper->stats();
      stored = std::to_string(ss.batches_written) + " windows (" + std::to_string(ss.rows_written) +
               " rows) written to " + o.db + ", " + std::to_string(ss.batches_dropped + ss.write_errors) +
               " lost";
    } else {
      stored = "the store was off: the last window is only in /metrics and OTLP";
    }
  }
  std::string otlp_said;
  if (pusher) {
    const OtlpStats os = pusher->stats();
    std::uint64_t dropped = 0;
    for (const auto& [why, n] : os.points_dropped) dropped += n;
    otlp_said = "; OTLP: " + std::to_string(os.points_sent) + " points sent, " +
                std::to_string(dropped) + " dropped, the last snapshot sent once more";
    pusher.reset();
  }
  SW_LOG(kInfo) << "stopping: the last "
                << format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(partial))
                << " published as a window; "
                << stored << otlp_said << "; detaching probes";
  return fatal ? 1 : 0;
}

}  // namespace stallwatch::cli
