// Hostile library files against the real daemon (issue 35, rows 2 and 3): user `nobody` maps a
// sparse fake libcudart.so.12 (4 KiB on disk, a terabyte apparent, a header claiming 2^34
// section headers) and a fake libnccl.so.2 whose .symtab claims 48 MiB inside a hole, before the
// daemon starts. The old daemon aborted on std::bad_alloc at its first scan, and at every
// restart. Here the daemon runs under a 256 MiB memory cap (the unit's MemoryMax and the
// DaemonSet's limit; a cgroup made here, v2 memory.max or v1 memory.limit_in_bytes on hybrid
// hosts, as systemd-run -p MemoryMax=256M would make), and must keep serving /metrics, count the
// normal stand-in job's CUDA calls exactly, say one line per bad file however many rescans meet
// it, and never be OOM-killed.
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

TEST(HostileFiles, DaemonUnderA256MiBCapSurvivesSparseLibrariesMappedByNobody) {
  HostileDir files;
  ASSERT_TRUE(files.ok()) << "cannot create the sparse files";
  const pid_t mapper = map_as_nobody(files.mapper(), {files.cudart(), files.nccl()});
  ASSERT_GT(mapper, 0) << "map_file as nobody did not map the files";

  // The cap: the daemon is forked while this process sits in the capped cgroup.
  const std::string cap_name = "sw-hostile-cap-" + std::to_string(getpid());
  MemoryCgroup cap(cap_name, 256ull << 20);
  std::string why_uncapped;
  if (!cap.ok()) why_uncapped = cap.error();
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
  // Rescans every second: each meets both files again.
  Daemon daemon({"--rescan-interval", "1s"});
  if (cap.ok()) move_self(back);
  if (!why_uncapped.empty()) {
    std::cerr << "note: the daemon runs without a memory cap: " << why_uncapped << "\n";
  }
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

  if (cap.ok()) {
    const std::string procs = read_text(cap.memory_dir() + "/cgroup.procs");
    EXPECT_NE(("\n" + procs).find("\n" + std::to_string(daemon.pid()) + "\n"), std::string::npos)
        << "the daemon is not in the capped cgroup " << cap.memory_dir();
    EXPECT_EQ(cap.oom_kills(), 0u) << "the daemon hit its 256 MiB cap";
    const std::string peak = read_text(cap.memory_dir() +
                                       (cap.v1() ? "/memory.max_usage_in_bytes" : "/memory.peak"));
    std::cerr << "daemon cgroup peak memory: " << peak;
  }
  EXPECT_EQ(daemon.stop(), 0) << log;
  kill_and_reap(mapper);
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
