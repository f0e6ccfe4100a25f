// Privileged tier, the job across nodes (issue #52 item 5): two daemons stand for two nodes
// (each traces only its own cgroup subtree, --cgroup-roots, under its own --kube-node name), a
// stand-in NCCL job of four ranks, two per node, whose collectives really wait for each other
// (the mock's shared-memory barrier), and one real Prometheus scraping both daemons with the
// shipped alerts/stallwatch.rules.yml. Only the straggler alert's `for` is shortened (2m to 5s)
// so the test takes seconds; every expression is the shipped one.
//   - a CPU hog on rank 0's core (node-a): StallwatchNcclStraggler names rank 0, node-a and
//     host_cause cpu_contention, and its description names the hog;
//   - the same job balanced (every rank's collectives take the same time): nothing fires while
//     the communicator's ranks wait a fair share;
//   - rank 3 (node-b) slowed by its own code (a longer gap between its steps, no host cause):
//     the alert names rank 3 and node-b with host_cause "none".
// Each daemon keeps its own store (its node's --db). With the hog started after a calm phase,
// `stallwatch explain` on node-b, whose ranks wait for node-a's rank 0 with no cause of their own,
// names the communicator and the job (issue #52 item 6); on node-a, where the cause is, and on
// both nodes of the balanced job, it names none.
// Each scenario is its own job (its own unique id, so its own commHash, and its own cgroups):
// the scenarios never see each other's series.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include "support/harness.h"
#include "support/process.h"
#include "trace/nccl_ranks.h"

namespace stallwatch::test {
namespace {

const std::string kCudart = std::string(MOCK_DIR) + "/libcudart.so.12";
const std::string kRules = std::string(FIXTURES_DIR) + "/../../alerts/stallwatch.rules.yml";
constexpr int kRanks = 4;
// A step of every rank: three slots of kSlotUs each, one of which is its compute (a
// cudaLaunchKernel using kComputeUs of CPU; the other two a cheap call), then ncclAllReduce,
// whose own time is kOpUs (the "network") plus the wait for the last rank to arrive. The ranks
// that share a core compute in different slots, so on this 2-CPU machine they do not contend
// with each other: any contention is the hog's. Measured here (20 s each, kernel 6.18): balanced,
// every rank waits 9-17% of the time (scores <= 0.25); with the hog, rank 0 waits 6% and its
// peers 66% (score 0.9); rank 3 slowed by its own code waits 2%, its peers 78%.
constexpr int kSlotUs = 1000;
constexpr int kComputeUs = 500;
constexpr int kOpUs = 300;
// The hog runs at nice -10, as node agents often do: a rank that sleeps between its steps gets
// its fair share back at every wake-up (EEVDF), so hogs at nice 0 barely delay it here (4 of
// them: rank 0 waited 35% less than its peers, not enough to call it a straggler).
constexpr int kHogNice = -10;
// The contended job runs this long before the hog starts, and this long with it before explain
// reads the stores: the period's first third of windows is then calm and its last third
// contended (store/nccl_waits.h compares the two). Measured here (3 runs): calm, node-b's ranks
// waited 0.55-0.9 ms per collective per window; with the hog, 12-16 ms (about 20x).
constexpr auto kCalm = std::chrono::seconds(5);

std::string base() { return "stallwatch-fleet-" + std::to_string(getpid()); }

// Debian's Prometheus on 127.0.0.1 scraping `targets` every second as job "stallwatch", with
// the shipped rules (evaluated every second; the straggler alert's `for` shortened).
class Prometheus {
 public:
  explicit Prometheus(const std::vector<std::string>& targets) {
    char tmpl[] = "/tmp/stallwatch-fleet-prom-XXXXXX";
    dir_ = mkdtemp(tmpl) ? tmpl : "";
    const std::string bin = find_binary();
    if (dir_.empty() || bin.empty()) {
      error_ = "prometheus not found (Debian package prometheus): run `bash scripts/install-deps.sh`";
      return;
    }
    std::string rules = slurp(kRules);
    const size_t alert = rules.find("- alert: StallwatchNcclStraggler");
    const size_t hold = alert == std::string::npos ? alert : rules.find("for: 2m", alert);
    if (hold == std::string::npos) {
      error_ = kRules + ": StallwatchNcclStraggler with `for: 2m` not found (the rules changed shape)";
      return;
    }
    rules.replace(hold, 7, "for: 5s");
    std::ofstream(dir_ + "/rules.yml") << rules;
    std::ostringstream cfg;
    cfg << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        << "rule_files:\n  - " << dir_ << "/rules.yml\n"
        << "scrape_configs:\n  - job_name: stallwatch\n    honor_labels: true\n"
        << "    static_configs:\n      - targets: [";
    for (size_t i = 0; i < targets.size(); ++i) cfg << (i ? ", " : "") << '"' << targets[i] << '"';
    cfg << "]\n";
    std::ofstream(dir_ + "/prometheus.yml") << cfg.str();
    port_ = free_port();
    Spawn s;
    s.argv = {bin, "--config.file=" + dir_ + "/prometheus.yml",
              "--storage.tsdb.path=" + dir_ + "/data",
              "--web.listen-address=127.0.0.1:" + std::to_string(port_)};
    s.output_path = dir_ + "/prometheus.log";
    child_ = Child(s);
    const bool ready = poll_until(
        [&] {
          long code = 0;
          return !child_.running() || (http_get(url("/-/ready"), &code) && code == 200);
        },
        std::chrono::seconds(30), std::chrono::milliseconds(100));
    if (!ready || !child_.running()) error_ = "prometheus did not get ready:\n" + log();
  }
  ~Prometheus() {
    child_.stop();
    if (!dir_.empty()) run_command({"rm", "-rf", dir_});
  }
  const std::string& error() const { return error_; }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::string log() const { return slurp(dir_ + "/prometheus.log").substr(0, 4000); }

  // An instant query's result vector (empty on any error).
  nlohmann::json query(const std::string& q) const {
    std::string escaped;
    for (unsigned char c : q) {
      if (std::isalnum(c) || std::strchr("-_.~", c)) {
        escaped += static_cast<char>(c);
      } else {
        char hex[4];
        std::snprintf(hex, sizeof(hex), "%%%02X", c);
        escaped += hex;
      }
    }
    return data("/api/v1/query?query=" + escaped).value("result", nlohmann::json::array());
  }
  // The alerts Prometheus holds now (pending and firing), with their annotations.
  nlohmann::json alerts() const {
    return data("/api/v1/alerts").value("alerts", nlohmann::json::array());
  }

 private:
  static std::string find_binary() {
    for (const char* p : {"/usr/bin/prometheus", "/usr/local/bin/prometheus"}) {
      if (access(p, X_OK) == 0) return p;
    }
    return "";
  }
  nlohmann::json data(const std::string& path) const {
    const auto body = http_get(url(path));
    if (!body) return nlohmann::json::object();
    const auto j = nlohmann::json::parse(*body, nullptr, false);
    if (j.is_discarded() || j.value("status", "") != "success") return nlohmann::json::object();
    return j["data"];
  }
  std::string dir_, error_;
  int port_ = 0;
  Child child_;
};

struct Job {
  std::string id_text;   // the unique id every rank gets (MOCK_NCCL_UNIQUE_ID)
  std::string comm;      // its commHash, as the daemons label it
  std::string job_id;    // TORCHELASTIC_RUN_ID
  std::vector<std::unique_ptr<TestCgroup>> cgroups;
  std::vector<Child> ranks;
  std::string barrier_dir;
  ~Job() {
    ranks.clear();  // killed before their cgroups go
    cgroups.clear();
    if (!barrier_dir.empty()) run_command({"rm", "-rf", barrier_dir});
  }
};

// Each scenario gets its own node cgroups, daemons and Prometheus (~5 s): a job's TestCgroups
// remove the parents they emptied, so the next scenario's node-a would be a new cgroup, not the
// --cgroup-roots the daemon holds.
class Fleet : public ::testing::Test {
 protected:
  void SetUp() override {
    nodes_[0] = std::make_unique<TestCgroup>(base() + "/node-a");
    nodes_[1] = std::make_unique<TestCgroup>(base() + "/node-b");
    agents_ = std::make_unique<TestCgroup>(base() + "/agents");
    for (int n = 0; n < 2; ++n) {
      daemons_[n] = std::make_unique<Daemon>(std::vector<std::string>{
          "--window", "500ms", "--cgroup-roots", nodes_[n]->label(),
          "--kube-node", n == 0 ? "node-a" : "node-b"});
    }
    for (auto& d : daemons_) ASSERT_TRUE(d->wait_ready()) << "log: " << d->log_path();
    prometheus_ = std::make_unique<Prometheus>(std::vector<std::string>{
        daemons_[0]->url("").substr(7), daemons_[1]->url("").substr(7)});
    ASSERT_EQ(prometheus_->error(), "");
  }
  void TearDown() override {
    prometheus_.reset();
    for (auto& d : daemons_) d.reset();
    agents_.reset();
    for (auto& n : nodes_) n.reset();
  }

  // Four ranks of a new job: ranks 0 and 1 on node-a, 2 and 3 on node-b; rank 0 alone on CPU 0,
  // the others on CPU 1 computing in different slots. `slow_gap_us` adds that much to rank 3's
  // gap between calls (its own code is slower).
  std::unique_ptr<Job> start_job(const std::string& name, int slow_gap_us = 0) {
    auto job = std::make_unique<Job>();
    job->id_text = "fleet-" + name + "-" + std::to_string(getpid());
    std::array<std::uint8_t, trace::kNcclUniqueIdBytes> id{};
    std::memcpy(id.data(), job->id_text.data(), job->id_text.size());
    job->comm = trace::comm_label(trace::nccl_unique_id_hash(id));
    job->job_id = "train-" + name;
    char tmpl[] = "/dev/shm/stallwatch-fleet-XXXXXX";
    job->barrier_dir = mkdtemp(tmpl) ? tmpl : "/tmp";
    const std::array<int, kRanks> cpu = {0, 1, 1, 1}, slot = {0, 0, 1, 2};
    for (int r = 0; r < kRanks; ++r) {
      const std::string node = r < 2 ? "node-a" : "node-b";
      job->cgroups.push_back(
          std::make_unique<TestCgroup>(base() + "/" + node + "/" + name + "-rank" + std::to_string(r)));
      std::array<std::string, 3> slots;
      slots.fill("cudaRuntimeGetVersion:1");
      slots[static_cast<size_t>(slot[static_cast<size_t>(r)])] = "cudaLaunchKernel:1";
      const int gap = kSlotUs + (r == 3 ? slow_gap_us : 0);
      Spawn s;
      s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--nccl", MOCK_NCCL_PATH, "--rank",
                std::to_string(r), "--nranks", std::to_string(kRanks), "--calls",
                slots[0] + "," + slots[1] + "," + slots[2] + ",ncclAllReduce:1",
                "--iterations", "1000000", "--spacing-us", std::to_string(gap),
                "--start-delay-ms", "500"};
      s.env = {{"MOCK_CUDA_LAUNCH_CPU_US", std::to_string(kComputeUs)},
               {"MOCK_NCCL_OP_US", std::to_string(kOpUs)},
               {"MOCK_NCCL_BARRIER_DIR", job->barrier_dir},
               {"MOCK_NCCL_UNIQUE_ID", job->id_text},
               {"TORCHELASTIC_RUN_ID", job->job_id},
               {"RANK", std::to_string(r)},
               {"LOCAL_RANK", std::to_string(r % 2)},
               {"WORLD_SIZE", std::to_string(kRanks)}};
      s.cgroup_dir = job->cgroups.back()->dir();
      s.cpu = cpu[static_cast<size_t>(r)];
      s.output_path = "/dev/null";
      job->ranks.emplace_back(s);
    }
    return job;
  }

  // The straggler alert of this communicator once it fires with `want` labels, else null.
  nlohmann::json wait_firing(const Job& job, std::chrono::seconds limit) {
    nlohmann::json found;
    poll_until(
        [&] {
          for (const auto& a : prometheus_->alerts()) {
            const auto& l = a["labels"];
            if (l.value("alertname", "") == "StallwatchNcclStraggler" &&
                l.value("comm", "") == job.comm && a.value("state", "") == "firing") {
              found = a;
              return true;
            }
          }
          return false;
        },
        limit, std::chrono::milliseconds(500));
    return found;
  }

  // What Prometheus says of the job's ranks now: "rank@node=score ..." for a failure message,
  // and each daemon's rank series.
  std::string scores(const Job& job) {
    std::string out;
    for (const auto& d : daemons_) {
      for (const Sample& x : parse_exposition(d->metrics())) {
        if (x.name != "stallwatch_nccl_rank_wait_seconds_total" &&
            x.name != "stallwatch_chain_active")
          continue;
        if (x.value == 0) continue;
        out += "\n  " + x.name;
        for (const auto& [k, v] : x.labels) out += " " + k + "=" + v;
        out += " " + std::to_string(x.value);
      }
    }
    out += "\n  scores: ";
    for (const auto& r : job.ranks) out += r.running() ? "" : "(a rank exited) ";
    for (const auto& s : prometheus_->query("stallwatch:nccl_rank_straggler_score{comm=\"" +
                                            job.comm + "\"}")) {
      out += s["metric"].value("rank", "?") + "@" + s["metric"].value("instance", "?") + "=" +
             s["value"][1].get<std::string>() + " ";
    }
    return out;
  }

  // `stallwatch explain --json` of node `n`'s store over the last minute: its nccl_waits entries
  // of `job`'s communicator (null when explain failed). With STALLWATCH_TEST_SHOW, the text too.
  nlohmann::json nccl_waits(int n, const Job& job) {
    const std::string db = daemons_[n]->db_path();
    std::string out;
    const int rc = run_command({STALLWATCH_BIN, "explain", "--db", db, "--since", "1m", "--json"},
                               &out, std::chrono::seconds(30));
    const size_t brace = out.find("\n{") == std::string::npos ? 0 : out.find("\n{") + 1;
    const auto j = nlohmann::json::parse(out.substr(brace), nullptr, false);
    if (rc != 0 || j.is_discarded() || !j.contains("nccl_waits")) {
      ADD_FAILURE() << "explain --db " << db << " (" << rc << "): " << out;
      return nullptr;
    }
    if (std::getenv("STALLWATCH_TEST_SHOW")) {
      std::string text;
      run_command({STALLWATCH_BIN, "explain", "--db", db, "--since", "1m"}, &text,
                  std::chrono::seconds(30));
      std::cout << "explain on node-" << (n == 0 ? 'a' : 'b') << ":\n" << text << "\n";
      // Each rank's wait per collective (ms) window by window, what the thresholds judge.
      run_command({STALLWATCH_BIN, "query", "--db", db,
                   "SELECT rank, group_concat(round(wait_ns / 1e6 / collectives, 2), ' ') FROM "
                   "nccl_windows WHERE communicator = '" + job.comm + "' AND collectives > 0 "
                   "GROUP BY rank"},
                  &text, std::chrono::seconds(30));
      std::cout << text << "\n";
    }
    nlohmann::json mine = nlohmann::json::array();
    for (const auto& w : j["nccl_waits"]) {
      if (w.value("comm", "") == job.comm) mine.push_back(w);
    }
    return mine;
  }

  std::array<std::unique_ptr<TestCgroup>, 2> nodes_;
  std::unique_ptr<TestCgroup> agents_;
  std::array<std::unique_ptr<Daemon>, 2> daemons_;
  std::unique_ptr<Prometheus> prometheus_;
};

TEST_F(Fleet, AHogOnOneRanksCoreIsNamedWithItsNodeAndCpuContention) {
  auto job = start_job("contended");
  std::this_thread::sleep_for(kCalm);
  std::vector<Child> hogs;
  for (int i = 0; i < 2; ++i) {
    Spawn h;
    h.comm = "sw-fleet-hog";
    h.cpu = 0;
    h.nice = kHogNice;
    h.cgroup_dir = agents_->dir();
    hogs.emplace_back(h);
  }
  // The victim node says where to look: node-b's ranks wait longer and longer for node-a's rank 0
  // with nothing on node-b to explain it. On node-a, rank 0 (the straggler) waits no longer than
  // before: nothing there points elsewhere.
  std::this_thread::sleep_for(kCalm);
  for (auto& d : daemons_) ASSERT_TRUE(d->wait_windows(2)) << "log: " << d->log_path();
  const nlohmann::json victim = nccl_waits(1, *job), culprit = nccl_waits(0, *job);
  ASSERT_TRUE(victim.is_array() && culprit.is_array());
  ASSERT_EQ(victim.size(), 2u) << "node-b's explain: " << victim.dump() << "; node-a's: "
                               << culprit.dump() << scores(*job);
  for (size_t i = 0; i < victim.size(); ++i) {
    EXPECT_EQ(victim[i].value("rank", -1), static_cast<int>(i) + 2) << victim.dump();
    EXPECT_EQ(victim[i].value("world_size", -1), kRanks);
    EXPECT_EQ(victim[i].value("job_id", ""), job->job_id);
    EXPECT_EQ(victim[i].value("look_at", ""),
              "stallwatch:nccl_rank_straggler_score{comm=\"" + job->comm + "\"}");
  }
  EXPECT_TRUE(culprit.empty()) << culprit.dump();
  if (std::getenv("STALLWATCH_TEST_SHOW")) std::cout << victim.dump(2) << "\n";

  const nlohmann::json alert = wait_firing(*job, std::chrono::seconds(90));
  ASSERT_FALSE(alert.is_null()) << "no StallwatchNcclStraggler for " << job->comm
                                << "; scores: " << scores(*job);
  const auto& l = alert["labels"];
  EXPECT_EQ(l.value("rank", ""), "0");
  EXPECT_EQ(l.value("node", ""), "node-a");
  EXPECT_EQ(l.value("instance", ""), daemons_[0]->url("").substr(7));
  EXPECT_EQ(l.value("world_size", ""), "4");
  EXPECT_EQ(l.value("job_id", ""), job->job_id);
  EXPECT_EQ(l.value("global_rank", ""), "0");
  EXPECT_EQ(l.value("host_cause", ""), "cpu_contention") << alert.dump();
  const std::string summary = alert["annotations"].value("summary", "");
  const std::string description = alert["annotations"].value("description", "");
  if (std::getenv("STALLWATCH_TEST_SHOW")) std::cout << alert.dump(2) << "\n" << scores(*job) << "\n";
  EXPECT_NE(summary.find("job " + job->job_id + ": rank 0 on node node-a holds the collective back"),
            std::string::npos)
      << summary;
  EXPECT_NE(description.find("node node-a: cpu_contention (sw-fleet-hog"), std::string::npos)
      << description;
  // Only rank 0 is named: its peers on both nodes wait for it.
  for (const auto& a : prometheus_->alerts()) {
    if (a["labels"].value("alertname", "") == "StallwatchNcclStraggler" &&
        a["labels"].value("comm", "") == job->comm) {
      EXPECT_EQ(a["labels"].value("rank", ""), "0") << a.dump();
    }
  }
}

TEST_F(Fleet, ABalancedJobFiresNothing) {
  auto job = start_job("balanced");
  // Until Prometheus has scored the four ranks in 20 evaluations, nothing may be pending and no
  // score may reach the alert's 0.5. (The scores, not the alert's 5% floor, keep it silent: a
  // 5-minute rate of a job a minute old reads a fifth of its ratio, under the floor for a while.)
  int judged = 0;
  double worst = 0;
  std::string seen, last;
  const bool observed = poll_until(
      [&] {
        for (const auto& a : prometheus_->alerts()) {
          if (a["labels"].value("alertname", "") == "StallwatchNcclStraggler" &&
              a["labels"].value("comm", "") == job->comm) {
            seen = a.dump();
          }
        }
        if (!seen.empty()) return true;
        const auto s = prometheus_->query("stallwatch:nccl_rank_straggler_score{comm=\"" +
                                          job->comm + "\"}");
        last = s.dump();
        if (s.size() != kRanks) return false;
        for (const auto& x : s) worst = std::max(worst, std::stod(x["value"][1].get<std::string>()));
        return ++judged >= 20;
      },
      std::chrono::seconds(60), std::chrono::seconds(1));
  EXPECT_EQ(seen, "") << "a balanced job raised a straggler alert; scores: " << scores(*job);
  EXPECT_TRUE(observed) << "the four ranks were not scored 20 times (" << judged << "; last "
                        << last << "); scores: " << scores(*job);
  EXPECT_LT(worst, 0.5) << scores(*job);
  // Nobody's waits grew: neither node's explain names the communicator.
  for (int n = 0; n < 2; ++n) EXPECT_EQ(nccl_waits(n, *job), nlohmann::json::array()) << n;
}

TEST_F(Fleet, ARankSlowedByItsOwnCodeSaysNoHostCause) {
  auto job = start_job("own-code", 2 * kSlotUs);
  const nlohmann::json alert = wait_firing(*job, std::chrono::seconds(90));
  ASSERT_FALSE(alert.is_null()) << "no StallwatchNcclStraggler for " << job->comm
                                << "; scores: " << scores(*job);
  const auto& l = alert["labels"];
  EXPECT_EQ(l.value("rank", ""), "3");
  EXPECT_EQ(l.value("node", ""), "node-b");
  EXPECT_EQ(l.value("instance", ""), daemons_[1]->url("").substr(7));
  EXPECT_EQ(l.value("host_cause", ""), "none") << alert.dump();
  if (std::getenv("STALLWATCH_TEST_SHOW")) std::cout << alert.dump(2) << "\n" << scores(*job) << "\n";
  EXPECT_NE(alert["annotations"].value("description", "").find("node node-b: no host cause"),
            std::string::npos)
      << alert.dump();
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
