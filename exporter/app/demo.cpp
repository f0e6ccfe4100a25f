#include "app/demo.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "cli/explain.h"
#include "common/duration.h"
#include "common/log.h"
#include "app/demo_runner.h"
#include "demo/scenarios.h"
#include "metrics/http_server.h"
#include "metrics/otlp/pusher.h"
#include "store/store.h"

namespace stallwatch::cli {
namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

constexpr const char* kUsage =
    "usage: stallwatch demo [SCENARIO] [--listen ADDR:PORT] [--db PATH] [--window DURATION]\n"
    "                       [--fast] [--hold] [--json] [--otlp-endpoint URL ...]\n"
    "\n"
    "Feeds a synthetic GPU host through the same chain engine, store and /metrics as `run`;\n"
    "no root, no GPU. Prints each window as the chain forms, then the explain report.\n"
    "\n"
    "scenarios: incident (default), cpu-contention, cold-start, memcpy-bottleneck,\n"
    "           periodic-spike, gpu-steal, memory-pressure, io-stall, network-retransmit,\n"
    "           nccl-straggler, healthy (a calm run: no chain)\n"
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
    "                      (see `stallwatch run --help`; OTEL_* variables apply too)\n";

}  // namespace

int demo_main(const std::vector<std::string>& args) {
  std::string name = "incident", listen, db;
  demo::RunnerOptions ro;
  otlp::PushFlags push_flags;
  bool json = false;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    auto value = [&](std::string& into) {
      if (i + 1 >= args.size()) {
        std::cerr << "stallwatch demo: " << a << " needs a value\n" << kUsage;
        return false;
      }
      into = args[++i];
      return true;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--listen") {
      if (!value(listen)) return 2;
    } else if (a == "--db") {
      if (!value(db)) return 2;
    } else if (a == "--window") {
      if (!value(v)) return 2;
      auto d = parse_duration(v);
      if (!d || d->count() <= 0) {
        std::cerr << "stallwatch demo: --window " << v << ": "
                  << (d ? "must be greater than 0" : d.error().message) << "\n";
        return 2;
      }
      ro.window = *d;
    } else if (a == "--fast") {
      ro.realtime = false;
    } else if (a == "--hold") {
      ro.hold = true;
    } else if (a == "--json") {
      json = true;
    } else if (a.starts_with("--otlp-")) {
      if (!value(v)) return 2;
      if (auto set = otlp::set_push_flag(push_flags, a.substr(2), v); !set) {
        std::cerr << "stallwatch demo: " << set.error().message << "\n";
        return 2;
      }
    } else if (!a.empty() && a[0] != '-') {
      name = a;
    } else {
      std::cerr << "stallwatch demo: unknown option " << a << "\n" << kUsage;
      return 2;
    }
  }
  auto scenario = demo::make_scenario(name);
  if (!scenario) {
    std::cerr << "stallwatch demo: unknown scenario '" << name << "'; one of:";
    for (const auto& n : demo::scenario_names()) std::cerr << " " << n;
    std::cerr << "\n";
    return 2;
  }
  if (ro.hold && listen.empty()) {
    std::cerr << "stallwatch demo: --hold needs --listen (it keeps the incident going for "
                 "Prometheus)\n";
    return 2;
  }
  auto push = otlp::push_config_from_environment(push_flags, STALLWATCH_VERSION);
  if (!push) {
    std::cerr << "stallwatch demo: " << push.error().message << "\n";
    return 2;
  }
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
    auto h = metrics::HttpServer::start(listen, board,
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
