// What the daemon says about a workload, for the privileged tests: sums over exposition samples,
// "is this cgroup traced yet", and the causal chains as `stallwatch explain --json` reports
// them (read from the daemon's store by a separate process). Every wait is bounded.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/json.h"
#include "support/harness.h"

namespace stallwatch::test {

// The sum of every sample named `name` whose labels include `match` (0 when there is none).
double sum_samples(const std::vector<Sample>& samples, const std::string& name,
                   const std::map<std::string, std::string>& match);

// Waits until the daemon exports CUDA calls made in `cgroup`: from then on the cgroup is one
// the daemon traces host events for.
bool wait_traced(const Daemon& daemon, const std::string& cgroup,
                 std::chrono::seconds limit = std::chrono::seconds(30));

// One chain of `stallwatch explain --json`.
struct ChainInfo {
  std::string kind, severity, cgroup;
  bool open = false;
  std::string json;  // the whole chain object, for messages
};
// Runs `stallwatch explain --db <daemon's db> --since 1h --json`; *raw gets its output.
std::vector<ChainInfo> explain_chains(const Daemon& daemon, std::string* raw = nullptr);
// The chains of `kind` and `cgroup` in that output, parsed whole (evidence, root cause, ...).
std::vector<Json> explain_chain_objects(const Daemon& daemon, const std::string& kind,
                                        const std::string& cgroup, std::string* raw = nullptr);
// The chains of exactly this kind and cgroup label.
std::vector<ChainInfo> chains_of(const std::vector<ChainInfo>& chains, const std::string& kind,
                                 const std::string& cgroup);
// stallwatch_chains_total summed over severities for this cgroup and kind.
double chains_total(const std::vector<Sample>& samples, const std::string& cgroup,
                    const std::string& kind);
// Waits (bounded) until explain reports a chain of `kind` for `cgroup`; returns the chains
// then seen (empty on timeout) and the last explain output in *raw.
std::vector<ChainInfo> wait_chain(const Daemon& daemon, const std::string& kind,
                                  const std::string& cgroup, std::chrono::seconds limit,
                                  std::string* raw = nullptr);

// argv of a CUDA workload that keeps a cgroup watched (host hooks work only for cgroups with
// CUDA-issuing threads): a launch and a sync every 5 ms for up to a minute. Set cgroup_dir.
std::vector<std::string> keeper_argv();

// One daemon (500 ms windows) shared by the tests of a suite; a suite with more setup defines
// its own SetUpTestSuite and calls DaemonSuite::SetUpTestSuite from it. The suite makes its
// cgroups with suite_cgroup(): its daemon traces only below their common root (OwnCgroupRoot).
class DaemonSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  void SetUp() override;
  static Daemon* daemon_;
  static OwnCgroupRoot* root_;
};
// NAME below the DaemonSuite root of this test process: "stallwatch-suite-PID/NAME".
std::string suite_cgroup(const std::string& name);

}  // namespace stallwatch::test
