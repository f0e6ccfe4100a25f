// Every JSON document writer (explain --json, check --json, /debug/snapshot, the store's JSON
// columns) over hostile strings: a process or cgroup name with invalid UTF-8 and control
// characters (any local user can prctl(PR_SET_NAME) or mkdir such names) and non-finite numbers.
// The output must parse, carry U+FFFD for each bad byte sequence, keep the control characters as
// escapes, and write null for NaN and infinities: never an exception, never an abort.
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/check.h"
#include "cli/explain.h"
#include "metrics/http_server.h"
#include "store/writer.h"

namespace stallwatch {
namespace {

const std::string kHostile = "x\xff\xfe\n\x1b[31msh /tmp/p #\xc0\xaf";
const std::string kReplacement = "\xef\xbf\xbd";  // U+FFFD
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

nlohmann::ordered_json parse(const std::string& text) {
  auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << text;
  return j;
}

// What a hostile name reads back as: bad bytes replaced, the rest kept.
void expect_cleaned(const std::string& s) {
  EXPECT_EQ(s.find('\xff'), std::string::npos) << s;
  EXPECT_NE(s.find(kReplacement), std::string::npos) << s;
  EXPECT_NE(s.find("\n\x1b[31msh /tmp/p #"), std::string::npos) << "text other than bad bytes kept";
}

TEST(JsonWriters, ExplainReport) {
  store::Report r;
  r.query.now_ns = 1795478400LL * 1000000000LL;
  r.query.since_ns = 3600LL * 1000000000LL;
  r.host.hostname = kHostile;
  r.host.cpu_busy = kNan;
  store::ReportChain c;
  c.id = "00000000000000aa";
  c.kind = "cpu_contention";
  c.comm = kHostile;
  c.cgroup = kHostile;
  c.p99_s = kInf;
  c.evidence = {{kHostile, kNan}, {"share", 0.25}};
  c.contributors.push_back({});
  c.contributors[0].comm = kHostile;
  r.chains.push_back(c);
  const std::string text = cli::render_explain_json(r);
  EXPECT_EQ(text.find('\n'), std::string::npos) << "control characters are escaped";
  auto j = parse(text);
  expect_cleaned(j["host"]["hostname"].get<std::string>());
  expect_cleaned(j["chains"][0]["comm"].get<std::string>());
  expect_cleaned(j["chains"][0]["contributors"][0]["comm"].get<std::string>());
  EXPECT_TRUE(j["chains"][0]["p99_s"].is_null());
  EXPECT_TRUE(j["host"]["cpu_busy"].is_null()) << "unknown stays null";
  ASSERT_EQ(j["chains"][0]["evidence"].size(), 2u);
  EXPECT_TRUE(j["chains"][0]["evidence"].begin().value().is_null());
  EXPECT_EQ(j["chains"][0]["evidence"]["share"].get<double>(), 0.25);
  EXPECT_EQ(j["period"]["seconds"].dump(), "3600") << "whole numbers stay integers";
}

TEST(JsonWriters, CheckReport) {
  cli::CheckReport r;
  r.items.push_back({kHostile, cli::Status::kWarn, kHostile, "fix"});
  r.libraries.push_back({kHostile, "cuda", true, {7}, {kHostile}, trace::Api::kDriver, kHostile});
  const std::string text = cli::render_json(r);
  EXPECT_EQ(text.find('\n'), std::string::npos);
  auto j = parse(text);
  expect_cleaned(j["checks"][0]["name"].get<std::string>());
  expect_cleaned(j["libraries"][0]["processes"][0].get<std::string>());
  expect_cleaned(j["libraries"][0]["sites"].get<std::string>());
  EXPECT_EQ(j["libraries"][0]["pids"][0].get<int>(), 7);
}

TEST(JsonWriters, DebugSnapshot) {
  Snapshot snap;
  Series& s = snap.series[kHostile];
  s.starvation_ratio = kNan;
  s.runnable_ratio = kInf;
  s.preemptors.push_back(Preemptor{1, 2, kHostile, kHostile, 3, 4, {}, 0, false, {}, {}});
  s.io_processes.push_back(ProcessIo{5, kHostile, IoKey{kHostile, "read"}, IoTotals{}});
  s.oom_victims.push_back(OomKill{6, kHostile, true, 7});
  const std::string text = metrics::snapshot_json(snap);
  ASSERT_TRUE(text.ends_with("\n"));
  EXPECT_EQ(text.find('\n'), text.size() - 1) << "one line";
  auto j = parse(text);
  const auto& series = j["series"][0];
  expect_cleaned(series["cgroup"].get<std::string>());
  expect_cleaned(series["preemptors"][0]["comm"].get<std::string>());
  expect_cleaned(series["io_processes"][0]["device"].get<std::string>());
  expect_cleaned(series["oom_victims"][0]["comm"].get<std::string>());
  EXPECT_TRUE(series["starvation_ratio"].is_null());
  EXPECT_TRUE(series["offcpu"]["runnable_ratio"].is_null());
}

TEST(JsonWriters, StoreColumns) {
  chains::Contributor k;
  k.comm = kHostile;
  k.cgroup = kHostile;
  auto contributors = parse(store::contributors_json({k}));
  expect_cleaned(contributors[0]["comm"].get<std::string>());
  auto evidence = parse(store::evidence_json({{kHostile, kInf}, {"n", 3}}));
  EXPECT_TRUE(evidence.begin().value().is_null());
  EXPECT_EQ(evidence["n"].dump(), "3");
}

}  // namespace
}  // namespace stallwatch
