// Privileged tier, hangs (issue #21): calls that do not return are read from the kernel while
// they are open. A synchronize held by the stand-in library (MOCK_CUDA_HOLD_FILE) is exported
// as stallwatch_cuda_call_inflight_seconds and opens a critical call_hang chain within the
// threshold plus two windows, naming the process, thread and call; it closes once released. A
// long loop of short synchronizes never opens one. Eight local ranks of which seven hang in
// ncclAllReduce (MOCK_NCCL_HOLD_FILE) and one never enters it: the chains name that rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <functional>
#include <set>
#include <thread>

#include "common/json.h"
#include "support/evidence.h"
#include "support/harness.h"
#include "support/process.h"

namespace stallwatch::test {
namespace {

using namespace std::chrono_literals;

const std::string kCudart = std::string(MOCK_DIR) + "/libcudart.so.12";
constexpr double kThresholdS = 2;   // --hang-threshold
constexpr double kWindowS = 0.5;    // --window

// The suite's cgroups all lie below /stallwatch-hang-PID; its daemon traces only there.
std::string top() { return "stallwatch-hang-" + std::to_string(getpid()); }
std::string unique(const std::string& name) { return top() + "/" + name; }

// The call_hang chains of `cgroup` explain reports, as JSON objects.
std::vector<Json> hang_chains(const Daemon& d, const std::string& cgroup,
                              std::string* raw = nullptr) {
  return explain_chain_objects(d, "call_hang", cgroup, raw);
}

double evidence(const Json& chain, const std::string& name) {
  return chain["evidence"].value(name, -1.0);
}

class Hang : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new OwnCgroupRoot(top());
    daemon_ = new Daemon(root_->flags({"--window", "500ms", "--hang-threshold", "2s"}));
    ASSERT_TRUE(daemon_->wait_ready()) << "daemon not ready; log: " << daemon_->log_path();
  }
  static void TearDownTestSuite() {
    if (daemon_) {
      EXPECT_EQ(daemon_->stop(), 0) << daemon_->log_path();
      delete daemon_;
      daemon_ = nullptr;
    }
    delete root_;
    root_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(daemon_, nullptr);
    hold_ = std::string(TEST_SCRATCH_DIR) + "/hang-hold-" + std::to_string(getpid());
    std::ofstream(hold_).put('1');
  }
  void TearDown() override { ::unlink(hold_.c_str()); }

  // Scrapes until `pred` holds on the samples (bounded); the last samples in *last.
  static bool scrape_until(const std::function<bool(const std::vector<Sample>&)>& pred,
                           std::chrono::seconds limit, std::vector<Sample>* last) {
    return poll_until(
        [&] {
          *last = parse_exposition(daemon_->metrics());
          return pred(*last);
        },
        limit, 100ms);
  }

  // Scrapes every 200 ms while `w` runs: the oldest open call of `cgroup` seen; with
  // `no_chain`, also that no call_hang chain is active at any scrape.
  static double oldest_open_call(const Child& w, const std::string& cgroup, bool no_chain) {
    double oldest = 0;
    while (w.running()) {
      auto x = parse_exposition(daemon_->metrics());
      oldest = std::max(oldest, sum_samples(x, "stallwatch_cuda_call_inflight_seconds", {{"cgroup", cgroup}}));
      if (no_chain) {
        EXPECT_EQ(sum_samples(x, "stallwatch_chain_active", {{"cgroup", cgroup}, {"kind", "call_hang"}}), 0);
      }
      std::this_thread::sleep_for(200ms);
    }
    return oldest;
  }

  static Daemon* daemon_;
  static OwnCgroupRoot* root_;
  std::string hold_;
};
Daemon* Hang::daemon_ = nullptr;
OwnCgroupRoot* Hang::root_ = nullptr;

TEST_F(Hang, HeldSynchronizeOpensACallHangWhileItHangsAndClosesOnceReleased) {
  TestCgroup cg(unique("sync"));
  Spawn s;
  s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--calls", "cudaStreamSynchronize:1",
            "--start-delay-ms", "500"};
  s.env = {{"MOCK_CUDA_HOLD_FILE", hold_}};
  s.cgroup_dir = cg.dir();
  Child w(s);
  const std::map<std::string, std::string> labels = {
      {"cgroup", cg.label()}, {"api", "runtime"}, {"call", "cudaStreamSynchronize"}};
  auto active = [&](const std::vector<Sample>& x) {
    return sum_samples(x, "stallwatch_chain_active", {{"cgroup", cg.label()}, {"kind", "call_hang"}});
  };
  // Seen while it hangs: the gauge appears before the chain.
  std::vector<Sample> x;
  ASSERT_TRUE(scrape_until([&](const auto& v) { return find_sample(v, "stallwatch_cuda_call_inflight_seconds", labels).has_value(); }, 30s, &x))
      << "no in-flight gauge; log: " << daemon_->log_path();
  EXPECT_LT(*find_sample(x, "stallwatch_cuda_call_inflight_seconds", labels), kThresholdS);
  EXPECT_EQ(active(x), 0) << "below the threshold: no chain yet";
  // The chain opens within the threshold plus two windows (one more for the scrape's lag).
  ASSERT_TRUE(scrape_until([&](const auto& v) { return active(v) == 1; }, 30s, &x));
  const double age = *find_sample(x, "stallwatch_cuda_call_inflight_seconds", labels);
  EXPECT_GE(age, kThresholdS);
  EXPECT_LE(age, kThresholdS + 3 * kWindowS) << "reported late";
  ASSERT_TRUE(daemon_->wait_windows(2));
  std::string raw;
  auto chains = hang_chains(*daemon_, cg.label(), &raw);
  ASSERT_EQ(chains.size(), 1u) << raw;
  const Json& c = chains[0];
  std::cout << "call_hang: " << c["summary"].get<std::string>() << "\n";
  EXPECT_EQ(c["severity"], "critical");
  EXPECT_EQ(c["open"], true);
  EXPECT_EQ(c["cgroup"], cg.label());
  EXPECT_EQ(c["pid"], w.pid());
  EXPECT_EQ(c["call"], "cudaStreamSynchronize");
  EXPECT_EQ(c["comm"], "cuda_workload");
  EXPECT_GT(evidence(c, "tid"), 0);
  EXPECT_GE(evidence(c, "blocked_share"), 0.9) << "the held call sleeps: blocked";
  EXPECT_NE(c["root_cause"].get<std::string>().find("blocked"), std::string::npos);
  EXPECT_NE(c["recommendation"].get<std::string>().find("py-spy dump --pid " + std::to_string(w.pid())),
            std::string::npos);
  // The store has the open call every window.
  std::string rows;
  ASSERT_EQ(run_command({STALLWATCH_BIN, "query", "--db", daemon_->db_path(), "--format", "csv",
                         "SELECT count(*), max(age_ns) > 2000000000 FROM inflight_windows "
                         "WHERE cgroup = '" + cg.label() + "' AND call = 'cudaStreamSynchronize'"},
                        &rows),
            0);
  EXPECT_NE(rows.find(",1\r\n"), std::string::npos) << rows;

  // Released: it returns, the gauge goes and the chain closes.
  ::unlink(hold_.c_str());
  ASSERT_EQ(w.wait(30s), 0);
  ASSERT_TRUE(scrape_until([&](const auto& v) { return active(v) == 0; }, 10s, &x));
  EXPECT_FALSE(find_sample(x, "stallwatch_cuda_call_inflight_seconds", labels).has_value());
  ASSERT_TRUE(daemon_->wait_windows(2));
  chains = hang_chains(*daemon_, cg.label(), &raw);
  ASSERT_EQ(chains.size(), 1u) << raw;
  EXPECT_EQ(chains[0]["open"], false) << raw;
}

TEST_F(Hang, LongLoopOfShortCallsNeverOpensIt) {
  TestCgroup cg(unique("busy"));
  Spawn s;
  // ~4 s of synchronizes, each ~1 ms: twice the threshold in all, none near it.
  s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--calls", "cudaStreamSynchronize:1",
            "--iterations", "4000", "--start-delay-ms", "300"};
  s.env = {{"MOCK_CUDA_SYNC_SLEEP_US", "1000"}};
  s.cgroup_dir = cg.dir();
  Child w(s);
  const double oldest = oldest_open_call(w, cg.label(), true);
  ASSERT_EQ(w.wait(30s), 0);
  ASSERT_TRUE(daemon_->wait_windows(2));
  auto x = parse_exposition(daemon_->metrics());
  EXPECT_GT(sum_samples(x, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", cg.label()}, {"call", "cudaStreamSynchronize"}}),
            1000)
      << "traced: the negative is not a blind spot";
  EXPECT_EQ(chains_total(x, cg.label(), "call_hang"), 0);
  EXPECT_LT(oldest, 0.5) << "an open call lived longer than any of its calls";
}

// A call left by longjmp (an exception unwinding through the library) never fires its
// uretprobe; the thread's next call from the same depth drops its frame, so it is not a hang.
TEST_F(Hang, CallLeftByLongjmpIsNotAHang) {
  TestCgroup cg(unique("escaped"));
  Spawn s;
  s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--calls", "cudaStreamSynchronize:1",
            "--iterations", "3000", "--escape-first-sync", "--start-delay-ms", "300"};
  s.env = {{"MOCK_CUDA_SYNC_SLEEP_US", "1000"}};
  s.cgroup_dir = cg.dir();
  Child w(s);
  const double oldest = oldest_open_call(w, cg.label(), false);
  ASSERT_EQ(w.wait(30s), 0);
  ASSERT_TRUE(daemon_->wait_windows(2));
  auto x = parse_exposition(daemon_->metrics());
  EXPECT_GE(sum_samples(x, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", cg.label()}, {"call", "cudaStreamSynchronize"}}),
            2999)
      << "the calls after the escaped one are traced (the first, made within 1 ms of the "
         "escaped one at the same place, may be taken for a second probe on it)";
  EXPECT_EQ(chains_total(x, cg.label(), "call_hang"), 0);
  EXPECT_LT(oldest, 0.5) << "the escaped call's frame stayed open";
}

TEST_F(Hang, RankThatNeverEntersTheCollectiveIsNamed) {
  constexpr int kRanks = 8, kMissing = 3;
  TestCgroup cg(unique("job"));
  Pipe never;  // rank 3 waits for a byte that comes only at the end
  std::vector<std::unique_ptr<Child>> ranks;
  for (int r = 0; r < kRanks; ++r) {
    Spawn s;
    s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--nccl", MOCK_NCCL_PATH, "--rank",
              std::to_string(r), "--nranks", std::to_string(kRanks), "--calls", "ncclAllReduce:1",
              "--start-delay-ms", "500"};
    if (r == kMissing) {
      s.argv.insert(s.argv.end(), {"--wait-fd", std::to_string(never.read_end)});
      s.pass_fds = {never.read_end};
    }
    s.env = {{"MOCK_NCCL_HOLD_FILE", hold_}};
    s.cgroup_dir = cg.dir();
    ranks.push_back(std::make_unique<Child>(s));
  }
  never.close_read();
  std::string raw;
  std::vector<Json> chains;
  ASSERT_TRUE(poll_until(
      [&] {
        chains = hang_chains(*daemon_, cg.label(), &raw);
        return chains.size() == kRanks - 1;
      },
      40s, 500ms))
      << chains.size() << " call_hang chains, want " << kRanks - 1 << ":\n" << raw;
  std::set<int> hung_ranks;
  const int missing_pid = ranks[kMissing]->pid();
  for (const auto& c : chains) {
    EXPECT_EQ(c["call"], "ncclAllReduce");
    EXPECT_EQ(c["api"], "nccl");
    EXPECT_NE(c["pid"], missing_pid) << "the missing rank is not in the collective";
    EXPECT_EQ(evidence(c, "world_size"), kRanks);
    hung_ranks.insert(static_cast<int>(evidence(c, "rank")));
    ASSERT_EQ(c["contributors"].size(), 1u) << c.dump();
    EXPECT_EQ(c["contributors"][0]["pid"], missing_pid);
    EXPECT_EQ(c["contributors"][0]["role"], "rank 3, not in the collective");
    EXPECT_NE(c["summary"].get<std::string>().find("rank 3 (PID " + std::to_string(missing_pid) +
                                                   ") has not entered it"),
              std::string::npos)
        << c["summary"];
  }
  EXPECT_EQ(hung_ranks, (std::set<int>{0, 1, 2, 4, 5, 6, 7}));
  std::cout << "call_hang: " << chains[0]["summary"].get<std::string>() << "\n";
  // The job is killed instead of released: every chain closes with its process.
  for (auto& r : ranks) r->stop();
  ASSERT_TRUE(poll_until(
      [&] {
        chains = hang_chains(*daemon_, cg.label(), &raw);
        return std::none_of(chains.begin(), chains.end(), [](const Json& c) { return c["open"] == true; });
      },
      20s, 500ms))
      << "chains still open after the ranks were killed:\n" << raw;
  EXPECT_EQ(chains.size(), static_cast<size_t>(kRanks - 1));
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
