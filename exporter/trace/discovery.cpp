#include "trace/discovery.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <system_error>

#include "common/log.h"
#include "common/strings.h"
#include "trace/library_files.h"

namespace stallwatch::trace {
namespace {

constexpr int kMaxEventRetries = 50;  // 50 x 10 ms: the loader maps text right after open
constexpr std::chrono::milliseconds kRetryDelay{10};
// How often housekeeping looks for exited processes and unused libraries (a stat per process).
constexpr std::chrono::milliseconds kSweepInterval{100};

// Failures that may pass: retried at the next scan instead of remembered for the file.
bool transient(int err) {
  switch (err) {
    case ENOENT:   // the process exited, its root went away
    case ESRCH:
    case EMFILE:   // out of file descriptors: more may be free later
    case ENFILE:
    case ENOMEM:
    case EAGAIN:
    case EBUSY:
    case EINTR:
      return true;
    default:
      return false;
  }
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

Reaper::Reaper()
    : thread_([this] {
        std::unique_lock lock(mu_);
        for (;;) {
          cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
          if (queue_.empty()) return;  // stop_ and drained
          auto batch = std::move(queue_);
          queue_.clear();
          lock.unlock();
          batch.clear();  // detaches here, off the discovery thread
          lock.lock();
        }
      }) {}

Reaper::~Reaper() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void Reaper::dispose(std::unique_ptr<LibraryProbes> probes) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(probes));
  }
  cv_.notify_one();
}

void EventQueue::push(int tgid) {
  {
    std::lock_guard lock(mu_);
    if (queued_.count(tgid)) return;
    if (queue_.size() >= capacity_) {
      dropped_++;
      return;
    }
    queue_.push_back(tgid);
    queued_.insert(tgid);
  }
  cv_.notify_one();
}

std::vector<int> EventQueue::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !queue_.empty(); });
  std::vector<int> out;
  out.swap(queue_);
  queued_.clear();
  return out;
}

Discovery::Discovery(CallPrograms programs, DiscoveryOptions options, const host::Procfs& fs)
    : programs_(programs), options_(options), fs_(fs) {}

Discovery::~Discovery() {
  std::unique_lock lock(closers_->mu);
  closers_->cv.wait_for(lock, std::chrono::seconds(5), [this] { return closers_->running == 0; });
}

void Discovery::detach_later(std::vector<FdLink> links) {
  if (links.empty()) return;
  std::shared_ptr<Closers> c = closers_;
  {
    std::lock_guard lock(c->mu);
    if (c->running >= kMaxClosers) return;  // `links` closes here, on this thread
    c->running++;
  }
  auto done = [c] {
    std::lock_guard lock(c->mu);
    c->running--;
    c->cv.notify_all();
  };
  try {
    std::thread([links = std::move(links), done]() mutable {
      links.clear();
      done();
    }).detach();
  } catch (const std::system_error&) {
    done();  // no thread: the links closed here, with the lambda that held them
  }
}

bool Discovery::failed_before(const FileKey& key, const struct stat* st) {
  auto it = failed_.find(key);
  if (it == failed_.end()) return false;
  const Failed& f = it->second;
  if (st == nullptr || f.size < 0) return true;
  const std::int64_t mtime_ns = std::int64_t{st->st_mtim.tv_sec} * 1'000'000'000 + st->st_mtim.tv_nsec;
  if (f.size == st->st_size && f.mtime_ns == mtime_ns) return true;
  failed_.erase(it);  // rewritten in place since: read it again
  return false;
}

void Discovery::remember_failure(const FileKey& key, const struct stat* st) {
  if (failed_.size() >= kMaxFailedFiles && !failed_.count(key)) {
    auto oldest = std::min_element(failed_.begin(), failed_.end(), [](const auto& a, const auto& b) {
      return a.second.order < b.second.order;
    });
    failed_.erase(oldest);
  }
  Failed f;
  if (st != nullptr) {
    f.size = st->st_size;
    f.mtime_ns = std::int64_t{st->st_mtim.tv_sec} * 1'000'000'000 + st->st_mtim.tv_nsec;
  }
  f.order = ++failures_remembered_;
  failed_[key] = f;
}

bool Discovery::scan_process(int pid) {
  auto mapped = cuda_libraries_of(fs_, pid);
  std::set<FileKey> now;
  for (const auto& lib : mapped) {
    // Hold the file open and attach through /proc/self/fd: the process may exit meanwhile
    // (its /proc/PID/root path vanishes), the file stays reachable.
    auto file = open_mapped_file(fs_, pid, lib);
    if (!file) {
      const int err = file.error().err;
      if (err != EXDEV && err != EINVAL) continue;  // exited, or the file went away
      // Not the mapped file (a planted symlink, a swap) or not a regular one: said once.
      const FileKey mapped_key{makedev(lib.dev_major, lib.dev_minor), lib.inode};
      if (!failed_before(mapped_key, nullptr)) {
        remember_failure(mapped_key, nullptr);
        SW_LOG(kWarn) << "not tracing " << escape_name(lib.path) << " (pid " << pid
                      << "): " << escape_name(file.error().message);
      }
      continue;
    }
    struct stat st {};
    if (::fstat(file->get(), &st) != 0) continue;
    FileKey key{st.st_dev, st.st_ino};
    std::string path = file->proc_path();
    auto it = libraries_.find(key);
    if (it == libraries_.end()) {
      if (failed_before(key, &st)) continue;
      // A file attached on disk that no process maps gives way to one a process maps.
      if (libraries_.size() >= options_.max_libraries && !free_on_disk_slot()) {
        if (refused_.insert(key).second) {
          refused_libraries_++;
          SW_LOG(kWarn) << "not tracing " << escape_name(lib.path) << " (pid " << pid << "): "
                        << options_.max_libraries
                        << " library files are traced already (--max-libraries); it is "
                           "traced once one of them is unused";
        }
        continue;
      }
      const auto started = std::chrono::steady_clock::now();
      auto probes = LibraryProbes::attach(programs_, path, lib.api, options_.launch_layer,
                                          options_.sites);
      const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - started);
      if (!probes) {
        // A file that cannot be traced stays so; a transient failure is retried next scan.
        const bool again = transient(probes.error().err);
        // A transient failure is logged once per file until it is traced (retries are many).
        const bool first = !again || retrying_.insert(key).second;
        const std::string why = "not tracing " + escape_name(lib.path) + " (pid " +
                                std::to_string(pid) + "): " + probes.error().message +
                                (again ? " (retried at the next scan)" : "");
        if (first) {
          SW_LOG(kWarn) << why;
        } else {
          SW_LOG(kDebug) << why;
        }
        if (!again) remember_failure(key, &st);
        continue;
      }
      refused_.erase(key);
      retrying_.erase(key);
      SW_LOG(kInfo) << "tracing " << escape_name(lib.path) << " (" << api_name(lib.api) << ", pid " << pid
                    << "): " << (*probes)->attached_symbols().size() << " symbols, "
                    << (*probes)->probe_count() << " probes in " << took.count() << " ms"
                    << "; sites: " << describe_sites((*probes)->sites());
      if (!(*probes)->missing_calls().empty()) {
        SW_LOG(kWarn) << escape_name(lib.path) << " does not export " << join((*probes)->missing_calls())
                      << "; those calls are not traced in it";
      }
      it = libraries_.emplace(key, Library{lib.path, std::move(*probes), {}}).first;
    }
    it->second.pids.insert(pid);
    now.insert(key);
    // A file whose launches are per process now (the cost budget): this process's own pair,
    // unless the budget cycles it (cycle_launches does).
    Library& traced = it->second;
    if (traced.per_process && !traced.launch_links.count(pid) && !duty_.count(pid)) {
      if (auto links = traced.probes->attach_hot(static_cast<std::uint32_t>(pid))) {
        traced.launch_links.emplace(pid, std::move(*links));
      }
    }
  }
  // Libraries this process no longer maps (dlclose).
  const bool known = processes_.count(pid) != 0;
  auto& old = processes_[pid];
  for (const auto& key : old) {
    if (!now.count(key)) {
      auto it = libraries_.find(key);
      if (it != libraries_.end()) it->second.pids.erase(pid);
    }
  }
  old = now;
  if (now.empty()) {
    processes_.erase(pid);
    if (known && on_gone_) on_gone_(pid);
  } else if (!known && on_found_) {
    on_found_(pid);
  }
  return !now.empty();
}

void Discovery::forget_process(int pid) {
  auto it = processes_.find(pid);
  if (it == processes_.end()) return;
  for (const auto& key : it->second) {
    auto lib = libraries_.find(key);
    if (lib != libraries_.end()) lib->second.pids.erase(pid);
  }
  processes_.erase(it);
  if (on_gone_) on_gone_(pid);
}

bool Discovery::free_on_disk_slot() {
  for (auto it = libraries_.begin(); it != libraries_.end(); ++it) {
    Library& lib = it->second;
    if (!lib.on_disk || !lib.pids.empty()) continue;
    SW_LOG(kInfo) << "detaching from " << escape_name(lib.path)
                  << " (attached on disk, mapped by no process): a mapped library needs its "
                     "slot (--max-libraries "
                  << options_.max_libraries << ")";
    lib.launch_links.clear();
    reaper_.dispose(std::move(lib.probes));
    libraries_.erase(it);
    return true;
  }
  return false;
}

void Discovery::attach_on_disk() {
  std::set<FileKey> seen;
  std::vector<std::string> dirs = options_.attach_on_disk ? library_dirs(options_.library_dirs)
                                                         : options_.library_dirs;
  // At most half the slots go to files no process maps yet; mapped ones may take those too.
  const size_t on_disk_room = std::max<size_t>(1, options_.max_libraries / 2);
  size_t on_disk = 0;
  for (const auto& [key, lib] : libraries_) on_disk += lib.on_disk && lib.pids.empty();
  for (LibraryFile& f : cuda_library_files(dirs)) {
    if (!f.trusted_dir) {
      // A user could put any file there (its own copy of a runtime, a thousand of them): its
      // files are traced when a process maps them, never attached ahead (issue #49).
      const std::string dir = f.path.substr(0, f.path.rfind('/'));
      if (untrusted_dirs_.size() < kMaxFailedFiles && untrusted_dirs_.insert(dir).second) {
        SW_LOG(kInfo) << "not attaching the CUDA libraries of " << escape_name(dir)
                      << " before use: users other than root can write it or a parent; they are "
                         "traced when a process maps them";
      }
      continue;
    }
    struct stat st {};
    if (::fstat(f.file.get(), &st) != 0) continue;
    const FileKey key{st.st_dev, st.st_ino};
    seen.insert(key);
    if (auto it = libraries_.find(key); it != libraries_.end()) {
      it->second.on_disk = true;
      continue;
    }
    if (failed_before(key, &st) || refused_.count(key)) continue;
    if (libraries_.size() >= options_.max_libraries || on_disk >= on_disk_room) {
      refused_.insert(key);
      refused_libraries_++;
      SW_LOG(kWarn) << "not attaching " << escape_name(f.path) << " before use: "
                    << (on_disk >= on_disk_room ? on_disk_room : options_.max_libraries)
                    << " library files are traced already"
                    << (on_disk >= on_disk_room ? " before use (half of --max-libraries)"
                                                : " (--max-libraries)")
                    << "; it is attached when a process maps it";
      continue;
    }
    const auto started = std::chrono::steady_clock::now();
    auto probes = LibraryProbes::attach(programs_, f.file.proc_path(), f.api,
                                        options_.launch_layer, options_.sites);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
    if (!probes) {
      if (!transient(probes.error().err)) remember_failure(key, &st);
      SW_LOG(kWarn) << "not tracing " << escape_name(f.path) << ": " << probes.error().message;
      continue;
    }
    SW_LOG(kInfo) << "tracing " << escape_name(f.path) << " (" << api_name(f.api)
                  << ", on disk, before any process maps it): "
                  << (*probes)->attached_symbols().size() << " symbols, "
                  << (*probes)->probe_count() << " probes in " << took.count() << " ms"
                  << "; sites: " << describe_sites((*probes)->sites());
    Library lib{f.path, std::move(*probes), {}};
    lib.on_disk = true;
    libraries_.emplace(key, std::move(lib));
    ++on_disk;
  }
  // A file replaced or removed since (a package upgrade): its probes go once unused.
  for (auto& [key, lib] : libraries_) {
    if (!seen.count(key)) lib.on_disk = false;
  }
}

size_t Discovery::scan_all() {
  if (options_.attach_on_disk || !options_.library_dirs.empty()) attach_on_disk();
  std::set<int> alive;
  for (int pid : list_pids(fs_)) {
    alive.insert(pid);
    scan_process(pid);
  }
  std::vector<int> gone;
  for (const auto& [pid, keys] : processes_) {
    if (!alive.count(pid)) gone.push_back(pid);
  }
  for (int pid : gone) forget_process(pid);
  last_full_scan_ = std::chrono::steady_clock::now();
  housekeep(last_full_scan_);
  return processes_.size();
}

bool Discovery::take_scan(int tgid, std::chrono::steady_clock::time_point now,
                          std::chrono::steady_clock::time_point* next) {
  auto [it, fresh] = scan_budget_.try_emplace(tgid, ScanBudget{kScanBurst, now});
  ScanBudget& b = it->second;
  if (!fresh && now > b.at) {
    b.tokens = std::min(kScanBurst, b.tokens + std::chrono::duration<double>(now - b.at) /
                                                   std::chrono::duration<double>(kScanRefill));
  }
  b.at = now;
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return true;
  }
  *next = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    (1 - b.tokens) * std::chrono::duration<double>(kScanRefill));
  return false;
}

void Discovery::handle_event(int tgid) {
  SW_LOG(kDebug) << "library mapping by pid " << tgid;
  // A process mapping libraries in a loop (dlopen/dlclose) sends an event per mapping: past a
  // burst its events fold into one scan per kScanRefill (issue #49: ~68 % of a CPU before).
  std::chrono::steady_clock::time_point next{};
  if (!take_scan(tgid, std::chrono::steady_clock::now(), &next)) {
    ++scans_deferred_;
    auto& p = pending_[tgid];
    if (p.next == std::chrono::steady_clock::time_point{} || p.next < next) p.next = next;
    p.attempts = kMaxEventRetries;  // one scan then; a process still loading sends more events
    return;
  }
  if (scan_process(tgid)) {
    pending_.erase(tgid);
  } else {
    pending_[tgid] = Pending{std::chrono::steady_clock::now() + kRetryDelay, 1};
  }
  publish_counts();
}

std::chrono::milliseconds Discovery::next_wait() const {
  std::chrono::milliseconds wait = pending_.empty() ? kSweepInterval : kRetryDelay;
  if (duty_.empty()) return wait;
  // Wake for the next edge of a cycled process's duty.
  const auto period = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.duty_period);
  const auto pos = (std::chrono::steady_clock::now() - epoch_) % period;
  for (const auto& [pid, duty] : duty_) {
    const auto edge = std::chrono::nanoseconds(static_cast<std::int64_t>(duty * period.count()));
    const auto next = pos < edge ? edge - pos : period - pos;
    wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(next));
  }
  return std::max(wait, std::chrono::milliseconds(1));
}

void Discovery::set_launch_duty(std::map<int, double> duty) {
  std::erase_if(duty, [](const auto& e) { return !(e.second > 0 && e.second < 1); });
  std::lock_guard lock(duty_mu_);
  duty_request_ = std::move(duty);
  duty_requested_ = true;
}

std::map<int, std::uint64_t> Discovery::launch_off_ns() const {
  const auto now = std::chrono::steady_clock::now();
  std::map<int, std::uint64_t> out;
  std::lock_guard lock(off_mu_);
  for (const auto& [pid, off] : off_) {
    std::uint64_t ns = off.total_ns;
    if (off.since != std::chrono::steady_clock::time_point{}) {
      ns += static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - off.since).count());
    }
    out.emplace(pid, ns);
  }
  return out;
}

bool Discovery::duty_on(double duty, std::chrono::steady_clock::time_point now) const {
  const auto period = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.duty_period);
  const auto pos = (now - epoch_) % period;
  return static_cast<double>(pos.count()) < duty * static_cast<double>(period.count());
}

void Discovery::to_per_process(Library& lib) {
  // Every other process's own pair first, then the every-process pair goes: a launch seen by
  // both meanwhile is counted once (bpf/calls.bpf.h), none is missed.
  for (int pid : lib.pids) {
    if (duty_.count(pid)) continue;
    auto links = lib.probes->attach_hot(static_cast<std::uint32_t>(pid));
    if (!links) {
      SW_LOG(kWarn) << "cost budget: not cycling the launches of " << escape_name(lib.path)
                    << ": pid " << pid << "'s own probes: " << links.error().message;
      lib.launch_links.clear();
      return;
    }
    lib.launch_links.emplace(pid, std::move(*links));
  }
  detach_later(lib.probes->take_hot_for_all());
  lib.per_process = true;
  SW_LOG(kInfo) << "cost budget: the launch probes of " << escape_name(lib.path)
                << " are per process now (" << lib.pids.size() << " processes map it)";
}

void Discovery::to_every_process(Library& lib) {
  auto all = lib.probes->attach_hot(0);
  if (!all) {
    SW_LOG(kWarn) << "cost budget: the launch probes of " << escape_name(lib.path)
                  << " stay per process: " << all.error().message;
    return;
  }
  lib.probes->set_hot_for_all(std::move(*all));
  for (auto& [pid, links] : lib.launch_links) detach_later(std::move(links));
  lib.launch_links.clear();
  lib.per_process = false;
  SW_LOG(kInfo) << "cost budget: the launch probes of " << escape_name(lib.path)
                << " are on every process again";
}

void Discovery::cycle_launches(std::chrono::steady_clock::time_point now) {
  {
    std::lock_guard lock(duty_mu_);
    if (duty_requested_) {
      duty_ = std::move(duty_request_);
      duty_request_.clear();
      duty_requested_ = false;
    }
  }
  std::erase_if(duty_, [&](const auto& e) { return !processes_.count(e.first); });
  std::set<int> cycled;
  for (auto& [key, lib] : libraries_) {
    bool wanted = false;
    if (lib.probes->cyclable()) {
      for (int pid : lib.pids) wanted = wanted || duty_.count(pid) != 0;
    }
    if (wanted && !lib.per_process) to_per_process(lib);
    if (!wanted && lib.per_process) to_every_process(lib);
    if (!lib.per_process) continue;
    std::erase_if(lib.launch_links, [&](const auto& e) { return !lib.pids.count(e.first); });
    for (int pid : lib.pids) {
      auto duty = duty_.find(pid);
      const bool on = duty == duty_.end() || duty_on(duty->second, now);
      auto link = lib.launch_links.find(pid);
      const auto started = std::chrono::steady_clock::now();
      auto took_us = [&] {
        return std::chrono::duration_cast<std::chrono::microseconds>(
                   std::chrono::steady_clock::now() - started)
            .count();
      };
      if (on && link == lib.launch_links.end()) {
        auto links = lib.probes->attach_hot(static_cast<std::uint32_t>(pid));
        if (links) lib.launch_links.emplace(pid, std::move(*links));
        SW_LOG(kDebug) << "cost budget: pid " << pid << "'s launch probes "
                       << (links ? "attached" : "not attached: " + links.error().message)
                       << " in " << took_us() << " us";
      } else if (!on && link != lib.launch_links.end()) {
        detach_later(std::move(link->second));  // its breakpoints leave that process
        lib.launch_links.erase(link);
        SW_LOG(kDebug) << "cost budget: pid " << pid << "'s launch probes detaching ("
                       << took_us() << " us here)";
      }
      if (duty != duty_.end()) cycled.insert(pid);
    }
  }
  // Off time per cycled process: from the decision to detach to the end of the attach.
  const auto after = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(off_mu_);
    std::erase_if(off_, [&](const auto& e) { return !processes_.count(e.first); });
    for (auto& [pid, off] : off_) {
      const bool off_now = cycled.count(pid) && !duty_on(duty_.at(pid), now);
      if (!off_now && off.since != std::chrono::steady_clock::time_point{}) {
        off.total_ns += static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(after - off.since).count());
        off.since = {};
      }
    }
    for (int pid : cycled) {
      OffTime& off = off_[pid];
      if (!duty_on(duty_.at(pid), now) && off.since == std::chrono::steady_clock::time_point{}) {
        off.since = now;
      }
    }
  }
  cycled_processes_ = cycled.size();
  uncyclable_processes_ = duty_.size() - cycled.size();
}


void Discovery::tick() {
  auto now = std::chrono::steady_clock::now();
  cycle_launches(now);
  if (now - last_full_scan_ >= options_.rescan_interval) {
    scan_all();  // ends with housekeep()
    return;
  }
  housekeep(now);
}

void Discovery::housekeep(std::chrono::steady_clock::time_point now) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.next > now) {
      ++it;
    } else if (scan_process(it->first) || ++it->second.attempts > kMaxEventRetries) {
      it = pending_.erase(it);
    } else {
      it->second.next = now + kRetryDelay;
      ++it;
    }
  }
  if (now - last_sweep_ < kSweepInterval) return;
  last_sweep_ = now;
  std::vector<int> gone;
  for (const auto& [pid, keys] : processes_) {
    if (!fs_.pid_exists(pid)) gone.push_back(pid);
  }
  for (int pid : gone) forget_process(pid);
  // Scan budgets of processes that have been quiet long enough to have a full one again.
  for (auto it = scan_budget_.begin(); it != scan_budget_.end();) {
    const bool full = now - it->second.at >= kScanRefill * static_cast<int>(kScanBurst);
    it = full ? scan_budget_.erase(it) : std::next(it);
  }
  for (auto it = libraries_.begin(); it != libraries_.end();) {
    Library& lib = it->second;
    if (!lib.pids.empty()) {
      lib.unused_since = {};
    } else if (lib.unused_since == std::chrono::steady_clock::time_point{}) {
      lib.unused_since = now;
    }
    if (lib.pids.empty() && !lib.on_disk && now - lib.unused_since >= options_.detach_linger) {
      SW_LOG(kInfo) << "detaching from " << escape_name(lib.path) << ": no process has mapped it for "
                    << std::chrono::duration_cast<std::chrono::seconds>(options_.detach_linger).count()
                    << "s";
      lib.launch_links.clear();
      reaper_.dispose(std::move(lib.probes));
      it = libraries_.erase(it);
    } else {
      ++it;
    }
  }
  publish_counts();
}

std::vector<bool> Discovery::stepped_calls() const {
  std::lock_guard<std::mutex> lock(stepped_mu_);
  return stepped_calls_;
}

void Discovery::publish_counts() {
  size_t probes = 0;
  size_t emulated = 0;
  std::vector<bool> stepped(all_calls().size(), false);
  for (const auto& [key, lib] : libraries_) {
    probes += lib.probes->probe_count();
    emulated += lib.probes->probes_of(SiteClass::kEmulated);
    for (const SymbolSite& s : lib.probes->sites()) {
      if (s.site.cls == SiteClass::kStepped && s.call_id < stepped.size()) stepped[s.call_id] = true;
    }
  }
  emulated_probes_ = emulated;
  {
    std::lock_guard<std::mutex> lock(stepped_mu_);
    stepped_calls_ = std::move(stepped);
  }
  traced_processes_ = processes_.size();
  attached_libraries_ = libraries_.size();
  attached_probes_ = probes;
}

}  // namespace stallwatch::trace
