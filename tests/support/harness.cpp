#include <algorithm>
#include "support/harness.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "identity/cgroup_resolver.h"

namespace stallwatch::test {
namespace {

std::string cgroup2_root() {
  auto m = identity::find_cgroup2_mount();
  return m ? *m : std::string();
}

size_t append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

void skip(const std::string& why) {
  std::cerr << "SKIP: " << why << "\n";
  std::exit(77);
}

}  // namespace

void require_privileges() {
  if (geteuid() != 0) skip("privileged tests need root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN)");
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) skip("capget failed");
  auto has = [&](int cap) { return (data[cap / 32].effective >> (cap % 32)) & 1; };
  if (!has(21) || !has(38) || !has(39)) {
    skip("missing CAP_SYS_ADMIN, CAP_PERFMON or CAP_BPF in the effective set");
  }
  if (cgroup2_root().empty()) skip("no cgroup2 hierarchy mounted");
}

int run_privileged_tests(int argc, char** argv) {
  require_privileges();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

std::optional<std::string> http_get(const std::string& url, long* status) {
  CURL* c = curl_easy_init();
  if (!c) return std::nullopt;
  std::string body;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  CURLcode rc = curl_easy_perform(c);
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(c);
  if (status) *status = code;
  if (rc != CURLE_OK) return std::nullopt;
  return body;
}

std::vector<Sample> parse_exposition(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = line.find_first_of("{ ");
    s.name = line.substr(0, i);
    if (i != std::string::npos && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        std::string key = line.substr(i, eq - i);
        std::string value;
        size_t j = eq + 2;  // past ="
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        s.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;
    }
    std::string v = line.substr(line.find_first_not_of(' ', i));
    s.value = v == "+Inf" ? INFINITY : std::strtod(v.c_str(), nullptr);
    out.push_back(std::move(s));
  }
  return out;
}

std::optional<double> find_sample(const std::vector<Sample>& samples, const std::string& name,
                                  const std::map<std::string, std::string>& match) {
  for (const auto& s : samples) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : match) {
      auto it = s.labels.find(k);
      ok = ok && it != s.labels.end() && it->second == v;
    }
    if (ok) return s.value;
  }
  return std::nullopt;
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

Daemon::Daemon(std::vector<std::string> extra_args) {
  port_ = free_port();
  log_ = "/tmp/stallwatch-test-daemon-" + std::to_string(getpid()) + "-" + std::to_string(port_) +
         ".log";
  db_ = "/tmp/stallwatch-test-" + std::to_string(getpid()) + "-" + std::to_string(port_) + ".db";
  // The tests read /debug/snapshot, which is off by default.
  std::vector<std::string> argv = {STALLWATCH_BIN, "run", "--listen",
                                   "127.0.0.1:" + std::to_string(port_), "--web.enable-debug"};
  auto db = std::find(extra_args.begin(), extra_args.end(), "--db");
  if (db != extra_args.end() && db + 1 != extra_args.end()) {
    db_ = *(db + 1);  // the test's own database, which it removes itself
    own_db_ = false;
  } else {
    argv.insert(argv.end(), {"--db", db_});
  }
  if (std::find(extra_args.begin(), extra_args.end(), "--window") == extra_args.end()) {
    argv.insert(argv.end(), {"--window", "200ms"});
  }
  // The tests find their series by the cgroup path and the call: both are opt-in on /metrics
  // (issue #37); a test of the defaults passes its own --metrics.* flags.
  auto has = [&](const char* flag) {
    return std::find(extra_args.begin(), extra_args.end(), flag) != extra_args.end();
  };
  if (!has("--metrics.identity-labels")) {
    argv.insert(argv.end(),
                {"--metrics.identity-labels", "cgroup,container_id,pod,namespace,container"});
  }
  if (!has("--metrics.calls")) argv.insert(argv.end(), {"--metrics.calls", "call"});
  // Each test daemon holds a lock of its own: the node's (a stallwatch that runs on the host,
  // or another test's daemon) is not theirs to take.
  if (!has("--lock-file")) {
    argv.insert(argv.end(), {"--lock-file", "/tmp/stallwatch-test-" + std::to_string(getpid()) +
                                                "-" + std::to_string(port_) + ".lock"});
  }
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  pid_ = fork();
  if (pid_ == 0) {
    int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
}

Daemon::~Daemon() {
  if (pid_ > 0) stop();
  unlink(("/tmp/stallwatch-test-" + std::to_string(getpid()) + "-" + std::to_string(port_) + ".lock")
             .c_str());
  if (!own_db_) return;
  for (const char* suffix : {"", "-wal", "-shm", ".lock", ".reserve"}) unlink((db_ + suffix).c_str());
}

std::string Daemon::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

bool Daemon::wait_ready(std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    long code = 0;
    if (http_get(url("/healthz"), &code) && code == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string Daemon::metrics() const { return http_get(url("/metrics")).value_or(""); }
std::string Daemon::snapshot_json() const { return http_get(url("/debug/snapshot")).value_or(""); }

long Daemon::sequence() const {
  std::smatch m;
  std::string json = snapshot_json();
  static const std::regex re("\"sequence\":([0-9]+)");
  return std::regex_search(json, m, re) ? std::stol(m[1]) : -1;
}

bool Daemon::wait_windows(int n, std::chrono::seconds limit) {
  long start = sequence();
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (sequence() >= start + n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int Daemon::stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  // Detaching costs one RCU grace period per probe on 6.x kernels: seconds for ~100 probes.
  int status = wait_exit(pid_, std::chrono::seconds(60));
  pid_ = -1;
  return status;
}

TestCgroup::TestCgroup(const std::string& name) {
  label_ = "/" + name;
  dir_ = cgroup2_root() + label_;
  std::string path;
  std::istringstream parts(name);
  std::string part;
  path = cgroup2_root();
  while (std::getline(parts, part, '/')) {
    path += "/" + part;
    mkdir(path.c_str(), 0755);
  }
}

TestCgroup::~TestCgroup() {
  // Children first: remove the leaf, then each parent created for it (best effort).
  std::string d = dir_;
  std::string root = cgroup2_root();
  while (d.size() > root.size()) {
    if (rmdir(d.c_str()) != 0) break;
    d = d.substr(0, d.rfind('/'));
  }
}

pid_t spawn(const Spawn& s) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  std::vector<std::string> cgroups = s.extra_cgroup_dirs;
  if (!s.cgroup_dir.empty()) cgroups.insert(cgroups.begin(), s.cgroup_dir);
  for (const auto& dir : cgroups) {
    std::ofstream procs(dir + "/cgroup.procs");
    procs << getpid() << std::flush;
    if (!procs) _exit(126);
  }
  if (!s.netns.empty()) {
    std::string path = s.netns[0] == '/' ? s.netns : "/var/run/netns/" + s.netns;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(126);
    close(fd);
  }
  for (int fd : s.pass_fds) {
    int flags = fcntl(fd, F_GETFD);
    if (flags < 0 || fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) != 0) _exit(126);
  }
  if (!s.output_path.empty()) {
    int fd = open(s.output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
  }
  if (s.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(s.cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) _exit(126);
  }
  if (s.nice != 0 && setpriority(PRIO_PROCESS, 0, s.nice) != 0) _exit(126);
  for (const auto& [k, v] : s.env) setenv(k.c_str(), v.c_str(), 1);
  if (!s.comm.empty()) prctl(PR_SET_NAME, s.comm.c_str());
  if (s.argv.empty()) {
    for (;;) {
    }  // a hog: spin until killed
  }
  std::vector<char*> args;
  for (const auto& a : s.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  _exit(127);
}

int wait_exit(pid_t pid, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill_and_reap(pid);
  return -1;
}

std::string capture(const std::string& command) {
  std::string out;
  FILE* f = popen(command.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

pid_t start_hog(const std::string& comm, int cpu, const std::string& cgroup_dir) {
  Spawn s;
  s.comm = comm;
  s.cpu = cpu;
  s.cgroup_dir = cgroup_dir;
  return spawn(s);
}

void kill_and_reap(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

}  // namespace stallwatch::test
