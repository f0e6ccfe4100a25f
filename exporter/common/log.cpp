#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>

namespace stallwatch {
namespace {
std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kHint:
      return "hint";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}
}  // namespace

void set_log_level(LogLevel min) { g_min_level = static_cast<int>(min); }

bool log_enabled(LogLevel level) { return static_cast<int>(level) >= g_min_level.load(); }

void log_line(LogLevel level, const std::string& message) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
  std::string line = std::string(ts) + "." + std::to_string(1000 + ms.count()).substr(1) + "Z " +
                     level_name(level) + ": " + message + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace stallwatch
