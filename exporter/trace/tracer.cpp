#include "trace/tracer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <vector>

#include "common/log.h"

extern "C" {
#include "bpf/cuda.h"
#include "bpf/discovery.h"
#include "bpf/sched.h"
#include "stallwatch.skel.h"
}

namespace stallwatch::trace {
namespace {

int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list args) {
  LogLevel ours = level == LIBBPF_WARN ? LogLevel::kWarn : LogLevel::kDebug;
  if (!log_enabled(ours)) return 0;
  char buf[1024];
  int n = vsnprintf(buf, sizeof(buf), fmt, args);
  std::string line(buf, n > 0 ? std::min<size_t>(n, sizeof(buf) - 1) : 0);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  log_line(ours, "libbpf: " + line);
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

}  // namespace

Result<std::unique_ptr<Tracer>> Tracer::open(const TracerOptions& options) {
  libbpf_set_print(libbpf_log);
  std::unique_ptr<Tracer> t(new Tracer());
  t->skel_ = stallwatch_bpf__open();
  if (!t->skel_) return load_error("opening the BPF object failed", errno);
  t->skel_->rodata->outlier_threshold_ns = static_cast<__u64>(options.outlier_threshold.count());
  if (int err = stallwatch_bpf__load(t->skel_)) {
    return load_error("loading the BPF programs into the kernel failed", -err);
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
  t->rings_ = ring_buffer__new(bpf_map__fd(t->skel_->maps.outliers), handle_outlier, t.get(),
                               nullptr);
  if (!t->rings_) return load_error("creating the outlier ring buffer failed", errno);
  if (int err = ring_buffer__add(t->rings_, bpf_map__fd(t->skel_->maps.lib_maps), handle_lib_map,
                                 t.get())) {
    return load_error("adding the discovery ring buffer failed", -err);
  }
  return t;
}

Tracer::~Tracer() {
  if (rings_) ring_buffer__free(rings_);
  if (skel_) stallwatch_bpf__destroy(skel_);
}

int Tracer::call_map_fd() const { return bpf_map__fd(skel_->maps.cuda_call_duration); }
int Tracer::offcpu_map_fd() const { return bpf_map__fd(skel_->maps.offcpu); }
int Tracer::preemptors_map_fd() const { return bpf_map__fd(skel_->maps.preemptors); }
int Tracer::lost_map_fd() const { return bpf_map__fd(skel_->maps.events_lost); }
bpf_program* Tracer::call_enter_program() const { return skel_->progs.cuda_enter; }
bpf_program* Tracer::call_exit_program() const { return skel_->progs.cuda_exit; }

int Tracer::handle_outlier(void* ctx, void* data, size_t size) {
  auto* self = static_cast<Tracer*>(ctx);
  if (size >= sizeof(outlier_event) && self->outlier_handler_) {
    self->outlier_handler_(*static_cast<const outlier_event*>(data));
  }
  return 0;
}

int Tracer::handle_lib_map(void* ctx, void* data, size_t size) {
  auto* self = static_cast<Tracer*>(ctx);
  if (size >= sizeof(lib_map_event) && self->lib_map_handler_) {
    self->lib_map_handler_(*static_cast<const lib_map_event*>(data));
  }
  return 0;
}

Result<int> Tracer::poll(std::chrono::milliseconds timeout) {
  int n = ring_buffer__poll(rings_, static_cast<int>(timeout.count()));
  if (n < 0 && n != -EINTR) return make_error("polling ring buffers failed", -n);
  return n < 0 ? 0 : n;
}

std::array<std::uint64_t, 8> read_lost(int lost_map_fd) {
  std::array<std::uint64_t, 8> out{};
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return out;
  std::vector<__u64> per_cpu(static_cast<size_t>(ncpu));
  for (__u32 k = 0; k < SW_LOST_MAX && k < out.size(); ++k) {
    if (bpf_map_lookup_elem(lost_map_fd, &k, per_cpu.data()) != 0) continue;
    for (auto v : per_cpu) out[k] += v;
  }
  return out;
}

}  // namespace stallwatch::trace
