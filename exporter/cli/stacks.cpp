#include "cli/stacks.h"

#include <chrono>
#include <iostream>

#include "cli/flags.h"
#include "cli/open_store.h"
#include "cli/version.h"
#include "common/duration.h"
#include "common/strings.h"
#include "store/report.h"
#include "store/schema.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace stallwatch::cli {
namespace {

constexpr const char* kPrefix = "stallwatch stacks: ";

constexpr const char* kUsage =
    "usage: stallwatch stacks [--db PATH] [--since DURATION] [--pid P] [--cgroup PATH]\n"
    "                         [--call NAME] [--timeout DURATION]\n"
    "\n"
    "Folded stacks of the slow CUDA calls (those at or above the daemon's --outlier-threshold)\n"
    "weighted by their stalled time in microseconds, one line per stack, outermost frame first:\n"
    "\n"
    "  libc.so.6+0x29d8f;...;worker() at /app/train.py:11;settle() at /app/train.py:4;"
    "cudaStreamSynchronize 48210\n"
    "\n"
    "Pipe it to flamegraph.pl, or load it in speedscope or a Grafana flame graph panel.\n"
    "\n"
    "  --db PATH        database (default /var/lib/stallwatch/stallwatch.db); read-only\n"
    "  --since DURATION period, e.g. 10m, 1h (default 10m)\n"
    "  --pid P          one process\n"
    "  --cgroup PATH    this cgroup and the cgroups below it\n"
    "  --call NAME      one CUDA call, e.g. cudaStreamSynchronize\n"
    "  --timeout D      give up after D (default 30s; 0 for none)\n"
    "  -h, --help       this text\n"
    "  --version        the version (as `stallwatch version`)\n";

int usage_error(const std::string& m) { return cli::usage_error(std::cerr, "stacks", m); }

}  // namespace

int stacks_main(const std::vector<std::string>& args) {
  po::options_description desc;
  // clang-format off
  add_help_flags(desc);
  desc.add_options()
    ("db", po::value<std::string>(), "")
    ("since", po::value<std::string>(), "")
    ("pid", po::value<std::string>(), "")
    ("cgroup", po::value<std::string>(), "")
    ("call", po::value<std::string>(), "")
    ("timeout", po::value<std::string>(), "");
  // clang-format on
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
  std::string db = "/var/lib/stallwatch/stallwatch.db";
  if (vm->count("db")) db = (*vm)["db"].as<std::string>();
  if (db.empty()) return usage_error("--db needs a path");
  store::ReportQuery q;
  q.since_ns = std::chrono::nanoseconds(std::chrono::minutes(10)).count();
  if (vm->count("since")) {
    auto d = parse_duration((*vm)["since"].as<std::string>());
    if (!d) return usage_error("--since: " + d.error().message);
    if (d->count() <= 0) return usage_error("--since must be longer than 0");
    q.since_ns = d->count();
  }
  if (vm->count("cgroup")) q.cgroup = (*vm)["cgroup"].as<std::string>();
  int pid = 0;
  if (vm->count("pid")) {
    auto parsed = read_pid((*vm)["pid"].as<std::string>());
    if (!parsed) return usage_error(parsed.error().message);
    pid = *parsed;
  }
  std::string call;
  if (vm->count("call")) call = (*vm)["call"].as<std::string>();
  std::chrono::nanoseconds timeout = kDefaultReadTimeout;
  if (vm->count("timeout")) {
    auto t = read_timeout((*vm)["timeout"].as<std::string>(), "--timeout");
    if (!t) return usage_error(t.error().message);
    timeout = *t;
  }
  q.now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();

  auto opened = open_store(db, "stacks");
  if (!opened) {
    std::cerr << kPrefix << opened.error().message << "\n";
    return 1;
  }
  if (!opened->note.empty()) std::cerr << kPrefix << opened->note << "\n";
  auto version = store::schema_version(opened->db.get());
  if (!version) {
    std::cerr << kPrefix << "reading " << db << ": " << version.error().message << "\n";
    return 1;
  }
  if (*version < 8) {
    std::cerr << kPrefix << db << " has no call sites (schema " << *version
              << "; they came with schema 8): run a newer `stallwatch run` on it first\n";
    return 1;
  }
  // Parameters past ?3 (the period's) are literals here: pid is a checked integer, the call
  // name goes through quote().
  std::string sql =
      "SELECT folded, sum(stalled_ns) FROM outlier_sites WHERE ts_ns > ?1 AND ts_ns <= ?2" +
      store::period_cgroup_clause("cgroup");
  if (pid) sql += " AND pid = " + std::to_string(pid);
  if (!call.empty()) {
    std::string quoted = "'";
    for (char c : call) quoted += c == '\'' ? std::string("''") : std::string(1, c);
    sql += " AND call = " + quoted + "'";
  }
  sql += " GROUP BY folded ORDER BY 2 DESC";
  size_t lines = 0;
  std::string out;
  const store::StatementDeadline deadline(opened->db.get(), timeout);
  auto done = store::each_period_row(opened->db.get(), sql, q, [&](const store::Stmt& row) {
    const std::int64_t us = row.int64(1) / 1000;
    out += row.text(0) + " " + std::to_string(us > 0 ? us : 1) + "\n";
    lines++;
  });
  if (!done) {
    if (deadline.expired()) {
      std::cerr << kPrefix << "stopped after " << format_duration(timeout)
                << " (--timeout); ask for a shorter period (--since), one --pid or one cgroup\n";
    } else {
      std::cerr << kPrefix << "reading " << db << ": " << done.error().message << "\n";
    }
    return 1;
  }
  std::cout << escape_text(out);
  if (lines == 0) {
    std::cerr << kPrefix << "no call sites in the period: no call reached the daemon's "
                            "--outlier-threshold, or it runs with --stacks=off\n";
  }
  return 0;
}

}  // namespace stallwatch::cli
