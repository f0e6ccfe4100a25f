// Flags of `stallwatch run`, from the command line and from --config FILE (same long names,
// `name = value` lines); the command line wins. Parsing is pure apart from reading the file.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "metrics/otlp/config.h"

namespace stallwatch::cli {

struct RunOptions {
  std::string listen = "0.0.0.0:9464";
  std::string db = "/var/lib/stallwatch/stallwatch.db";
  std::chrono::nanoseconds window = std::chrono::seconds(5);
  std::chrono::nanoseconds outlier_threshold = std::chrono::milliseconds(1);
  std::chrono::nanoseconds rescan_interval = std::chrono::seconds(30);
  std::chrono::nanoseconds detach_linger = std::chrono::seconds(30);
  size_t max_cgroups = 256;
  std::uint64_t max_db = 2ull << 30;                                  // --max-db
  std::chrono::nanoseconds retention = std::chrono::hours(24 * 7);    // --retention
  std::string kube_api;   // --kube-api: "" auto (in a pod), "none", or the API server URL
  std::string kube_node;  // --kube-node: "" = $NODE_NAME, else the hostname
  std::chrono::nanoseconds kube_refresh = std::chrono::seconds(60);  // --kube-refresh
  otlp::PushFlags otlp;  // --otlp-*; merged with OTEL_* by otlp::resolve_push_config
  std::string config;
  bool verbose = false;
  bool help = false;
};

// argv excludes the program and subcommand names. A `help` result carries the usage text in
// `usage`.
Result<RunOptions> parse_run_options(const std::vector<std::string>& args, std::string* usage);

}  // namespace stallwatch::cli
