#include "support/host_env.h"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "identity/cgroup_resolver.h"
#include "support/process.h"

namespace stallwatch::test {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text << std::flush;
  return static_cast<bool>(out);
}

// The number after `key` on the line it starts (memory.events, oom_control, /proc/meminfo).
std::uint64_t keyed_value(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string k;
    std::uint64_t v = 0;
    if (fields >> k >> v && k == key) return v;
  }
  return 0;
}

std::string cgroup2_root() { return identity::find_cgroup2_mount().value_or(""); }

// The mount point of the cgroup v1 hierarchy that has `controller`; empty if none.
std::string v1_mount(const std::string& controller) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // ... mount-point ... - fstype source super-options
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype, source, options;
    tail >> fstype >> source >> options;
    if (fstype != "cgroup" ||
        ("," + options + ",").find("," + controller + ",") == std::string::npos) {
      continue;
    }
    std::istringstream head(line.substr(0, dash));
    std::string field, mount_point;
    for (int i = 0; i < 5 && head >> field; ++i) mount_point = field;
    return mount_point;
  }
  return "";
}

// This process's cgroup in the v1 hierarchy of `controller` ("/" when at the root).
std::string own_v1_cgroup(const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    if (controllers.find("," + controller + ",") != std::string::npos) return line.substr(b + 1);
  }
  return "/";
}

// Unified: enables `controller` from the root down to the parent of the leaf `name`.
void enable_v2_controller(const std::string& root, const std::string& name,
                          const std::string& controller) {
  std::string d = root;
  write_file(d + "/cgroup.subtree_control", "+" + controller);
  std::istringstream parts(
      name.substr(0, name.rfind('/') == std::string::npos ? 0 : name.rfind('/')));
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    d += "/" + part;
    write_file(d + "/cgroup.subtree_control", "+" + controller);
  }
}

// v1: the directories of `name` below the test's own cgroup of `controller` (mounted at
// `mount`); those it made are appended to `created`, leaf last. Returns the leaf.
std::string make_v1_dirs(const std::string& mount, const std::string& controller,
                         const std::string& name, std::vector<std::string>& created) {
  std::string d = mount + own_v1_cgroup(controller);
  if (d.back() == '/') d.pop_back();
  std::istringstream parts(name);
  std::string part;
  while (std::getline(parts, part, '/')) {
    d += "/" + part;
    if (mkdir(d.c_str(), 0755) == 0) created.push_back(d);
  }
  return d;
}

void remove_v1_dirs(const std::vector<std::string>& created) {
  for (auto it = created.rbegin(); it != created.rend(); ++it) {
    // An emptied cgroup can take a moment to let go (its last task still exiting).
    poll_until([&] { return rmdir(it->c_str()) == 0 || errno == ENOENT; }, std::chrono::seconds(5),
               std::chrono::milliseconds(20));
  }
}

}  // namespace

std::string block_backed_dir() {
  std::vector<std::string> candidates = {TEST_SCRATCH_DIR, "/var/tmp", "/tmp"};
  for (const auto& dir : candidates) {
    struct statfs fs {};
    if (statfs(dir.c_str(), &fs) != 0 || access(dir.c_str(), W_OK) != 0) continue;
    if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) continue;
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0 || major(st.st_dev) == 0) continue;  // no block device
    return dir;
  }
  return "";
}

std::string block_device_of(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || major(st.st_dev) == 0) return "";
  std::string sys =
      "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  char resolved[PATH_MAX];
  if (!realpath(sys.c_str(), resolved)) return "";
  std::string dir = resolved;
  // A partition's directory sits inside its disk's: requests are the disk's.
  if (access((dir + "/partition").c_str(), F_OK) == 0) dir = dir.substr(0, dir.rfind('/'));
  std::istringstream uevent(read_file(dir + "/uevent"));
  std::string line;
  while (std::getline(uevent, line)) {
    if (line.rfind("DEVNAME=", 0) == 0) return line.substr(8);
  }
  return dir.substr(dir.rfind('/') + 1);
}

MemoryCgroup::MemoryCgroup(const std::string& name, std::uint64_t limit_bytes) : v2_(name) {
  std::string root = cgroup2_root();
  std::string limit = std::to_string(limit_bytes);
  if (read_file(root + "/cgroup.controllers").find("memory") != std::string::npos) {
    // Unified: enable the controller down to the leaf's parent, then limit the leaf.
    enable_v2_controller(root, name, "memory");
    memory_dir_ = dir();
    if (!write_file(memory_dir_ + "/memory.max", limit)) error_ = "cannot write memory.max";
    write_file(memory_dir_ + "/memory.swap.max", "0");  // absent without swap accounting
    return;
  }
  std::string mount = v1_mount("memory");
  if (mount.empty()) {
    error_ = "no memory controller: neither cgroup v2 (cgroup.controllers) nor a v1 hierarchy";
    return;
  }
  v1_ = true;
  const std::string d = make_v1_dirs(mount, "memory", name, created_);
  memory_dir_ = d;
  if (!write_file(d + "/memory.limit_in_bytes", limit)) {
    error_ = "cannot write " + d + "/memory.limit_in_bytes";
    return;
  }
  // Swap would turn an OOM kill into swapping: cap memory+swap at the same limit. Only with
  // swap: the memsw counter then fails first, and it keeps no failcnt on recent kernels.
  if (keyed_value(read_file("/proc/meminfo"), "SwapTotal:") > 0 &&
      access((d + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0) {
    write_file(d + "/memory.memsw.limit_in_bytes", limit);
  }
}

MemoryCgroup::~MemoryCgroup() { remove_v1_dirs(created_); }

void MemoryCgroup::place(Spawn& s) const {
  s.cgroup_dir = dir();
  if (v1_) s.extra_cgroup_dirs.push_back(memory_dir_);
}

std::uint64_t MemoryCgroup::oom_kills() const {
  return v1_ ? keyed_value(read_file(memory_dir_ + "/memory.oom_control"), "oom_kill")
             : keyed_value(read_file(memory_dir_ + "/memory.events"), "oom_kill");
}

std::uint64_t MemoryCgroup::limit_hits() const {
  if (!v1_) return keyed_value(read_file(memory_dir_ + "/memory.events"), "max");
  // With memory+swap capped at the same limit, the memsw counter is the one that fails.
  return std::strtoull(read_file(memory_dir_ + "/memory.failcnt").c_str(), nullptr, 10) +
         std::strtoull(read_file(memory_dir_ + "/memory.memsw.failcnt").c_str(), nullptr, 10);
}

NetnsPair::NetnsPair(const std::string& prefix, int subnet, int drop_percent)
    : ns_a_(prefix + "a"), ns_b_(prefix + "b") {
  std::string net = "10.253." + std::to_string(subnet & 0xff) + ".";
  addr_a_ = net + "1";
  addr_b_ = net + "2";
  const std::string net6 = "fd53:253:" + std::to_string(subnet & 0xff) + "::";
  addr6_a_ = net6 + "1";
  addr6_b_ = net6 + "2";
  // Leftovers of a crashed run with the same name go first (errors ignored).
  run_command({"ip", "netns", "del", ns_a_});
  run_command({"ip", "netns", "del", ns_b_});
  if (!(created_a_ = ip({"netns", "add", ns_a_}))) return;
  if (!(created_b_ = ip({"netns", "add", ns_b_}))) return;
  const std::string& va = ns_a_;  // the veth ends are named like their namespaces
  const std::string& vb = ns_b_;
  bool ok = ip({"link", "add", va, "type", "veth", "peer", "name", vb}) &&
            ip({"link", "set", va, "netns", ns_a_}) && ip({"link", "set", vb, "netns", ns_b_}) &&
            ip({"-n", ns_a_, "addr", "add", addr_a_ + "/30", "dev", va}) &&
            ip({"-n", ns_b_, "addr", "add", addr_b_ + "/30", "dev", vb}) &&
            // nodad: usable at once, no duplicate-address detection wait
            ip({"-n", ns_a_, "addr", "add", addr6_a_ + "/64", "dev", va, "nodad"}) &&
            ip({"-n", ns_b_, "addr", "add", addr6_b_ + "/64", "dev", vb, "nodad"}) &&
            ip({"-n", ns_a_, "link", "set", "lo", "up"}) &&
            ip({"-n", ns_b_, "link", "set", "lo", "up"}) &&
            ip({"-n", ns_a_, "link", "set", va, "up"}) &&
            ip({"-n", ns_b_, "link", "set", vb, "up"});
  if (!ok) return;
  // Bounded wait for both ends to report carrier.
  bool up = poll_until(
      [&] {
        std::string a, b;
        run_command({"ip", "-n", ns_a_, "-o", "link", "show", "dev", va}, &a);
        run_command({"ip", "-n", ns_b_, "-o", "link", "show", "dev", vb}, &b);
        return a.find("LOWER_UP") != std::string::npos && b.find("LOWER_UP") != std::string::npos;
      },
      std::chrono::seconds(5), std::chrono::milliseconds(50));
  if (!up) {
    error_ = "veth " + va + "/" + vb + " did not come up within 5 s";
    return;
  }
  set_drop_percent(drop_percent);
}

NetnsPair::~NetnsPair() {
  // Deleting a namespace deletes its veth end, which deletes the pair, and its nftables tables.
  if (created_a_) run_command({"ip", "netns", "del", ns_a_});
  if (created_b_) run_command({"ip", "netns", "del", ns_b_});
}

bool NetnsPair::ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  int rc = run_command(argv, &out);
  if (rc != 0 && error_.empty()) {
    std::string cmd;
    for (const auto& a : argv) cmd += a + " ";
    error_ = cmd + "exited " + std::to_string(rc) + ": " + out;
  }
  return rc == 0;
}

bool NetnsPair::set_drop_percent(int percent) {
  // "table ...; delete table ..." first makes the delete succeed whether or not it exists.
  std::string rules =
      "table inet stallwatch_test\n"
      "delete table inet stallwatch_test\n"
      "table inet stallwatch_test {\n"
      "  chain input {\n"
      "    type filter hook input priority 0; policy accept;\n"
      "    meta l4proto tcp numgen random mod 100 < " +
      std::to_string(percent) +
      " counter drop\n"
      "  }\n"
      "}\n";
  std::string path = "/tmp/stallwatch-nft-" + std::to_string(getpid()) + "-" + ns_b_ + ".nft";
  if (!write_file(path, rules)) {
    error_ = "cannot write " + path;
    return false;
  }
  std::string out;
  int rc = run_command({"ip", "netns", "exec", ns_b_, "nft", "-f", path}, &out);
  unlink(path.c_str());
  if (rc != 0) {
    error_ = "nft -f in " + ns_b_ + " exited " + std::to_string(rc) + " (is nftables installed? " +
             "scripts/install-deps.sh): " + out;
    return false;
  }
  return true;
}

std::uint64_t NetnsPair::dropped_packets() const {
  std::string out;
  run_command({"ip", "netns", "exec", ns_b_, "nft", "list", "table", "inet", "stallwatch_test"},
              &out);
  std::smatch m;
  static const std::regex re("counter packets ([0-9]+)");
  return std::regex_search(out, m, re) ? std::stoull(m[1]) : 0;
}

}  // namespace stallwatch::test

namespace stallwatch::test {

CpuLimitCgroup::CpuLimitCgroup(const std::string& name, std::uint64_t quota_us,
                               std::uint64_t period_us)
    : v2_(name) {
  const std::string root = cgroup2_root();
  if (read_file(root + "/cgroup.controllers").find("cpu") != std::string::npos &&
      v1_mount("cpu").empty()) {
    enable_v2_controller(root, name, "cpu");
    cpu_dir_ = dir();
    if (!write_file(cpu_dir_ + "/cpu.max",
                    std::to_string(quota_us) + " " + std::to_string(period_us))) {
      error_ = "cannot write " + cpu_dir_ + "/cpu.max";
    }
    return;
  }
  const std::string mount = v1_mount("cpu");
  if (mount.empty()) {
    error_ = "no cpu controller: neither cgroup v2 (cgroup.controllers) nor a v1 hierarchy";
    return;
  }
  v1_ = true;
  const std::string d = make_v1_dirs(mount, "cpu", name, created_);
  cpu_dir_ = d;
  if (!write_file(d + "/cpu.cfs_period_us", std::to_string(period_us)) ||
      !write_file(d + "/cpu.cfs_quota_us", std::to_string(quota_us))) {
    error_ = "cannot write " + d + "/cpu.cfs_quota_us";
  }
}

CpuLimitCgroup::~CpuLimitCgroup() { remove_v1_dirs(created_); }

void CpuLimitCgroup::place(Spawn& s) const {
  s.cgroup_dir = dir();
  if (v1_) s.extra_cgroup_dirs.push_back(cpu_dir_);
}

std::uint64_t CpuLimitCgroup::throttled_periods() const {
  return keyed_value(read_file(cpu_dir_ + "/cpu.stat"), "nr_throttled");
}

namespace {

// Per CPU: total, steal and irq + softirq ticks of /proc/stat.
std::map<int, std::array<std::uint64_t, 3>> cpu_ticks() {
  std::map<int, std::array<std::uint64_t, 3>> out;
  std::istringstream in(read_file("/proc/stat"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || !isdigit(line[3])) continue;
    std::istringstream f(line.substr(3));
    int cpu = 0;
    std::uint64_t v[10] = {};
    f >> cpu;
    for (auto& x : v) f >> x;
    std::uint64_t total = 0;
    for (int i = 0; i < 8; i++) total += v[i];  // guest time is inside user and nice
    out[cpu] = {total, v[7], v[5] + v[6]};
  }
  return out;
}

}  // namespace

CpuWeather::CpuWeather(std::chrono::milliseconds every) : every_(every) {
  thread_ = std::thread([this] {
    auto before = cpu_ticks();
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, every_, [this] { return stop_; })) {
      auto now = cpu_ticks();
      for (const auto& [cpu, t] : now) {
        auto b = before.find(cpu);
        if (b == before.end() || t[0] <= b->second[0]) continue;
        const double total = static_cast<double>(t[0] - b->second[0]);
        Seen& s = seen_[cpu];
        s.max_steal = std::max(s.max_steal, static_cast<double>(t[1] - b->second[1]) / total);
        s.max_irq = std::max(s.max_irq, static_cast<double>(t[2] - b->second[2]) / total);
        s.max_stolen = std::max(
            s.max_stolen, static_cast<double>(t[1] - b->second[1] + t[2] - b->second[2]) / total);
        s.steal_ticks += t[1] - b->second[1];
        s.irq_ticks += t[2] - b->second[2];
        s.ticks += t[0] - b->second[0];
      }
      before = std::move(now);
    }
  });
}

CpuWeather::~CpuWeather() { stop(); }

void CpuWeather::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CpuWeather::Seen CpuWeather::on(int cpu) const {
  std::lock_guard lock(mu_);
  auto it = seen_.find(cpu);
  return it == seen_.end() ? Seen{} : it->second;
}

}  // namespace stallwatch::test
