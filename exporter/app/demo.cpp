#include "app/demo.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "app/demo_runner.h"
#include "cli/explain.h"
#include "cli/flags.h"
#include "cli/options.h"
#include "cli/version.h"
#include "common/duration.h"
#include "common/log.h"
#include "common/strings.h"
#include "demo/scenarios.h"
#include "metrics/http_server.h"
#include "metrics/otlp/pusher.h"
#include "stallwatch_version.h"  // generated (cmake/GitVersion.cmake)
#include "store/store.h"

namespace stallwatch::cli {
namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

}  // namespace

const char* const kDemoUsage =
    "usage: stallwatch demo [SCENARIO] [--listen ADDR:PORT] [--db PATH] [--window DURATION]\n"
    "                       [--fast] [--hold] [--json] [--otlp-endpoint URL ...]\n"
    "                       [--log.level LEVEL] [--log.format FORMAT]\n"
    "\n"
    "Feeds a synthetic GPU host through the same chain engine, store and /metrics as `run`;\n"
    "no root, no GPU. Prints each window as the chain forms, then the explain report.\n"
    "\n"
    "scenarios: incident (default), cpu-contention, cold-start, memcpy-bottleneck,\n"
    "           periodic-spike, gpu-steal, memory-pressure, io-stall, network-retransmit,\n"
    "           nccl-straggler, nccl-hang (3 ranks wait forever for a 4th: call_hang, at a\n"
    "           5s hang threshold), cpu-steal, cpu-throttle (the pod's own CPU limit),\n"
    "           cuda-oom (an allocation out of GPU memory), graph-recapture (CUDA graphs\n"
    "           re-recorded every step), gpu-throttle (a GPU at its power cap), gpu-xid (a\n"
    "           GPU falls off the bus under a job), healthy (a calm run: no chain)\n"
    "           (--list: one a line, with its story)\n"
    "\n"
    "  --listen ADDR:PORT  serve /metrics, /healthz, /debug/snapshot; after the story keep\n"
    "                      going (last phase repeating) until Ctrl-C\n"
    "  --db PATH           store here (default: a new file in $TMPDIR, kept; none: a\n"
    "                      temporary one, removed at the end)\n"
    "  --window DURATION   time between windows (default 1s, or none with --fast); each\n"
    "                      window holds at least 1 s of synthetic activity\n"
    "  --fast              no waiting: the story's windows end now\n"
    "  --hold              stop the story at the incident and keep it going (with --listen:\n"
    "                      for alert rules and dashboards)\n"
    "  --json              print the final report as JSON (explain --json)\n"
    "  --otlp-*            push the windows and chains over OTLP, as `stallwatch run` does\n"
    "                      (see `stallwatch run --help`; OTEL_* variables apply too)\n"
    "  --log.level LEVEL   debug, info, warn or error (default info); -v is debug\n"
    "  --log.format FORMAT logfmt or json, one line per message (default: plain lines)\n"
    "  --metrics.identity-labels LIST, --metrics.calls class|call,\n"
    "  --metrics.histogram-ladder x4|x2|x16\n"
    "                      what /metrics carries, as `stallwatch run --help` describes\n"
    "  --list              the scenarios, one a line with what each tells\n"
    "  -h, --help          this text\n"
    "  --version           the version (as `stallwatch version`)\n";

Result<DemoOptions> parse_demo_options(const std::vector<std::string>& args) {
  po::options_description desc;
  // clang-format off
  add_help_flags(desc);
  desc.add_options()
    ("list", "")
    ("scenario", po::value<std::vector<std::string>>(), "")
    ("listen", po::value<std::string>(), "")
    ("db", po::value<std::string>(), "")
    ("window", po::value<std::string>(), "")
    ("fast", "")
    ("hold", "")
    ("json", "")
    ("metrics.identity-labels", po::value<std::string>(), "")
    ("metrics.histogram-ladder", po::value<std::string>(), "")
    ("metrics.calls", po::value<std::string>(), "");
  // clang-format on
  add_log_flags(desc);
  for (const auto& f : otlp::push_flag_infos()) {
    if (f.repeatable) {
      desc.add_options()(f.name, po::value<std::vector<std::string>>()->composing(), "");
    } else {
      desc.add_options()(f.name, po::value<std::string>(), "");
    }
  }
  po::positional_options_description positional;
  positional.add("scenario", -1);
  auto vm = parse_flags(args, desc, &positional);
  if (!vm) return vm.error();
  DemoOptions o;
  o.help = vm->count("help") > 0;
  o.version = vm->count("version") > 0;
  o.list = vm->count("list") > 0;
  if (vm->count("scenario")) {
    const auto names = (*vm)["scenario"].as<std::vector<std::string>>();
    if (names.size() > 1) {
      return make_error("one scenario at a time, not '" + names[0] + "' and '" + names[1] + "'");
    }
    o.scenario = names.front();
  }
  if (vm->count("listen")) o.listen = (*vm)["listen"].as<std::string>();
  if (vm->count("metrics.identity-labels")) {
    auto r = set_identity_labels((*vm)["metrics.identity-labels"].as<std::string>(),
                                 "--metrics.identity-labels", o.exposition);
    if (!r) return r.error();
  }
  if (vm->count("metrics.histogram-ladder")) {
    auto r = set_histogram_ladder((*vm)["metrics.histogram-ladder"].as<std::string>(),
                                  "--metrics.histogram-ladder", o.exposition);
    if (!r) return r.error();
  }
  if (vm->count("metrics.calls")) {
    auto r = set_metric_calls((*vm)["metrics.calls"].as<std::string>(), "--metrics.calls",
                              o.exposition);
    if (!r) return r.error();
  }
  if (vm->count("db")) o.db = (*vm)["db"].as<std::string>();
  if (vm->count("window")) {
    const std::string v = (*vm)["window"].as<std::string>();
    auto d = parse_duration(v);
    if (!d || d->count() <= 0) {
      return make_error("--window " + v + ": " +
                        (d ? std::string("must be greater than 0") : d.error().message));
    }
    o.window = *d;
  }
  o.fast = vm->count("fast") > 0;
  o.hold = vm->count("hold") > 0;
  o.json = vm->count("json") > 0;
  for (const auto& f : otlp::push_flag_infos()) {
    if (!vm->count(f.name)) continue;
    const std::vector<std::string> values =
        f.repeatable ? (*vm)[f.name].as<std::vector<std::string>>()
                     : std::vector<std::string>{(*vm)[f.name].as<std::string>()};
    for (const auto& v : values) {
      if (auto set = otlp::set_push_flag(o.otlp, f.name, v); !set) return set.error();
    }
  }
  auto log = log_settings(*vm);
  if (!log) return log.error();
  o.log = *log;
  return o;
}

std::string demo_scenario_list() {
  const std::vector<std::string> names = demo::scenario_names();
  size_t width = 0;
  for (const auto& n : names) width = std::max(width, n.size());
  std::string out;
  for (const auto& n : names) {
    const auto s = demo::make_scenario(n);
    out += n + std::string(width + 2 - n.size(), ' ') + (s ? s->title : "") + "\n";
  }
  return out;
}

int demo_main(const std::vector<std::string>& args) {
  auto parsed = parse_demo_options(args);
  if (!parsed) return usage_error(std::cerr, "demo", parsed.error().message);
  if (parsed->help) {
    std::cout << kDemoUsage;
    return 0;
  }
  if (parsed->version) {
    std::cout << version_text();
    return 0;
  }
  if (parsed->list) {
    std::cout << demo_scenario_list();
    return 0;
  }
  const DemoOptions& opts = *parsed;
  apply_log_settings(opts.log);
  const std::string& name = opts.scenario;
  const std::string& listen = opts.listen;
  std::string db = opts.db;
  const bool json = opts.json;
  const otlp::PushFlags& push_flags = opts.otlp;
  demo::RunnerOptions ro;
  ro.window = opts.window;
  ro.realtime = !opts.fast;
  ro.hold = opts.hold;
  auto scenario = demo::make_scenario(name);
  if (!scenario) {
    std::string names;
    for (const auto& n : demo::scenario_names()) names += (names.empty() ? "" : ", ") + n;
    std::cerr << "stallwatch demo: unknown scenario '" << escape_line(name)
              << "'; one of: " << names << " (see `stallwatch demo --list`)\n";
    return 2;
  }
  if (ro.hold && listen.empty()) {
    return usage_error(std::cerr, "demo",
                       "--hold needs --listen (it keeps the incident going for Prometheus)");
  }
  auto push = otlp::push_config_from_environment(push_flags, STALLWATCH_VERSION);
  if (!push) {
    std::cerr << "stallwatch demo: " << push.error().message << "\n";
    return 2;
  }
  push->per_call = opts.exposition.per_call;
  // "none", as for run: keep nothing (the report still needs a store: a temporary one).
  const bool discard = db == "none";
  if (db.empty() || discard) {
    const char* tmp = std::getenv("TMPDIR");
    db = std::string(tmp && *tmp ? tmp : "/tmp") + "/stallwatch-demo-" + name + "-" +
         std::to_string(getpid()) + ".db";
  }
  store::StoreOptions so;
  so.path = db;
  auto st = store::Store::open(so);
  if (!st) {
    std::cerr << "stallwatch demo: " << st.error().message << "\n";
    return 1;
  }
  metrics::SnapshotBoard board;
  std::unique_ptr<metrics::HttpServer> http;
  if (!listen.empty()) {
    metrics::HttpOptions hopts;
    hopts.listen = listen;
    hopts.enable_debug = true;  // the demo's own data, no host to protect
    hopts.exposition = opts.exposition;
    auto h = metrics::HttpServer::start(hopts, board,
                                        metrics::BuildInfo{STALLWATCH_VERSION, STALLWATCH_REVISION});
    if (!h) {
      std::cerr << "stallwatch demo: " << h.error().message << "\n";
      return 1;
    }
    http = std::move(*h);
    std::cout << "serving http://" << listen << "/metrics\n";
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    ro.serve_after = true;
    ro.stop = &g_stop;
  }
  std::unique_ptr<otlp::Pusher> pusher;
  if (push->enabled) {
    pusher = std::make_unique<otlp::Pusher>(
        *push, metrics::BuildInfo{STALLWATCH_VERSION, STALLWATCH_REVISION});
    ro.otlp = pusher.get();
    std::cout << "pushing OTLP to " << otlp::describe(*push) << "\n";
  }
  ExplainOptions eo;
  eo.db = db;
  eo.since = std::chrono::hours(24);
  eo.json = json;
  char host[256] = "demo-host";
  gethostname(host, sizeof(host) - 1);
  auto print_report = [&] {
    (*st)->flush();
    std::cout << "\n== stallwatch explain --db " << db << (json ? " --json" : "") << "\n\n";
    const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count() +
                             ro.window.count();
    return run_explain(eo, now, host, std::cout, std::cerr);
  };
  // Removes a --db none store once the report is printed.
  auto finish = [&](int rc) {
    if (discard) {
      st->reset();
      for (const char* suffix : {"", "-wal", "-shm"}) std::remove((db + suffix).c_str());
    }
    return rc;
  };
  if (!ro.serve_after) {
    demo::run_scenario(*scenario, ro, board, st->get(), std::cout);
    int rc = print_report();
    if (!discard) {
      std::cout << "\nstored in " << db << "; try: stallwatch explain --db " << db
                << " --per-process\n";
    }
    return finish(rc);
  }
  // Serving: the story, then windows of the last (or, with --hold, the incident) phase until
  // Ctrl-C, then the report.
  demo::run_scenario(*scenario, ro, board, st->get(), std::cout);
  return finish(print_report());
}

}  // namespace stallwatch::cli
