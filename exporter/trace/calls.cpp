#include "trace/calls.h"

#include <array>

namespace stallwatch::trace {
namespace {

// Name, api, NCCL argument positions, and the class the chain rules read (calls.h).
constexpr std::array kCalls = {
    CallInfo{"cudaMalloc", Api::kRuntime, {}, CallClass::kAlloc},
    CallInfo{"cudaFree", Api::kRuntime},
    CallInfo{"cudaMallocManaged", Api::kRuntime, {}, CallClass::kAlloc},
    CallInfo{"cudaMallocAsync", Api::kRuntime, {}, CallClass::kAlloc},
    CallInfo{"cudaFreeAsync", Api::kRuntime},
    CallInfo{"cudaLaunchKernel", Api::kRuntime},
    CallInfo{"cudaMemcpy", Api::kRuntime, {}, CallClass::kCopy},
    CallInfo{"cudaMemcpyAsync", Api::kRuntime, {}, CallClass::kCopy},
    CallInfo{"cudaMemset", Api::kRuntime},
    CallInfo{"cudaStreamSynchronize", Api::kRuntime, {}, CallClass::kSync},
    CallInfo{"cudaDeviceSynchronize", Api::kRuntime, {}, CallClass::kSync},
    CallInfo{"cudaEventSynchronize", Api::kRuntime, {}, CallClass::kSync},
    CallInfo{"cudaGraphLaunch", Api::kRuntime},
    CallInfo{"cuLaunchKernel", Api::kDriver},
    CallInfo{"cuLaunchKernelEx", Api::kDriver},
    CallInfo{"cuMemAlloc_v2", Api::kDriver, {}, CallClass::kAlloc},
    CallInfo{"cuMemFree_v2", Api::kDriver},
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
    CallInfo{"ncclCommInitRankScalable", Api::kNccl, {NcclKind::kInitRank, 0, 0, 1}},
    CallInfo{"ncclCommInitAll", Api::kNccl, {NcclKind::kInitAll, 0, 0, 1}},
    CallInfo{"ncclCommSplit", Api::kNccl, {NcclKind::kSplit, 0, 0, 4}},
    CallInfo{"ncclCommUserRank", Api::kNccl, {NcclKind::kUserRank, 0, 0, 1}},
    CallInfo{"ncclCommCount", Api::kNccl, {NcclKind::kCount, 0, 0, 1}},
    CallInfo{"ncclCommDestroy", Api::kNccl, {NcclKind::kDestroy, 0, 0, 1}},
    CallInfo{"ncclCommAbort", Api::kNccl, {NcclKind::kDestroy, 0, 0, 1}},
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

CallClass call_class(std::uint32_t call_id) {
  return call_id < kCalls.size() ? kCalls[call_id].cls : CallClass::kOther;
}

std::uint64_t cookie_of(std::uint32_t call_id) {
  std::uint64_t cookie = call_id;
  if (call_id >= kCalls.size()) return cookie;
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
