// --web.config.file YAML (exporter-toolkit's format): a result or an error, never a crash or
// an exception escaping yaml-cpp.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "metrics/web_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = stallwatch::metrics::parse_web_config(text, "/etc/stallwatch");
  if (c) {
    if (c->tls && (c->cert_file.empty() || c->key_file.empty())) std::abort();
    (void)c->tls_priorities();
  } else if (c.error().message.empty()) {
    std::abort();
  }
  return 0;
}
