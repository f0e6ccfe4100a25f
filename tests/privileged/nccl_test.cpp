// Privileged tier, NCCL: the real daemon traces the mock libnccl.so.2 (real symbols and
// signatures) in two "ranks" of one job, each in its own cgroup. Per-rank histograms count every
// collective exactly with the rank and world size learnt from ncclCommInitRank, bytes are
// count x element size, and a rank whose collectives take 20x its peer's is named by an
// nccl_straggler chain; two balanced ranks open none. A process that leaks more communicators
// than the communicator map holds has the entries the map dropped counted as lost.
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include <iostream>

#include "support/evidence.h"
#include "support/harness.h"
#include "support/process.h"
#include "trace/nccl_ranks.h"

namespace stallwatch::test {
namespace {

const std::string kCudart = std::string(MOCK_DIR) + "/libcudart.so.12";
constexpr int kCalls = 150;                      // ncclAllReduce calls per rank
constexpr double kBytesPerCall = 1048576.0 * 4;  // count x sizeof(float)
constexpr int kPeriodUs = 20000;                 // one collective per ~20 ms

std::string unique(const std::string& name) {
  return suite_cgroup("nccl-" + name);
}

class Nccl : public DaemonSuite {
 protected:
  // One rank: ncclCommInitRank(rank, 2) after a 500 ms start delay (the library is traced by
  // then), kCalls ncclAllReduce each taking op_us, paced to one per kPeriodUs so that both
  // ranks run side by side for ~3 s (several windows).
  static Child start_rank(const TestCgroup& cg, int rank, int op_us) {
    Spawn s;
    s.argv = {WORKLOAD_BIN,
              "--cudart",
              kCudart,
              "--nccl",
              MOCK_NCCL_PATH,
              "--rank",
              std::to_string(rank),
              "--nranks",
              "2",
              "--calls",
              "ncclAllReduce:1",
              "--iterations",
              std::to_string(kCalls),
              "--start-delay-ms",
              "500"};
    if (op_us < kPeriodUs) {
      s.argv.insert(s.argv.end(), {"--spacing-us", std::to_string(kPeriodUs - op_us)});
    }
    s.env = {{"MOCK_NCCL_OP_US", std::to_string(op_us)}};
    s.cgroup_dir = cg.dir();
    return Child(s);
  }

  static std::map<std::string, std::string> op_labels(const TestCgroup& cg, int rank) {
    return {{"cgroup", cg.label()},
            {"op", "ncclAllReduce"},
            {"rank", std::to_string(rank)},
            {"world_size", "2"}};
  }

};

TEST_F(Nccl, SlowRankHasExactPerRankHistogramsAndIsNamedByAStragglerChain) {
  TestCgroup fast(unique("rank0")), slow(unique("rank1"));
  Child r0 = start_rank(fast, 0, 1000);
  Child r1 = start_rank(slow, 1, 20000);

  // The straggler chain opens while the ranks run (bounded by the run itself plus slack).
  double chains = 0;
  poll_until(
      [&] {
        chains = chains_total(parse_exposition(daemon_->metrics()), slow.label(), "nccl_straggler");
        return chains > 0 || (!r0.running() && !r1.running());
      },
      std::chrono::seconds(60), std::chrono::milliseconds(200));
  ASSERT_EQ(r0.wait(std::chrono::seconds(60)), 0);
  ASSERT_EQ(r1.wait(std::chrono::seconds(60)), 0);
  ASSERT_TRUE(daemon_->wait_windows()) << daemon_->log_path();
  std::string metrics = daemon_->metrics();
  auto s = parse_exposition(metrics);

  // Exact counts and bytes per rank, under the rank and world size learnt at init.
  const std::string count = "stallwatch_nccl_op_duration_seconds_count";
  EXPECT_EQ(find_sample(s, count, op_labels(fast, 0)), kCalls) << metrics;
  EXPECT_EQ(find_sample(s, count, op_labels(slow, 1)), kCalls) << metrics;
  EXPECT_EQ(find_sample(s, "stallwatch_nccl_op_bytes_total", op_labels(fast, 0)),
            kCalls * kBytesPerCall);
  EXPECT_EQ(find_sample(s, "stallwatch_nccl_op_bytes_total", op_labels(slow, 1)),
            kCalls * kBytesPerCall);
  auto bucket_inf = op_labels(slow, 1);
  bucket_inf["le"] = "+Inf";
  EXPECT_EQ(find_sample(s, "stallwatch_nccl_op_duration_seconds_bucket", bucket_inf), kCalls);
  // Nothing else was attributed to either rank: no series under another rank or an unknown one.
  EXPECT_EQ(sum_samples(s, count, {{"cgroup", fast.label()}}), kCalls);
  EXPECT_EQ(sum_samples(s, count, {{"cgroup", slow.label()}}), kCalls);
  // Durations: each slow call sleeps 20 ms, each fast one 1 ms.
  double slow_sum =
      find_sample(s, "stallwatch_nccl_op_duration_seconds_sum", op_labels(slow, 1)).value_or(0);
  double fast_sum =
      find_sample(s, "stallwatch_nccl_op_duration_seconds_sum", op_labels(fast, 0)).value_or(0);
  EXPECT_GE(slow_sum, kCalls * 0.020);
  EXPECT_GE(fast_sum, kCalls * 0.001);
  EXPECT_LT(fast_sum, slow_sum / 5);

  // Every NCCL call is also a call of the api="nccl" family, setup included.
  auto call_count = [&](const TestCgroup& cg, const std::string& call) {
    return find_sample(s, "stallwatch_cuda_call_duration_seconds_count",
                       {{"cgroup", cg.label()}, {"api", "nccl"}, {"call", call}});
  };
  for (const TestCgroup* cg : {&fast, &slow}) {
    EXPECT_EQ(call_count(*cg, "ncclAllReduce"), kCalls) << cg->label();
    EXPECT_EQ(call_count(*cg, "ncclCommInitRank"), 1) << cg->label();
    EXPECT_EQ(call_count(*cg, "ncclCommDestroy"), 1) << cg->label();
  }

  // The chain names the slow rank's cgroup, and only that one.
  std::string raw;
  auto found = wait_chain(*daemon_, "nccl_straggler", slow.label(), std::chrono::seconds(20), &raw);
  EXPECT_GT(chains, 0) << "no nccl_straggler chain in the metrics while the ranks ran:\n"
                       << metrics;
  if (!found.empty()) std::cout << "straggler chain: " << found[0].json.substr(0, 600) << "\n";
  ASSERT_FALSE(found.empty()) << "explain has no nccl_straggler chain for " << slow.label() << ":\n"
                              << raw;
  EXPECT_TRUE(chains_of(explain_chains(*daemon_), "nccl_straggler", fast.label()).empty())
      << "the fast rank is not the straggler: " << raw;
  EXPECT_EQ(chains_total(s, fast.label(), "nccl_straggler"), 0) << metrics;
}

TEST_F(Nccl, BalancedRanksOpenNoStragglerChain) {
  TestCgroup a(unique("even0")), b(unique("even1"));
  Child r0 = start_rank(a, 0, 1000);
  Child r1 = start_rank(b, 1, 1000);
  ASSERT_EQ(r0.wait(std::chrono::seconds(60)), 0);
  ASSERT_EQ(r1.wait(std::chrono::seconds(60)), 0);
  // Windows enough for a chain to have opened (the positive test sees one within the run).
  ASSERT_TRUE(daemon_->wait_windows(4)) << daemon_->log_path();
  std::string metrics = daemon_->metrics();
  auto s = parse_exposition(metrics);
  // Traced, and counted exactly: the negative is not a blind spot.
  EXPECT_EQ(find_sample(s, "stallwatch_nccl_op_duration_seconds_count", op_labels(a, 0)), kCalls)
      << metrics;
  EXPECT_EQ(find_sample(s, "stallwatch_nccl_op_duration_seconds_count", op_labels(b, 1)), kCalls)
      << metrics;
  EXPECT_EQ(chains_total(s, a.label(), "nccl_straggler"), 0) << metrics;
  EXPECT_EQ(chains_total(s, b.label(), "nccl_straggler"), 0) << metrics;
  // Two communicators fit: nothing was dropped for room.
  EXPECT_EQ(find_sample(s, "stallwatch_events_lost_total", {{"source", "nccl_comms_evicted"}}), 0)
      << metrics;
  std::string raw;
  auto chains = explain_chains(*daemon_, &raw);
  EXPECT_TRUE(chains_of(chains, "nccl_straggler", a.label()).empty()) << raw;
  EXPECT_TRUE(chains_of(chains, "nccl_straggler", b.label()).empty()) << raw;
}

// Issue #52: the key of a communicator on every node is NCCL's commHash, computed in the kernel
// from the unique id passed by value (InitRank), through a pointer (InitRankScalable), or from
// the parent's hash, split count and colour (Split); each member carries its job keys from its
// environment and what it waited for its collectives, exactly counted.
TEST_F(Nccl, RanksCarryNcclsCommHashTheirJobKeysAndTheirWait) {
  const std::string id_text = "stallwatch-test-job-" + std::to_string(getpid());
  std::array<std::uint8_t, trace::kNcclUniqueIdBytes> id{};
  std::memcpy(id.data(), id_text.data(), id_text.size());
  const std::uint64_t parent = trace::nccl_unique_id_hash(id);
  const std::string comm = trace::comm_label(parent);
  const std::string child = trace::comm_label(trace::nccl_split_hash(parent, 1, 5));

  struct Rank {
    std::string name;
    int rank;
    std::map<std::string, std::string> env;
  };
  const std::vector<Rank> ranks = {
      {"init", 0, {}},
      {"scalable", 1, {{"CUDA_WORKLOAD_NCCL_INIT", "scalable"}}},
      {"split", 1, {{"CUDA_WORKLOAD_NCCL_SPLIT", "5"}}}};
  std::vector<std::unique_ptr<TestCgroup>> cgs;
  std::vector<std::unique_ptr<Pipe>> exits;
  std::vector<Child> children;
  for (const Rank& r : ranks) {
    cgs.push_back(std::make_unique<TestCgroup>(unique("job-" + r.name)));
    exits.push_back(std::make_unique<Pipe>());
    Spawn sp;
    sp.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--nccl", MOCK_NCCL_PATH, "--rank",
               std::to_string(r.rank), "--nranks", "2", "--calls", "ncclAllReduce:1",
               "--iterations", std::to_string(kCalls), "--start-delay-ms", "500",
               "--exit-fd", std::to_string(exits.back()->read_end)};
    sp.env = {{"MOCK_NCCL_OP_US", "1000"},
              {"MOCK_NCCL_UNIQUE_ID", id_text},
              {"TORCHELASTIC_RUN_ID", "job\n\"7\""},  // hostile: escaped on the way out
              {"RANK", std::to_string(r.rank)},
              {"LOCAL_RANK", std::to_string(r.rank)},
              {"WORLD_SIZE", "2"}};
    sp.env.insert(r.env.begin(), r.env.end());
    sp.pass_fds = {exits.back()->read_end};
    sp.cgroup_dir = cgs.back()->dir();
    children.emplace_back(sp);
    exits.back()->close_read();
  }
  auto labels = [&](size_t i, const std::string& c) {
    return std::map<std::string, std::string>{{"cgroup", cgs[i]->label()},
                                              {"comm", c},
                                              {"rank", std::to_string(ranks[i].rank)},
                                              {"world_size", "2"}};
  };
  const std::vector<std::string> comms = {comm, comm, child};
  std::vector<Sample> x;
  std::string metrics;
  const bool counted = poll_until(
      [&] {
        metrics = daemon_->metrics();
        x = parse_exposition(metrics);
        for (size_t i = 0; i < ranks.size(); ++i) {
          if (find_sample(x, "stallwatch_nccl_rank_collectives_total", labels(i, comms[i])) !=
              kCalls)
            return false;
        }
        return true;
      },
      std::chrono::seconds(60), std::chrono::milliseconds(200));
  EXPECT_TRUE(counted) << "want " << comm << " (init, scalable) and " << child << " (split):\n"
                       << metrics;
  for (size_t i = 0; i < ranks.size(); ++i) {
    SCOPED_TRACE(ranks[i].name);
    // Each rank slept 1 ms in each of its collectives: at least that was its wait.
    const double wait =
        find_sample(x, "stallwatch_nccl_rank_wait_seconds_total", labels(i, comms[i])).value_or(0);
    EXPECT_GE(wait, kCalls * 0.001);
    EXPECT_LT(wait, 30.0);
    auto info = labels(i, comms[i]);
    info.insert({{"job_id", "job\\n\"7\""},
                 {"global_rank", std::to_string(ranks[i].rank)},
                 {"local_rank", std::to_string(ranks[i].rank)}});
    EXPECT_EQ(find_sample(x, "stallwatch_job_info", info), 1) << metrics;
    // No series under a hash the job does not have. The split rank is a member of its parent
    // too, of the same rank and size: ops are told apart by rank and size only, so both count
    // them (docs/fleet.md).
    EXPECT_EQ(sum_samples(x, "stallwatch_nccl_rank_collectives_total", {{"cgroup", cgs[i]->label()}}),
              kCalls * (ranks[i].name == "split" ? 2 : 1));
    if (ranks[i].name == "split") {
      EXPECT_EQ(find_sample(x, "stallwatch_nccl_rank_collectives_total", labels(i, comm)), kCalls);
    }
  }
  for (auto& e : exits) EXPECT_TRUE(write_byte(e->write_end));
  for (Child& c : children) EXPECT_EQ(c.wait(std::chrono::seconds(30)), 0);
}

// The keys a BPF map named `name` holds now (the daemon's: one daemon runs), read through the
// kernel's map ids, not through the daemon; -1 when there is no such map.
long count_map_keys(const char* name) {
  __u32 id = 0;
  while (bpf_map_get_next_id(id, &id) == 0) {
    int fd = bpf_map_get_fd_by_id(id);
    if (fd < 0) continue;
    bpf_map_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0 || std::strcmp(info.name, name) != 0) {
      close(fd);
      continue;
    }
    std::vector<unsigned char> key(info.key_size), next(info.key_size);
    long n = 0;
    const void* prev = nullptr;
    while (bpf_map_get_next_key(fd, prev, next.data()) == 0) {
      key = next;
      prev = key.data();
      ++n;
    }
    close(fd);
    return n;
  }
  return -1;
}

// Defined last: the communicators it leaks stay counted for the rest of the daemon's life.
TEST_F(Nccl, CommunicatorsDroppedForRoomAreCountedAsLost) {
  constexpr long kLeaked = 5000;  // + the rank's own: 5001 inserts into a map of 4096
  constexpr long kMapSize = 4096;  // bpf/nccl.bpf.c nccl_comms
  TestCgroup cg(unique("leaky"));
  Spawn sp;
  sp.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--nccl", MOCK_NCCL_PATH, "--rank", "0",
             "--nranks", "1", "--leak-comms", std::to_string(kLeaked), "--calls",
             "ncclAllReduce:1", "--start-delay-ms", "500"};
  sp.cgroup_dir = cg.dir();
  Child c(sp);
  ASSERT_EQ(c.wait(std::chrono::seconds(120)), 0);
  // A reading counts once the next one agrees (trace/map_iter.h EvictionCount): two windows.
  ASSERT_TRUE(daemon_->wait_windows(3)) << daemon_->log_path();
  auto s = parse_exposition(daemon_->metrics());
  const long live = count_map_keys("nccl_comms");
  ASSERT_GE(live, 0) << "no map nccl_comms: is the daemon's BPF object loaded?";
  EXPECT_LE(live, kMapSize);
  const auto evicted =
      find_sample(s, "stallwatch_events_lost_total", {{"source", "nccl_comms_evicted"}});
  ASSERT_TRUE(evicted.has_value());
  std::cout << "nccl_comms: " << *evicted << " evicted, " << live << " live\n";
  // Every communicator the kernel saw is either in the map, dropped for room, or was destroyed
  // at exit (the rank's own, when the map still held it).
  const long accounted = static_cast<long>(*evicted) + live;
  EXPECT_TRUE(accounted == kLeaked + 1 || accounted == kLeaked)
      << "evicted " << *evicted << " + live " << live << " != " << kLeaked + 1 << " inserts";
  EXPECT_GE(*evicted, kLeaked + 1 - kMapSize);
  // The other LRU maps had no reason to drop anything.
  EXPECT_EQ(find_sample(s, "stallwatch_events_lost_total", {{"source", "preemptors_evicted"}}), 0);
  EXPECT_EQ(find_sample(s, "stallwatch_events_lost_total", {{"source", "reclaim_starts_evicted"}}),
            0);
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
