// The Kubernetes API's PodList (a compromised or buggy API server, or a proxy in between):
// parsed or refused, never a crash or an unbounded result.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "identity/kube_metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  auto pods = stallwatch::identity::parse_pod_list(json);
  if (pods) {
    if (pods->size() > stallwatch::identity::kMaxPods) std::abort();
    for (const auto& p : *pods) {
      if (p.uid.empty() || p.name.empty()) std::abort();
    }
  }
  return 0;
}
