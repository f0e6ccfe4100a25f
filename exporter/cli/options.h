// Flags of `stallwatch run`, from the command line, STALLWATCH_* environment variables and
// --config FILE (same long names, `name = value` lines). Precedence: command line >
// STALLWATCH_<FLAG> > (OTEL_*, for the OTLP settings: otlp::resolve_push_config) > config file
// > default. Parsing is pure apart from reading the file: the environment is passed in.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "metrics/model.h"
#include "common/log.h"
#include "common/result.h"
#include "metrics/otlp/config.h"
#include "trace/calls.h"

namespace stallwatch::cli {

// STALLWATCH_OUTLIER_THRESHOLD for --outlier-threshold (cli/flags.h: env_var_name).
inline constexpr const char* kRunEnvPrefix = "STALLWATCH_";

struct RunOptions {
  std::string listen = "0.0.0.0:9464";  // --web.listen-address (--listen, its alias)
  std::string telemetry_path = "/metrics";  // --web.telemetry-path
  // --lock-file: one daemon per node holds it (flock); "none" takes no lock (tests).
  std::string lock_file = "/run/stallwatch/stallwatch.lock";
  std::string web_config_file;    // --web.config.file (metrics/web_config.h)
  bool web_enable_debug = false;  // --web.enable-debug: serve /debug/snapshot
  bool web_classic_histograms = true;  // --web.classic-histograms: classic buckets in protobuf
  // --metrics.identity-labels, --metrics.histogram-ladder
  metrics::ExpositionOptions exposition;
  unsigned web_max_connections = 64;  // --web.max-connections
  std::string db = "/var/lib/stallwatch/stallwatch.db";
  std::chrono::nanoseconds window = std::chrono::seconds(5);
  std::chrono::nanoseconds outlier_threshold = std::chrono::milliseconds(1);
  bool stacks = true;  // --stacks=on|off: outliers carry native and Python stacks
  std::chrono::nanoseconds hang_threshold = std::chrono::seconds(60);  // --hang-threshold
  std::chrono::nanoseconds rescan_interval = std::chrono::seconds(30);
  std::chrono::nanoseconds detach_linger = std::chrono::seconds(30);
  size_t max_cgroups = 256;
  size_t max_libraries = 128;  // --max-libraries
  std::vector<std::string> library_dirs;  // --library-dirs: attached before any process maps them
  // --cgroup-roots: cgroup paths (from the cgroup2 mount, "/kubepods.slice") whose subtrees
  // alone are traced; empty: every cgroup.
  std::vector<std::string> cgroup_roots;
  // --attach-on-disk: the standard directories too; unset (auto, the default) where the daemon
  // uses multi-uprobe links, whose detach costs one grace period per file, not one per probe.
  std::optional<bool> attach_on_disk;
  bool uprobe_multi = true;               // --uprobe-multi: multi-uprobe links where the kernel has them
  trace::LaunchLayer launch_layer = trace::LaunchLayer::kDriver;  // --launch-layer
  bool move_probe_sites = true;           // --probe-sites: auto (true) or entry
  double cost_budget = 0.01;              // --cost-budget: share of CPU time (0: none)
  std::uint64_t max_db = 2ull << 30;                                  // --max-db
  std::chrono::nanoseconds retention = std::chrono::hours(24 * 7);    // --retention
  std::string kube_api;   // --kube-api: "" auto (in a pod), "none", or the API server URL
  std::string kube_node;  // --kube-node: "" = $NODE_NAME, else the hostname
  std::chrono::nanoseconds kube_refresh = std::chrono::seconds(60);  // --kube-refresh
  bool gpu_monitor = true;       // --gpu-monitor: NVML readings and Xid errors
  std::string nvml_library;      // --nvml-library: "" as the dynamic loader finds it
  std::chrono::nanoseconds gpu_sample_interval = std::chrono::milliseconds(250);
  std::string procfs = "/proc";  // --path.procfs: the host's procfs (a container mounts it elsewhere)
  std::string sysfs = "/sys";    // --path.sysfs
  // --otlp-* from the command line and STALLWATCH_OTLP_*, and those of the config file, which
  // rank below OTEL_*; merged by otlp::resolve_push_config.
  otlp::PushFlags otlp;
  otlp::PushFlags otlp_file;
  std::string config;
  LogSettings log;       // --log.level, --log.format, -v
  bool verbose = false;  // debug logging (-v or --log.level=debug)
  bool help = false;     // --help or --version: print `usage` and exit 0
  bool version = false;  // --version (then `help` is set too)
  // Flags whose value came from the environment, and the variable's name.
  std::map<std::string, std::string> from_env;

  bool operator==(const RunOptions&) const = default;
};

// args exclude the program and subcommand names; env holds "NAME=value" strings (environ).
// A `help` result carries what to print in `usage`: the usage text for --help, the version text
// (cli/version.h) for --version. --version is answered before the environment and the config
// file are read, so a broken one cannot hide it; --help after them, so `run OPTIONS --help`
// checks them all.
Result<RunOptions> parse_run_options(const std::vector<std::string>& args,
                                     const std::vector<std::string>& env, std::string* usage);
// The same without environment variables.
Result<RunOptions> parse_run_options(const std::vector<std::string>& args, std::string* usage);

// The long names of every run flag, in --help order (each has a STALLWATCH_ variable but help
// and version).
std::vector<std::string> run_flag_names();

// STALLWATCH_* variables of `env` that set nothing (a typo such as STALLWATCH_WINDOWS), each
// as one warning line with the closest variable that does, if one is close. STALLWATCH_OPTS
// (the systemd unit's extra flags) is not one of them.
std::vector<std::string> unknown_run_variables(const std::vector<std::string>& env);

// A message about `--flag` from a later check (OTLP, Kubernetes) with the flag replaced by its
// STALLWATCH_ variable when the value came from there.
std::string name_run_flag_source(const RunOptions& o, const std::string& message);

// --metrics.identity-labels, --metrics.histogram-ladder and --metrics.calls VALUE into `e` (run
// and demo);
// the error names `source` (the flag or variable) and the accepted values.
Result<Ok> set_identity_labels(const std::string& value, const std::string& source,
                               metrics::ExpositionOptions& e);
Result<Ok> set_histogram_ladder(const std::string& value, const std::string& source,
                                metrics::ExpositionOptions& e);
Result<Ok> set_metric_calls(const std::string& value, const std::string& source,
                            metrics::ExpositionOptions& e);

}  // namespace stallwatch::cli
