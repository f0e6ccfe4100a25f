#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <ctime>

#include "common/json.h"
#include "common/strings.h"

namespace stallwatch {
namespace {
std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_format{static_cast<int>(LogFormat::kPlain)};

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

// 2024-05-01T12:00:00.123Z
std::string timestamp(std::chrono::system_clock::time_point when) {
  std::time_t t = std::chrono::system_clock::to_time_t(when);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(when.time_since_epoch()) % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
  return std::string(ts) + "." + std::to_string(1000 + ms.count()).substr(1) + "Z";
}

}  // namespace

void set_log_level(LogLevel min) { g_min_level = static_cast<int>(min); }

void set_log_format(LogFormat format) { g_format = static_cast<int>(format); }

void apply_log_settings(const LogSettings& settings) {
  set_log_level(settings.level);
  set_log_format(settings.format);
}

bool log_enabled(LogLevel level) { return static_cast<int>(level) >= g_min_level.load(); }

Result<LogLevel> parse_log_level(std::string_view text) {
  if (text == "debug") return LogLevel::kDebug;
  if (text == "info") return LogLevel::kInfo;
  if (text == "warn") return LogLevel::kWarn;
  if (text == "error") return LogLevel::kError;
  return make_error("--log.level: unknown level '" + std::string(text) +
                    "'; use debug, info, warn or error");
}

Result<LogFormat> parse_log_format(std::string_view text) {
  if (text == "logfmt") return LogFormat::kLogfmt;
  if (text == "json") return LogFormat::kJson;
  return make_error("--log.format: unknown format '" + std::string(text) + "'; use logfmt or json");
}

std::string format_log_line(LogFormat format, LogLevel level,
                            std::chrono::system_clock::time_point when, std::string_view message) {
  const std::string ts = timestamp(when);
  switch (format) {
    case LogFormat::kLogfmt:
      // A JSON string literal is a valid logfmt quoted value: \" \\ \n \t \u00XX.
      return "ts=" + ts + " level=" + level_name(level) + " msg=" + json_string(message) + "\n";
    case LogFormat::kJson:
      return "{\"ts\":\"" + ts + "\",\"level\":\"" + level_name(level) +
             "\",\"msg\":" + json_string(message) + "}\n";
    case LogFormat::kPlain:
      break;
  }
  return ts + " " + level_name(level) + ": " + std::string(message) + "\n";
}

void log_line(LogLevel level, const std::string& message) {
  // One escaper for every line (issue #35): a host word that reached a message unescaped can
  // neither start a line of its own nor drive the terminal (ESC, CSI, bidi overrides).
  const std::string line = format_log_line(static_cast<LogFormat>(g_format.load()), level,
                                           std::chrono::system_clock::now(), escape_line(message));
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace stallwatch
