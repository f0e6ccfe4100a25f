// Workload identity from a cgroup path (directory names are chosen by whoever creates the
// cgroup): always a normalised path, a container id of hex digits (12 or more: runtimes
// that shorten ids are accepted) or none.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "identity/cgroup_identity.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view path(reinterpret_cast<const char*>(data), size);
  const auto id = stallwatch::identity::parse_cgroup_path(path);
  if (id.cgroup.empty() || id.cgroup[0] != '/') std::abort();
  if (!id.container_id.empty()) {
    if (id.container_id.size() < 12) std::abort();
    for (char c : id.container_id) {
      if (!std::isxdigit(static_cast<unsigned char>(c))) std::abort();
    }
  }
  return 0;
}
