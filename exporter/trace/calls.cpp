#include "trace/calls.h"

#include <array>

extern "C" {
#include <linux/types.h>

#include "bpf/stallwatch.h"
}

namespace stallwatch::trace {
namespace {

static_assert(static_cast<int>(MemOp::kAlloc) == SW_MEM_ALLOC);
static_assert(static_cast<int>(MemOp::kAllocPitch) == SW_MEM_ALLOC_PITCH);
static_assert(static_cast<int>(MemOp::kAlloc3D) == SW_MEM_ALLOC_3D);
static_assert(static_cast<int>(MemOp::kFree) == SW_MEM_FREE);

constexpr MemArgs kFree1{MemOp::kFree, 1};
constexpr MemArgs kHostAlloc{MemOp::kAlloc, 1, 2, MemKind::kHost};

// Name, api, NCCL argument positions, the class the chain rules read and what the call does to
// memory (calls.h). New calls go at the end: the table's order is the call ids'.
constexpr std::array kCalls = {
    CallInfo{"cudaMalloc", Api::kRuntime, {}, CallClass::kAlloc, {MemOp::kAlloc, 1, 2}},
    CallInfo{"cudaFree", Api::kRuntime, {}, CallClass::kOther, kFree1},
    CallInfo{"cudaMallocManaged", Api::kRuntime, {}, CallClass::kAlloc,
             {MemOp::kAlloc, 1, 2, MemKind::kManaged}},
    CallInfo{"cudaMallocAsync", Api::kRuntime, {}, CallClass::kAlloc, {MemOp::kAlloc, 1, 2}},
    CallInfo{"cudaFreeAsync", Api::kRuntime, {}, CallClass::kOther, kFree1},
    CallInfo{"cudaLaunchKernel", Api::kRuntime, {}, CallClass::kOther, {}, true},
    CallInfo{"cudaMemcpy", Api::kRuntime, {}, CallClass::kCopy},
    CallInfo{"cudaMemcpyAsync", Api::kRuntime, {}, CallClass::kCopy},
    CallInfo{"cudaMemset", Api::kRuntime},
    CallInfo{"cudaStreamSynchronize", Api::kRuntime, {}, CallClass::kSync},
    CallInfo{"cudaDeviceSynchronize", Api::kRuntime, {}, CallClass::kSync},
    CallInfo{"cudaEventSynchronize", Api::kRuntime, {}, CallClass::kSync},
    CallInfo{"cudaGraphLaunch", Api::kRuntime},
    CallInfo{"cuLaunchKernel", Api::kDriver, {}, CallClass::kOther, {}, true},
    CallInfo{"cuLaunchKernelEx", Api::kDriver, {}, CallClass::kOther, {}, true},
    CallInfo{"cuMemAlloc_v2", Api::kDriver, {}, CallClass::kAlloc, {MemOp::kAlloc, 1, 2}},
    CallInfo{"cuMemFree_v2", Api::kDriver, {}, CallClass::kOther, kFree1},
    CallInfo{"cuMemcpy", Api::kDriver, {}, CallClass::kCopy},
    CallInfo{"cuMemcpyAsync", Api::kDriver, {}, CallClass::kCopy},
    CallInfo{"cuMemcpyHtoD_v2", Api::kDriver, {}, CallClass::kCopy},
    CallInfo{"cuMemcpyDtoH_v2", Api::kDriver, {}, CallClass::kCopy},
    CallInfo{"cuCtxSynchronize", Api::kDriver, {}, CallClass::kSync},
    CallInfo{"cuStreamSynchronize", Api::kDriver, {}, CallClass::kSync},
    CallInfo{"cuEventSynchronize", Api::kDriver, {}, CallClass::kSync},
    CallInfo{"cuGraphLaunch", Api::kDriver},
    // NCCL (nccl.h of NCCL 2.2x): argument positions of the x86-64 calling convention. The
    // 128-byte ncclUniqueId of the InitRank calls goes on the stack, so `rank` stays third.
    CallInfo{"ncclAllReduce", Api::kNccl, {NcclKind::kOp, 3, 4, 6}},
    CallInfo{"ncclAllGather", Api::kNccl, {NcclKind::kOp, 3, 4, 5}},
    CallInfo{"ncclReduceScatter", Api::kNccl, {NcclKind::kOp, 3, 4, 6}},
    CallInfo{"ncclBroadcast", Api::kNccl, {NcclKind::kOp, 3, 4, 6}},
    CallInfo{"ncclBcast", Api::kNccl, {NcclKind::kOp, 2, 3, 5}},
    CallInfo{"ncclReduce", Api::kNccl, {NcclKind::kOp, 3, 4, 7}},
    CallInfo{"ncclAlltoAll", Api::kNccl, {NcclKind::kOp, 3, 4, 5}},
    CallInfo{"ncclGather", Api::kNccl, {NcclKind::kOp, 3, 4, 6}},
    CallInfo{"ncclScatter", Api::kNccl, {NcclKind::kOp, 3, 4, 6}},
    CallInfo{"ncclSend", Api::kNccl, {NcclKind::kOp, 2, 3, 5}},
    CallInfo{"ncclRecv", Api::kNccl, {NcclKind::kOp, 2, 3, 5}},
    CallInfo{"ncclGroupStart", Api::kNccl},
    CallInfo{"ncclGroupEnd", Api::kNccl},
    CallInfo{"ncclCommInitRank", Api::kNccl, {NcclKind::kInitRank, 0, 0, 1}},
    CallInfo{"ncclCommInitRankConfig", Api::kNccl, {NcclKind::kInitRank, 0, 0, 1}},
    CallInfo{"ncclCommInitRankScalable", Api::kNccl, {NcclKind::kInitScalable, 5, 0, 1}},
    CallInfo{"ncclCommInitAll", Api::kNccl, {NcclKind::kInitAll, 0, 0, 1}},
    CallInfo{"ncclCommSplit", Api::kNccl, {NcclKind::kSplit, 0, 0, 4}},
    CallInfo{"ncclCommUserRank", Api::kNccl, {NcclKind::kUserRank, 0, 0, 1}},
    CallInfo{"ncclCommCount", Api::kNccl, {NcclKind::kCount, 0, 0, 1}},
    CallInfo{"ncclCommDestroy", Api::kNccl, {NcclKind::kDestroy, 0, 0, 1}},
    CallInfo{"ncclCommAbort", Api::kNccl, {NcclKind::kDestroy, 0, 0, 1}},
    // Memory (issue #20), signatures of cuda_runtime_api.h and cuda.h of CUDA 12/13.
    CallInfo{"cudaMallocHost", Api::kRuntime, {}, CallClass::kAlloc, kHostAlloc},
    CallInfo{"cudaHostAlloc", Api::kRuntime, {}, CallClass::kAlloc, kHostAlloc},
    CallInfo{"cudaFreeHost", Api::kRuntime, {}, CallClass::kOther, kFree1},
    CallInfo{"cudaMallocPitch", Api::kRuntime, {}, CallClass::kAlloc, {MemOp::kAllocPitch}},
    CallInfo{"cudaMalloc3D", Api::kRuntime, {}, CallClass::kAlloc, {MemOp::kAlloc3D}},
    CallInfo{"cuMemAllocManaged", Api::kDriver, {}, CallClass::kAlloc,
             {MemOp::kAlloc, 1, 2, MemKind::kManaged}},
    CallInfo{"cuMemAllocAsync", Api::kDriver, {}, CallClass::kAlloc, {MemOp::kAlloc, 1, 2}},
    CallInfo{"cuMemFreeAsync", Api::kDriver, {}, CallClass::kOther, kFree1},
    CallInfo{"cuMemAllocHost_v2", Api::kDriver, {}, CallClass::kAlloc, kHostAlloc},
    CallInfo{"cuMemHostAlloc", Api::kDriver, {}, CallClass::kAlloc, kHostAlloc},
    CallInfo{"cuMemFreeHost", Api::kDriver, {}, CallClass::kOther, kFree1},
    CallInfo{"cuMemAllocPitch_v2", Api::kDriver, {}, CallClass::kAlloc, {MemOp::kAllocPitch}},
    // Physical memory of the virtual-memory API (PyTorch's expandable_segments, NCCL):
    // cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, prop, flags); cuMemMap
    // and cuMemUnmap only map it, no new bytes.
    CallInfo{"cuMemCreate", Api::kDriver, {}, CallClass::kAlloc,
             {MemOp::kAlloc, 1, 2, MemKind::kDevice, true}},
    CallInfo{"cuMemRelease", Api::kDriver, {}, CallClass::kOther,
             {MemOp::kFree, 1, 0, MemKind::kDevice, true}},
    // CUDA Graph capture, instantiation and update (graph_recapture); the launches are above.
    CallInfo{"cudaStreamBeginCapture", Api::kRuntime, {}, CallClass::kGraphBuild},
    CallInfo{"cudaStreamEndCapture", Api::kRuntime, {}, CallClass::kGraphBuild},
    CallInfo{"cudaGraphInstantiate", Api::kRuntime, {}, CallClass::kGraphBuild},
    CallInfo{"cudaGraphInstantiateWithFlags", Api::kRuntime, {}, CallClass::kGraphBuild},
    CallInfo{"cudaGraphInstantiateWithParams", Api::kRuntime, {}, CallClass::kGraphBuild},
    CallInfo{"cudaGraphExecUpdate", Api::kRuntime, {}, CallClass::kGraphBuild},
    CallInfo{"cuStreamBeginCapture_v2", Api::kDriver, {}, CallClass::kGraphBuild},
    CallInfo{"cuStreamEndCapture", Api::kDriver, {}, CallClass::kGraphBuild},
    CallInfo{"cuGraphInstantiateWithFlags", Api::kDriver, {}, CallClass::kGraphBuild},
    CallInfo{"cuGraphInstantiateWithParams", Api::kDriver, {}, CallClass::kGraphBuild},
    CallInfo{"cuGraphExecUpdate_v2", Api::kDriver, {}, CallClass::kGraphBuild},
};

// `name` is `stem` + ".so" + optional ".version", or an auditwheel copy
// `stem` + "-" + hash (at least 6 lowercase hex digits) + ".so" + optional ".version".
// "libcuda" must not match "libcudart" or "libcudadebugger", nor "libnccl" match "libnccl-net".
bool is_library(std::string_view name, std::string_view stem) {
  if (!name.starts_with(stem)) return false;
  std::string_view rest = name.substr(stem.size());
  if (rest.starts_with('-')) {
    const size_t dot = rest.find('.');
    if (dot == std::string_view::npos) return false;
    const std::string_view hash = rest.substr(1, dot - 1);
    if (hash.size() < 6 || hash.find_first_not_of("0123456789abcdef") != hash.npos) return false;
    rest.remove_prefix(dot);
  }
  return rest == ".so" || rest.starts_with(".so.");
}

}  // namespace

std::optional<Api> api_of_library(std::string_view file) {
  const size_t slash = file.rfind('/');
  if (slash != std::string_view::npos) file.remove_prefix(slash + 1);
  if (is_library(file, "libcudart")) return Api::kRuntime;
  if (is_library(file, "libcuda")) return Api::kDriver;
  if (is_library(file, "libnccl")) return Api::kNccl;
  return std::nullopt;
}

std::span<const CallInfo> all_calls() { return kCalls; }

bool probed_under(std::uint32_t call_id, LaunchLayer layer) {
  if (call_id >= kCalls.size()) return false;
  const CallInfo& c = kCalls[call_id];
  if (!c.kernel_launch || layer == LaunchLayer::kBoth) return true;
  if (layer == LaunchLayer::kNone) return false;
  return (c.api == Api::kDriver) == (layer == LaunchLayer::kDriver);
}

std::string_view launch_layer_name(LaunchLayer layer) {
  switch (layer) {
    case LaunchLayer::kDriver:
      return "driver";
    case LaunchLayer::kRuntime:
      return "runtime";
    case LaunchLayer::kBoth:
      return "both";
    case LaunchLayer::kNone:
      return "none";
  }
  return "driver";
}

std::optional<LaunchLayer> parse_launch_layer(std::string_view text) {
  for (LaunchLayer l :
       {LaunchLayer::kDriver, LaunchLayer::kRuntime, LaunchLayer::kBoth, LaunchLayer::kNone}) {
    if (text == launch_layer_name(l)) return l;
  }
  return std::nullopt;
}

CallClass call_class(std::uint32_t call_id) {
  return call_id < kCalls.size() ? kCalls[call_id].cls : CallClass::kOther;
}

std::string_view metric_class(std::uint32_t call_id) {
  if (call_id >= kCalls.size()) return "other";
  const CallInfo& c = kCalls[call_id];
  if (c.api == Api::kNccl) return "nccl";
  if (c.kernel_launch || c.name == "cudaGraphLaunch" || c.name == "cuGraphLaunch") return "launch";
  if (c.mem.op != MemOp::kNone) return "memory";
  switch (c.cls) {
    case CallClass::kSync:
      return "sync";
    case CallClass::kCopy:
      return "copy";
    case CallClass::kAlloc:
      return "memory";
    case CallClass::kGraphBuild:
      return "graph_build";
    case CallClass::kOther:
      break;
  }
  return "other";
}

std::uint64_t cookie_of(std::uint32_t call_id) {
  std::uint64_t cookie = call_id;
  if (call_id >= kCalls.size()) return cookie;
  if (const MemArgs& m = kCalls[call_id].mem; m.op != MemOp::kNone) {
    cookie |= static_cast<std::uint64_t>(m.ptr_arg & 0xf) << 32;
    cookie |= static_cast<std::uint64_t>(m.size_arg & 0xf) << 36;
    cookie |= static_cast<std::uint64_t>(m.handle ? 1 : 0) << 40;
    cookie |= static_cast<std::uint64_t>(static_cast<unsigned>(m.op) & 0xf) << 44;
    return cookie;
  }
  const NcclArgs& a = kCalls[call_id].nccl;
  cookie |= static_cast<std::uint64_t>(a.count_arg & 0xf) << 32;
  cookie |= static_cast<std::uint64_t>(a.dtype_arg & 0xf) << 36;
  cookie |= static_cast<std::uint64_t>(a.comm_arg & 0xf) << 40;
  cookie |= static_cast<std::uint64_t>(static_cast<unsigned>(a.kind) & 0xf) << 44;
  return cookie;
}

bool is_nccl_op(std::uint32_t call_id) {
  return call_id < kCalls.size() && kCalls[call_id].nccl.kind == NcclKind::kOp;
}

bool is_allocating_call(std::uint32_t call_id) {
  if (call_id >= kCalls.size()) return false;
  const MemOp op = kCalls[call_id].mem.op;
  return op == MemOp::kAlloc || op == MemOp::kAllocPitch || op == MemOp::kAlloc3D;
}

MemKind mem_kind(std::uint32_t call_id) {
  return call_id < kCalls.size() ? kCalls[call_id].mem.kind : MemKind::kDevice;
}

std::string_view mem_kind_name(MemKind kind) {
  switch (kind) {
    case MemKind::kDevice:
      return "device";
    case MemKind::kManaged:
      return "managed";
    case MemKind::kHost:
      return "host";
  }
  return "device";
}

std::string_view api_name(Api api) {
  switch (api) {
    case Api::kRuntime:
      return "runtime";
    case Api::kDriver:
      return "driver";
    case Api::kNccl:
      return "nccl";
  }
  return "unknown";
}

std::optional<std::uint32_t> call_for_symbol(std::string_view symbol, Api api) {
  for (std::string_view suffix : {"_ptsz", "_ptds"}) {
    if (symbol.ends_with(suffix)) {
      symbol.remove_suffix(suffix.size());
      break;
    }
  }
  for (std::uint32_t i = 0; i < kCalls.size(); ++i) {
    if (kCalls[i].api == api && kCalls[i].name == symbol) return i;
  }
  return std::nullopt;
}

}  // namespace stallwatch::trace
