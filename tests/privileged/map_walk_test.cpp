// Privileged tier, reading BPF maps (trace/map_iter.h) on real kernel hash maps: an entry of a
// process judged gone leaves the map with the value it has *then*, not the value its batch was
// read with. The race it closes (seen in CI, io_test: 240 of 256 direct reads counted): the
// daemon reads a batch, the process adds its last I/O and exits, the daemon finds it gone and
// deletes the entry; the increments after the batch read were lost with it.
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "support/harness.h"
#include "trace/map_iter.h"

namespace stallwatch::test {
namespace {

struct Key {
  std::uint32_t tgid;
  std::uint32_t tag;
};
struct Value {
  std::uint64_t count;
  std::uint64_t bytes;
};

class Map {
 public:
  explicit Map(std::uint32_t entries) {
    fd_ = bpf_map_create(BPF_MAP_TYPE_HASH, "sw_walk_test", sizeof(Key), sizeof(Value), entries,
                         nullptr);
  }
  ~Map() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }
  void put(std::uint32_t tgid, std::uint64_t count) {
    const Key k{tgid, 1};
    const Value v{count, count * 4096};
    ASSERT_EQ(bpf_map_update_elem(fd_, &k, &v, BPF_ANY), 0) << errno;
  }
  bool has(std::uint32_t tgid) const {
    const Key k{tgid, 1};
    Value v{};
    return bpf_map_lookup_elem(fd_, &k, &v) == 0;
  }

 private:
  int fd_ = -1;
};

TEST(MapWalk, AnEntryJudgedGoneLeavesWithItsLatestValue) {
  Map m(1024);
  ASSERT_GE(m.fd(), 0) << "bpf_map_create: " << errno;
  // 300 processes: more than one batch of 256. Odd tgids are gone; each of them adds 16 more
  // reads between the batch read and the judgement, as a process does before exit(2).
  for (std::uint32_t tgid = 1; tgid <= 300; ++tgid) m.put(tgid, 240);
  std::map<std::uint32_t, std::uint64_t> live, retired;
  const trace::Walk walk = trace::for_each_process_entry<Key, Value>(
      m.fd(),
      [&](const Key& k) {
        if (k.tgid % 2 == 0) return false;
        m.put(k.tgid, 256);  // its last reads, after the batch was read
        return true;
      },
      [&](const Key& k, const Value& v) { live[k.tgid] = v.count; },
      [&](const Key& k, const Value& v) {
        retired[k.tgid] = v.count;
        EXPECT_EQ(v.bytes, v.count * 4096);
      });
  EXPECT_EQ(walk.live, 150u);
  EXPECT_EQ(walk.deleted, 150u);
  ASSERT_EQ(live.size(), 150u);
  ASSERT_EQ(retired.size(), 150u);
  for (const auto& [tgid, count] : retired) {
    EXPECT_EQ(count, 256u) << "process " << tgid << ": its last 16 reads were lost";
    EXPECT_FALSE(m.has(tgid)) << "process " << tgid << " is still in the map";
  }
  for (const auto& [tgid, count] : live) {
    EXPECT_EQ(count, 240u);
    EXPECT_TRUE(m.has(tgid)) << "live process " << tgid << " left the map";
  }
}

// An entry another reader took meanwhile is neither retired twice nor counted as deleted.
TEST(MapWalk, AnEntryGoneMeanwhileIsRetiredOnce) {
  Map m(64);
  ASSERT_GE(m.fd(), 0) << "bpf_map_create: " << errno;
  for (std::uint32_t tgid = 1; tgid <= 4; ++tgid) m.put(tgid, 10);
  int retired = 0;
  const trace::Walk walk = trace::for_each_process_entry<Key, Value>(
      m.fd(),
      [&](const Key& k) {
        if (k.tgid == 3) {
          bpf_map_delete_elem(m.fd(), &k);  // someone else took it
        }
        return true;
      },
      [&](const Key&, const Value&) { ADD_FAILURE() << "every process is gone"; },
      [&](const Key& k, const Value&) {
        EXPECT_NE(k.tgid, 3u);
        ++retired;
      });
  EXPECT_EQ(retired, 3);
  EXPECT_EQ(walk.deleted, 3u);
  EXPECT_EQ(walk.live, 0u);
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
