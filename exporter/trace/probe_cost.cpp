#include "trace/probe_cost.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "probe_cost.skel.h"
#include "trace/proc_maps.h"
#include "trace/uprobe_multi.h"

#if defined(__x86_64__)
// The targets: each begins with the instruction its name says, then returns. sw_cal_stub and
// sw_cal_stub2 have the shape of every cu* entry of NVIDIA's driver (cmpl $imm32, disp32(%rip) is
// 10 bytes; the je follows at +10): the first is probed on its compare, the second on its je, so
// that probes on every target at once never meet in one call. Never called by the daemon itself,
// only by its calibration children.
asm(R"(
  .text
  .p2align 4
  .hidden sw_cal_stub
  .type sw_cal_stub,@function
sw_cal_stub:
  cmpl $0x321cba00, sw_cal_flag(%rip)
  je 1f
1:
  ret
  .size sw_cal_stub, .-sw_cal_stub
  .p2align 4
  .hidden sw_cal_stub2
  .type sw_cal_stub2,@function
sw_cal_stub2:
  cmpl $0x321cba00, sw_cal_flag(%rip)
  je 3f
3:
  ret
  .size sw_cal_stub2, .-sw_cal_stub2
  .p2align 4
  .hidden sw_cal_push
  .type sw_cal_push,@function
sw_cal_push:
  push %rbp
  pop %rbp
  ret
  .size sw_cal_push, .-sw_cal_push
  .p2align 4
  .hidden sw_cal_nop
  .type sw_cal_nop,@function
sw_cal_nop:
  nop
  ret
  .size sw_cal_nop, .-sw_cal_nop
  .p2align 4
  .hidden sw_cal_nopl
  .type sw_cal_nopl,@function
sw_cal_nopl:
  nopl 0x0(%rax,%rax,1)
  ret
  .size sw_cal_nopl, .-sw_cal_nopl
  .p2align 4
  .hidden sw_cal_jmp
  .type sw_cal_jmp,@function
sw_cal_jmp:
  jmp 2f
2:
  ret
  .size sw_cal_jmp, .-sw_cal_jmp
  .p2align 4
  .hidden sw_cal_endbr
  .type sw_cal_endbr,@function
sw_cal_endbr:
  endbr64
  ret
  .size sw_cal_endbr, .-sw_cal_endbr
  .p2align 4
  .hidden sw_cal_plain
  .type sw_cal_plain,@function
sw_cal_plain:
  ret
  .size sw_cal_plain, .-sw_cal_plain
  .data
  .p2align 2
sw_cal_flag:
  .long 0
  .text
)");
extern "C" {
void sw_cal_stub();
void sw_cal_stub2();
void sw_cal_push();
void sw_cal_nop();
void sw_cal_nopl();
void sw_cal_jmp();
void sw_cal_endbr();
void sw_cal_plain();
}
#endif

namespace stallwatch::trace {

namespace {

using Target = void (*)();

struct SkelDeleter {
  void operator()(probe_cost_bpf* s) const { probe_cost_bpf__destroy(s); }
};
struct LinkDeleter {
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};
using Link = std::unique_ptr<bpf_link, LinkDeleter>;

int quiet(libbpf_print_level, const char*, va_list) { return 0; }

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// In the child: whether the kernel gave this process its single-step page. Async-signal-safe.
bool has_xol_page() {
  static constexpr char kName[] = "[uprobes]";
  constexpr size_t kLen = sizeof(kName) - 1;
  const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096 + kLen];
  size_t carry = 0;
  bool found = false;
  while (!found) {
    const ssize_t n = read(fd, buf + carry, 4096);
    if (n <= 0) break;
    const size_t len = carry + static_cast<size_t>(n);
    for (size_t i = 0; i + kLen <= len && !found; ++i) found = memcmp(buf + i, kName, kLen) == 0;
    carry = std::min(len, kLen - 1);
    memmove(buf, buf + len - carry, carry);
  }
  close(fd);
  return found;
}

// The child: measures a batch set natively, then one per phase the parent starts with 'g'.
// Each report: `batches` durations in ns, then 1 if the single-step page exists.
[[noreturn]] void child_main(Target fn, Target plain, int calls, int batches, int in, int out) {
  Target volatile f = fn;
  Target volatile p = plain;
  std::uint64_t report[65] = {};
  const int n = std::min(batches, 64);
  for (int phase = 0;; ++phase) {
    if (phase > 0) {
      char c = 0;
      if (read(in, &c, 1) != 1 || c != 'g') _exit(0);
    }
    for (int b = 0; b < n; ++b) {
      const std::uint64_t t0 = now_ns();
      for (int i = 0; i < calls; ++i) (phase == 0 ? p : f)();
      report[b] = now_ns() - t0;
    }
    report[n] = phase == 1 && has_xol_page() ? 1 : 0;
    const size_t bytes = sizeof(std::uint64_t) * static_cast<size_t>(n + 1);
    if (write(out, report, bytes) != static_cast<ssize_t>(bytes)) _exit(1);
  }
}

struct Phase {
  double per_call_ns = 0;  // median batch / calls
  bool stepped = false;    // the single-step page appeared (entry phase only)
  std::uint64_t hits = 0;
};

struct SiteRun {
  bool ok = false;
  std::string error;
  Phase native, entry, pair;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// File offset of `fn` in the daemon's executable, from this process's maps.
bool file_offset_of(Target fn, std::uint64_t* offset) {
  const auto addr = reinterpret_cast<std::uintptr_t>(fn);
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    MapsEntry m;
    if (!parse_maps_line(line, m)) continue;
    if (addr >= m.start && addr < m.end) {
      *offset = addr - m.start + m.offset;
      return true;
    }
  }
  return false;
}

// One calibration child: forked, it measures the native loop at once, then one phase per 'g'.
class Child {
 public:
  Child(const CalibrationOptions& o, Target fn, bool timed)
      : o_(o), calls_(timed ? o.timed_calls : o.detect_calls), batches_(timed ? o.batches : 1) {
    fn_ = fn;
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { finish(); }

  int calls_per_phase() const { return calls_ * batches_; }
  pid_t pid() const { return pid_; }

  bool start(std::string& error) {
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0) {
      error = std::string("pipe: ") + std::strerror(errno);
      return false;
    }
    if (pipe2(from_child, O_CLOEXEC) != 0) {
      error = std::string("pipe: ") + std::strerror(errno);
      close(to_child[0]);
      close(to_child[1]);
      return false;
    }
#if defined(__x86_64__)
    Target plain = sw_cal_plain;
#else
    Target plain = fn_;
#endif
    pid_ = fork();
    if (pid_ == 0) {
      // The parent's ends: held here, the child would never read end of file.
      close(to_child[1]);
      close(from_child[0]);
      child_main(fn_, plain, calls_, batches_, to_child[0], from_child[1]);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = from_child[0];
    out_ = to_child[1];
    if (pid_ < 0) {
      error = std::string("fork: ") + std::strerror(errno);
      return false;
    }
    return read_report(native, false, error);
  }

  // The next phase: the calls with whatever probes are attached now.
  bool phase(Phase& p, std::string& error) { return read_report(p, true, error); }

  // Ends the child. Killed, not told by end of file: a child forked later holds copies of this
  // one's pipe ends (fork copies every descriptor), so its end of file may never come.
  void finish() {
    if (out_ >= 0) close(out_);
    if (in_ >= 0) close(in_);
    out_ = in_ = -1;
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

  Phase native;

 private:
  bool read_report(Phase& p, bool go, std::string& error) {
    if (go && write(out_, "g", 1) != 1) {
      error = "the calibration child is gone";
      return false;
    }
    std::vector<std::uint64_t> report(static_cast<size_t>(std::min(batches_, 64) + 1));
    const size_t want = report.size() * sizeof(std::uint64_t);
    size_t got = 0;
    const auto deadline =
        now_ns() + static_cast<std::uint64_t>(o_.child_timeout.count()) * 1000000ull;
    while (got < want) {
      const std::uint64_t t = now_ns();
      if (t >= deadline) {
        error = "the calibration child did not answer within " +
                std::to_string(o_.child_timeout.count()) + " ms";
        return false;
      }
      pollfd pfd{in_, POLLIN, 0};
      const int ready = poll(&pfd, 1, static_cast<int>((deadline - t) / 1000000ull) + 1);
      if (ready <= 0) continue;  // EINTR or the deadline: looked at above
      const ssize_t n = read(in_, reinterpret_cast<char*>(report.data()) + got, want - got);
      if (n <= 0) {
        error = "the calibration child exited early";
        return false;
      }
      got += static_cast<size_t>(n);
    }
    std::vector<double> per_call;
    for (size_t b = 0; b + 1 < report.size(); ++b) {
      per_call.push_back(static_cast<double>(report[b]) / calls_);
    }
    p.per_call_ns = median(per_call);
    p.stepped = report.back() != 0;
    return true;
  }

  const CalibrationOptions& o_;
  Target fn_ = nullptr;
  int calls_;
  int batches_;
  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
};

// The counting programs' hits, per slot (0 entry, 1 return).
void reset_hits(probe_cost_bpf* skel) {
  for (std::uint32_t slot = 0; slot < 2; ++slot) {
    const std::uint64_t z = 0;
    bpf_map__update_elem(skel->maps.probe_cost_hits, &slot, sizeof(slot), &z, sizeof(z), BPF_ANY);
  }
}

bool expect_hits(probe_cost_bpf* skel, std::uint32_t slot, int want, Phase& p,
                 std::string& error) {
  std::uint64_t n = 0;
  bpf_map__lookup_elem(skel->maps.probe_cost_hits, &slot, sizeof(slot), &n, sizeof(n), 0);
  p.hits = n;
  if (n == static_cast<std::uint64_t>(want)) return true;
  error = "the " + std::string(slot ? "return" : "entry") + " probe fired " + std::to_string(n) +
          " times for " + std::to_string(want) + " calls";
  return false;
}

struct Site {
  Target fn;
  std::uint32_t delta;
  InsnKind kind;
  bool timed;
  std::uint64_t offset = 0;  // in the daemon's executable, delta included
  SiteRun run;
};

// Multi-uprobe links (Linux 6.6): one entry link over every site and one return link over the
// timed ones, for all processes (only the children call the targets). Two links to detach, and
// no perf event: enabling one patches the scheduler's code (a static key), which under qemu's
// TCG once crashed a guest.
bool run_with_multi_links(probe_cost_bpf* skel, const CalibrationOptions& o,
                          std::vector<Site>& sites, std::string& error) {
  std::vector<std::uint64_t> offsets, cookies;
  for (const Site& s : sites) {
    offsets.push_back(s.offset);
    cookies.push_back(0);
  }
  auto entry = attach_uprobe_multi(skel->progs.probe_cost_enter_multi, "/proc/self/exe", offsets,
                                   cookies, false);
  if (!entry) {
    error = entry.error().message;
    return false;
  }
  std::vector<std::unique_ptr<Child>> timed;
  for (Site& s : sites) {
    auto child = std::make_unique<Child>(o, s.fn, s.timed);
    SiteRun& r = s.run;
    r.ok = child->start(r.error);
    r.native = child->native;
    if (r.ok) reset_hits(skel);
    if (r.ok) r.ok = child->phase(r.entry, r.error);
    if (r.ok) r.ok = expect_hits(skel, 0, child->calls_per_phase(), r.entry, r.error);
    if (r.ok && s.timed) {
      timed.push_back(std::move(child));
    } else {
      child->finish();
    }
  }
  std::vector<std::uint64_t> ret_offsets, ret_cookies;
  for (const Site& s : sites) {
    if (s.timed && s.run.ok) {
      ret_offsets.push_back(s.offset);
      ret_cookies.push_back(0);
    }
  }
  if (ret_offsets.empty()) return true;
  auto ret = attach_uprobe_multi(skel->progs.probe_cost_exit_multi, "/proc/self/exe", ret_offsets,
                                 ret_cookies, true);
  size_t next = 0;
  for (Site& s : sites) {
    if (!s.timed || !s.run.ok) continue;
    Child& child = *timed[next++];
    SiteRun& r = s.run;
    if (!ret) {
      r.ok = false;
      r.error = ret.error().message;
    } else {
      reset_hits(skel);
      r.ok = child.phase(r.pair, r.error) &&
             expect_hits(skel, 1, child.calls_per_phase(), r.pair, r.error);
    }
    child.finish();
  }
  return true;
}

// Elsewhere, one perf-event probe per child, pid-filtered: a detach (an RCU grace period) each.
void run_with_perf_links(probe_cost_bpf* skel, const CalibrationOptions& o,
                         std::vector<Site>& sites) {
  for (Site& s : sites) {
    SiteRun& r = s.run;
    Child child(o, s.fn, s.timed);
    std::vector<Link> links;
    auto probe = [&](bpf_program* prog, bool retprobe) {
      bpf_uprobe_opts opts{};
      opts.sz = sizeof(opts);
      opts.retprobe = retprobe;
      bpf_link* l = bpf_program__attach_uprobe_opts(prog, child.pid(), "/proc/self/exe", s.offset,
                                                    &opts);
      if (!l) {
        r.error = std::string(retprobe ? "uretprobe" : "uprobe") +
                  " on the daemon's own binary: " + std::strerror(errno);
        return false;
      }
      links.emplace_back(l);
      return true;
    };
    r.ok = child.start(r.error);
    r.native = child.native;
    if (r.ok) reset_hits(skel);
    if (r.ok) r.ok = probe(skel->progs.probe_cost_enter, false);
    if (r.ok) r.ok = child.phase(r.entry, r.error);
    if (r.ok) r.ok = expect_hits(skel, 0, child.calls_per_phase(), r.entry, r.error);
    if (r.ok && s.timed) {
      reset_hits(skel);
      r.ok = probe(skel->progs.probe_cost_exit, true) && child.phase(r.pair, r.error) &&
             expect_hits(skel, 1, child.calls_per_phase(), r.pair, r.error);
    }
    child.finish();
    links.clear();  // detach: each waits for an RCU grace period
  }
}

std::string micros(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", seconds * 1e6);
  return buf;
}

}  // namespace

ProbeCalibration calibrate_probes(const CalibrationOptions& options) {
  ProbeCalibration c;
  const auto started = std::chrono::steady_clock::now();
  auto done = [&] {
    c.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                   started);
    return c;
  };
#if !defined(__x86_64__)
  c.error = "probe sites are chosen on x86-64 only; here every probe stays at its symbol";
  return done();
#else
  const libbpf_print_fn_t previous = libbpf_set_print(quiet);
  bool multi = kernel_has_uprobe_multi();
  auto load = [&]() {
    std::unique_ptr<probe_cost_bpf, SkelDeleter> s(probe_cost_bpf__open());
    if (!s) return s;
    for (bpf_program* p : {s->progs.probe_cost_enter_multi, s->progs.probe_cost_exit_multi}) {
      if (multi) {
        bpf_program__set_expected_attach_type(p, static_cast<bpf_attach_type>(kUprobeMultiAttachType));
      } else {
        bpf_program__set_autoload(p, false);
      }
    }
    if (probe_cost_bpf__load(s.get()) != 0) s.reset();
    return s;
  };
  std::unique_ptr<probe_cost_bpf, SkelDeleter> skel = load();
  if (!skel && multi) {  // a kernel that refuses the multi-link copies: without them
    multi = false;
    skel = load();
  }
  const int load_errno = errno;
  libbpf_set_print(previous);
  if (!skel) {
    c.error = std::string("cannot load the calibration programs: ") + std::strerror(load_errno);
    return done();
  }
  std::vector<Site> sites = {
      {sw_cal_stub, 0, InsnKind::kCompare, true, 0, {}},
      {sw_cal_stub2, 10, InsnKind::kJcc, true, 0, {}},
      {sw_cal_push, 0, InsnKind::kPush, false, 0, {}},
      {sw_cal_nop, 0, InsnKind::kNop, false, 0, {}},
      {sw_cal_nopl, 0, InsnKind::kNopl, false, 0, {}},
      {sw_cal_jmp, 0, InsnKind::kJmp, false, 0, {}},
      {sw_cal_endbr, 0, InsnKind::kEndbr, false, 0, {}},
  };
  for (Site& s : sites) {
    if (!file_offset_of(s.fn, &s.offset)) {
      c.error = "probe cost not measured: the calibration targets are not in a file mapping";
      return done();
    }
    s.offset += s.delta;
  }
  std::string multi_error;
  if (!multi || !run_with_multi_links(skel.get(), options, sites, multi_error)) {
    run_with_perf_links(skel.get(), options, sites);
  }
  Emulation e;
  e.emulated[static_cast<int>(InsnKind::kCall)] = true;  // branch emulation, as jmp and jcc
  std::string error;
  auto cost = [&](const SiteRun& r, TrapCost& t) {
    t.entry_seconds = std::max(0.0, r.entry.per_call_ns - r.native.per_call_ns) * 1e-9;
    t.return_seconds = std::max(0.0, r.pair.per_call_ns - r.entry.per_call_ns) * 1e-9;
    t.measured = true;
  };
  const SiteRun& cmp = sites[0].run;
  const SiteRun& je = sites[1].run;
  if (!cmp.ok || !je.ok) {
    c.error = "probe cost not measured: " + (cmp.ok ? je.error : cmp.error);
    return done();
  }
  cost(cmp, cmp.entry.stepped ? c.stepped : c.emulated);
  cost(je, je.entry.stepped ? c.stepped : c.emulated);
  for (const Site& s : sites) {
    if (!s.run.ok) {
      if (error.empty()) error = std::string(insn_kind_name(s.kind)) + ": " + s.run.error;
      e.emulated[static_cast<int>(s.kind)] = default_emulation()(s.kind);
      continue;
    }
    e.emulated[static_cast<int>(s.kind)] = !s.run.entry.stepped;
  }
  e.measured = error.empty();
  c.emulation = e;
  c.error = error;
  return done();
#endif
}

std::string describe_calibration(const ProbeCalibration& c) {
  std::string emulated, stepped;
  for (InsnKind k : {InsnKind::kPush, InsnKind::kNop, InsnKind::kNopl, InsnKind::kJcc,
                     InsnKind::kJmp, InsnKind::kEndbr}) {
    std::string& list = c.emulation(k) ? emulated : stepped;
    list += (list.empty() ? "" : ", ") + std::string(insn_kind_name(k));
  }
  std::string s = c.emulation.measured ? "this kernel emulates " : "assumed emulated: ";
  s += (emulated.empty() ? "none" : emulated) + " (single-steps " +
       (stepped.empty() ? "none" : stepped) + ")";
  if (c.emulated.measured || c.stepped.measured) {
    s += "; a probe costs";
    if (c.emulated.measured) {
      s += " " + micros(c.emulated.entry_seconds) + " µs + " + micros(c.emulated.return_seconds) +
           " µs return emulated";
    }
    if (c.stepped.measured) {
      s += std::string(c.emulated.measured ? "," : "") + " " + micros(c.stepped.entry_seconds) +
           " µs + " + micros(c.stepped.return_seconds) + " µs return single-stepped";
    }
  }
  if (!c.error.empty()) s += " (" + c.error + ")";
  return s;
}

}  // namespace stallwatch::trace
