// `stallwatch demo [SCENARIO]`: a synthetic incident through the real engine, store and
// /metrics, no root and no GPU. Ends with the explain report of what it stored.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/result.h"
#include "metrics/model.h"
#include "metrics/otlp/config.h"

namespace stallwatch::cli {

struct DemoOptions {
  std::string scenario = "incident";  // SCENARIO (not checked here: demo::make_scenario)
  std::string listen;                 // --listen
  std::string db;                     // --db ("" a new file in $TMPDIR, "none" a temporary one)
  std::chrono::nanoseconds window = std::chrono::seconds(1);  // --window
  bool fast = false;     // --fast
  bool hold = false;     // --hold
  bool json = false;     // --json
  otlp::PushFlags otlp;  // --otlp-*
  metrics::ExpositionOptions exposition;  // --metrics.identity-labels, --metrics.histogram-ladder
  LogSettings log;       // --log.level, --log.format, -v
  bool help = false;
  bool version = false;  // --version
  bool list = false;     // --list: the scenarios, one a line
};

extern const char* const kDemoUsage;

// `demo --list`: each scenario's name and title, one a line, the titles in one column.
std::string demo_scenario_list();

// args exclude the program and subcommand names. `--flag VALUE` and `--flag=VALUE` both work.
Result<DemoOptions> parse_demo_options(const std::vector<std::string>& args);

// Exit codes: 0 the story ran and the report printed, 1 the store or the listener could not be
// opened, 2 bad usage.
int demo_main(const std::vector<std::string>& args);

}  // namespace stallwatch::cli
