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

struct CallInfo {
  std::string_view name;  // the `call` label: the base symbol name
  Api api;
};

std::span<const CallInfo> all_calls();
std::string_view api_name(Api api);  // the `api` label: runtime, driver, nccl

// Call id for an exported symbol of a library of the given api: the symbol itself or a
// per-thread-default-stream variant of it (suffix _ptsz or _ptds).
std::optional<std::uint32_t> call_for_symbol(std::string_view symbol, Api api);

}  // namespace stallwatch::trace
