#include "demo/synthetic.h"

#include <algorithm>
#include <set>
#include <cstring>

#include "identity/cgroup_identity.h"
#include "trace/calls.h"
#include "trace/histogram.h"

namespace stallwatch::demo {
namespace {


std::uint32_t call_id(std::string_view name) {
  auto calls = trace::all_calls();
  for (std::uint32_t i = 0; i < calls.size(); i++) {
    if (calls[i].name == name) return i;
  }
  return 0;
}

// `n` values of `ns` each into a cumulative histogram (CallTotals, IoTotals, NcclTotals).
template <typename T>
void add_values(T& t, std::uint64_t n, std::uint64_t ns) {
  if (n == 0) return;
  t.count += n;
  t.sum_ns += n * ns;
  t.buckets[trace::bucket_of_ns(ns)] += n;
  t.max_ns = std::max(t.max_ns, ns);
}

// Typical and tail values of a mix: how many are slow.
std::uint64_t slow_count(std::uint64_t count, std::uint64_t tail_ns, double tail_share) {
  if (!tail_ns) return 0;
  const auto slow = static_cast<std::uint64_t>(static_cast<double>(count) * tail_share + 0.5);
  return std::min(slow, count);
}


}  // namespace

void SyntheticHost::add_process(const std::string& cgroup_in, int pid, const std::string& comm_in,
                                std::int64_t start_ns) {
  const std::string cgroup = rename_cgroup_ ? rename_cgroup_(cgroup_in) : cgroup_in;
  const std::string comm = rename_comm_ ? rename_comm_(comm_in) : comm_in;
  Proc& p = procs_[pid];
  p.cgroup = cgroup;
  p.comm = comm;
  p.start_ns = start_ns;
  cgroups_[cgroup];
}

void SyntheticHost::exit_process(int pid) {
  auto it = procs_.find(pid);
  if (it != procs_.end()) {
    SeriesTotals& kept = cgroups_[it->second.cgroup].totals;
    for (const auto& [id, t] : it->second.calls) kept.calls[id].add(t);
    for (const auto& [key, t] : it->second.nccl) kept.nccl[key].add(t);
    kept.offcpu.add(it->second.offcpu);
    procs_.erase(it);
  }
  auto io = io_procs_.find(pid);
  if (io != io_procs_.end()) {
    SeriesTotals& kept = cgroups_[io->second.cgroup].totals;
    for (const auto& [key, t] : io->second.io) kept.io[key].add(t);
    io_procs_.erase(io);
  }
}

void SyntheticHost::calls(int pid, const CallMix& mix) {
  auto it = procs_.find(pid);
  if (it == procs_.end() || mix.count == 0) return;
  const std::uint32_t id = call_id(mix.call);
  CallTotals& t = it->second.calls[id];
  const std::uint64_t before = t.sum_ns;
  const std::uint64_t slow = slow_count(mix.count, mix.tail_ns, mix.tail_share);
  add_values(t, mix.count - slow, mix.typical_ns);
  add_values(t, slow, mix.tail_ns);
  const double spent = static_cast<double>(t.sum_ns - before);
  t.runnable_ns += static_cast<std::uint64_t>(spent * mix.runnable_share);
  t.blocked_ns += static_cast<std::uint64_t>(spent * mix.blocked_share);
  // The ring buffer sees calls of 1 ms and more one by one; send a few, as a real host would.
  const std::uint64_t slowest = slow ? mix.tail_ns : mix.typical_ns;
  const std::uint64_t over = slow ? slow : (mix.typical_ns >= 1000000 ? mix.count : 0);
  if (slowest < 1000000) return;
  auto& slow_here = slow_[{pid, id}];
  slow_here.first += over;
  slow_here.second += over * slowest;
  for (std::uint64_t i = 0; i < std::min<std::uint64_t>(over, 16); i++) {
    trace::OutlierRecord e{};
    e.ts_ns = static_cast<std::uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
    e.tgid = static_cast<std::uint32_t>(pid);
    e.tid = static_cast<std::uint32_t>(pid);
    e.call_id = id;
    e.duration_ns = slowest;
    e.runnable_ns = static_cast<std::uint64_t>(static_cast<double>(slowest) * mix.runnable_share);
    e.blocked_ns = static_cast<std::uint64_t>(static_cast<double>(slowest) * mix.blocked_share);
    e.preemptions = mix.runnable_share > 0 ? 3 : 0;
    std::strncpy(e.comm, it->second.comm.c_str(), sizeof(e.comm) - 1);
    outliers_.add(e);
  }
}

namespace {

// Where a PyTorch training script would make the call: its line, the caller's, the interpreter.
std::vector<chains::SiteFrame> synthetic_frames(std::string_view call) {
  auto py = [](const char* fn, const char* file, int line) {
    chains::SiteFrame f;
    f.python = true;
    f.function = fn;
    f.file = file;
    f.line = line;
    return f;
  };
  chains::SiteFrame eval;
  eval.function = "_PyEval_EvalFrameDefault";
  eval.module = "libpython3.11.so.1.0";
  eval.offset = 0x2a1;
  if (call.starts_with("nccl")) {
    return {py("all_reduce_grads", "/workspace/dist.py", 77), py("train_step", "/workspace/train.py", 142), eval};
  }
  if (call.find("Memcpy") != std::string_view::npos) {
    return {py("Batch.to_device", "/workspace/data.py", 58), py("train_step", "/workspace/train.py", 131), eval};
  }
  if (call.find("Malloc") != std::string_view::npos || call.find("Alloc") != std::string_view::npos ||
      call.find("MemCreate") != std::string_view::npos) {
    return {py("Model.alloc_activations", "/workspace/model.py", 311), py("train_step", "/workspace/train.py", 136), eval};
  }
  if (call.find("Graph") != std::string_view::npos) {
    return {py("capture_step", "/workspace/graphs.py", 44), py("train_step", "/workspace/train.py", 139), eval};
  }
  return {py("train_step", "/workspace/train.py", 142), py("main", "/workspace/train.py", 187), eval};
}

}  // namespace

chains::OutlierWindow SyntheticHost::drain_outliers() {
  chains::OutlierWindow w = outliers_.drain();
  const auto calls = trace::all_calls();
  for (const auto& [key, v] : slow_) {
    if (v.first == 0 || key.second >= calls.size()) continue;
    chains::ResolvedSite r;
    r.pid = key.first;
    r.call_id = key.second;
    r.site.call = std::string(calls[key.second].name);
    r.site.count = v.first;
    r.site.stalled_ns = v.second;
    r.site.frames = synthetic_frames(r.site.call);
    w.resolved.push_back(std::move(r));
  }
  slow_.clear();
  return w;
}

void SyntheticHost::memory(int pid, std::string_view call, std::uint64_t allocated,
                           std::uint64_t freed, std::uint64_t failures,
                           std::uint64_t failed_bytes) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return;
  CallTotals& t = it->second.calls[call_id(call)];
  t.alloc_bytes += allocated;
  t.freed_bytes += freed;
  t.alloc_failures += failures;
  if (failures > 0) t.failed_bytes = failed_bytes;
}

void SyntheticHost::offcpu(int pid, std::uint64_t runnable_ns, std::uint64_t blocked_ns,
                           std::uint64_t oncpu_ns, std::uint64_t preemptions) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return;
  it->second.offcpu.add(OffcpuTotals{runnable_ns, blocked_ns, oncpu_ns, preemptions});
}

void SyntheticHost::preempted_by(int victim, int pid, const std::string& comm_in,
                                 const std::string& cgroup_in, std::uint64_t runnable_ns,
                                 std::uint64_t count, int ppid, bool kernel_thread) {
  const std::string cgroup = rename_cgroup_ ? rename_cgroup_(cgroup_in) : cgroup_in;
  const std::string comm = rename_comm_ ? rename_comm_(comm_in) : comm_in;
  auto it = procs_.find(victim);
  if (it == procs_.end()) return;
  Preemptor& p = it->second.preemptors[pid];
  p.victim_pid = victim;
  p.pid = pid;
  p.comm = comm;
  p.cgroup = cgroup;
  p.ppid = ppid;
  p.kernel_thread = kernel_thread;
  const identity::Identity where = identity::parse_cgroup_path(cgroup);
  p.pod_uid = where.pod_uid;
  p.unit = where.systemd_unit;
  p.runnable_ns += runnable_ns;
  p.count += count;
}

void SyntheticHost::nccl(int pid, const NcclMix& mix) {
  auto it = procs_.find(pid);
  if (it == procs_.end() || mix.count == 0) return;
  // Every NCCL call is also a call of the series (api nccl), with its off-CPU time.
  calls(pid, CallMix{mix.op, mix.count, mix.typical_ns, mix.tail_ns, mix.tail_share,
                     mix.runnable_share, mix.blocked_share});
  NcclTotals& t = it->second.nccl[NcclKey{call_id(mix.op), mix.rank, mix.world_size}];
  const std::uint64_t slow = slow_count(mix.count, mix.tail_ns, mix.tail_share);
  add_values(t, mix.count - slow, mix.typical_ns);
  add_values(t, slow, mix.tail_ns);
  t.bytes += mix.count * mix.bytes_each;
}

void SyntheticHost::inflight(int pid, std::string_view call, const InflightCall& open) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return;
  InflightCall c = open;
  c.pid = pid;
  c.call_id = call_id(call);
  it->second.inflight.push_back(std::move(c));
}

void SyntheticHost::io(const std::string& cgroup_in, int pid, const std::string& comm_in,
                       const IoMix& mix) {
  const std::string cgroup = rename_cgroup_ ? rename_cgroup_(cgroup_in) : cgroup_in;
  const std::string comm = rename_comm_ ? rename_comm_(comm_in) : comm_in;
  if (mix.count == 0) return;
  IoProc& p = io_procs_[pid];
  p.cgroup = cgroup;
  p.comm = comm;
  cgroups_[cgroup];
  IoTotals& t = p.io[IoKey{mix.device, mix.op}];
  const std::uint64_t slow = slow_count(mix.count, mix.tail_ns, mix.tail_share);
  add_values(t, mix.count - slow, mix.typical_ns);
  add_values(t, slow, mix.tail_ns);
  t.bytes += mix.count * mix.bytes_each;
}

void SyntheticHost::reclaim(const std::string& cgroup_in, std::uint64_t direct_ns,
                            std::uint64_t memcg_ns, std::uint64_t cuda_ns,
                            std::uint64_t reclaims) {
  const std::string cgroup = rename_cgroup_ ? rename_cgroup_(cgroup_in) : cgroup_in;
  ReclaimTotals& r = cgroups_[cgroup].totals.reclaim;
  r.direct_ns += direct_ns;
  r.memcg_ns += memcg_ns;
  r.cuda_ns += std::min(cuda_ns, direct_ns + memcg_ns);
  if (memcg_ns >= direct_ns) {
    r.memcg_count += reclaims;
  } else {
    r.direct_count += reclaims;
  }
}

void SyntheticHost::oom_kill(const std::string& cgroup_in, int pid, const std::string& comm_in,
                             std::int64_t at_ns) {
  const std::string cgroup = rename_cgroup_ ? rename_cgroup_(cgroup_in) : cgroup_in;
  const std::string comm = rename_comm_ ? rename_comm_(comm_in) : comm_in;
  SeriesTotals& kept = cgroups_[cgroup].totals;
  const bool cuda = procs_.count(pid) > 0;
  kept.oom_kills++;
  if (cuda) kept.oom_kills_cuda++;
  kept.oom_victims.push_back(OomKill{pid, comm, cuda, at_ns});
  if (kept.oom_victims.size() > kMaxOomVictims) kept.oom_victims.erase(kept.oom_victims.begin());
  exit_process(pid);
}

void SyntheticHost::pressure(const std::string& cgroup_in, const PressureTotals& add) {
  const std::string cgroup = rename_cgroup_ ? rename_cgroup_(cgroup_in) : cgroup_in;
  PressureTotals& p = cgroups_[cgroup].pressure;
  p.known = true;
  p.cpu_some_ns += add.cpu_some_ns;
  p.cpu_full_ns += add.cpu_full_ns;
  p.memory_some_ns += add.memory_some_ns;
  p.memory_full_ns += add.memory_full_ns;
  p.io_some_ns += add.io_some_ns;
  p.io_full_ns += add.io_full_ns;
}

void SyntheticHost::retransmits(const std::string& cgroup_in, std::uint64_t ipv4,
                                std::uint64_t ipv6) {
  const std::string cgroup = rename_cgroup_ ? rename_cgroup_(cgroup_in) : cgroup_in;
  SeriesTotals& kept = cgroups_[cgroup].totals;
  kept.tcp_retransmits_ipv4 += ipv4;
  kept.tcp_retransmits_ipv6 += ipv6;
}

void SyntheticHost::cpu_limit(const std::string& cgroup_in, double cores, std::uint64_t periods,
                              std::uint64_t throttled_periods, std::uint64_t throttled_ns) {
  const std::string cgroup = rename_cgroup_ ? rename_cgroup_(cgroup_in) : cgroup_in;
  host::CpuLimitTotals& l = cgroups_[cgroup].cpu_limit;
  l.known = true;
  l.period_us = 100000;
  l.quota_us = static_cast<std::uint64_t>(cores * 100000);
  l.limit_cores = cores;
  l.limited_at = cgroup;
  l.limited_dir = "/sys/fs/cgroup" + cgroup;
  l.periods += periods;
  l.throttled_periods += throttled_periods;
  l.throttled_ns += throttled_ns;
}

void SyntheticHost::gpu(const host::GpuReading& reading, double held_share,
                        std::int64_t window_ns) {
  if (gpus_.gpus.size() <= reading.index) gpus_.gpus.resize(reading.index + 1);
  gpus_.nvml = true;
  host::GpuTotals& t = gpus_.gpus[reading.index];
  t.last = reading;
  const auto w = static_cast<std::uint64_t>(window_ns);
  const auto held = static_cast<std::uint64_t>(held_share * static_cast<double>(w));
  t.sampled_ns += w;
  t.samples += static_cast<std::uint64_t>(window_ns / 250000000);
  if (host::held_reasons(reading.reasons) != 0) {
    t.held_ns += held;
    t.held_clock_mhz_ns += static_cast<double>(reading.sm_clock_mhz) * static_cast<double>(held);
  }
  for (size_t k = 0; k < host::kClockReasons.size(); ++k) {
    if (reading.reasons & host::kClockReasons[k].bit) t.reason_ns[k] += held;
  }
}

void SyntheticHost::xid(unsigned gpu, int code, const std::string& text, std::int64_t at_ns,
                        int pid) {
  host::XidEvent x;
  x.seq = gpus_.xids.empty() ? 1 : gpus_.xids.back().seq + 1;
  x.unix_ns = at_ns;
  x.gpu = static_cast<int>(gpu);
  x.code = code;
  x.pid = pid;
  x.text = text;
  if (gpu < gpus_.gpus.size()) {
    const std::string& bus = gpus_.gpus[gpu].last.bus_id;
    x.pci = bus.size() > 4 ? bus.substr(4, 10) : bus;  // "00000000:3B:00.0" → "0000:3b:00"
    for (char& c : x.pci) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    x.address_known = host::parse_pci_address(bus, x.address);
  }
  auto it = std::find_if(gpus_.xid_counts.begin(), gpus_.xid_counts.end(),
                         [&](const host::XidCount& c) { return c.gpu == x.gpu && c.code == code; });
  if (it == gpus_.xid_counts.end()) {
    gpus_.xid_counts.push_back(host::XidCount{x.gpu, x.pci, code, 0});
    it = gpus_.xid_counts.end() - 1;
  }
  ++it->count;
  gpus_.kmsg = true;
  gpus_.xids.push_back(std::move(x));
}

std::shared_ptr<Snapshot> SyntheticHost::snapshot(std::chrono::system_clock::time_point taken,
                                                  std::chrono::nanoseconds window) {
  auto snap = std::make_shared<Snapshot>();
  snap->node = "demo-node";  // stallwatch_job_info: one node in a demo
  snap->sequence = ++sequence_;
  snap->taken = taken;
  snap->window = window;
  snap->cpu_stolen = std::exchange(stolen_, {});
  snap->gpu = gpus_;
  for (const auto& g : gpus_.gpus) {
    for (int pid : g.last.pids) {
      if (procs_.count(pid)) snap->gpu.process_gpus[pid].push_back(g.last.index);
    }
  }
  for (auto& [pid, p] : procs_) {
    Series& s = snap->series[p.cgroup];
    for (auto& c : std::exchange(p.inflight, {})) s.inflight.push_back(std::move(c));
    // Its communicators, as the kernel's nccl_comms map knows them from the setup calls.
    std::set<std::pair<int, int>> comms;
    for (const auto& [key, t] : p.nccl) {
      if (key.rank >= 0 && comms.insert({key.rank, key.world_size}).second) {
        // One communicator per world size, with the same commHash on every rank.
        snap->nccl_members.push_back(NcclMember{p.cgroup, pid, key.rank, key.world_size,
                                                0x5eed000000000000ULL + key.world_size,
                                                trace::JobKeys{"demo", std::to_string(key.rank),
                                                               std::to_string(key.rank),
                                                               std::to_string(key.world_size)}});
      }
    }
    for (const auto& [id, t] : p.calls) {
      s.calls[id].add(t);
      s.processes.push_back(ProcessCall{pid, id, t});
    }
    s.offcpu.add(p.offcpu);
    s.process_info[pid] = ProcessInfo{pid, p.comm, p.start_ns, p.offcpu, {}};
    for (const auto& [ppid, pre] : p.preemptors) s.preemptors.push_back(pre);
    for (const auto& [key, t] : p.nccl) {
      s.nccl[key].add(t);
      s.nccl_processes.push_back(ProcessNccl{pid, key, t});
    }
  }
  for (const auto& [pid, p] : io_procs_) {
    Series& s = snap->series[p.cgroup];
    for (const auto& [key, t] : p.io) {
      s.io[key].add(t);
      s.io_processes.push_back(ProcessIo{pid, p.comm, key, t});
    }
  }
  for (const auto& [label, cg] : cgroups_) {
    Series& s = snap->series[label];
    s.add(cg.totals);  // as the collector adds a cgroup's retired totals
    s.pressure = cg.pressure;
    s.cpu_limit = cg.cpu_limit;
  }
  for (auto& [label, s] : snap->series) {
    s.identity = identity::parse_cgroup_path(label);
    s.identity.cgroup = label;
    std::sort(s.preemptors.begin(), s.preemptors.end(),
              [](const Preemptor& a, const Preemptor& b) { return a.runnable_ns > b.runnable_ns; });
    if (s.preemptors.size() > 10) s.preemptors.resize(10);
  }
  std::uint64_t processes = 0;
  for (const auto& [label, s] : snap->series) processes += s.process_info.size();
  snap->traced_processes = processes;
  snap->attached_libraries = 2;
  snap->attached_probes = 2 * trace::all_calls().size();
  snap->emulated_probes = snap->attached_probes;  // a host where every site is emulated
  // What the development VM measured at start (trace/probe_cost.h), rounded.
  snap->trap_cost_emulated = {0.9e-6, 0.3e-6, true};
  snap->trap_cost_stepped = {9.5e-6, 0.35e-6, true};
  snap->outliers = outliers_.total();
  snap->ready = true;
  return snap;
}

}  // namespace stallwatch::demo
