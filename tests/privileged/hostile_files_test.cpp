// Hostile library files against the real daemon (issue 35, rows 2 and 3): user `nobody` maps a
// sparse fake libcudart.so.12 (4 KiB on disk, a terabyte apparent, a header claiming 2^34
// section headers) and a fake libnccl.so.2 whose .symtab claims 48 MiB inside a hole, before the
// daemon starts. The old daemon aborted on std::bad_alloc at its first scan, and at every
// restart. Here the daemon runs under a 256 MiB memory cap (the unit's MemoryMax and the
// DaemonSet's limit; a cgroup made here, v2 memory.max or v1 memory.limit_in_bytes on hybrid
// hosts, as systemd-run -p MemoryMax=256M would make), and must keep serving /metrics, count the
// normal stand-in job's CUDA calls exactly, say one line per bad file however many rescans meet
// it, and never be OOM-killed. The same cap holds against a cgroup tree nobody builds in a
// subtree delegated to it (issue #49): 250 nested levels of 255-byte names with 4,000 leaves,
// each leaf's path ~64 KB, which got the daemon OOM-killed when it kept paths as strings.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <elf.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/harness.h"
#include "support/host_env.h"
#include "support/hostile_elf.h"

namespace stallwatch::test {
namespace {

using namespace std::chrono_literals;
const std::string kCudart = std::string(MOCK_DIR) + "/libcudart.so.12";
const std::string kMapFile = std::string(MOCK_DIR) + "/map_file";
constexpr uid_t kNobody = 65534;

// A directory of hostile libraries any user can read.
class HostileDir {
 public:
  HostileDir() {
    char tmpl[] = "/tmp/sw-hostile-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ::chmod(dir_.c_str(), 0755);
    // Row 2: e_shnum 0 and section 0's sh_size 2^34 (extended numbering), 1 TiB apparent.
    ok_ = write_sparse(cudart(), image_claiming_2to34_sections(), (1ll << 40) + 8192);
    // Row 3: a .symtab of 48 MiB (within the table budget) lying in a hole.
    const std::string symtab = image_with_symtab_at_1gib(48ull << 20);
    ok_ = ok_ && write_sparse(nccl(), symtab, 2ll << 30);
    // The mapper runs as nobody, who may not reach the build tree (a clone under a 0700
    // directory, as mktemp -d makes): a copy here, where any user can run it.
    std::error_code ec;
    std::filesystem::copy_file(kMapFile, mapper(), ec);
    ok_ = ok_ && !ec && ::chmod(mapper().c_str(), 0755) == 0;
  }
  ~HostileDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  bool ok() const { return ok_; }
  std::string cudart() const { return dir_ + "/libcudart.so.12"; }
  std::string nccl() const { return dir_ + "/libnccl.so.2"; }
  std::string mapper() const { return dir_ + "/map_file"; }

 private:
  std::string dir_;
  bool ok_ = false;
};

// map_file as user nobody, mapping `paths`; returns its pid once the files are mapped (or -1).
pid_t map_as_nobody(const std::string& mapper, const std::vector<std::string>& paths) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) {
      ::_exit(126);
    }
    std::vector<char*> argv{const_cast<char*>(mapper.c_str())};
    for (const auto& p : paths) argv.push_back(const_cast<char*>(p.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  char buf[16] = {};
  const ssize_t n = ::read(out[0], buf, sizeof buf - 1);
  ::close(out[0]);
  if (n <= 0 || std::string(buf).find("mapped") == std::string::npos) {
    kill_and_reap(pid);
    return -1;
  }
  return pid;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_with(const std::string& text, const std::string& what) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(what) != std::string::npos) out.push_back(line);
  }
  return out;
}

// Moves this process into the cgroup directories `dirs`: a child forked while it is there
// (the daemon) stays there after it moves back.
void move_self(const std::vector<std::string>& dirs) {
  for (const auto& dir : dirs) std::ofstream(dir + "/cgroup.procs") << getpid() << std::flush;
}

// This process's cgroup in a hierarchy mounted at `mount` (`controllers` as /proc/self/cgroup
// names them: "" for v2, "memory" for the v1 memory hierarchy).
std::string own_cgroup_dir(const std::string& mount, const std::string& controllers) {
  std::istringstream in(read_text("/proc/self/cgroup"));
  for (std::string line; std::getline(in, line);) {
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    if (line.substr(first + 1, second - first - 1) == controllers) {
      return mount + line.substr(second + 1);
    }
  }
  return "";
}

// The daemon started inside `cap` (named `cap_name`): forked while this process sits there, so
// it stays there when this process moves back. Without a cap (none could be made) it runs
// uncapped, with a note.
std::unique_ptr<Daemon> start_capped(const MemoryCgroup& cap, const std::string& cap_name,
                                     std::vector<std::string> args) {
  std::vector<std::string> back;
  if (cap.ok()) {
    // Where this process is, to return to after the fork.
    back.push_back(own_cgroup_dir(cap.dir().substr(0, cap.dir().size() - cap.label().size()), ""));
    if (cap.v1()) {  // made right below this process's own v1 memory cgroup
      back.push_back(cap.memory_dir().substr(0, cap.memory_dir().size() - cap_name.size() - 1));
    }
    std::vector<std::string> into{cap.dir()};
    if (cap.v1()) into.push_back(cap.memory_dir());
    move_self(into);
  }
  auto daemon = std::make_unique<Daemon>(std::move(args));
  if (cap.ok()) {
    move_self(back);
  } else {
    std::cerr << "note: the daemon runs without a memory cap: " << cap.error() << "\n";
  }
  return daemon;
}

// The daemon is in the cap, was never OOM-killed there; its peak is printed.
void expect_held(const MemoryCgroup& cap, const Daemon& daemon) {
  if (!cap.ok()) return;
  const std::string procs = read_text(cap.memory_dir() + "/cgroup.procs");
  EXPECT_NE(("\n" + procs).find("\n" + std::to_string(daemon.pid()) + "\n"), std::string::npos)
      << "the daemon is not in the capped cgroup " << cap.memory_dir();
  EXPECT_EQ(cap.oom_kills(), 0u) << "the daemon hit its 256 MiB cap";
  const std::string peak = read_text(cap.memory_dir() +
                                     (cap.v1() ? "/memory.max_usage_in_bytes" : "/memory.peak"));
  std::cerr << "daemon cgroup peak memory: " << peak;
}

TEST(HostileFiles, DaemonUnderA256MiBCapSurvivesSparseLibrariesMappedByNobody) {
  HostileDir files;
  ASSERT_TRUE(files.ok()) << "cannot create the sparse files";
  const pid_t mapper = map_as_nobody(files.mapper(), {files.cudart(), files.nccl()});
  ASSERT_GT(mapper, 0) << "map_file as nobody did not map the files";

  const std::string cap_name = "sw-hostile-cap-" + std::to_string(getpid());
  MemoryCgroup cap(cap_name, 256ull << 20);
  // Rescans every second: each meets both files again.
  const auto started = start_capped(cap, cap_name, {"--rescan-interval", "1s"});
  Daemon& daemon = *started;
  ASSERT_TRUE(daemon.wait_ready()) << "the daemon did not come up; log: "
                                   << read_text(daemon.log_path());

  // The normal stand-in job beside them is counted exactly.
  TestCgroup cg("sw-hostile-job-" + std::to_string(getpid()));
  Spawn s;
  s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--start-delay-ms", "500", "--calls",
            "cudaMemset:4"};
  s.cgroup_dir = cg.dir();
  ASSERT_EQ(wait_exit(spawn(s)), 0);
  ASSERT_TRUE(daemon.wait_windows());
  std::this_thread::sleep_for(2500ms);  // at least two more rescans meet the files

  long status = 0;
  const auto text = http_get(daemon.url("/metrics"), &status);
  ASSERT_TRUE(text) << "/metrics does not answer";
  EXPECT_EQ(status, 200);
  const auto samples = parse_exposition(*text);
  EXPECT_EQ(find_sample(samples, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", cg.label()}, {"call", "cudaMemset"}}),
            4);
  EXPECT_EQ(::kill(daemon.pid(), 0), 0) << "the daemon died";

  const std::string log = read_text(daemon.log_path());
  const auto cudart_lines = lines_with(log, files.cudart());
  ASSERT_EQ(cudart_lines.size(), 1u) << log;
  EXPECT_NE(cudart_lines[0].find("17179869184 section headers"), std::string::npos)
      << cudart_lines[0];
  const auto nccl_lines = lines_with(log, files.nccl());
  ASSERT_EQ(nccl_lines.size(), 1u) << log;
  EXPECT_NE(nccl_lines[0].find("hole"), std::string::npos) << nccl_lines[0];

  expect_held(cap, daemon);
  EXPECT_EQ(daemon.stop(), 0) << log;
  kill_and_reap(mapper);
}

// Removes directory `name` below `dir_fd` and every directory under it, by descriptor: a chain
// deeper than PATH_MAX cannot be removed by path. Cgroup directories go with rmdir alone.
void remove_tree_at(int dir_fd, const std::string& name) {
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    std::vector<std::string> children;
    for (const auto& e :
         std::filesystem::directory_iterator("/proc/self/fd/" + std::to_string(fd))) {
      if (e.symlink_status().type() == std::filesystem::file_type::directory) {
        children.push_back(e.path().filename());
      }
    }
    for (const auto& c : children) remove_tree_at(fd, c);
    ::close(fd);
  }
  ::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR);
}

// As nobody, below `top` (a cgroup delegated to nobody): `levels` nested directories of
// 255-byte names with `leaves` directories at the bottom, and beside them a pod's and a
// container's scope by the kubelet's and containerd's names. 0 when all were made.
int build_as_nobody(const std::string& top, int levels, int leaves, const std::string& fake_pod) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) {
      ::_exit(126);
    }
    int fd = ::open(top.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (int level = 0; fd >= 0 && level < levels; ++level) {
      std::string name(255, static_cast<char>('a' + level % 26));
      name.replace(0, 3, std::to_string(100 + level));
      if (::mkdirat(fd, name.c_str(), 0755) != 0) ::_exit(10);
      const int next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      ::close(fd);
      fd = next;
    }
    if (fd < 0) ::_exit(11);
    for (int i = 0; i < leaves; ++i) {
      const std::string name = std::to_string(i) + std::string(250, 'z');
      if (::mkdirat(fd, name.c_str(), 0755) != 0) ::_exit(12);
    }
    std::string path = top;
    for (const auto& part : {fake_pod.substr(0, fake_pod.find('/')),
                             fake_pod.substr(fake_pod.find('/') + 1)}) {
      path += "/" + part;
      if (::mkdir(path.c_str(), 0755) != 0) ::_exit(13);
    }
    ::_exit(0);
  }
  return wait_exit(pid);
}

// Issue #49: the high finding (a persistent OOM from a deep tree any user with a delegated
// subtree can build) and (d) (a pod's and container's names made by a user label the user's
// job as that pod). Under the 256 MiB cap the daemon walks the tree, resolves a job started
// after it and keeps serving; the fake pod's job is exported under its own path, no pod UID.
TEST(HostileCgroups, DaemonUnderA256MiBCapSurvivesADeepTreeMadeByNobody) {
  const std::string tag = std::to_string(getpid());
  TestCgroup delegated("sw-delegated-" + tag);
  ASSERT_EQ(::chown(delegated.dir().c_str(), kNobody, kNobody), 0) << std::strerror(errno);
  const std::string uid = "1a2b3c4d_5e6f_7a8b_9c0d_112233445566";
  const std::string fake_pod = "kubepods-burstable-pod" + uid + ".slice/cri-containerd-" +
                               std::string(64, 'c') + ".scope";
  constexpr int kLevels = 250, kLeaves = 4000;
  const auto made = std::chrono::steady_clock::now();
  ASSERT_EQ(build_as_nobody(delegated.dir(), kLevels, kLeaves, fake_pod), 0);
  std::cerr << "nobody made " << kLevels + kLeaves + 2 << " cgroups in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - made).count()
            << " ms\n";
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      for (const auto& e : std::filesystem::directory_iterator(dir)) {
        if (e.symlink_status().type() == std::filesystem::file_type::directory) {
          remove_tree_at(fd, e.path().filename());
        }
      }
      ::close(fd);
    }
  } cleanup{delegated.dir()};

  const std::string cap_name = "sw-deep-cap-" + tag;
  MemoryCgroup cap(cap_name, 256ull << 20);
  const auto started = start_capped(cap, cap_name, {});
  Daemon& daemon = *started;
  ASSERT_TRUE(daemon.wait_ready()) << read_text(daemon.log_path());

  // A job in a cgroup made now: its id is unknown, so the daemon walks the whole tree.
  TestCgroup cg("sw-deep-job-" + tag);
  Spawn s;
  s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--start-delay-ms", "500", "--calls",
            "cudaMemset:4"};
  s.cgroup_dir = cg.dir();
  Spawn pod = s;
  pod.argv.back() = "cudaMemset:2";
  pod.cgroup_dir = delegated.dir() + "/" + fake_pod;
  const pid_t first = spawn(s);
  ASSERT_EQ(wait_exit(spawn(pod)), 0);
  ASSERT_EQ(wait_exit(first), 0);
  ASSERT_TRUE(daemon.wait_windows()) << read_text(daemon.log_path());
  ASSERT_EQ(::kill(daemon.pid(), 0), 0) << "the daemon died";
  const auto samples = parse_exposition(daemon.metrics());
  EXPECT_EQ(find_sample(samples, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", cg.label()}, {"call", "cudaMemset"}}),
            4);
  const std::string pod_label = delegated.label() + "/" + fake_pod;
  EXPECT_EQ(find_sample(samples, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", pod_label}, {"call", "cudaMemset"}}),
            2);
  int info = 0;
  for (const auto& sample : samples) {
    if (sample.name != "stallwatch_cgroup_info" || sample.labels.at("cgroup") != pod_label) continue;
    ++info;
    EXPECT_EQ(sample.labels.count("pod_uid") ? sample.labels.at("pod_uid") : "", "")
        << "a pod's names made in a delegated subtree named the workload";
    EXPECT_EQ(sample.labels.count("workload") ? sample.labels.at("workload") : "?", pod_label);
  }
  EXPECT_EQ(info, 1);
  expect_held(cap, daemon);
  EXPECT_EQ(daemon.stop(), 0) << read_text(daemon.log_path());
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
