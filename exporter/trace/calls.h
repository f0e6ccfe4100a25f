// The traced CUDA calls: a fixed table whose index is the call id the BPF programs carry as
// bpf_cookie and user space turns back into the `api` and `call` labels. Symbol variants
// (`_ptsz`, `_ptds`) fold into the call they are a variant of. Immutable; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace stallwatch::trace {

enum class Api : std::uint8_t { kRuntime, kDriver, kNccl };

// Which library a file is, from its name or a path's last component: libcudart.so.12 →
// runtime, libcuda.so.1 → driver, libnccl.so.2 → nccl, with any version after ".so" and also
// auditwheel copies named with a hash (libcudart-9335f6a2.so.12). nullopt for anything else:
// libcudart_static.a, libcudadebugger.so.1, libnccl-net.so, libcublas.so.12, ...
std::optional<Api> api_of_library(std::string_view file);

// How nccl.bpf.c reads an NCCL call's arguments (ignored for the other apis).
enum class NcclKind : std::uint8_t {
  kNone,      // not NCCL, or nothing to read (ncclGroupStart/End)
  kOp,        // a collective or point-to-point op: element count, data type, communicator
  kInitRank,  // out-communicator, nranks, rank (ncclCommInitRank*, InitRankScalable)
  kInitAll,   // out-array of communicators, ndev (ranks 0..ndev-1)
  kSplit,     // out-communicator in argument 4; rank learnt later (UserRank/Count)
  kUserRank,  // communicator, out-int rank
  kCount,     // communicator, out-int size
  kDestroy,   // communicator is gone
  kInitScalable,  // as kInitRank; count_arg is the position of the unique-id array
};

struct NcclArgs {
  NcclKind kind = NcclKind::kNone;
  std::uint8_t count_arg = 0;  // 1-based argument positions (x86-64 SysV; 7+ on the stack)
  std::uint8_t dtype_arg = 0;
  std::uint8_t comm_arg = 0;
};

// What the chain rules treat a call as (chains/call_classes.h): a synchronisation waits for the
// GPU, an allocation may grow the allocator's pool, a copy moves data between host and device,
// a graph build captures, instantiates or updates a CUDA Graph (graph_recapture).
enum class CallClass : std::uint8_t { kOther, kSync, kAlloc, kCopy, kGraphBuild };

// What a runtime or driver call does to memory (cuda.bpf.c; SW_MEM_* of bpf/stallwatch.h).
enum class MemOp : std::uint8_t {
  kNone,
  kAlloc,       // (T **out, size_t size, ...): out and size argument positions below
  kAllocPitch,  // (T **out, size_t *pitch, size_t width, size_t height, ...): pitch × height
  kAlloc3D,     // cudaMalloc3D(cudaPitchedPtr *out, cudaExtent extent)
  kFree,        // (T *ptr, ...) or cuMemRelease(handle): pointer argument position below
};

// Where an allocating call's memory lives: the `kind` label of stallwatch_cuda_memory_live_bytes.
enum class MemKind : std::uint8_t { kDevice, kManaged, kHost };
inline constexpr int kMemKinds = 3;
std::string_view mem_kind_name(MemKind kind);  // device, managed, host

struct MemArgs {
  MemOp op = MemOp::kNone;
  std::uint8_t ptr_arg = 0;   // 1-based: the out-pointer (alloc) or the freed pointer (free)
  std::uint8_t size_arg = 0;  // 1-based: the size (kAlloc)
  MemKind kind = MemKind::kDevice;
  bool handle = false;        // the value is a cuMemCreate handle, not an address
};

struct CallInfo {
  std::string_view name;  // the `call` label: the base symbol name
  Api api;
  NcclArgs nccl{};
  CallClass cls = CallClass::kOther;
  MemArgs mem{};
  bool kernel_launch = false;  // launches one kernel: a twin of the other layer's launches
};

// Whose kernel launches get probes (--launch-layer). The runtime's cudaLaunchKernel reaches a
// driver launch (cuLaunchKernel or cuLaunchKernelEx) underneath, so probing both layers traps
// twice per launch: on the H100 hosts of docs/validation.md ~7 µs each, and launches are most
// of a training loop's traced calls. kDriver (the default) probes the driver's launches only:
// one probe pair per launch, and it also sees the launches that never pass the runtime
// (cuBLAS, Triton, JAX call the driver directly). kRuntime probes cudaLaunchKernel only (the
// runtime's name, blind to driver-direct launches); kBoth, both layers, as before issue #40;
// kNone, no launch at all: a launch-bound job pays no trap per launch, and the diagnosis rests
// on the synchronize, copy, allocation and NCCL calls (no launch rate or latency).
// Every other call is probed at both layers: they are rare next to launches (a few % of calls).
enum class LaunchLayer : std::uint8_t { kDriver, kRuntime, kBoth, kNone };
std::string_view launch_layer_name(LaunchLayer layer);  // driver, runtime, both, none
std::optional<LaunchLayer> parse_launch_layer(std::string_view text);

// bpf_cookie of a call's probes: the call id in bits 0-31, then for NCCL count, dtype and comm
// argument positions in bits 32-35, 36-39, 40-43 and the NcclKind in bits 44-47; for a memory
// call of the runtime or driver, pointer and size argument positions in bits 32-35 and 36-39,
// the handle flag in bit 40 and the MemOp in bits 44-47.
std::uint64_t cookie_of(std::uint32_t call_id);
// An NCCL op (kOp): a collective or send/recv, the calls of stallwatch_nccl_op_*.
bool is_nccl_op(std::uint32_t call_id);
// A call that allocates memory (its bytes are counted), and where that memory lives.
bool is_allocating_call(std::uint32_t call_id);
MemKind mem_kind(std::uint32_t call_id);  // kDevice for a call that does not allocate

std::span<const CallInfo> all_calls();
// Whether `call_id` gets probes under `layer`: every call except the kernel launches of the
// layer not chosen. Unknown ids: false.
bool probed_under(std::uint32_t call_id, LaunchLayer layer);
CallClass call_class(std::uint32_t call_id);  // kOther for an unknown id

// The `class` label of a call on /metrics (by default its series are merged per class, issue
// #37): launch (kernel and graph launches), sync, copy, memory (allocation and free),
// graph_build, nccl (every NCCL call), other. "other" for an unknown id.
std::string_view metric_class(std::uint32_t call_id);
std::string_view api_name(Api api);  // the `api` label: runtime, driver, nccl

// Call id for an exported symbol of a library of the given api: the symbol itself or a
// per-thread-default-stream variant of it (suffix _ptsz or _ptds).
std::optional<std::uint32_t> call_for_symbol(std::string_view symbol, Api api);

}  // namespace stallwatch::trace
