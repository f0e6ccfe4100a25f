// Owns the BPF skeleton: loads it, attaches the scheduler and discovery programs, and hands
// out the map fds and the call programs that LibraryProbes attach per library file. Polls the
// outlier and library-mapping ring buffers. Not thread-safe except where noted: one thread
// polls; map fds may be read from any thread (the kernel synchronises map access).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "trace/attach.h"
#include "trace/records.h"
#include "trace/snapshot.h"

struct stallwatch_bpf;
struct ring_buffer;
struct bpf_program;
struct bpf_link;

namespace stallwatch::trace {

struct TracerOptions {
  std::chrono::nanoseconds outlier_threshold{std::chrono::milliseconds(1)};
  bool stacks = true;  // --stacks: outliers carry the native and Python stack
  bool uprobe_multi = true;  // --uprobe-multi: multi-uprobe links where the kernel has them
  // --cgroup-roots: the cgroup directories (absolute paths under the cgroup2 mount) whose
  // subtrees alone are traced; empty: every cgroup. At most kMaxCgroupRoots.
  std::vector<std::string> cgroup_roots;
};
inline constexpr std::size_t kMaxCgroupRoots = 8;  // bpf/maps.bpf.h SW_MAX_CGROUP_ROOTS

class Tracer {
 public:
  // Handlers get the ring buffer's records decoded (trace/records.h), on the polling thread.
  using OutlierHandler = std::function<void(const OutlierRecord&)>;
  using LibMapHandler = std::function<void(int tgid)>;  // a process mapped a traced library
  using OomKillHandler = std::function<void(std::uint64_t cgroup_id, OomKill kill)>;

  // Opens, loads and attaches; the error names what failed and how to fix it.
  static Result<std::unique_ptr<Tracer>> open(const TracerOptions& options);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // The fd of a map of the skeleton by its name in bpf/ (the evidence sources find theirs);
  // -1 when there is no such map.
  int map_fd(const char* name) const;
  // The link of the iter/task program inflight_calls (bpf_iter_create reads it); -1 when it
  // could not be attached.
  int inflight_iter_link_fd() const;
  // The link of the iter/task program fold_offcpu, which moves the threads' off-CPU tallies
  // into the map offcpu; run (bpf_iter_create, read to the end) before reading that map.
  int fold_iter_link_fd() const;
  // The call probes' programs; the multi-uprobe copies only where the kernel loaded them.
  CallPrograms call_programs() const;
  bool uprobe_multi() const { return uprobe_multi_; }
  // Host hooks this kernel lacks (named by what they measure), for `check` and the log.
  const std::vector<std::string>& unavailable_hooks() const { return unavailable_; }
  // Every program of the object and whether it is loaded now (a variant this kernel does not
  // need, a hook whose tracepoint it lacks or a program its verifier refused: not loaded), by
  // name: stallwatch_bpf_programs_loaded.
  std::vector<std::pair<std::string, bool>> program_states() const;

  void on_outlier(OutlierHandler h) { outlier_handler_ = std::move(h); }
  void on_lib_map(LibMapHandler h) { lib_map_handler_ = std::move(h); }
  void on_oom_kill(OomKillHandler h) { oom_kill_handler_ = std::move(h); }
  // Delivers pending ring-buffer records to the handlers; waits at most timeout.
  Result<int> poll(std::chrono::milliseconds timeout);

 private:
  Tracer() = default;
  static int handle_outlier(void* ctx, void* data, size_t size);
  static int handle_lib_map(void* ctx, void* data, size_t size);
  static int handle_host_event(void* ctx, void* data, size_t size);
  void attach_host_hooks();

  stallwatch_bpf* skel_ = nullptr;
  ring_buffer* rings_ = nullptr;
  OutlierHandler outlier_handler_;
  // Reads and deletes one user_stacks entry (ring-buffer thread only).
  void take_stack(std::uint32_t id, std::vector<std::uint64_t>& out);
  std::array<std::pair<std::uint32_t, std::vector<std::uint64_t>>, 256> last_stacks_{};
  LibMapHandler lib_map_handler_;
  OomKillHandler oom_kill_handler_;
  std::vector<std::string> unavailable_;
  // One load: without the multi-uprobe copies unless `multi`, without the programs named in
  // `refused` (optional ones the verifier refused before), without the Python walk unless
  // `python_walk`.
  static Result<std::unique_ptr<Tracer>> open_once(const TracerOptions& options, bool multi,
                                                   const std::vector<std::string>& refused,
                                                   bool python_walk);
  bool uprobe_multi_ = false;
};

// Sum of the per-CPU lost-event counters, by enum sw_lost_source.
std::array<std::uint64_t, kLostSources> read_lost(int lost_map_fd);

// Sum of the per-CPU insert and delete counters of one LRU map (enum sw_lru_map).
struct LruOps {
  std::uint64_t inserts = 0;
  std::uint64_t deletes = 0;
};
LruOps read_lru_ops(int lru_ops_fd, unsigned lru);

}  // namespace stallwatch::trace
