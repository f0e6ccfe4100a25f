#include "chains/advice.h"

#include <string_view>

namespace stallwatch::chains {
namespace {

std::string last_component(std::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool in_kubepods(std::string_view cgroup) { return cgroup.find("kubepods") != cgroup.npos; }

std::string line(std::string_view command, std::string_view why) {
  return std::string(command) + "   # " + std::string(why) + "\n";
}

}  // namespace

std::string advise_cpu_contention(const Chain& c, int host_cpus) {
  std::string out;
  const std::string pid = std::to_string(c.pid);
  if (host_cpus >= 3) {
    const std::string mine = "0-" + std::to_string(host_cpus - 2);
    out += line("taskset -acp " + mine + " " + pid,
                "pin " + c.comm + " and its threads to cores " + mine);
  } else {
    out += line("taskset -acp 0 " + pid, "pin " + c.comm + " to core 0");
  }
  const std::string spare = std::to_string(host_cpus >= 2 ? host_cpus - 1 : 0);
  bool same_workload = false;
  size_t shown = 0;
  for (const auto& k : c.contributors) {
    if (k.cgroup == c.identity.cgroup) {
      same_workload = true;
      continue;
    }
    if (shown++ == 3) break;
    const std::string kp = std::to_string(k.pid);
    out += line("renice -n 19 -p " + kp + "; taskset -acp " + spare + " " + kp,
                "lower " + k.comm + " and keep it off the training cores");
    const std::string unit = last_component(k.cgroup);
    if (unit.ends_with(".service")) {
      out += line("systemctl set-property " + unit + " CPUWeight=20 AllowedCPUs=" + spare,
                  "make it last for " + unit);
    } else if (in_kubepods(k.cgroup)) {
      out += "# " + k.comm + " runs in another pod: lower its CPU limit, or schedule it away\n";
    }
  }
  if (same_workload) {
    out += line("DataLoader(num_workers=<free cores - 1>, persistent_workers=True)",
                "workers of the same job compete with the CUDA-issuing thread");
  }
  if (in_kubepods(c.identity.cgroup)) {
    out += line("resources: {requests: {cpu: \"6\"}, limits: {cpu: \"6\"}}",
                "Guaranteed QoS with integer CPUs: the static CPU manager gives exclusive cores");
  }
  if (c.contributors.empty()) {
    out += line("stallwatch explain --per-process --since 15m",
                "find what else runs on the workload's CPUs (top -H also helps)");
  }
  return out;
}

std::string advise_alloc_spike(const Chain&) {
  std::string out;
  out += line("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
              "grow the caching allocator's pool without a new cudaMalloc per size");
  out += "# warm the allocator: run one step at the largest batch and sequence length first\n";
  out += "# remove torch.cuda.empty_cache() from the training loop (it returns memory that "
         "cudaMalloc must take again)\n";
  out += "# pad or bucket variable-length inputs to a few fixed shapes\n";
  return out;
}

std::string advise_cold_start(const Chain&) {
  std::string out;
  out += "# warm up before serving or timing: run a few untimed iterations after start\n";
  out += line("DataLoader(persistent_workers=True)",
              "keep processes alive between epochs and jobs instead of paying start-up again");
  out += line("export CUDA_MODULE_LOADING=LAZY",
              "load only the kernels used (the default in recent CUDA releases)");
  return out;
}

std::string advise_memcpy_bound(const Chain&) {
  std::string out;
  out += line("DataLoader(pin_memory=True); batch.to('cuda', non_blocking=True)",
              "page-locked buffers and asynchronous copies");
  out += "# overlap copies with compute: prefetch the next batch on a separate "
         "torch.cuda.Stream\n";
  out += "# shrink transfers: copy uint8/fp16 and convert on the GPU; move preprocessing to "
         "the GPU (NVIDIA DALI)\n";
  out += "# avoid per-step .item() / .cpu() calls that copy results back synchronously\n";
  return out;
}

std::string advise_gpu_contention(const Chain& c) {
  std::string out;
  out += line("CUDA_VISIBLE_DEVICES=<gpu>",
              "give each job its own GPU (in Kubernetes: an nvidia.com/gpu limit per pod)");
  out += "# or share it on purpose: MIG partitions (nvidia-smi mig) on A100/H100, or MPS for "
         "cooperating processes\n";
  for (const auto& k : c.contributors) {
    out += "# move " + k.comm + " (PID " + std::to_string(k.pid) + ", " + k.cgroup +
           ") to another GPU or node\n";
    break;
  }
  return out;
}

std::string advise_memory_pressure(const Chain& c) {
  std::string out;
  const std::string& cg = c.identity.cgroup;
  const bool memcg = c.evidence_value("memcg_reclaim_s") >= c.evidence_value("direct_reclaim_s");
  const bool oom = c.evidence_value("oom_kills") > 0;
  if (oom) {
    out += line("journalctl -k | grep -iE 'out of memory|oom-kill'",
                "what the kernel killed, at which usage and limit");
  }
  if (memcg || oom) {
    const std::string unit = last_component(cg);
    if (in_kubepods(cg)) {
      out += line("resources: {requests: {memory: \"<more>\"}, limits: {memory: \"<more>\"}}",
                  "the container reclaims (or is killed) at its memory limit: raise it");
    } else if (unit.ends_with(".service") || unit.ends_with(".scope")) {
      out += line("systemctl set-property " + unit + " MemoryMax=<more> MemoryHigh=<more>",
                  "the unit reclaims (or is killed) at its memory limit: raise it");
    } else {
      out += line("cat /sys/fs/cgroup" + cg + "/memory.max /sys/fs/cgroup" + cg +
                      "/memory.stat",
                  "the cgroup reclaims at its limit: raise memory.max or shrink the job");
    }
  }
  if (!memcg) {
    out += "# the node itself ran short (direct reclaim): check free -g and vmstat 1; move other "
           "memory-hungry workloads away or add memory\n";
  }
  out += line("DataLoader(num_workers=<fewer>, prefetch_factor=2)",
              "every worker holds prefetch_factor batches and its own copy of the dataset object");
  out += "# pin_memory=True page-locks every prefetched batch: it cannot be reclaimed or swapped\n";
  out += "# keep the Dataset in numpy arrays or memory-mapped files, not Python lists of objects "
         "(reference counts make every worker copy them)\n";
  return out;
}

std::string advise_io_stall(const Chain& c, const std::string& device) {
  std::string out;
  out += line("DataLoader(num_workers=<more>, prefetch_factor=4, persistent_workers=True)",
              "more reads in flight hide the storage latency from the training loop");
  if (!device.empty()) {
    out += line("iostat -x 1 " + device,
                "is " + device + " saturated (%util, aqu-sz) or just slow (r_await)?");
  }
  out += "# copy the dataset to local NVMe first, or keep it in the page cache "
         "(vmtouch -t DATASET_DIR); read-ahead large sequential shards (WebDataset, "
         "TFRecord) instead of many small files\n";
  if (in_kubepods(c.identity.cgroup)) {
    out += "# in Kubernetes: a local-NVMe emptyDir or hostPath cache instead of network "
           "storage for the dataset\n";
  }
  out += line("ionice -c3 -p <PID>",
              "lower the I/O priority of other processes that read or write the same device");
  return out;
}

std::string advise_network_retransmit(const Chain& c) {
  std::string out;
  out += line("ethtool -S <iface> | grep -iE 'err|drop|discard|crc'",
              "NIC and link errors that cause the retransmits");
  out += line("ss -ti state established", "which connections retransmit (retrans:, rto:)");
  out += line("ip link show <iface>",
              "MTU must match along the path, switch ports included (jumbo frames)");
  if (c.api == "nccl") {
    out += line("NCCL_SOCKET_IFNAME=<fast iface> NCCL_DEBUG=INFO",
                "keep NCCL on the data-plane network and see which transport it chose");
    out += line("NCCL_IB_HCA=<mlx5_0,...>",
                "use RDMA (InfiniBand/RoCE) where the hosts have it instead of TCP sockets");
  } else {
    out += "# the retransmits of this workload coincide with slower synchronisation: check what "
           "it waits for over the network (parameter server, remote storage, data service)\n";
  }
  return out;
}

std::string advise_nccl_straggler(const Chain& c) {
  std::string out;
  const std::string pid = std::to_string(c.pid);
  out += line("stallwatch explain --per-process --since 15m",
              "other chains on PID " + pid + " (cpu_contention, memory_pressure) are its host cause");
  if (c.evidence_value("op_runnable_share") >= 0.1) {
    out += line("taskset -acp <cores of its GPU's NUMA node> " + pid,
                "the rank waits for a CPU inside NCCL calls");
  }
  out += line("nvidia-smi topo -m",
              "is this rank's GPU on the far NUMA node or behind another PCIe switch than its NIC?");
  out += line("numactl --cpunodebind=<node> --membind=<node>",
              "start each rank on its GPU's NUMA node (torchrun: one launcher per node or a wrapper)");
  out += line("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET",
              "which NIC and transport each rank chose; set CUDA_VISIBLE_DEVICES / NCCL_IB_HCA so "
              "every rank uses the NIC next to its GPU");
  return out;
}

}  // namespace stallwatch::chains
