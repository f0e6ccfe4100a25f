// Leveled logging to stderr, one line per message. A HINT line says how to fix what the
// line before it reported. Thread-safe (one write(2) per line).
// Formats (--log.format, the exporters' flag): plain (the default, `TS level: msg`), logfmt
// (`ts=TS level=info msg="..."`) and json (`{"ts":"TS","level":"info","msg":"..."}`); TS is
// RFC 3339 UTC with milliseconds. logfmt and json escape quotes, backslashes and control
// characters (a message never spans two lines) and replace invalid UTF-8 with U+FFFD.
#pragma once

#include <chrono>
#include <sstream>
#include <string>
#include <string_view>

#include "common/result.h"

namespace stallwatch {

enum class LogLevel { kDebug, kInfo, kWarn, kHint, kError };
enum class LogFormat { kPlain, kLogfmt, kJson };

// What --log.level, --log.format and -v choose.
struct LogSettings {
  LogLevel level = LogLevel::kInfo;
  LogFormat format = LogFormat::kPlain;
  bool operator==(const LogSettings&) const = default;
};

void set_log_level(LogLevel min);
void set_log_format(LogFormat format);
void apply_log_settings(const LogSettings& settings);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& message);

// --log.level: debug, info, warn or error. The error names the flag and the choices.
Result<LogLevel> parse_log_level(std::string_view text);
// --log.format: logfmt or json.
Result<LogFormat> parse_log_format(std::string_view text);

// One log line, newline included, as log_line writes it (pure; tests).
std::string format_log_line(LogFormat format, LogLevel level,
                            std::chrono::system_clock::time_point when, std::string_view message);

// Usage: SW_LOG(kWarn) << "x " << y;  (the stream is built only when the level is enabled)
class LogStream {
 public:
  explicit LogStream(LogLevel level) : level_(level) {}
  ~LogStream() { log_line(level_, out_.str()); }
  template <typename T>
  LogStream& operator<<(const T& v) {
    out_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream out_;
};

}  // namespace stallwatch

#define SW_LOG(level)                                                                 \
  for (bool sw_log_once_ = ::stallwatch::log_enabled(::stallwatch::LogLevel::level); \
       sw_log_once_; sw_log_once_ = false)                                            \
  ::stallwatch::LogStream(::stallwatch::LogLevel::level)
