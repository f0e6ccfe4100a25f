// Test harness for the privileged and e2e tiers: privilege checks (exit 77 = skipped), the
// daemon as a child process with a bounded readiness wait on /healthz, workloads placed in
// cgroups the test creates, HTTP over libcurl and a small parser of the Prometheus text format.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace stallwatch::test {

// Exits 77 with the reason on stderr unless running as root with CAP_BPF, CAP_PERFMON and
// CAP_SYS_ADMIN and a cgroup2 hierarchy is mounted.
void require_privileges();

// main() of a privileged test binary: require_privileges, then every GoogleTest test.
int run_privileged_tests(int argc, char** argv);

std::optional<std::string> http_get(const std::string& url, long* status = nullptr);

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};
std::vector<Sample> parse_exposition(const std::string& text);
// The value of the one sample with this name whose labels include `match`; nullopt if none.
std::optional<double> find_sample(const std::vector<Sample>& samples, const std::string& name,
                                  const std::map<std::string, std::string>& match);

int free_port();

class Daemon {
 public:
  explicit Daemon(std::vector<std::string> extra_args = {});
  ~Daemon();
  // Waits (bounded) for /healthz to answer 200; false on timeout or an early exit.
  bool wait_ready(std::chrono::seconds limit = std::chrono::seconds(30));
  std::string url(const std::string& path) const;
  std::string metrics() const;
  std::string snapshot_json() const;
  // Waits until the daemon has published two more windows than when called, so that
  // everything that happened before the call is in the snapshot.
  bool wait_windows(int n = 2, std::chrono::seconds limit = std::chrono::seconds(20));
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_; }
  // Removed with the daemon, unless the test passed its own --db.
  const std::string& db_path() const { return db_; }
  int stop();  // SIGTERM, bounded wait; returns the exit status

 private:
  long sequence() const;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_;
  std::string db_;
  bool own_db_ = true;  // false when the test passed --db itself
};

// A cgroup v2 directory under the unified mount, removed (after its processes exit) when
// destroyed. `relative` is the label the daemon should print: "/" + name.
class TestCgroup {
 public:
  explicit TestCgroup(const std::string& name);
  ~TestCgroup();
  const std::string& label() const { return label_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_, label_;
};

// A cgroup subtree of a suite's own, /TOP, kept (by a child cgroup, `keep`) while this lives,
// and the flags that make a daemon trace only below it (--cgroup-roots, issue #50): other CUDA
// processes on the host, another stallwatch's tests included, then change none of the suite's
// counts. Make it before the daemon starts and keep it until the daemon stops: a root removed
// and made again is another cgroup, which the daemon would not trace.
class OwnCgroupRoot {
 public:
  explicit OwnCgroupRoot(const std::string& top) : label_("/" + top), keep_(top + "/keep") {}
  // `args` and --cgroup-roots /TOP.
  std::vector<std::string> flags(std::vector<std::string> args) const {
    args.insert(args.end(), {"--cgroup-roots", label_});
    return args;
  }

 private:
  std::string label_;
  TestCgroup keep_;
};

struct Spawn {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string cgroup_dir;  // join this cgroup before exec, when set
  // More cgroup directories to join (another hierarchy, e.g. a cgroup v1 memory cgroup).
  std::vector<std::string> extra_cgroup_dirs;
  // Join this network namespace before exec, when set: a name under /var/run/netns (as
  // `ip netns add` makes) or an absolute path such as /proc/PID/ns/net.
  std::string netns;
  std::vector<int> pass_fds;  // keep these open across exec (the test makes its fds O_CLOEXEC)
  std::string output_path;    // append stdout and stderr to this file, when set
  int cpu = -1;               // pin to this CPU before exec, when >= 0
  std::string comm;           // set the process name before exec (for hogs), when set
  int nice = 0;               // setpriority(PRIO_PROCESS) before exec, when not 0
};

// Starts a child; the returned pid is in its cgroups, its network namespace and on its CPU
// before it runs the program. A step that fails makes the child exit 126 without running it.
pid_t spawn(const Spawn& s);
// Waits (bounded) for a child; returns its exit status or -1 on timeout (then kills it).
int wait_exit(pid_t pid, std::chrono::seconds limit = std::chrono::seconds(60));
// The standard output of a shell command (popen), whatever its exit status.
std::string capture(const std::string& command);
// A busy loop process (for CPU contention), named `comm`, pinned to `cpu`, in `cgroup_dir`.
pid_t start_hog(const std::string& comm, int cpu, const std::string& cgroup_dir);
void kill_and_reap(pid_t pid);

}  // namespace stallwatch::test
