#include "trace/tracer.h"
#include "trace/uprobe_multi.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <ctime>
#include <vector>

#include "common/strings.h"
#include "common/log.h"

extern "C" {
#include "bpf/cuda.h"
#include "bpf/discovery.h"
#include "bpf/host.h"
#include "bpf/sched.h"
#include "stallwatch.skel.h"
}

namespace stallwatch::trace {
namespace {

// The program the kernel refused in the last load and the verifier's last lines, from libbpf's
// messages (libbpf logs on the loading thread: one load at a time).
struct Refusal {
  std::string program;
  std::string verifier;  // its last lines, "; " between them
};
Refusal g_refusal;

// "prog 'NAME': ..." → NAME; "" when the message is not about one program.
std::string program_of(const std::string& line) {
  const size_t at = line.find("prog '");
  if (at == std::string::npos) return {};
  const size_t end = line.find('\'', at + 6);
  return end == std::string::npos ? std::string() : line.substr(at + 6, end - at - 6);
}

// The last `n` non-empty lines of a verifier log (libbpf hands it as one message).
std::string verifier_tail(const std::string& log, size_t n) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < log.size()) {
    size_t nl = log.find('\n', start);
    if (nl == std::string::npos) nl = log.size();
    std::string l = log.substr(start, nl - start);
    start = nl + 1;
    if (l.empty() || l.find("PROG LOAD LOG --") != std::string::npos) continue;
    lines.push_back(std::move(l));
  }
  std::string out;
  for (size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i) {
    out += (out.empty() ? "" : "; ") + lines[i];
  }
  return out;
}

int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list args) {
  LogLevel ours = level == LIBBPF_WARN ? LogLevel::kWarn : LogLevel::kDebug;
  if (!log_enabled(ours) && level != LIBBPF_WARN) return 0;
  // Verifier logs arrive as one long message: size the buffer to it.
  va_list again;
  va_copy(again, args);
  int n = vsnprintf(nullptr, 0, fmt, args);
  std::string line(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) vsnprintf(line.data(), line.size() + 1, fmt, again);
  va_end(again);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  if (line.find("-- BEGIN PROG LOAD LOG --") != std::string::npos) {
    // The whole log at debug; Tracer::open says once which program and the verifier's last
    // lines, at warn.
    g_refusal.program = program_of(line);
    g_refusal.verifier = verifier_tail(line, 4);
    if (log_enabled(LogLevel::kDebug)) log_line(LogLevel::kDebug, "libbpf: " + line);
    return 0;
  }
  if (line.find("failed to load") != std::string::npos && g_refusal.program.empty()) {
    g_refusal.program = program_of(line);
  }
  if (log_enabled(ours)) log_line(ours, "libbpf: " + line);
  return 0;
}

// The mmap syscall tracepoint needs tracefs; mount it where the kernel expects it if absent.
void ensure_tracefs() {
  struct stat st {};
  if (::stat("/sys/kernel/tracing/events", &st) == 0) return;
  if (::stat("/sys/kernel/debug/tracing/events", &st) == 0) return;
  if (::mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, nullptr) == 0) {
    SW_LOG(kInfo) << "mounted tracefs at /sys/kernel/tracing (library discovery needs it)";
  } else {
    SW_LOG(kWarn) << "cannot mount tracefs at /sys/kernel/tracing: " << std::strerror(errno);
  }
}

Error load_error(const char* what, int err) {
  std::string msg = std::string(what) + ": " + std::strerror(err);
  if (err == EPERM || err == EACCES) {
    msg += " (run as root or grant CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN; `stallwatch check` "
           "says which is missing)";
  }
  return make_error(msg, err);
}

// A host hook: a tp_btf program, the tracepoint it needs and what it measures.
using Progs = decltype(stallwatch_bpf::progs);
using Links = decltype(stallwatch_bpf::links);

struct HostHook {
  bpf_program* Progs::*program;
  bpf_link* Links::*link;
  const char* tracepoint;
  const char* measures;
  const char* name;  // the program's name in the object
};

constexpr HostHook kHostHooks[] = {
    {&Progs::direct_reclaim_begin, &Links::direct_reclaim_begin,
     "mm_vmscan_direct_reclaim_begin", "direct reclaim time", "direct_reclaim_begin"},
    {&Progs::direct_reclaim_end, &Links::direct_reclaim_end,
     "mm_vmscan_direct_reclaim_end", "direct reclaim time", "direct_reclaim_end"},
    {&Progs::memcg_reclaim_begin, &Links::memcg_reclaim_begin,
     "mm_vmscan_memcg_reclaim_begin", "memcg reclaim time", "memcg_reclaim_begin"},
    {&Progs::memcg_reclaim_end, &Links::memcg_reclaim_end,
     "mm_vmscan_memcg_reclaim_end", "memcg reclaim time", "memcg_reclaim_end"},
    {&Progs::oom_mark_victim, &Links::oom_mark_victim,
     "mark_victim", "OOM kills", "oom_mark_victim"},
    {&Progs::block_io_start, &Links::block_io_start,
     "block_io_start", "block I/O latency", "block_io_start"},
    {&Progs::block_io_done, &Links::block_io_done,
     "block_io_done", "block I/O latency", "block_io_done"},
    {&Progs::tcp_retransmit_skb, &Links::tcp_retransmit_skb,
     "tcp_retransmit_skb", "TCP retransmits", "tcp_retransmit_skb"},
};

// What the host hook named `program` measures; "" when it is none.
std::string hook_measure(const std::string& program) {
  for (const HostHook& h : kHostHooks) {
    if (program == h.name) return h.measures;
  }
  return {};
}

// Number of arguments the raw tracepoint passes (its btf_trace_<name> prototype minus the
// context pointer); -1 when unknown.
int tracepoint_args(const btf* vmlinux, const char* name) {
  if (!vmlinux) return -1;
  std::string type = std::string("btf_trace_") + name;
  int id = btf__find_by_name_kind(vmlinux, type.c_str(), BTF_KIND_TYPEDEF);
  if (id < 0) return -1;
  const btf_type* t = btf__type_by_id(vmlinux, btf__resolve_type(vmlinux, id));
  if (!t || !btf_is_ptr(t)) return -1;
  t = btf__type_by_id(vmlinux, t->type);
  if (!t || !btf_is_func_proto(t)) return -1;
  return static_cast<int>(btf_vlen(t)) - 1;
}

// Whether the running kernel has the raw tracepoint (its btf_trace_<name> type in vmlinux BTF).
bool kernel_has_tracepoint(const btf* vmlinux, const char* name) {
  if (!vmlinux) return true;  // cannot tell: let the load decide
  std::string type = std::string("btf_trace_") + name;
  return btf__find_by_name_kind(vmlinux, type.c_str(), BTF_KIND_TYPEDEF) >= 0;
}


// Loads the multi-uprobe copies of the call programs (expected attach type
// BPF_TRACE_UPROBE_MULTI) or leaves them out.
void configure_uprobe_multi(stallwatch_bpf* skel, bool on) {
  for (bpf_program* p : {skel->progs.cuda_enter_multi, skel->progs.cuda_exit_multi,
                         skel->progs.nccl_enter_multi, skel->progs.nccl_exit_multi}) {
    if (on) {
      bpf_program__set_expected_attach_type(p, static_cast<bpf_attach_type>(kUprobeMultiAttachType));
    } else {
      bpf_program__set_autoload(p, false);
    }
  }
}

}  // namespace

Result<std::unique_ptr<Tracer>> Tracer::open(const TracerOptions& options) {
  libbpf_set_print(libbpf_log);
  // Multi-uprobe links (one kernel object per library file and direction instead of one per
  // probe) where vmlinux has them; a kernel that then refuses the programs gets a second load
  // without them.
  bool multi = options.uprobe_multi && kernel_has_uprobe_multi();
  // A program the verifier refuses (issue #38: a verifier that accepts it on one kernel may not
  // on another) is said once with the verifier's last lines; a host hook or the hang iterator
  // is then left out and the rest loads; a call program is loaded again without the Python
  // frame walk; only a refused core program stops the daemon.
  std::vector<std::string> refused;
  bool python_walk = options.stacks;
  for (int attempt = 0;; ++attempt) {
    g_refusal = Refusal{};
    auto r = open_once(options, multi, refused, python_walk);
    if (r || attempt >= 12) return r;
    const std::string prog = g_refusal.program;
    const std::string why =
        prog.empty() ? r.error().message
                     : "the kernel's verifier refused the BPF program " + prog +
                           (g_refusal.verifier.empty() ? "" : " (its last lines: " + g_refusal.verifier + ")");
    const bool multi_prog = prog.size() > 6 && prog.ends_with("_multi");
    const bool optional =
        prog == "inflight_calls" ||
        std::any_of(std::begin(kHostHooks), std::end(kHostHooks),
                    [&](const HostHook& h) { return prog == h.name; });
    const bool call_prog = prog.starts_with("cuda_") || prog.starts_with("nccl_");
    if (multi && (multi_prog || prog.empty())) {
      SW_LOG(kWarn) << why << "; loading again with one link per probe";
      multi = false;
    } else if (optional && std::find(refused.begin(), refused.end(), prog) == refused.end()) {
      SW_LOG(kWarn) << why << "; going on without it ("
                    << (prog == "inflight_calls" ? std::string("calls that do not return")
                                                 : hook_measure(prog))
                    << " will not be measured)";
      refused.push_back(prog);
    } else if (call_prog && python_walk) {
      SW_LOG(kWarn) << why << "; loading again without the Python frame walk (native frames only)";
      python_walk = false;
    } else if (multi) {
      SW_LOG(kWarn) << why << "; loading again with one link per probe";
      multi = false;
    } else {
      return make_error(r.error().message + (prog.empty() ? "" : ": " + why), r.error().err);
    }
  }
}

Result<std::unique_ptr<Tracer>> Tracer::open_once(const TracerOptions& options, bool multi,
                                                  const std::vector<std::string>& refused,
                                                  bool python_walk) {
  std::unique_ptr<Tracer> t(new Tracer());
  t->skel_ = stallwatch_bpf__open();
  if (!t->skel_) return load_error("opening the BPF object failed", errno);
  t->uprobe_multi_ = multi;
  configure_uprobe_multi(t->skel_, multi);
  t->skel_->rodata->outlier_threshold_ns = static_cast<__u64>(options.outlier_threshold.count());
  t->skel_->rodata->capture_stacks = options.stacks;
  // The Python frame walk runs under bpf_loop (Linux 5.17): a kernel without it gets the
  // programs without the walk (native frames only) rather than no programs (issue #38).
  if (options.stacks && libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_loop, nullptr) == 0) {
    t->skel_->rodata->python_frames = false;
    SW_LOG(kWarn) << "this kernel has no bpf_loop (Linux < 5.17): call sites get native frames "
                     "only, no Python frames";
  }
  if (!python_walk) t->skel_->rodata->python_frames = false;
  t->skel_->rodata->cgroup_root_count = static_cast<__u32>(options.cgroup_roots.size());
  for (const std::string& name : refused) {
    if (bpf_program* p = bpf_object__find_program_by_name(t->skel_->obj, name.c_str())) {
      bpf_program__set_autoload(p, false);
    }
    const std::string what = hook_measure(name);
    if (!what.empty() && std::find(t->unavailable_.begin(), t->unavailable_.end(), what) ==
                             t->unavailable_.end()) {
      t->unavailable_.push_back(what);
    }
  }
  // Host hooks whose tracepoint this kernel lacks are not loaded (their measure is missing,
  // the rest works); probing BTF rather than comparing kernel versions.
  btf* vmlinux = btf__load_vmlinux_btf();
  if (libbpf_get_error(vmlinux)) vmlinux = nullptr;
  for (const HostHook& h : kHostHooks) {
    if (kernel_has_tracepoint(vmlinux, h.tracepoint)) continue;
    bpf_program__set_autoload(t->skel_->progs.*h.program, false);
    if (std::find(t->unavailable_.begin(), t->unavailable_.end(), h.measures) ==
        t->unavailable_.end()) {
      t->unavailable_.push_back(h.measures);
    }
  }
  // tcp_retransmit_skb gained `int err` (fired for failed attempts too) in Linux 6.x.
  t->skel_->rodata->retransmit_has_err = tracepoint_args(vmlinux, "tcp_retransmit_skb") >= 3;
  btf__free(vmlinux);
  if (int err = stallwatch_bpf__load(t->skel_)) {
    return load_error("loading the BPF programs into the kernel failed", -err);
  }
  // The cgroup roots, before any call probe exists: a call is never judged against an empty slot.
  for (std::size_t i = 0; i < options.cgroup_roots.size() && i < kMaxCgroupRoots; ++i) {
    const std::string& dir = options.cgroup_roots[i];
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      return make_error("--cgroup-roots: cannot open " + dir + ": " + std::strerror(errno) +
                        " (a directory of the cgroup2 hierarchy, e.g. /kubepods.slice)");
    }
    const std::uint32_t key = static_cast<std::uint32_t>(i);
    const std::uint32_t value = static_cast<std::uint32_t>(fd);
    const int err = bpf_map_update_elem(bpf_map__fd(t->skel_->maps.cgroup_roots), &key, &value,
                                        BPF_ANY);
    const int saved = errno;
    ::close(fd);  // the map holds the cgroup now
    if (err) {
      return make_error("--cgroup-roots: " + dir + " is not a cgroup2 directory (" +
                        std::strerror(saved) + ")");
    }
  }
  auto* links = &t->skel_->links;
  auto* progs = &t->skel_->progs;
  links->sched_switch = bpf_program__attach(progs->sched_switch);
  if (!links->sched_switch) return load_error("attaching tp_btf/sched_switch failed", errno);
  links->sched_wakeup = bpf_program__attach(progs->sched_wakeup);
  if (!links->sched_wakeup) return load_error("attaching tp_btf/sched_wakeup failed", errno);
  ensure_tracefs();
  links->discovery_mmap = bpf_program__attach(progs->discovery_mmap);
  if (!links->discovery_mmap) {
    return load_error(
        "attaching tracepoint syscalls/sys_enter_mmap (library discovery) failed; the kernel "
        "needs CONFIG_FTRACE_SYSCALLS and tracefs at /sys/kernel/tracing",
        errno);
  }
  t->attach_host_hooks();
  // The task iterator that folds the threads' off-CPU tallies into offcpu: without it the
  // off-CPU figures would arrive only when threads exit.
  links->fold_offcpu = bpf_program__attach_iter(progs->fold_offcpu, nullptr);
  if (!links->fold_offcpu) return load_error("attaching iter/task fold_offcpu failed", errno);
  // The task iterator over open calls: without it, hung calls are not seen (the rest works).
  links->inflight_calls = bpf_program__autoload(progs->inflight_calls)
                              ? bpf_program__attach_iter(progs->inflight_calls, nullptr)
                              : nullptr;
  if (!links->inflight_calls) {
    SW_LOG(kWarn) << "attaching iter/task inflight_calls failed (" << std::strerror(errno)
                  << "): calls that do not return (call_hang) will not be seen";
  }
  t->rings_ = ring_buffer__new(bpf_map__fd(t->skel_->maps.outliers), handle_outlier, t.get(),
                               nullptr);
  if (!t->rings_) return load_error("creating the outlier ring buffer failed", errno);
  if (int err = ring_buffer__add(t->rings_, bpf_map__fd(t->skel_->maps.lib_maps), handle_lib_map,
                                 t.get())) {
    return load_error("adding the discovery ring buffer failed", -err);
  }
  if (int err = ring_buffer__add(t->rings_, bpf_map__fd(t->skel_->maps.host_events),
                                 handle_host_event, t.get())) {
    return load_error("adding the host-event ring buffer failed", -err);
  }
  return t;
}

void Tracer::attach_host_hooks() {
  for (const HostHook& h : kHostHooks) {
    bpf_program* prog = skel_->progs.*h.program;
    if (!bpf_program__autoload(prog)) continue;
    bpf_link* link = bpf_program__attach(prog);
    if (!link) {
      SW_LOG(kWarn) << "attaching tp_btf/" << h.tracepoint << " failed (" << std::strerror(errno)
                    << "): " << h.measures << " will not be measured";
      if (std::find(unavailable_.begin(), unavailable_.end(), h.measures) == unavailable_.end()) {
        unavailable_.push_back(h.measures);
      }
      continue;
    }
    skel_->links.*h.link = link;
  }
  for (const auto& what : unavailable_) {
    SW_LOG(kWarn) << "no " << what << " on this kernel (a tracepoint it lacks, or a program "
                     "its verifier refused: see above); that evidence is missing from metrics "
                     "and chains";
  }
}

Tracer::~Tracer() {
  if (rings_) ring_buffer__free(rings_);
  if (skel_) stallwatch_bpf__destroy(skel_);
}

std::vector<std::pair<std::string, bool>> Tracer::program_states() const {
  std::vector<std::pair<std::string, bool>> out;
  bpf_program* p = nullptr;
  bpf_object__for_each_program(p, skel_->obj) {
    out.emplace_back(bpf_program__name(p), bpf_program__fd(p) >= 0);
  }
  return out;
}

int Tracer::map_fd(const char* name) const {
  const bpf_map* m = bpf_object__find_map_by_name(skel_->obj, name);
  if (!m) SW_LOG(kError) << "no map named " << name << " in the BPF object (a bug)";
  return m ? bpf_map__fd(m) : -1;
}
int Tracer::inflight_iter_link_fd() const {
  return skel_->links.inflight_calls ? bpf_link__fd(skel_->links.inflight_calls) : -1;
}
int Tracer::fold_iter_link_fd() const {
  return skel_->links.fold_offcpu ? bpf_link__fd(skel_->links.fold_offcpu) : -1;
}
CallPrograms Tracer::call_programs() const {
  CallPrograms p;
  p.enter = skel_->progs.cuda_enter;
  p.exit = skel_->progs.cuda_exit;
  p.nccl_enter = skel_->progs.nccl_enter;
  p.nccl_exit = skel_->progs.nccl_exit;
  if (uprobe_multi_) {
    p.enter_multi = skel_->progs.cuda_enter_multi;
    p.exit_multi = skel_->progs.cuda_exit_multi;
    p.nccl_enter_multi = skel_->progs.nccl_enter_multi;
    p.nccl_exit_multi = skel_->progs.nccl_exit_multi;
  }
  return p;
}

int Tracer::handle_outlier(void* ctx, void* data, size_t size) {
  auto* self = static_cast<Tracer*>(ctx);
  if (size >= sizeof(outlier_event) && self->outlier_handler_) {
    const auto& e = *static_cast<const outlier_event*>(data);
    OutlierRecord r;
    r.ts_ns = e.ts_ns;
    r.cgroup_id = e.cgroup_id;
    r.duration_ns = e.duration_ns;
    r.runnable_ns = e.runnable_ns;
    r.blocked_ns = e.blocked_ns;
    r.tgid = e.tgid;
    r.tid = e.tid;
    r.call_id = e.call_id;
    r.preemptions = e.preemptions;
    static_assert(sizeof(r.comm) == sizeof(e.comm));
    std::memcpy(r.comm, e.comm, sizeof(r.comm));
    if (size >= sizeof(outlier_event)) {
      r.py_status = e.py_status;
      const unsigned n = std::min<unsigned>(e.py_count, SW_PY_FRAMES);
      for (unsigned i = 0; i < n; ++i) r.python.emplace_back(e.py[i].code, e.py[i].instr);
    }
    if (e.stack_id >= 0) self->take_stack(static_cast<std::uint32_t>(e.stack_id), r.native);
    self->outlier_handler_(r);
  }
  return 0;
}

void Tracer::take_stack(std::uint32_t id, std::vector<std::uint64_t>& out) {
  std::array<std::uint64_t, SW_STACK_DEPTH> ips{};
  const int fd = bpf_map__fd(skel_->maps.user_stacks);
  if (bpf_map_lookup_elem(fd, &id, ips.data()) == 0) {
    // Deleted once read, so the map holds only stacks in flight (bpf/maps.bpf.h); the last
    // stack of each id is kept for a record of the same stack that raced the delete.
    bpf_map_delete_elem(fd, &id);
    auto end = std::find(ips.begin(), ips.end(), 0);
    last_stacks_[id % last_stacks_.size()] = {id, std::vector<std::uint64_t>(ips.begin(), end)};
  }
  const auto& [cached_id, cached] = last_stacks_[id % last_stacks_.size()];
  if (cached_id == id) out = cached;
}

int Tracer::handle_lib_map(void* ctx, void* data, size_t size) {
  auto* self = static_cast<Tracer*>(ctx);
  if (size >= sizeof(lib_map_event) && self->lib_map_handler_) {
    self->lib_map_handler_(static_cast<int>(static_cast<const lib_map_event*>(data)->tgid));
  }
  return 0;
}

int Tracer::handle_host_event(void* ctx, void* data, size_t size) {
  auto* self = static_cast<Tracer*>(ctx);
  if (size < sizeof(host_event) || !self->oom_kill_handler_) return 0;
  const auto& e = *static_cast<const host_event*>(data);
  if (e.kind != SW_HOST_OOM_KILL) return 0;
  OomKill kill;
  kill.pid = static_cast<int>(e.tgid);
  kill.comm = escape_name(std::string_view(e.comm, strnlen(e.comm, sizeof(e.comm))));
  kill.cuda = e.cuda != 0;
  kill.at_ns = unix_ns_of_monotonic(e.ts_ns);
  self->oom_kill_handler_(e.cgroup_id, std::move(kill));
  return 0;
}

std::int64_t unix_ns_of_monotonic(std::uint64_t mono_ns) {
  timespec mono{}, real{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &real);
  const std::int64_t now_mono = mono.tv_sec * 1000000000LL + mono.tv_nsec;
  const std::int64_t now_real = real.tv_sec * 1000000000LL + real.tv_nsec;
  return now_real - (now_mono - static_cast<std::int64_t>(mono_ns));
}

Result<int> Tracer::poll(std::chrono::milliseconds timeout) {
  int n = ring_buffer__poll(rings_, static_cast<int>(timeout.count()));
  if (n < 0 && n != -EINTR) return make_error("polling ring buffers failed", -n);
  return n < 0 ? 0 : n;
}

std::array<std::uint64_t, kLostSources> read_lost(int lost_map_fd) {
  std::array<std::uint64_t, kLostSources> out{};
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return out;
  std::vector<__u64> per_cpu(static_cast<size_t>(ncpu));
  for (__u32 k = 0; k < SW_LOST_MAX && k < out.size(); ++k) {
    if (bpf_map_lookup_elem(lost_map_fd, &k, per_cpu.data()) != 0) continue;
    for (auto v : per_cpu) out[k] += v;
  }
  return out;
}

LruOps read_lru_ops(int lru_ops_fd, unsigned lru) {
  LruOps out;
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0 || lru >= SW_LRU_MAX) return out;
  std::vector<sw_lru_ops> per_cpu(static_cast<size_t>(ncpu));
  __u32 k = lru;
  if (bpf_map_lookup_elem(lru_ops_fd, &k, per_cpu.data()) != 0) return out;
  for (const auto& v : per_cpu) {
    out.inserts += v.inserts;
    out.deletes += v.deletes;
  }
  return out;
}

}  // namespace stallwatch::trace
