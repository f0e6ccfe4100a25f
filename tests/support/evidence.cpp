#include "support/evidence.h"

#include <unistd.h>

#include <algorithm>
#include <regex>

#include "support/process.h"

namespace stallwatch::test {

double sum_samples(const std::vector<Sample>& samples, const std::string& name,
                   const std::map<std::string, std::string>& match) {
  double total = 0;
  for (const auto& s : samples) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : match) {
      auto it = s.labels.find(k);
      ok = ok && it != s.labels.end() && it->second == v;
    }
    if (ok) total += s.value;
  }
  return total;
}

bool wait_traced(const Daemon& daemon, const std::string& cgroup, std::chrono::seconds limit) {
  return poll_until(
      [&] {
        auto s = parse_exposition(daemon.metrics());
        return sum_samples(s, "stallwatch_cuda_call_duration_seconds_count", {{"cgroup", cgroup}}) >
               0;
      },
      limit);
}

std::vector<Json> explain_chain_objects(const Daemon& daemon, const std::string& kind,
                                        const std::string& cgroup, std::string* raw) {
  std::string out;
  run_command({STALLWATCH_BIN, "explain", "--db", daemon.db_path(), "--since", "1h", "--json"},
              &out, std::chrono::seconds(30));
  if (raw) *raw = out;
  std::vector<Json> chains;
  const Json doc = Json::parse(out, nullptr, false);
  if (doc.is_discarded() || !doc.contains("chains")) return chains;
  for (const auto& c : doc["chains"]) {
    if (c["kind"] == kind && c["cgroup"] == cgroup) chains.push_back(c);
  }
  return chains;
}

std::vector<ChainInfo> explain_chains(const Daemon& daemon, std::string* raw) {
  std::string out;
  run_command({STALLWATCH_BIN, "explain", "--db", daemon.db_path(), "--since", "1h", "--json"},
              &out, std::chrono::seconds(30));
  if (raw) *raw = out;
  std::vector<ChainInfo> chains;
  // Each chain object starts {"id":..,"kind":..,"severity":..,"peak":..,"open":..,"cgroup":..
  static const std::regex re(
      R"re(\{"id":"[^"]*","kind":"([^"]*)","severity":"([^"]*)","peak":"[^"]*","open":(true|false),"cgroup":"((?:[^"\\]|\\.)*)")re");
  auto begin = std::sregex_iterator(out.begin(), out.end(), re);
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    ChainInfo c;
    c.kind = m[1];
    c.severity = m[2];
    c.open = m[3] == "true";
    c.cgroup = m[4];
    // The object runs to the next chain's start (or the end of the array): enough context.
    size_t start = static_cast<size_t>(m.position(0));
    size_t next = out.find("{\"id\":", start + 1);
    size_t end = out.find("],\"traced\"", start);
    c.json = out.substr(start, std::min(next, end) - start);
    chains.push_back(std::move(c));
  }
  return chains;
}

std::vector<ChainInfo> chains_of(const std::vector<ChainInfo>& chains, const std::string& kind,
                                 const std::string& cgroup) {
  std::vector<ChainInfo> out;
  for (const auto& c : chains) {
    if (c.kind == kind && c.cgroup == cgroup) out.push_back(c);
  }
  return out;
}

double chains_total(const std::vector<Sample>& samples, const std::string& cgroup,
                    const std::string& kind) {
  return sum_samples(samples, "stallwatch_chains_total", {{"cgroup", cgroup}, {"kind", kind}});
}

std::vector<ChainInfo> wait_chain(const Daemon& daemon, const std::string& kind,
                                  const std::string& cgroup, std::chrono::seconds limit,
                                  std::string* raw) {
  std::vector<ChainInfo> found;
  poll_until(
      [&] {
        found = chains_of(explain_chains(daemon, raw), kind, cgroup);
        return !found.empty();
      },
      limit, std::chrono::milliseconds(500));
  return found;
}

std::vector<std::string> keeper_argv() {
  return {WORKLOAD_BIN,
          "--cudart",
          std::string(MOCK_DIR) + "/libcudart.so.12",
          "--start-delay-ms",
          "300",
          "--calls",
          "cudaLaunchKernel:1,cudaStreamSynchronize:1",
          "--iterations",
          "12000",
          "--spacing-us",
          "5000"};
}

Daemon* DaemonSuite::daemon_ = nullptr;
OwnCgroupRoot* DaemonSuite::root_ = nullptr;

namespace {
std::string suite_top() { return "stallwatch-suite-" + std::to_string(getpid()); }
}  // namespace

std::string suite_cgroup(const std::string& name) { return suite_top() + "/" + name; }

void DaemonSuite::SetUpTestSuite() {
  root_ = new OwnCgroupRoot(suite_top());
  daemon_ = new Daemon(root_->flags({"--window", "500ms"}));
  ASSERT_TRUE(daemon_->wait_ready()) << "daemon not ready; log: " << daemon_->log_path();
}

void DaemonSuite::TearDownTestSuite() {
  if (daemon_) {
    EXPECT_EQ(daemon_->stop(), 0) << "daemon exit status; log: " << daemon_->log_path();
    delete daemon_;
    daemon_ = nullptr;
  }
  delete root_;
  root_ = nullptr;
}

void DaemonSuite::SetUp() { ASSERT_NE(daemon_, nullptr) << "suite setup failed"; }

}  // namespace stallwatch::test

