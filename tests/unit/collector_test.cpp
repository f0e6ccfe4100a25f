// The generic collector (trace/collector.h) over a temporary procfs and cgroup2 tree, fed by a
// stand-in evidence source that behaves like a kernel map of per-process call totals: which
// series a cgroup feeds (path, overflow past max_cgroups), retirement of exited processes and
// vanished cgroups (counters never go backwards), process names and start times, identities,
// and the order of the source hooks.
#include "chains/window.h"
#include "trace/collector.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "identity/cgroup_resolver.h"

namespace stallwatch::trace {
namespace {

namespace fs = std::filesystem;

struct Entry {
  std::uint64_t cgroup_id;
  int pid;
  std::uint32_t call;
  std::uint64_t count;
  std::uint32_t start_tag = 0;
};

// Like cuda_source.cpp over a map the test fills; records the hooks it saw.
class MapSource : public Source {
 public:
  std::vector<Entry> map;
  std::vector<std::string> hooks;

  std::string_view name() const override { return "map"; }
  void read(SourceContext& ctx, Snapshot& snap) override {
    hooks.push_back("read");
    for (auto it = map.begin(); it != map.end();) {
      CgroupSlot& slot = ctx.cgroup(it->cgroup_id);
      CallTotals t;
      t.count = it->count;
      t.sum_ns = it->count * 1000;
      if (!ctx.alive(it->pid, it->start_tag)) {
        slot.retired.calls[it->call].add(t);
        snap.exited[slot.label].calls.push_back(ProcessCall{it->pid, it->call, t, true});
        ctx.exited_process(snap, slot.label, it->pid, it->start_tag);
        it = map.erase(it);
        continue;
      }
      slot.live = true;
      Series& s = snap.series[slot.label];
      s.calls[it->call].add(t);
      s.processes.push_back(ProcessCall{it->pid, it->call, t});
      ctx.process(s, it->pid);
      ++it;
    }
  }
  void retire_cgroup(std::uint64_t id, SeriesTotals&) override {
    hooks.push_back("retire " + std::to_string(id));
  }
  void finish(Snapshot& snap) override {
    hooks.push_back("finish " + std::to_string(snap.series.size()));
  }
};

class CollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("collector_test." + std::to_string(getpid()));
    fs::create_directories(root_ / "proc");
    std::ofstream(root_ / "proc" / "stat") << "btime 1795400000\n";
    for (const char* cg : {"a.slice", "b.slice", "c.slice"})
      fs::create_directories(root_ / "cg" / cg);
  }
  void TearDown() override { fs::remove_all(root_); }

  void start_process(int pid, const std::string& comm, int start_ticks = 100) {
    fs::create_directories(root_ / "proc" / std::to_string(pid));
    std::ofstream(root_ / "proc" / std::to_string(pid) / "comm") << comm << "\n";
    std::ofstream(root_ / "proc" / std::to_string(pid) / "stat")
        << pid << " (" << comm << ") S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " << start_ticks
        << " 0 0";
  }
  void end_process(int pid) { fs::remove_all(root_ / "proc" / std::to_string(pid)); }
  std::uint64_t id_of(const std::string& cg) {
    struct stat st {};
    EXPECT_EQ(::stat((root_ / "cg" / cg).c_str(), &st), 0);
    return st.st_ino;
  }

  std::unique_ptr<Collector> make(MapSource*& source, size_t max_cgroups) {
    std::vector<std::unique_ptr<Source>> sources;
    auto s = std::make_unique<MapSource>();
    source = s.get();
    sources.push_back(std::move(s));
    fs_ = std::make_unique<host::Procfs>((root_ / "proc").string(), (root_ / "sys").string());
    resolver_ = std::make_unique<identity::CgroupResolver>((root_ / "cg").string());
    return std::make_unique<Collector>(
        std::move(sources), *resolver_, *fs_,
        CollectorOptions{max_cgroups, nullptr, [this](int pid, std::uint32_t tag) {
                           return discovered_.count(pid) ? discovered_[pid] + "@" + std::to_string(tag)
                                                         : std::string();
                         },
                         "node-a"});
  }
  std::shared_ptr<Snapshot> collect(Collector& c) {
    return c.collect(std::chrono::seconds(1), TraceCounts{});
  }

  fs::path root_;
  std::map<int, std::string> discovered_;  // what discovery named (CollectorOptions::exited_name)
  std::unique_ptr<host::Procfs> fs_;
  std::unique_ptr<identity::CgroupResolver> resolver_;
};

TEST_F(CollectorTest, SeriesByCgroupPathWithProcessNames) {
  MapSource* src = nullptr;
  auto c = make(src, 8);
  start_process(10, "python3");
  start_process(11, "torchrun");
  src->map = {{id_of("a.slice"), 10, 1, 5}, {id_of("b.slice"), 11, 2, 7}};
  auto snap = collect(*c);
  ASSERT_EQ(snap->series.size(), 2u);
  const Series& a = snap->series.at("/a.slice");
  EXPECT_EQ(a.identity.cgroup, "/a.slice");
  EXPECT_EQ(a.calls.at(1).count, 5u);
  ASSERT_EQ(a.process_info.count(10), 1u);
  EXPECT_EQ(a.process_info.at(10).comm, "python3");
  const long ticks = sysconf(_SC_CLK_TCK);
  EXPECT_EQ(a.process_info.at(10).start_ns,
            1795400000LL * 1000000000LL + 100LL * (1000000000LL / ticks));
  EXPECT_EQ(snap->series.at("/b.slice").process_info.at(11).comm, "torchrun");
  EXPECT_EQ(snap->sequence, 1u);
  EXPECT_EQ(collect(*c)->sequence, 2u);
}

// A process exits and its PID is taken by a new one within the window: the kernel's entries are
// keyed by (PID, start tag), so the exited one's counts are retired and the new one is its own
// process with its own name (issue #15).
TEST_F(CollectorTest, ReusedPidIsAnotherProcess) {
  if (sysconf(_SC_CLK_TCK) != 100) GTEST_SKIP() << "the fixture's start ticks assume USER_HZ 100";
  MapSource* src = nullptr;
  auto c = make(src, 8);
  const auto a = id_of("a.slice");
  start_process(10, "python3", 100);
  src->map = {{a, 10, 1, 5, 100}};
  auto first = collect(*c);
  EXPECT_EQ(first->series.at("/a.slice").process_info.at(10).comm, "python3");
  end_process(10);
  start_process(10, "imposter", 500);
  src->map = {{a, 10, 1, 5, 100}, {a, 10, 1, 2, 500}};
  auto snap = collect(*c);
  const Series& s = snap->series.at("/a.slice");
  EXPECT_EQ(s.calls.at(1).count, 7u) << "the exited one's 5 retired, the new one's 2 live";
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].totals.count, 2u);
  ASSERT_EQ(s.process_info.count(10), 1u);
  EXPECT_EQ(s.process_info.at(10).comm, "imposter");
  ASSERT_EQ(src->map.size(), 1u) << "the exited one's entry is deleted";
  EXPECT_EQ(src->map[0].start_tag, 500u);
}

TEST_F(CollectorTest, CgroupsPastTheLimitFoldIntoOverflow) {
  MapSource* src = nullptr;
  auto c = make(src, 1);
  start_process(10, "a");
  start_process(11, "b");
  start_process(12, "c");
  src->map = {
      {id_of("a.slice"), 10, 1, 1}, {id_of("b.slice"), 11, 1, 2}, {id_of("c.slice"), 12, 1, 4}};
  auto snap = collect(*c);
  ASSERT_EQ(snap->series.size(), 2u);
  EXPECT_EQ(snap->series.at("/a.slice").calls.at(1).count, 1u);
  EXPECT_EQ(snap->series.at(kOverflowCgroup).calls.at(1).count, 6u);
  EXPECT_EQ(snap->series.at(kOverflowCgroup).identity.cgroup, kOverflowCgroup);
  EXPECT_TRUE(snap->series.at(kOverflowCgroup).identity.container_id.empty());
}

// Issue #51: a cgroup whose path cannot be found is "_unknown", not the cap's "_overflow", and
// takes no place under --max-cgroups.
TEST_F(CollectorTest, AnUnresolvableCgroupIsUnknownNotOverflow) {
  MapSource* src = nullptr;
  auto c = make(src, 1);
  start_process(10, "a");
  start_process(11, "b");
  src->map = {{987654321, 10, 1, 3}, {id_of("a.slice"), 11, 1, 2}};
  auto snap = collect(*c);
  ASSERT_EQ(snap->series.size(), 2u);
  EXPECT_EQ(snap->series.at(kUnknownCgroup).calls.at(1).count, 3u);
  EXPECT_EQ(snap->series.at(kUnknownCgroup).identity.cgroup, kUnknownCgroup);
  EXPECT_EQ(snap->series.at("/a.slice").calls.at(1).count, 2u) << "the one place under the cap";
  EXPECT_EQ(snap->series.count(kOverflowCgroup), 0u);
}

TEST_F(CollectorTest, ExitedProcessesKeepTheirCountsAndVanishedCgroupsGo) {
  MapSource* src = nullptr;
  auto c = make(src, 8);
  start_process(10, "python3");
  start_process(20, "worker");
  const auto a = id_of("a.slice"), b = id_of("b.slice");
  src->map = {{a, 10, 1, 5}, {b, 20, 1, 3}};
  collect(*c);
  end_process(10);
  src->map.push_back({a, 10, 1, 0});  // a later read of the same (gone) process adds nothing
  auto snap = collect(*c);
  const Series& sa = snap->series.at("/a.slice");
  EXPECT_EQ(sa.calls.at(1).count, 5u) << "retired, not lost";
  EXPECT_EQ(sa.process_info.count(10), 0u) << "live processes only";
  EXPECT_TRUE(sa.processes.empty());
  // Its final totals, for the window it ended in, with the name read while it ran.
  ASSERT_EQ(snap->exited.count("/a.slice"), 1u);
  const ExitedProcesses& ended = snap->exited.at("/a.slice");
  ASSERT_EQ(ended.calls.size(), 2u) << "both entries the map held for it";
  EXPECT_EQ(ended.calls[0].pid, 10);
  EXPECT_EQ(ended.calls[0].totals.count, 5u);
  EXPECT_TRUE(ended.calls[0].exited);
  ASSERT_EQ(ended.info.count(10), 1u);
  EXPECT_EQ(ended.info.at(10).comm, "python3");
  EXPECT_TRUE(ended.info.at(10).exited);
  EXPECT_EQ(src->map.size(), 1u) << "the exited process's entries left the map";
  auto later = collect(*c);
  EXPECT_EQ(later->series.at("/a.slice").calls.at(1).count, 5u) << "and stay counted";
  EXPECT_TRUE(later->exited.empty()) << "one window only";

  // b's process exits and b's cgroup is removed: its series disappears, the sources are told.
  end_process(20);
  fs::remove(root_ / "cg" / "b.slice");
  src->hooks.clear();
  snap = collect(*c);
  EXPECT_EQ(snap->series.count("/b.slice"), 0u);
  ASSERT_EQ(snap->exited.count("/b.slice"), 1u) << "its last window's rows, not its series";
  EXPECT_EQ(snap->exited.at("/b.slice").info.at(20).comm, "worker");
  EXPECT_EQ(snap->series.count("/a.slice"), 1u);
  EXPECT_EQ(src->hooks,
            (std::vector<std::string>{"read", "retire " + std::to_string(b), "finish 1"}));
}

// A job shorter than a window: it started and exited between two passes, so the collector never
// read it alive. Its calls are still this window's, named by discovery (issue #51).
TEST_F(CollectorTest, AProcessThatNeverOutlivedAWindowIsStillCountedAndNamed) {
  MapSource* src = nullptr;
  auto c = make(src, 8);
  const auto a = id_of("a.slice");
  collect(*c);
  discovered_[30] = "short_job";
  src->map = {{a, 30, 2, 6000, 77}};  // no /proc entry: it is gone already
  auto snap = collect(*c);
  ASSERT_EQ(snap->exited.count("/a.slice"), 1u);
  const ExitedProcesses& ended = snap->exited.at("/a.slice");
  ASSERT_EQ(ended.calls.size(), 1u);
  EXPECT_EQ(ended.calls[0].totals.count, 6000u);
  EXPECT_EQ(ended.info.at(30).comm, "short_job@77") << "discovery's name, by PID and start tag";
  EXPECT_EQ(snap->series.at("/a.slice").calls.at(2).count, 6000u);
  const chains::WindowView v = chains::diff_windows(nullptr, *snap);
  EXPECT_TRUE(v.processes.empty()) << "the rules never judge the window a process ended in";
  ASSERT_EQ(v.ended.size(), 1u);
  EXPECT_EQ(v.ended[0].pid, 30);
  EXPECT_EQ(v.ended[0].comm, "short_job@77");
  EXPECT_EQ(v.ended[0].calls.at(2).count, 6000u);
}

TEST_F(CollectorTest, ASharedLabelKeepsAVanishedCgroupsCounts) {
  MapSource* src = nullptr;
  auto c = make(src, 1);
  start_process(10, "a");
  start_process(11, "b");
  start_process(12, "c");
  const auto b = id_of("b.slice"), cc = id_of("c.slice");
  src->map = {{id_of("a.slice"), 10, 1, 1}, {b, 11, 1, 2}, {cc, 12, 1, 4}};
  EXPECT_EQ(collect(*c)->series.at(kOverflowCgroup).calls.at(1).count, 6u);
  end_process(11);
  fs::remove(root_ / "cg" / "b.slice");
  auto snap = collect(*c);
  EXPECT_EQ(snap->series.at(kOverflowCgroup).calls.at(1).count, 6u)
      << "b's calls pass to c, which shares the overflow label: the counter never goes back";
}

}  // namespace
}  // namespace stallwatch::trace
