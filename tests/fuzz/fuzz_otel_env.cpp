// The OTEL_* variables of the OTLP push (anyone who can edit the unit's environment file sets
// them): each input line is NAME=value; the result is a config or one error, never a crash,
// and milliseconds never overflow into a wrong interval or timeout.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

#include "metrics/otlp/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::map<std::string, std::string> vars;
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    vars["OTEL_" + line.substr(0, eq)] = line.substr(eq + 1);
  }
  auto getenv = [&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  auto c = stallwatch::otlp::resolve_push_config({}, getenv, "node", "0.0.0");
  if (c && c->enabled) {
    if (c->interval < std::chrono::milliseconds(100) || c->interval > std::chrono::hours(24)) {
      std::abort();
    }
    if (c->delivery.timeout < std::chrono::milliseconds(100)) std::abort();
  } else if (!c && c.error().message.empty()) {
    std::abort();
  }
  return 0;
}
