// Unit tests for exporter/common/log.h: the --log.level and --log.format values and the line
// each format writes (plain, logfmt, json), escaping included.
#include "common/log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>

namespace stallwatch {
namespace {

// 2024-05-01T12:34:56.078Z
const auto kWhen = std::chrono::system_clock::time_point(std::chrono::milliseconds(1714566896078));

TEST(LogLevelTest, Parses) {
  EXPECT_EQ(*parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(*parse_log_level("info"), LogLevel::kInfo);
  EXPECT_EQ(*parse_log_level("warn"), LogLevel::kWarn);
  EXPECT_EQ(*parse_log_level("error"), LogLevel::kError);
  for (const char* bad : {"", "DEBUG", "warning", "hint", "trace"}) {
    const auto l = parse_log_level(bad);
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_EQ(l.error().message, "--log.level: unknown level '" + std::string(bad) +
                                     "'; use debug, info, warn or error");
  }
}

TEST(LogFormatTest, Parses) {
  EXPECT_EQ(*parse_log_format("logfmt"), LogFormat::kLogfmt);
  EXPECT_EQ(*parse_log_format("json"), LogFormat::kJson);
  for (const char* bad : {"", "JSON", "text", "plain"}) {
    const auto f = parse_log_format(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.error().message,
              "--log.format: unknown format '" + std::string(bad) + "'; use logfmt or json");
  }
}

TEST(LogLineTest, PlainIsTheDefaultFormat) {
  EXPECT_EQ(LogSettings{}.format, LogFormat::kPlain);
  EXPECT_EQ(LogSettings{}.level, LogLevel::kInfo);
  EXPECT_EQ(format_log_line(LogFormat::kPlain, LogLevel::kWarn, kWhen, "disk is slow"),
            "2024-05-01T12:34:56.078Z warn: disk is slow\n");
  EXPECT_EQ(format_log_line(LogFormat::kPlain, LogLevel::kHint, kWhen, "do this"),
            "2024-05-01T12:34:56.078Z hint: do this\n");
}

TEST(LogLineTest, Logfmt) {
  EXPECT_EQ(format_log_line(LogFormat::kLogfmt, LogLevel::kInfo, kWhen, "ready: listening"),
            "ts=2024-05-01T12:34:56.078Z level=info msg=\"ready: listening\"\n");
  EXPECT_EQ(format_log_line(LogFormat::kLogfmt, LogLevel::kError, kWhen, ""),
            "ts=2024-05-01T12:34:56.078Z level=error msg=\"\"\n");
}

TEST(LogLineTest, LogfmtEscapes) {
  const std::string line = format_log_line(LogFormat::kLogfmt, LogLevel::kDebug, kWhen,
                                           "a \"quoted\" C:\\path\nsecond\tline\r\x01\x1f");
  EXPECT_EQ(line,
            "ts=2024-05-01T12:34:56.078Z level=debug "
            "msg=\"a \\\"quoted\\\" C:\\\\path\\nsecond\\tline\\r\\u0001\\u001f\"\n");
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line per message";
}

TEST(LogLineTest, Json) {
  EXPECT_EQ(format_log_line(LogFormat::kJson, LogLevel::kWarn, kWhen, "slow"),
            "{\"ts\":\"2024-05-01T12:34:56.078Z\",\"level\":\"warn\",\"msg\":\"slow\"}\n");
}

TEST(LogLineTest, JsonEscapesAndParses) {
  // Hostile text: quotes, backslashes, newlines, control characters, invalid UTF-8.
  const std::string message = "comm \"x\\y\"\nnext\x07 caf\xc3\xa9 \xff end";
  const std::string line = format_log_line(LogFormat::kJson, LogLevel::kError, kWhen, message);
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  const auto doc = nlohmann::json::parse(line);
  EXPECT_EQ(doc["ts"], "2024-05-01T12:34:56.078Z");
  EXPECT_EQ(doc["level"], "error");
  EXPECT_EQ(doc["msg"], "comm \"x\\y\"\nnext\x07 caf\xc3\xa9 \xef\xbf\xbd end");
  EXPECT_NE(line.find("\\u0007"), std::string::npos) << line;
}

TEST(LogSettingsTest, ApplySetsTheLevel) {
  apply_log_settings({LogLevel::kError, LogFormat::kPlain});
  EXPECT_FALSE(log_enabled(LogLevel::kWarn));
  EXPECT_TRUE(log_enabled(LogLevel::kError));
  apply_log_settings({LogLevel::kDebug, LogFormat::kPlain});
  EXPECT_TRUE(log_enabled(LogLevel::kDebug));
  apply_log_settings({});
  EXPECT_FALSE(log_enabled(LogLevel::kDebug));
  EXPECT_TRUE(log_enabled(LogLevel::kInfo));
}

}  // namespace
}  // namespace stallwatch
