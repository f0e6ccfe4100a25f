#include "trace/calls.h"

#include <array>

namespace stallwatch::trace {
namespace {

constexpr std::array kCalls = {
    CallInfo{"cudaMalloc", Api::kRuntime},
    CallInfo{"cudaFree", Api::kRuntime},
    CallInfo{"cudaMallocManaged", Api::kRuntime},
    CallInfo{"cudaMallocAsync", Api::kRuntime},
    CallInfo{"cudaFreeAsync", Api::kRuntime},
    CallInfo{"cudaLaunchKernel", Api::kRuntime},
    CallInfo{"cudaMemcpy", Api::kRuntime},
    CallInfo{"cudaMemcpyAsync", Api::kRuntime},
    CallInfo{"cudaMemset", Api::kRuntime},
    CallInfo{"cudaStreamSynchronize", Api::kRuntime},
    CallInfo{"cudaDeviceSynchronize", Api::kRuntime},
    CallInfo{"cudaEventSynchronize", Api::kRuntime},
    CallInfo{"cudaGraphLaunch", Api::kRuntime},
    CallInfo{"cuLaunchKernel", Api::kDriver},
    CallInfo{"cuLaunchKernelEx", Api::kDriver},
    CallInfo{"cuMemAlloc_v2", Api::kDriver},
    CallInfo{"cuMemFree_v2", Api::kDriver},
    CallInfo{"cuMemcpy", Api::kDriver},
    CallInfo{"cuMemcpyAsync", Api::kDriver},
    CallInfo{"cuMemcpyHtoD_v2", Api::kDriver},
    CallInfo{"cuMemcpyDtoH_v2", Api::kDriver},
    CallInfo{"cuCtxSynchronize", Api::kDriver},
    CallInfo{"cuStreamSynchronize", Api::kDriver},
    CallInfo{"cuEventSynchronize", Api::kDriver},
    CallInfo{"cuGraphLaunch", Api::kDriver},
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
