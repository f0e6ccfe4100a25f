// Leveled logging to stderr, one line per message. A HINT line says how to fix what the
// line before it reported. Thread-safe (one write(2) per line).
#pragma once

#include <sstream>
#include <string>

namespace stallwatch {

enum class LogLevel { kDebug, kInfo, kWarn, kHint, kError };

void set_log_level(LogLevel min);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& message);

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
