// Golden outputs of every demo scenario, held byte for byte: the window narration, /metrics
// (text 0.0.4) after the story, and the `explain` report as text, with --per-process, and as
// JSON (compared after parsing, key order kept). The scenarios run with a fixed clock and seed,
// so the files in tests/fixtures/golden/<scenario>/ only change when behaviour does; a refactor
// must leave them alone. After an intended change of output, regenerate them with
//   STALLWATCH_UPDATE_GOLDEN=1 build/golden_test
// and read the diff before committing it.
// /metrics is taken from a run without a store (the store's own families count bytes and queue
// depth, which depend on the writer thread's timing); the reports from a second run with one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "app/demo_runner.h"
#include "cli/explain.h"
#include "demo/scenarios.h"
#include "metrics/exposition.h"
#include "metrics/http_server.h"
#include "store/store.h"

namespace stallwatch {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kEndNs = 1795478400LL * 1000000000LL;  // 2026-11-24T00:00:00Z
constexpr std::uint64_t kSeed = 42;
constexpr std::int64_t kWindowNs = 1000000000LL;

bool updating() {
  const char* v = std::getenv("STALLWATCH_UPDATE_GOLDEN");
  return v && *v && std::string(v) != "0";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& body) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << body;
}

// Compares `actual` with the golden file (or rewrites it when updating).
void expect_golden(const fs::path& p, const std::string& actual, bool json = false) {
  if (updating()) {
    write(p, actual);
    return;
  }
  ASSERT_TRUE(fs::exists(p)) << p << " is missing; run with STALLWATCH_UPDATE_GOLDEN=1";
  const std::string want = slurp(p);
  if (json) {
    auto a = nlohmann::ordered_json::parse(actual, nullptr, false);
    auto w = nlohmann::ordered_json::parse(want, nullptr, false);
    ASSERT_FALSE(a.is_discarded()) << "explain --json is not JSON:\n" << actual;
    EXPECT_EQ(a, w) << p << " differs:\n" << actual;
    return;
  }
  EXPECT_EQ(actual, want) << p << " differs";
}

demo::RunnerOptions runner_options() {
  demo::RunnerOptions ro;
  ro.realtime = false;
  ro.end_ns = kEndNs;
  ro.seed = kSeed;
  ro.window = std::chrono::nanoseconds(kWindowNs);
  return ro;
}

std::string explain(const std::string& db, bool json, bool per_process) {
  cli::ExplainOptions eo;
  eo.db = db;
  eo.since = std::chrono::hours(24);
  eo.json = json;
  eo.per_process = per_process;
  std::ostringstream out, err;
  int rc = cli::run_explain(eo, kEndNs + kWindowNs, "golden-host", out, err);
  EXPECT_EQ(rc, 0) << err.str();
  return out.str();
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, DemoOutputsAreUnchanged) {
  const std::string name = GetParam();
  const fs::path dir = fs::path(FIXTURES_DIR) / "golden" / name;
  auto scenario = demo::make_scenario(name);
  ASSERT_TRUE(scenario);

  {
    metrics::SnapshotBoard board;
    std::ostringstream narration;
    demo::run_scenario(*scenario, runner_options(), board, nullptr, narration);
    expect_golden(dir / "demo.txt", narration.str());
    expect_golden(dir / "metrics.txt",
                  metrics::render_exposition(*board.current(), {"0.1.0", "golden"}));
  }

  char tmpl[] = "/tmp/golden_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string db = std::string(tmpl) + "/golden.db";
  {
    store::StoreOptions so;
    so.path = db;
    auto st = store::Store::open(so);
    ASSERT_TRUE(st) << st.error().message;
    metrics::SnapshotBoard board;
    std::ostringstream narration;
    demo::run_scenario(*scenario, runner_options(), board, st->get(), narration);
    (*st)->flush();
    expect_golden(dir / "explain.txt", explain(db, false, false));
    expect_golden(dir / "explain-per-process.txt", explain(db, false, true));
    expect_golden(dir / "explain.json", explain(db, true, false), true);
  }
  fs::remove_all(tmpl);
}

INSTANTIATE_TEST_SUITE_P(Scenarios, Golden, ::testing::ValuesIn(demo::scenario_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace stallwatch
