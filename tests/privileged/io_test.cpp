// Privileged tier, block I/O: a "data worker" (tests/mock/data_worker.c) in a CUDA workload's
// cgroup does real block I/O on the disk under a file of the root filesystem (never tmpfs).
//  - N O_DIRECT 4 KiB reads at distinct offsets and M O_DIRECT writes each followed by
//    fdatasync: per-device histograms and byte counters in exactly that cgroup, reads exact;
//  - a trainer (cuda_workload --wait-fd) that waits for an I/O-bound worker between steps: the
//    GPU starvation ratio rises above 0.2 and an io_stall chain opens;
//  - the same trainer fed from memory: no starvation, no io_stall chain.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <iostream>

#include "support/evidence.h"
#include "support/harness.h"
#include "support/host_env.h"
#include "support/process.h"

namespace stallwatch::test {
namespace {

const std::string kCudart = std::string(MOCK_DIR) + "/libcudart.so.12";
constexpr int kReads = 256;
constexpr int kWrites = 32;

std::string unique(const std::string& name) {
  return suite_cgroup("io-" + name);
}

class Io : public DaemonSuite {
 protected:
  void SetUp() override {
    DaemonSuite::SetUp();
    dir_ = block_backed_dir();
    if (dir_.empty()) GTEST_SKIP() << "no directory on a block device (everything is tmpfs)";
    device_ = block_device_of(dir_);
    ASSERT_FALSE(device_.empty()) << "no block device found for " << dir_;
  }
  void TearDown() override {
    for (const auto& f : files_) unlink(f.c_str());
  }

  std::string file(const std::string& name) {
    files_.push_back(dir_ + "/stallwatch-io-" + std::to_string(getpid()) + "-" + name);
    return files_.back();
  }

  // Keeps the cgroup CUDA-issuing (and so traced): a launch every 5 ms for up to a minute.
  static Child start_keeper(const TestCgroup& cg) {
    Spawn s;
    s.argv = keeper_argv();
    s.cgroup_dir = cg.dir();
    return Child(s);
  }

  // The trainer: before each step it waits for one byte (a batch) from fd, then launches and
  // synchronizes (2 ms of CPU spent inside cudaStreamSynchronize: the GPU is busy).
  static Child start_trainer(const TestCgroup& cg, int fd) {
    Spawn s;
    s.argv = {WORKLOAD_BIN,       "--cudart", kCudart,
              "--start-delay-ms", "500",      "--wait-fd",
              std::to_string(fd), "--calls",  "cudaLaunchKernel:10,cudaStreamSynchronize:1",
              "--iterations",     "1000000"};
    s.env = {{"MOCK_CUDA_SYNC_CPU_US", "2000"}};
    s.cgroup_dir = cg.dir();
    s.pass_fds = {fd};
    return Child(s);
  }

  std::map<std::string, std::string> io_labels(const TestCgroup& cg, const std::string& op) {
    return {{"cgroup", cg.label()}, {"device", device_}, {"op", op}};
  }

  struct IoCounts {
    double count = 0, bytes = 0, inf = 0;
  };
  IoCounts io_of(const std::vector<Sample>& s, const TestCgroup& cg, const std::string& op) {
    IoCounts r;
    auto labels = io_labels(cg, op);
    r.count = find_sample(s, "stallwatch_block_io_duration_seconds_count", labels).value_or(0);
    r.bytes = find_sample(s, "stallwatch_block_io_bytes_total", labels).value_or(0);
    labels["le"] = "+Inf";
    r.inf = find_sample(s, "stallwatch_block_io_duration_seconds_bucket", labels).value_or(0);
    return r;
  }

  // Runs a trainer fed by a data worker with `worker_args` for up to `limit`, polling the
  // starvation ratio every window until `enough` says so. Returns every ratio seen.
  std::vector<double> run_trainer(const TestCgroup& cg, std::vector<std::string> worker_args,
                                  std::chrono::seconds limit,
                                  const std::function<bool(const std::vector<double>&)>& enough) {
    Pipe batches;
    Spawn w;
    // At most 2 batches ready ahead of the trainer (a DataLoader's prefetch depth).
    w.argv = {DATA_WORKER_BIN,
              "--stream-fd",
              std::to_string(batches.write_end),
              "--prefetch",
              "2",
              "--seconds",
              std::to_string(limit.count() + 10)};
    w.argv.insert(w.argv.end(), worker_args.begin(), worker_args.end());
    w.cgroup_dir = cg.dir();
    w.pass_fds = {batches.write_end};
    log_ = "/tmp/stallwatch-io-" + std::to_string(getpid()) + "-worker.log";
    w.output_path = log_;
    Child worker(w);
    Child trainer = start_trainer(cg, batches.read_end);
    batches.close_read();
    batches.close_write();
    EXPECT_TRUE(wait_traced(*daemon_, cg.label())) << daemon_->log_path();
    std::vector<double> ratios;
    long last = -1;
    poll_until(
        [&] {
          auto s = parse_exposition(daemon_->metrics());
          long seq =
              static_cast<long>(find_sample(s, "stallwatch_snapshot_sequence", {}).value_or(-1));
          if (seq == last) return false;
          last = seq;
          auto r = find_sample(s, "stallwatch_gpu_starvation_ratio", {{"cgroup", cg.label()}});
          if (r) ratios.push_back(*r);
          return enough(ratios) || !trainer.running() || !worker.running();
        },
        limit, std::chrono::milliseconds(100));
    EXPECT_TRUE(trainer.running()) << "the trainer stopped early";
    EXPECT_TRUE(worker.running()) << "the worker stopped early: " << slurp(log_);
    return ratios;
  }

  std::string dir_, device_, log_;
  std::vector<std::string> files_;
};

TEST_F(Io, DirectReadsAndSyncedWritesCountPerDeviceInTheWorkersCgroup) {
  TestCgroup cg(unique("direct"));
  std::string path = file("direct.dat");
  Child keeper = start_keeper(cg);
  ASSERT_TRUE(wait_traced(*daemon_, cg.label())) << daemon_->log_path();

  // Phase 1 (before the baseline): create an 8 MiB file of real data, fsync'd.
  Pipe ready, go;
  Spawn s;
  s.argv = {DATA_WORKER_BIN,
            "--file",
            path,
            "--create-mb",
            "8",
            "--ready-fd",
            std::to_string(ready.write_end),
            "--go-fd",
            std::to_string(go.read_end),
            "--direct-reads",
            std::to_string(kReads),
            "--direct-writes",
            std::to_string(kWrites)};
  s.cgroup_dir = cg.dir();
  s.pass_fds = {ready.write_end, go.read_end};
  std::string log = "/tmp/stallwatch-io-" + std::to_string(getpid()) + "-direct.log";
  s.output_path = log;
  Child worker(s);
  ready.close_write();
  go.close_read();
  ASSERT_TRUE(read_byte(ready.read_end, std::chrono::seconds(60))) << slurp(log);
  ASSERT_TRUE(daemon_->wait_windows()) << daemon_->log_path();
  auto before = parse_exposition(daemon_->metrics());

  // Phase 2: exactly kReads reads and kWrites synced writes, O_DIRECT.
  ASSERT_TRUE(write_byte(go.write_end));
  ASSERT_EQ(worker.wait(std::chrono::seconds(60)), 0) << slurp(log);
  ASSERT_TRUE(daemon_->wait_windows()) << daemon_->log_path();
  std::string metrics = daemon_->metrics();
  auto after = parse_exposition(metrics);
  unlink(log.c_str());

  IoCounts r0 = io_of(before, cg, "read"), r1 = io_of(after, cg, "read");
  IoCounts w0 = io_of(before, cg, "write"), w1 = io_of(after, cg, "write");
  // Reads are exact: each read waits for its own request before the next is issued (no
  // merging, no readahead with O_DIRECT), and nothing else in the cgroup reads meanwhile.
  EXPECT_EQ(r1.count - r0.count, kReads) << "device " << device_ << "\n" << metrics;
  EXPECT_EQ(r1.bytes - r0.bytes, kReads * 4096.0);
  EXPECT_EQ(r1.inf - r0.inf, kReads);
  // Writes: at least one request per O_DIRECT write (the filesystem may add its own, e.g. a
  // journal commit submitted by fdatasync; the cache flushes are op="flush").
  EXPECT_GE(w1.count - w0.count, kWrites) << metrics;
  EXPECT_GE(w1.bytes - w0.bytes, kWrites * 4096.0);
  // fdatasync's cache flushes are empty requests, counted as op="flush" with no bytes.
  IoCounts f0 = io_of(before, cg, "flush"), f1 = io_of(after, cg, "flush");
  EXPECT_GE(f1.count - f0.count, 1.0) << metrics;
  EXPECT_EQ(f1.bytes - f0.bytes, 0.0);
  EXPECT_GT(find_sample(after, "stallwatch_block_io_duration_seconds_sum", io_labels(cg, "read"))
                .value_or(0),
            0);
  // Every read of the cgroup is on that device: none under another device label.
  EXPECT_EQ(sum_samples(after, "stallwatch_block_io_duration_seconds_count",
                        {{"cgroup", cg.label()}, {"op", "read"}}),
            r1.count);
  // The keeper, in the same cgroup, did no I/O: the counts are the worker's.
  std::cout << device_ << ": reads +" << r1.count - r0.count << " (" << r1.bytes - r0.bytes
            << " B), writes +" << w1.count - w0.count << " (" << w1.bytes - w0.bytes
            << " B), flushes +" << f1.count - f0.count << "\n";
}

TEST_F(Io, TrainerWaitingOnAnIoBoundLoaderStarvesAndOpensAnIoStallChain) {
  TestCgroup cg(unique("stall"));
  std::string path = file("stream.dat");
  Spawn create;
  create.argv = {DATA_WORKER_BIN, "--file", path, "--create-mb", "256"};
  ASSERT_EQ(Child(create).wait(std::chrono::seconds(120)), 0);

  // Each batch is 16 MiB of 1 MiB O_DIRECT reads (~10 ms here) for 2 ms of GPU work.
  double chains = 0;
  auto ratios = run_trainer(cg, {"--file", path, "--batch-mb", "16"}, std::chrono::seconds(40),
                            [&](const std::vector<double>& r) {
                              chains = chains_total(parse_exposition(daemon_->metrics()),
                                                    cg.label(), "io_stall");
                              double top = 0;
                              for (double v : r) top = std::max(top, v);
                              return chains > 0 && top > 0.2;
                            });
  std::string metrics = daemon_->metrics();
  auto s = parse_exposition(metrics);
  double top = 0;
  for (double v : ratios) top = std::max(top, v);
  EXPECT_GT(top, 0.2) << "starvation ratios seen: " << ratios.size() << "\n" << metrics;
  EXPECT_GT(io_of(s, cg, "read").count, 0) << metrics;
  std::string raw;
  auto found = wait_chain(*daemon_, "io_stall", cg.label(), std::chrono::seconds(20), &raw);
  EXPECT_FALSE(found.empty()) << "no io_stall chain for " << cg.label() << ":\n"
                              << raw << "\nworker: " << slurp(log_);
  std::cout << "starvation peak " << top << " over " << ratios.size() << " windows; chain "
            << (found.empty() ? "-" : found[0].severity) << "\n";
  unlink(log_.c_str());
}

TEST_F(Io, TrainerFedFromMemoryDoesNotStarveAndOpensNoIoStallChain) {
  TestCgroup cg(unique("fed"));
  // 1 MiB batches copied from memory: the pipe is always full, the trainer never waits.
  auto ratios = run_trainer(cg, {"--batch-mb", "1", "--from-memory"}, std::chrono::seconds(8),
                            [](const std::vector<double>& r) { return r.size() >= 10; });
  ASSERT_TRUE(daemon_->wait_windows()) << daemon_->log_path();
  std::string metrics = daemon_->metrics();
  auto s = parse_exposition(metrics);
  ASSERT_GE(ratios.size(), 3u) << metrics;
  // The first window may hold the trainer's start; the last ones are steady state.
  for (size_t i = ratios.size() - 3; i < ratios.size(); ++i) EXPECT_LT(ratios[i], 0.2) << i;
  std::cout << "starvation ratios:";
  for (double r : ratios) std::cout << " " << r;
  std::cout << "\n";
  EXPECT_EQ(io_of(s, cg, "read").count, 0) << metrics;
  EXPECT_EQ(chains_total(s, cg.label(), "io_stall"), 0) << metrics;
  std::string raw;
  EXPECT_TRUE(chains_of(explain_chains(*daemon_, &raw), "io_stall", cg.label()).empty()) << raw;
  unlink(log_.c_str());
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
