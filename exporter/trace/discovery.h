// Finds every copy of the CUDA libraries that processes map and keeps probes on each file
// while at least one process maps it. Sources: a full /proc scan at start and every
// rescan_interval, and library-mapping records from the kernel (discovery.bpf.c) that name
// the process to scan at once. A library mapped while the daemon runs is attached before the
// mmap(2) that maps its code has returned to the loader in most cases, and within one retry
// (10 ms) otherwise.
// Files are the host's and may be hostile: opened non-blocking, regular files only, read with
// bounded preads (elf_symbols.h); the daemon runs discovery on its own thread, fed by an
// EventQueue, so a file that never answers (a stalled FUSE mount) cannot stop the ring buffers.
// At most max_libraries files get probes; the rest are refused, logged once each and counted.
// Transient failures (EMFILE, ENOMEM, a process that exited mid-scan) are retried at the next
// scan; a file that cannot be traced (no symbols, not ELF, a hostile header) is remembered by
// (device, inode, size, mtime) and not read again until it changes (at most kMaxFailedFiles
// remembered, the oldest forgotten first), so a hostile file costs one parse and one log line,
// not one per scan. A process's file is opened through open_mapped_file (proc_maps.h): never
// through the process's symlinks, and only when it is the file the maps line names.
// The cost budget (--cost-budget; the daemon's window decides, set_launch_duty) duty-cycles the
// kernel launches' probes of chosen processes: on each file they map, the launch probes move
// from the every-process links to one link pair per process (the kernel's pid filter), and a
// cycled process's pair is attached for `duty` of each duty_period and detached for the rest,
// so its launches trap only then. Every other call stays probed. A file goes back to its
// every-process links once none of its processes is cycled. While a file's launches are per
// process, a process that maps it is probed from its scan on (tens of ms after the mmap).
// Thread-safety: handle_event/tick/scan_all from one thread; the counters, set_launch_duty and
// launch_off_ns from any thread.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
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
  size_t max_libraries = 128;  // --max-libraries: library files with probes at once
  // --library-dirs: probes on the CUDA library files of these directories at start and at
  // each full scan, before any process maps them, so a process that calls right after dlopen
  // loses no call. --attach-on-disk adds the standard directories (library_files.h). Files
  // elsewhere are attached when first mapped, tens of milliseconds after.
  std::vector<std::string> library_dirs;
  bool attach_on_disk = false;
  LaunchLayer launch_layer = LaunchLayer::kDriver;  // --launch-layer: whose launches get probes
  SitePolicy sites;  // what this kernel emulates (probe_cost.h); --probe-sites
  // One cycle of the cost budget's duty: a cycled process's launch probes are attached for the
  // first duty × duty_period of each. The daemon's window (1 to 10 s): each window then holds
  // about one period's on-phase, and the on-phase is long next to an attach (~7 ms here).
  std::chrono::milliseconds duty_period{std::chrono::seconds(1)};
};

// Library-mapping events from the ring-buffer thread to the discovery thread. push() only
// takes a short lock; past `capacity` distinct pending processes an event is dropped and
// counted (the next full scan finds the process). Thread-safety: any thread.
class EventQueue {
 public:
  explicit EventQueue(size_t capacity = 4096) : capacity_(capacity) {}
  void push(int tgid);
  // The queued processes (each once, in arrival order), waiting up to `timeout` for one.
  std::vector<int> wait(std::chrono::milliseconds timeout);
  std::uint64_t dropped() const { return dropped_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> queue_;
  std::set<int> queued_;
  size_t capacity_;
  std::atomic<std::uint64_t> dropped_{0};
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
  ~Discovery();  // waits (bounded) for the launch links being detached
  Discovery(const Discovery&) = delete;
  Discovery& operator=(const Discovery&) = delete;

  // Scans every process; returns the number of processes mapping a traced library.
  size_t scan_all();
  // A process mapped a file named like a CUDA library: scan it now and retry briefly.
  void handle_event(int tgid);
  // Retries pending scans, drops exited processes and unused libraries (at most every 100 ms),
  // rescans when due.
  void tick();
  // How long the caller may wait for events before the next tick: 10 ms while scans are
  // pending retry, else 100 ms.
  std::chrono::milliseconds next_wait() const;

  // Called on the discovery thread when a process first maps a traced library, and when it
  // exited or unmapped them all (the Python registry follows CUDA processes this way).
  void on_processes(std::function<void(int)> found, std::function<void(int)> gone) {
    on_found_ = std::move(found);
    on_gone_ = std::move(gone);
  }

  size_t traced_processes() const { return traced_processes_.load(); }
  size_t attached_libraries() const { return attached_libraries_.load(); }
  size_t attached_probes() const { return attached_probes_.load(); }
  // Of attached_probes(), those whose site the kernel emulates (the rest are single-stepped).
  size_t emulated_probes() const { return emulated_probes_.load(); }
  // By call id (trace/calls.h): whether some attached file probes that call on a site the
  // kernel single-steps (the probe cost estimate prices its calls so). Any thread.
  std::vector<bool> stepped_calls() const;
  // Library files refused because max_libraries were traced (each file counted once).
  std::uint64_t refused_libraries() const { return refused_libraries_.load(); }

  // The share of each period the launch probes of these processes stay attached, (0, 1];
  // processes not named (or at 1) are not cycled. Applied at the next tick. Any thread.
  void set_launch_duty(std::map<int, double> duty);
  // Per process ever cycled (and alive): nanoseconds its launch probes were detached by the
  // budget, cumulative, the current off phase included. Any thread.
  std::map<int, std::uint64_t> launch_off_ns() const;
  // Processes whose launch probes are cycled now, and those the budget named that map only
  // files whose launches cannot be cycled (no multi-uprobe links). Any thread.
  size_t cycled_processes() const { return cycled_processes_.load(); }
  size_t uncyclable_processes() const { return uncyclable_processes_.load(); }

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
    // While some process of it is cycled: each process's own launch link pair (attached now),
    // the every-process pair taken from probes.
    bool per_process = false;
    std::map<int, std::vector<FdLink>> launch_links{};
    std::chrono::steady_clock::time_point unused_since{};  // set while pids is empty
    bool on_disk = false;  // found in a library directory at the latest full scan: kept
  };
  struct Pending {
    std::chrono::steady_clock::time_point next;
    int attempts = 0;
  };

  // Scans one process; true if it maps at least one traced library.
  bool scan_process(int pid);
  // Attaches the library files of the library directories not traced yet (full scans only).
  void attach_on_disk();
  // Detaches one library attached on disk that no process maps; false when there is none.
  bool free_on_disk_slot();
  void forget_process(int pid);
  void publish_counts();
  // The budget's duty on every file: per-process launch links where a process is cycled, each
  // cycled process's pair on or off by the phase of `now`.
  void cycle_launches(std::chrono::steady_clock::time_point now);
  void to_per_process(Library& lib);
  void to_every_process(Library& lib);
  // Closes launch links on a thread of their own: a multi-uprobe link's close removes its
  // breakpoints at once, then waits for a grace period (~75 ms on 6.18), so a second's detaches
  // of several processes overlap instead of queueing on the discovery thread.
  void detach_later(std::vector<FdLink> links);
  // Whether a cycled process's launch probes are on at `now`.
  bool duty_on(double duty, std::chrono::steady_clock::time_point now) const;

  CallPrograms programs_;
  DiscoveryOptions options_;
  const host::Procfs& fs_;
  std::map<FileKey, Library> libraries_;
  // A file that could not be traced, as it was then (size and mtime in ns; -1: any).
  struct Failed {
    std::int64_t size = -1;
    std::int64_t mtime_ns = -1;
    std::uint64_t order = 0;  // when it was remembered: the oldest is forgotten first
  };
  static constexpr size_t kMaxFailedFiles = 4096;
  // Whether `key` failed before and has not changed since (a changed file is forgotten).
  bool failed_before(const FileKey& key, const struct stat* st);
  void remember_failure(const FileKey& key, const struct stat* st);

  std::map<FileKey, Failed> failed_;  // attach failed; not retried for the same file
  std::set<FileKey> refused_;              // over max_libraries (logged and counted once)
  std::set<std::string> untrusted_dirs_;   // library directories users can write (logged once)
  std::set<FileKey> retrying_;             // transient failure logged, retried until traced
  std::map<int, std::set<FileKey>> processes_;
  std::map<int, Pending> pending_;
  // Scans one process may cost: kScanBurst at once, then one per kScanRefill (its events in
  // between fold into the next scan). Budgets of quiet processes are dropped at the sweep.
  static constexpr double kScanBurst = 8;
  static constexpr std::chrono::milliseconds kScanRefill{250};
  struct ScanBudget {
    double tokens;
    std::chrono::steady_clock::time_point at;
  };
  // Takes a scan for `tgid`; false and *next (when the next one is due) when none is left.
  bool take_scan(int tgid, std::chrono::steady_clock::time_point now,
                 std::chrono::steady_clock::time_point* next);
  std::map<int, ScanBudget> scan_budget_;
  std::uint64_t scans_deferred_ = 0;  // mapping events folded into a later scan
  std::chrono::steady_clock::time_point last_full_scan_{};
  std::chrono::steady_clock::time_point last_sweep_{};
  std::function<void(int)> on_found_, on_gone_;
  Reaper reaper_;  // probes still attached at shutdown are destroyed after it, on the caller
  std::atomic<size_t> traced_processes_{0}, attached_libraries_{0}, attached_probes_{0};
  std::atomic<size_t> emulated_probes_{0};
  mutable std::mutex stepped_mu_;
  std::vector<bool> stepped_calls_;
  std::atomic<std::uint64_t> refused_libraries_{0};
  std::uint64_t failures_remembered_ = 0;
  // The budget's duty: the latest request (any thread), and what the discovery thread applies.
  std::mutex duty_mu_;
  std::map<int, double> duty_request_;
  bool duty_requested_ = false;
  std::map<int, double> duty_;
  struct OffTime {
    std::uint64_t total_ns = 0;  // completed off phases
    std::chrono::steady_clock::time_point since{};  // set while off now
  };
  mutable std::mutex off_mu_;
  std::map<int, OffTime> off_;  // per process ever cycled and alive
  const std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
  std::atomic<size_t> cycled_processes_{0}, uncyclable_processes_{0};
  struct Closers {
    std::mutex mu;
    std::condition_variable cv;
    int running = 0;
  };
  static constexpr int kMaxClosers = 64;  // beyond, the discovery thread closes them itself
  std::shared_ptr<Closers> closers_ = std::make_shared<Closers>();
};

}  // namespace stallwatch::trace
