// Tests for exporter/identity: cgroup path parsing, cgroup2 mount discovery, id -> path resolver.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "identity/cgroup_identity.h"
#include "identity/cgroup_resolver.h"

namespace stallwatch::identity {

// Prints every field when an expectation fails.
void PrintTo(const Identity& id, std::ostream* os) {
  *os << "{cgroup=\"" << id.cgroup << "\" container_id=\"" << id.container_id << "\" pod_uid=\""
      << id.pod_uid << "\" runtime=\"" << id.runtime << "\" qos=\"" << id.qos
      << "\" systemd_unit=\"" << id.systemd_unit << "\" slurm_job=\"" << id.slurm_job
      << "\" slurm_step=\"" << id.slurm_step << "\"}";
}

namespace {

const std::string kId = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kUidUnderscores = "1a2b3c4d_5e6f_7a8b_9c0d_112233445566";
const std::string kUid = "1a2b3c4d-5e6f-7a8b-9c0d-112233445566";

TEST(ParseCgroupPath, ContainerdSystemdDriverBurstable) {
  const std::string path = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                           kUidUnderscores + ".slice/cri-containerd-" + kId + ".scope";
  EXPECT_EQ(parse_cgroup_path(path), (Identity{.cgroup = path,
                                               .container_id = kId,
                                               .pod_uid = kUid,
                                               .runtime = "containerd",
                                               .qos = "burstable"}));
}

TEST(ParseCgroupPath, ContainerdSystemdDriverGuaranteed) {
  const std::string path =
      "/kubepods.slice/kubepods-pod" + kUidUnderscores + ".slice/cri-containerd-" + kId + ".scope";
  EXPECT_EQ(parse_cgroup_path(path), (Identity{.cgroup = path,
                                               .container_id = kId,
                                               .pod_uid = kUid,
                                               .runtime = "containerd",
                                               .qos = "guaranteed"}));
}

TEST(ParseCgroupPath, PodSliceWithoutContainer) {
  const std::string path = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" +
                           kUidUnderscores + ".slice";
  EXPECT_EQ(parse_cgroup_path(path),
            (Identity{.cgroup = path, .pod_uid = kUid, .qos = "besteffort"}));
}

TEST(ParseCgroupPath, CgroupfsDriver) {
  const std::string path = "/kubepods/burstable/pod" + kUid + "/" + kId;
  EXPECT_EQ(parse_cgroup_path(path),
            (Identity{.cgroup = path, .container_id = kId, .pod_uid = kUid, .qos = "burstable"}));
  const std::string guaranteed = "/kubepods/pod" + kUid + "/" + kId;
  EXPECT_EQ(
      parse_cgroup_path(guaranteed),
      (Identity{.cgroup = guaranteed, .container_id = kId, .pod_uid = kUid, .qos = "guaranteed"}));
}

TEST(ParseCgroupPath, CrioContainer) {
  const std::string path = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" +
                           kUidUnderscores + ".slice/crio-" + kId + ".scope";
  EXPECT_EQ(parse_cgroup_path(path), (Identity{.cgroup = path,
                                               .container_id = kId,
                                               .pod_uid = kUid,
                                               .runtime = "crio",
                                               .qos = "besteffort"}));
  // CRI-O with cgroupfs: crio-<id> without .scope.
  const std::string cgroupfs = "/kubepods/besteffort/pod" + kUid + "/crio-" + kId;
  EXPECT_EQ(parse_cgroup_path(cgroupfs), (Identity{.cgroup = cgroupfs,
                                                   .container_id = kId,
                                                   .pod_uid = kUid,
                                                   .runtime = "crio",
                                                   .qos = "besteffort"}));
}

TEST(ParseCgroupPath, CrioConmonIsNotTheContainer) {
  const std::string path = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                           kUidUnderscores + ".slice/crio-conmon-" + kId + ".scope";
  EXPECT_EQ(parse_cgroup_path(path),
            (Identity{.cgroup = path, .pod_uid = kUid, .runtime = "crio", .qos = "burstable"}));
}

TEST(ParseCgroupPath, Docker) {
  const std::string systemd = "/system.slice/docker-" + kId + ".scope";
  EXPECT_EQ(parse_cgroup_path(systemd),
            (Identity{.cgroup = systemd, .container_id = kId, .runtime = "docker"}));
  const std::string cgroupfs = "/docker/" + kId;
  EXPECT_EQ(parse_cgroup_path(cgroupfs),
            (Identity{.cgroup = cgroupfs, .container_id = kId, .runtime = "docker"}));
  // An ordinary unit whose name starts like a container scope stays a unit.
  EXPECT_EQ(parse_cgroup_path("/system.slice/docker-cleanup.scope"),
            (Identity{.cgroup = "/system.slice/docker-cleanup.scope",
                      .runtime = "systemd",
                      .systemd_unit = "docker-cleanup.scope"}));
}

TEST(ParseCgroupPath, ContainerdOutsideKubernetes) {
  EXPECT_EQ(parse_cgroup_path("/system.slice/containerd.service"),
            (Identity{.cgroup = "/system.slice/containerd.service",
                      .runtime = "systemd",
                      .systemd_unit = "containerd.service"}));
  const std::string nested = "/system.slice/containerd.service/default/" + kId;
  EXPECT_EQ(parse_cgroup_path(nested), (Identity{.cgroup = nested,
                                                 .container_id = kId,
                                                 .runtime = "containerd",
                                                 .systemd_unit = "containerd.service"}));
  const std::string nerdctl = "/system.slice/nerdctl-" + kId + ".scope";
  EXPECT_EQ(parse_cgroup_path(nerdctl),
            (Identity{.cgroup = nerdctl, .container_id = kId, .runtime = "containerd"}));
}

TEST(ParseCgroupPath, SystemdUnits) {
  EXPECT_EQ(parse_cgroup_path("/system.slice/fluent-bit.service"),
            (Identity{.cgroup = "/system.slice/fluent-bit.service",
                      .runtime = "systemd",
                      .systemd_unit = "fluent-bit.service"}));
  EXPECT_EQ(parse_cgroup_path("/user.slice/user-1000.slice/session-3.scope"),
            (Identity{.cgroup = "/user.slice/user-1000.slice/session-3.scope",
                      .runtime = "systemd",
                      .systemd_unit = "session-3.scope"}));
  const std::string nested = "/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service";
  EXPECT_EQ(parse_cgroup_path(nested),
            (Identity{.cgroup = nested, .runtime = "systemd", .systemd_unit = "foo.service"}));
  EXPECT_EQ(parse_cgroup_path("/system.slice"), (Identity{.cgroup = "/system.slice"}));
}

TEST(ParseCgroupPath, SlurmCgroupV2) {
  const std::string path = "/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0";
  EXPECT_EQ(parse_cgroup_path(path), (Identity{.cgroup = path,
                                               .runtime = "slurm",
                                               .systemd_unit = "slurmstepd.scope",
                                               .slurm_job = "1234",
                                               .slurm_step = "0"}));
  const std::string job_only = "/system.slice/slurmstepd.scope/job_77";
  EXPECT_EQ(parse_cgroup_path(job_only), (Identity{.cgroup = job_only,
                                                   .runtime = "slurm",
                                                   .systemd_unit = "slurmstepd.scope",
                                                   .slurm_job = "77"}));
  for (const std::string step : {"extern", "interactive"}) {
    const std::string p = "/system.slice/slurmstepd.scope/job_5/step_" + step;
    EXPECT_EQ(parse_cgroup_path(p).slurm_step, step) << p;
  }
}

TEST(ParseCgroupPath, SlurmLegacyLayout) {
  const std::string path = "/slurm/uid_1000/job_1234/step_batch";
  EXPECT_EQ(
      parse_cgroup_path(path),
      (Identity{.cgroup = path, .runtime = "slurm", .slurm_job = "1234", .slurm_step = "batch"}));
  // job_N outside a Slurm hierarchy is not a Slurm job.
  EXPECT_EQ(parse_cgroup_path("/foo/job_1/step_0"), (Identity{.cgroup = "/foo/job_1/step_0"}));
}

TEST(ParseCgroupPath, RootAndNormalisation) {
  EXPECT_EQ(parse_cgroup_path("/"), (Identity{.cgroup = "/"}));
  EXPECT_EQ(parse_cgroup_path(""), (Identity{.cgroup = "/"}));
  EXPECT_EQ(parse_cgroup_path("///"), (Identity{.cgroup = "/"}));
  EXPECT_EQ(parse_cgroup_path("/system.slice/fluent-bit.service/"),
            parse_cgroup_path("/system.slice/fluent-bit.service"));
  EXPECT_EQ(parse_cgroup_path("system.slice//fluent-bit.service//").cgroup,
            "/system.slice/fluent-bit.service");
}

TEST(ParseCgroupPath, GarbageLeavesOnlyCgroup) {
  for (const std::string& garbage :
       {std::string("not a cgroup path!!"), std::string("\x01\xff/\0/x", 6), std::string("/pod/"),
        std::string("/kubepods-pod.slice"), std::string("/docker/1234"),
        std::string("/cri-containerd-zz"), std::string("/slurm/job_/step_")}) {
    const Identity id = parse_cgroup_path(garbage);
    EXPECT_FALSE(id.cgroup.empty());
    EXPECT_EQ(id.cgroup.front(), '/');
    EXPECT_EQ(id, (Identity{.cgroup = id.cgroup})) << garbage;
  }
  std::mt19937 rng(42);
  const std::string alphabet = "/-_.abcdefpodkubeslicescope0123456789\xff";
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 200, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    const Identity id = parse_cgroup_path(s);
    ASSERT_FALSE(id.cgroup.empty());
    ASSERT_EQ(id.cgroup.front(), '/');
    ASSERT_TRUE(id.cgroup == "/" || id.cgroup.back() != '/');
  }
}

constexpr std::string_view kPureV2 =
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "25 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "26 25 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

constexpr std::string_view kHybrid =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

constexpr std::string_view kV1Only =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n";

TEST(FindCgroup2Mount, PureV2) { EXPECT_EQ(find_cgroup2_mount(kPureV2), "/sys/fs/cgroup"); }

TEST(FindCgroup2Mount, Hybrid) { EXPECT_EQ(find_cgroup2_mount(kHybrid), "/sys/fs/cgroup/unified"); }

TEST(FindCgroup2Mount, None) {
  EXPECT_EQ(find_cgroup2_mount(kV1Only), std::nullopt);
  EXPECT_EQ(find_cgroup2_mount(""), std::nullopt);
  EXPECT_EQ(find_cgroup2_mount("garbage\n- cgroup2\n1 2 3 4\n"), std::nullopt);
}

TEST(FindCgroup2Mount, PrefersStandardPlaceAndUnescapes) {
  const std::string two =
      "50 1 0:40 / /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n" + std::string(kPureV2);
  EXPECT_EQ(find_cgroup2_mount(two), "/sys/fs/cgroup");
  EXPECT_EQ(find_cgroup2_mount("50 1 0:40 / /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n"),
            "/mnt/my cg");
}

TEST(FindCgroup2Mount, ThisHostDoesNotCrash) {
  if (const auto mount = find_cgroup2_mount()) {
    EXPECT_TRUE(std::filesystem::is_directory(*mount));
  }
}

std::uint64_t inode_of(const std::filesystem::path& p) {
  struct stat st {};
  EXPECT_EQ(stat(p.c_str(), &st), 0) << p;
  return st.st_ino;
}

class CgroupResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("identity_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ / "a" / "b");
    std::filesystem::create_directories(root_ / "c");
    std::ofstream(root_ / "a" / "cgroup.procs") << "1\n";
    std::filesystem::create_directory_symlink(root_ / "a", root_ / "link");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::filesystem::path root_;
};

TEST_F(CgroupResolverTest, ResolvesDirectoriesByInode) {
  CgroupResolver resolver(root_.string() + "/");
  EXPECT_EQ(resolver.mount(), root_.string());
  EXPECT_EQ(resolver.path_of(inode_of(root_ / "a" / "b")), "/a/b");
  EXPECT_EQ(resolver.path_of(inode_of(root_)), "/");
  EXPECT_EQ(resolver.path_of(inode_of(root_ / "a")), "/a");
  EXPECT_EQ(resolver.path_of(inode_of(root_ / "c")), "/c");
  EXPECT_EQ(resolver.cached(), 4u);  // root, a, a/b, c: no files, symlink not followed
  EXPECT_EQ(resolver.path_of(inode_of(root_ / "a" / "cgroup.procs")), std::nullopt);
  EXPECT_EQ(resolver.path_of(0xffffffffffffull), std::nullopt);
}

TEST_F(CgroupResolverTest, RescansAtMostEveryIntervalAndForgetsRemoved) {
  CgroupResolver resolver(root_.string());
  ASSERT_EQ(resolver.path_of(inode_of(root_ / "c")), "/c");
  std::filesystem::create_directory(root_ / "c" / "new");
  const std::uint64_t fresh = inode_of(root_ / "c" / "new");
  EXPECT_EQ(resolver.path_of(fresh), std::nullopt);  // walked just now: rate-limited
  std::this_thread::sleep_for(CgroupResolver::kMinWalkInterval + std::chrono::milliseconds(20));
  EXPECT_EQ(resolver.path_of(fresh), "/c/new");
  EXPECT_EQ(resolver.cached(), 5u);

  std::filesystem::remove_all(root_ / "a");
  resolver.forget_missing();
  EXPECT_EQ(resolver.cached(), 3u);  // root, c, c/new
  EXPECT_EQ(resolver.path_of(fresh), "/c/new");
}

// Issue #35 row 14: a user with a delegated subtree can make thousands of cgroups. A walk
// records at most max_cgroups of them (and counts the rest), and forget_missing checks a
// bounded slice of the cache per call instead of lstat'ing every cached path every window.
TEST_F(CgroupResolverTest, WalkAndChecksAreBounded) {
  for (int i = 0; i < 200; ++i) std::filesystem::create_directory(root_ / "c" / std::to_string(i));
  ResolverLimits limits;
  limits.max_cgroups = 50;
  limits.check_per_call = 10;
  CgroupResolver resolver(root_.string(), limits);
  EXPECT_TRUE(resolver.path_of(inode_of(root_)).has_value());
  EXPECT_EQ(resolver.cached(), 50u);
  // Those met and not recorded (a skipped directory's children are never met): 153 or so.
  EXPECT_GE(resolver.over_limit(), 100u);

  std::filesystem::remove_all(root_ / "c");
  std::filesystem::remove_all(root_ / "a");
  resolver.forget_missing();
  EXPECT_EQ(resolver.cached(), 40u) << "one call checks at most 10 entries";
  for (int i = 0; i < 10; ++i) resolver.forget_missing();
  EXPECT_EQ(resolver.cached(), 1u) << "in a few calls every stale entry is gone; the root stays";
}

// Removes `name` under `dir_fd` and everything below it by descriptor (a chain deeper than
// PATH_MAX cannot be removed by path).
void remove_below(int dir_fd, const char* name) {
  const int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    std::vector<std::string> children;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd/" + std::to_string(fd))) {
      children.push_back(e.path().filename());
    }
    for (const auto& c : children) {
      if (unlinkat(fd, c.c_str(), 0) != 0) remove_below(fd, c.c_str());
    }
    close(fd);
  }
  unlinkat(dir_fd, name, AT_REMOVEDIR);
}

// Issue #49, the high finding: 250 nested levels of 255-byte names with leaves below, each
// leaf's path ~64 KB. The resolver keeps parent + name: what it holds grows with the names,
// not with the paths, and every leaf still resolves to its full path.
TEST_F(CgroupResolverTest, DeepTreesCostTheirNamesNotTheirPaths) {
  constexpr int kLevels = 250;
  constexpr int kLeaves = 400;
  int fd = open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::string expected;
  for (int level = 0; level < kLevels; ++level) {
    std::string name(255, static_cast<char>('a' + level % 26));
    name.replace(0, 3, std::to_string(100 + level));
    ASSERT_EQ(mkdirat(fd, name.c_str(), 0755), 0) << level;
    const int next = openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(fd);
    ASSERT_GE(next, 0);
    fd = next;
    expected += "/" + name;
  }
  std::uint64_t leaf = 0;
  for (int i = 0; i < kLeaves; ++i) {
    const std::string name = std::to_string(i) + std::string(250, 'z');
    ASSERT_EQ(mkdirat(fd, name.c_str(), 0755), 0);
    struct stat st {};
    ASSERT_EQ(fstatat(fd, name.c_str(), &st, 0), 0);
    if (i == 7) leaf = st.st_ino;
  }
  close(fd);

  CgroupResolver resolver(root_.string());
  const auto path = resolver.path_of(leaf);
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(*path, expected + "/7" + std::string(250, 'z'));
  EXPECT_GT(path->size(), 64000u);
  EXPECT_EQ(resolver.cached(), 4u + kLevels + kLeaves);
  // 650 names of ~255 bytes plus a node each: ~0.25 MB. As full paths: 400 × 64 KB = 26 MB.
  EXPECT_LT(resolver.bytes(), 400u * 1024);
  EXPECT_GT(resolver.bytes(), 650u * 255);
  // Too deep to lstat by name: kept while its parent is, not dropped and walked for again.
  for (int i = 0; i < 5; ++i) resolver.forget_missing();
  EXPECT_EQ(resolver.cached(), 4u + kLevels + kLeaves);
  EXPECT_EQ(resolver.path_of(leaf), path);
  EXPECT_EQ(resolver.walks(), 1u);

  // The byte budget refuses what does not fit (and counts it) instead of growing.
  ResolverLimits tight;
  tight.max_bytes = 64 * 1024;
  CgroupResolver bounded(root_.string(), tight);
  bounded.path_of(leaf);
  EXPECT_LE(bounded.bytes(), 64u * 1024);
  EXPECT_GT(bounded.over_limit(), 0u);
  const int root_fd = open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  remove_below(root_fd, std::to_string(100).append(252, 'a').c_str());
  close(root_fd);
}

// Issue #49 (f): an id a walk did not find (a removed cgroup's, as preemptor entries keep) is
// remembered as missing: asking again does not walk again, however often.
TEST_F(CgroupResolverTest, MissingIdsAreNotWalkedForAgain) {
  CgroupResolver resolver(root_.string());
  std::filesystem::create_directory(root_ / "gone");
  const std::uint64_t gone = inode_of(root_ / "gone");
  std::filesystem::remove(root_ / "gone");
  EXPECT_EQ(resolver.path_of(gone), std::nullopt);
  EXPECT_EQ(resolver.walks(), 1u);
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(CgroupResolver::kMinWalkInterval + std::chrono::milliseconds(20));
    EXPECT_EQ(resolver.path_of(gone), std::nullopt);
  }
  EXPECT_EQ(resolver.walks(), 1u) << "a known-missing id walked the tree again";
  // A new id still gets its walk (this file system, unlike cgroupfs, reuses inode numbers:
  // the first new directory may get the removed one's).
  std::filesystem::create_directory(root_ / "new0");
  std::filesystem::create_directory(root_ / "new");
  ASSERT_NE(inode_of(root_ / "new"), gone);
  EXPECT_EQ(resolver.path_of(inode_of(root_ / "new")), "/new");
  EXPECT_EQ(resolver.walks(), 2u);
}

// Trust follows the owner of every level (issue #49 (d)): with nothing owned by the trusted
// uid, no level of the path may name a workload; with everything, all of it may.
TEST_F(CgroupResolverTest, TrustedPathStopsAtTheFirstLevelNotOwnedByTheRuntime) {
  ResolverLimits mine;
  mine.trusted_uid = getuid();
  CgroupResolver trusting(root_.string(), mine);
  EXPECT_EQ(trusting.trusted_path_of(inode_of(root_ / "a" / "b")), std::nullopt) << "no walk yet";
  ASSERT_EQ(trusting.path_of(inode_of(root_ / "a" / "b")), "/a/b");
  EXPECT_EQ(trusting.trusted_path_of(inode_of(root_ / "a" / "b")), "/a/b");
  ResolverLimits other;
  other.trusted_uid = getuid() + 1;
  CgroupResolver wary(root_.string(), other);
  ASSERT_EQ(wary.path_of(inode_of(root_ / "a" / "b")), "/a/b");
  EXPECT_EQ(wary.trusted_path_of(inode_of(root_ / "a" / "b")), "/");
}

TEST(CgroupResolver, MissingMountResolvesNothing) {
  CgroupResolver resolver("/nonexistent/stallwatch/cgroup");
  EXPECT_EQ(resolver.path_of(1), std::nullopt);
  EXPECT_EQ(resolver.cached(), 0u);
}

// Issue #49 (d): below a delegated level the user picks every name. A pod's and a container's
// names made there decide nothing; the workload key is the whole path (a unit name reused
// there is not the system unit's workload).
TEST(Identity, NamesBelowADelegatedLevelDecideNothing) {
  const std::string user = "/user.slice/user-1000.slice";
  const std::string fake_pod = user + "/user@1000.service/kubepods-burstable-pod" +
                               kUidUnderscores + ".slice/cri-containerd-" + kId + ".scope";
  const Identity pod = parse_cgroup_path(fake_pod, user);
  EXPECT_EQ(pod, (Identity{.cgroup = fake_pod, .delegated = true}));
  EXPECT_EQ(workload_key(pod), fake_pod);
  const std::string unit = user + "/user@1000.service/app.slice/fluent-bit.service";
  EXPECT_EQ(workload_key(parse_cgroup_path(unit, user)), unit);
  const std::string slurm = "/system.slice/slurmstepd.scope/job_1234/step_0/user/job_99/step_1";
  const Identity job = parse_cgroup_path(slurm, "/system.slice/slurmstepd.scope/job_1234/step_0");
  EXPECT_EQ(job.slurm_job, "1234");
  EXPECT_EQ(job.slurm_step, "0");
  EXPECT_TRUE(job.delegated);
  // All of it trusted: as before.
  const std::string real = "/kubepods.slice/kubepods-pod" + kUidUnderscores + ".slice/cri-containerd-" +
                           kId + ".scope";
  EXPECT_EQ(parse_cgroup_path(real, real), parse_cgroup_path(real));
  EXPECT_FALSE(parse_cgroup_path(real, real).delegated);
}

// Issue #49 (low): the label is lossless and distinct, valid UTF-8, and bounded.
TEST(CgroupLabel, EscapesLosslesslyAndBoundsTheLength) {
  EXPECT_EQ(cgroup_label("/system.slice/fluent-bit.service"), "/system.slice/fluent-bit.service");
  EXPECT_EQ(cgroup_label("/a\xff\\b"), "/a\\xff\\\\b");
  EXPECT_NE(cgroup_label("/a\xff"), cgroup_label("/a\xEF\xBF\xBD"));
  EXPECT_NE(cgroup_label("/a\xff"), cgroup_label("/a\\xff"));  // a literal backslash-x-f-f
  EXPECT_EQ(cgroup_label("/caf\xC3\xA9"), "/caf\xC3\xA9");
  EXPECT_EQ(cgroup_label("/a;\x1b[31m\"q"), "/a;\x1b[31m\"q") << "valid UTF-8 stays as is";
  for (const std::string path : {"/a\xff\\b", "/a\\xff", "/x\xC3", "/\\\\", "/caf\xC3\xA9"}) {
    EXPECT_EQ(cgroup_path_of_label(cgroup_label(path)), path) << "lossless";
  }
  std::string deep;
  for (int i = 0; i < 250; ++i) deep += "/" + std::string(254, 'a') + "\xC3\xA9";
  const std::string label = cgroup_label(deep);
  EXPECT_LE(label.size(), kMaxCgroupLabel);
  EXPECT_EQ(label.substr(0, 100), deep.substr(0, 100));
  EXPECT_TRUE(label.ends_with(deep.substr(deep.size() - 300)));
  std::string other = deep;
  other[5000] = 'b';  // differs only where the label leaves it out
  EXPECT_NE(cgroup_label(other), label);
  EXPECT_EQ(cgroup_label(other).size(), label.size());
}

// The `workload` key of issue #37, one case per rule of cgroup_identity.h.
TEST(WorkloadKey, OneRulePerKindOfWorkload) {
  const std::string pod_path = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                               kUidUnderscores + ".slice/cri-containerd-" + kId + ".scope";
  Identity named = parse_cgroup_path(pod_path);
  named.pod = "llm-train-0";
  named.pod_namespace = "ml";
  named.container = "trainer";
  EXPECT_EQ(workload_key(named), "ml/llm-train-0/trainer");
  named.container.clear();  // the pod's names known, not the container's
  EXPECT_EQ(workload_key(named), "ml/llm-train-0");
  EXPECT_EQ(workload_key(parse_cgroup_path(pod_path)),
            "pod/1a2b3c4d-5e6f-7a8b-9c0d-112233445566/0123456789ab");
  EXPECT_EQ(workload_key(parse_cgroup_path("/system.slice/docker-" + kId + ".scope")),
            "docker/0123456789ab");
  EXPECT_EQ(workload_key(parse_cgroup_path("/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0")),
            "slurm/job_1234/step_0");
  EXPECT_EQ(workload_key(parse_cgroup_path("/system.slice/fluent-bit.service")), "fluent-bit.service");
  EXPECT_EQ(workload_key(parse_cgroup_path("/user.slice/user-1000.slice/session-3.scope")),
            "session-3.scope");
  EXPECT_EQ(workload_key(parse_cgroup_path("/")), "/");
  EXPECT_EQ(workload_key(parse_cgroup_path("/sw-test/a b")), "/sw-test/a b");
  EXPECT_EQ(workload_key(Identity{}), "/");
}

}  // namespace
}  // namespace stallwatch::identity
