// Finds every copy of the CUDA libraries that processes map and keeps probes on each file
// while at least one process maps it. Sources: a full /proc scan at start and every
// rescan_interval, and library-mapping records from the kernel (discovery.bpf.c) that name
// the process to scan at once. A library mapped while the daemon runs is attached before the
// mmap(2) that maps its code has returned to the loader in most cases, and within one retry
// (10 ms) otherwise.
// Thread-safety: handle_event/tick/scan_all from one thread; the counters from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "trace/attach.h"
#include "trace/proc_maps.h"

struct bpf_program;

namespace stallwatch::trace {

struct DiscoveryOptions {
  std::chrono::milliseconds rescan_interval{std::chrono::seconds(30)};
  // Probes stay on a library this long after the last process unmapped it, so short-lived
  // processes and restarts do not churn attach/detach.
  std::chrono::milliseconds detach_linger{std::chrono::seconds(30)};
};

// Destroys probe sets on its own thread: detaching a uprobe waits for an RCU grace period
// (tens of milliseconds each on some kernels), which must not stall discovery. Joins on
// destruction after draining.
class Reaper {
 public:
  Reaper();
  ~Reaper();
  void dispose(std::unique_ptr<LibraryProbes> probes);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<LibraryProbes>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

class Discovery {
 public:
  // `fs` (the host's procfs) must outlive the discovery.
  Discovery(CallPrograms programs, DiscoveryOptions options, const host::Procfs& fs);

  // Scans every process; returns the number of processes mapping a traced library.
  size_t scan_all();
  // A process mapped a file named like a CUDA library: scan it now and retry briefly.
  void handle_event(int tgid);
  // Retries pending scans, drops exited processes and unused libraries, rescans when due.
  void tick();

  size_t traced_processes() const { return traced_processes_.load(); }
  size_t attached_libraries() const { return attached_libraries_.load(); }
  size_t attached_probes() const { return attached_probes_.load(); }

 private:
  // tick() without the rescan: scan_all() ends with it (no recursion, however long a scan
  // takes or however short --rescan-interval is).
  void housekeep(std::chrono::steady_clock::time_point now);
  struct FileKey {
    dev_t dev;
    ino_t ino;
    auto operator<=>(const FileKey&) const = default;
  };
  struct Library {
    std::string path;  // first path seen, for logs
    std::unique_ptr<LibraryProbes> probes;
    std::set<int> pids;
    std::chrono::steady_clock::time_point unused_since{};  // set while pids is empty
  };
  struct Pending {
    std::chrono::steady_clock::time_point next;
    int attempts = 0;
  };

  // Scans one process; true if it maps at least one traced library.
  bool scan_process(int pid);
  void forget_process(int pid);
  void publish_counts();

  CallPrograms programs_;
  DiscoveryOptions options_;
  const host::Procfs& fs_;
  std::map<FileKey, Library> libraries_;
  std::map<FileKey, std::string> failed_;  // attach failed; not retried for the same file
  std::map<int, std::set<FileKey>> processes_;
  std::map<int, Pending> pending_;
  std::chrono::steady_clock::time_point last_full_scan_{};
  Reaper reaper_;  // probes still attached at shutdown are destroyed after it, on the caller
  std::atomic<size_t> traced_processes_{0}, attached_libraries_{0}, attached_probes_{0};
};

}  // namespace stallwatch::trace
