// Unit tests for exporter/common/duration.h (durations as users write them) and
// exporter/cli/options.h (flags of `stallwatch run`, from the command line and --config).
#include "cli/options.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/duration.h"

namespace stallwatch {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(ParseDurationTest, Units) {
  struct Case {
    const char* text;
    std::chrono::nanoseconds want;
  };
  for (const Case& c : {Case{"500ms", 500ms}, Case{"5s", 5s}, Case{"10m", 10min}, Case{"1h", 1h},
                        Case{"2d", 48h}, Case{"250us", 250us}, Case{"7ns", 7ns}, Case{"0s", 0ns}}) {
    const auto d = parse_duration(c.text);
    ASSERT_TRUE(d.ok()) << c.text << ": " << d.error().message;
    EXPECT_EQ(*d, c.want) << c.text;
  }
}

TEST(ParseDurationTest, Errors) {
  for (const char* text : {"", "5", "5x", "-1s", "s", "5 s", "1.5s", "5S", "99999999999999999999s",
                           "9999999999999d"}) {
    const auto d = parse_duration(text);
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_TRUE(contains(d.error().message, "'" + std::string(text) + "'")) << d.error().message;
  }
  EXPECT_TRUE(contains(parse_duration("").error().message, "empty"));
  EXPECT_TRUE(contains(parse_duration("5").error().message, "missing unit"));
  EXPECT_TRUE(contains(parse_duration("5x").error().message, "unknown unit"));
  EXPECT_TRUE(contains(parse_duration("-1s").error().message, "whole number"));
}

TEST(FormatDurationTest, LargestWholeUnit) {
  EXPECT_EQ(format_duration(500ms), "500ms");
  EXPECT_EQ(format_duration(5s), "5s");
  EXPECT_EQ(format_duration(10min), "10m");
  EXPECT_EQ(format_duration(1h), "1h");
  EXPECT_EQ(format_duration(48h), "2d");
  EXPECT_EQ(format_duration(250us), "250us");
  EXPECT_EQ(format_duration(1500ms), "1500ms");
  EXPECT_EQ(format_duration(90s), "90s");
  EXPECT_EQ(format_duration(7ns), "7ns");
  EXPECT_EQ(format_duration(0ns), "0ns");
}

TEST(FormatDurationTest, RoundTrip) {
  for (const char* text : {"500ms", "5s", "10m", "1h", "2d", "250us", "7ns", "1500ms", "90s"}) {
    const auto d = parse_duration(text);
    ASSERT_TRUE(d.ok()) << text;
    EXPECT_EQ(format_duration(*d), text);
  }
  for (std::chrono::nanoseconds d :
       std::initializer_list<std::chrono::nanoseconds>{1ns, 1001ns, 61s, 25h, 3min + 1ms}) {
    const auto back = parse_duration(format_duration(d));
    ASSERT_TRUE(back.ok()) << format_duration(d);
    EXPECT_EQ(*back, d);
  }
}

}  // namespace

namespace cli {
namespace {

Result<RunOptions> parse(const std::vector<std::string>& args, std::string* usage = nullptr) {
  return parse_run_options(args, usage);
}

std::string error_of(const std::vector<std::string>& args) {
  const auto o = parse(args);
  EXPECT_FALSE(o.ok());
  return o.ok() ? "" : o.error().message;
}

// A config file in a fresh temporary directory, removed with the fixture.
class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "stallwatch_options_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& text) {
    const std::string path = (dir_ / "stallwatch.conf").string();
    std::ofstream(path) << text;
    return path;
  }

  std::filesystem::path dir_;
};

TEST(ParseRunOptionsTest, Defaults) {
  const auto o = parse({});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->listen, "0.0.0.0:9464");
  EXPECT_EQ(o->window, 5s);
  EXPECT_EQ(o->max_cgroups, 256u);
  EXPECT_EQ(o->db, "/var/lib/stallwatch/stallwatch.db");
  EXPECT_EQ(o->outlier_threshold, 1ms);
  EXPECT_EQ(o->rescan_interval, 30s);
  EXPECT_EQ(o->config, "");
  EXPECT_FALSE(o->verbose);
  EXPECT_FALSE(o->help);
}

TEST(ParseRunOptionsTest, FlagsSet) {
  const auto o =
      parse({"--listen", "127.0.0.1:9100", "--window=500ms", "--max-cgroups", "16", "--db",
             "/tmp/sw.db", "--outlier-threshold", "250us", "--rescan-interval", "1m", "-v"});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->listen, "127.0.0.1:9100");
  EXPECT_EQ(o->window, 500ms);
  EXPECT_EQ(o->max_cgroups, 16u);
  EXPECT_EQ(o->db, "/tmp/sw.db");
  EXPECT_EQ(o->outlier_threshold, 250us);
  EXPECT_EQ(o->rescan_interval, 1min);
  EXPECT_TRUE(o->verbose);
  EXPECT_FALSE(o->help);

  const auto ipv6 = parse({"--listen", "[::1]:9464"});
  ASSERT_TRUE(ipv6.ok()) << ipv6.error().message;
  EXPECT_EQ(ipv6->listen, "[::1]:9464");
}

TEST(ParseRunOptionsTest, UnknownFlag) {
  const std::string message = error_of({"--frobnicate"});
  EXPECT_TRUE(contains(message, "frobnicate")) << message;
  EXPECT_TRUE(contains(message, "stallwatch run --help")) << message;
}

TEST(ParseRunOptionsTest, BadListen) {
  for (const char* listen : {"9464", "host:", "host:99999", "host:0", "host:94a4", ":"}) {
    const std::string message = error_of({"--listen", listen});
    EXPECT_TRUE(contains(message, "--listen")) << message;
    EXPECT_TRUE(contains(message, listen)) << message;
    EXPECT_TRUE(contains(message, "ADDR:PORT")) << message;
  }
}

TEST(ParseRunOptionsTest, BadDurations) {
  const std::string zero = error_of({"--window", "0s"});
  EXPECT_TRUE(contains(zero, "--window must be greater than 0")) << zero;
  const std::string bare = error_of({"--window", "5"});
  EXPECT_TRUE(contains(bare, "--window")) << bare;
  EXPECT_TRUE(contains(bare, "'5'")) << bare;
  const std::string outlier = error_of({"--outlier-threshold", "fast"});
  EXPECT_TRUE(contains(outlier, "--outlier-threshold")) << outlier;
  EXPECT_TRUE(contains(outlier, "'fast'")) << outlier;
  const std::string rescan = error_of({"--rescan-interval", "0ms"});
  EXPECT_TRUE(contains(rescan, "--rescan-interval must be greater than 0")) << rescan;
}

TEST(ParseRunOptionsTest, BadMaxCgroups) {
  const std::string message = error_of({"--max-cgroups", "many"});
  EXPECT_TRUE(contains(message, "max-cgroups")) << message;
}

TEST(ParseRunOptionsTest, KubernetesFlags) {
  const auto defaults = parse({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->kube_api, "");
  EXPECT_EQ(defaults->kube_node, "");
  EXPECT_EQ(defaults->kube_refresh, 60s);
  const auto o = parse({"--kube-api", "http://127.0.0.1:8001", "--kube-node", "gpu-node-7",
                        "--kube-refresh", "2m"});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->kube_api, "http://127.0.0.1:8001");
  EXPECT_EQ(o->kube_node, "gpu-node-7");
  EXPECT_EQ(o->kube_refresh, 2min);
  const std::string fast = error_of({"--kube-refresh", "500ms"});
  EXPECT_EQ(fast, "--kube-refresh must be at least 1s");
  const std::string bad = error_of({"--kube-refresh", "often"});
  EXPECT_TRUE(contains(bad, "--kube-refresh")) << bad;
  EXPECT_TRUE(contains(bad, "'often'")) << bad;
}

TEST(ParseRunOptionsTest, Help) {
  std::string usage;
  const auto o = parse({"--help"}, &usage);
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_TRUE(o->help);
  EXPECT_TRUE(contains(usage, "--listen")) << usage;
  EXPECT_TRUE(contains(usage, "--config")) << usage;
  EXPECT_TRUE(contains(usage, "--window")) << usage;

  const auto short_help = parse({"-h"});
  ASSERT_TRUE(short_help.ok());
  EXPECT_TRUE(short_help->help);
}

TEST(ParseRunOptionsTest, UsageFilledWithoutHelp) {
  std::string usage;
  ASSERT_TRUE(parse({}, &usage).ok());
  EXPECT_TRUE(contains(usage, "--max-cgroups")) << usage;
}

TEST_F(ConfigFile, Applied) {
  const std::string path = write("listen = 127.0.0.1:9999\nwindow = 2s\n");
  const auto o = parse({"--config", path});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->config, path);
  EXPECT_EQ(o->listen, "127.0.0.1:9999");
  EXPECT_EQ(o->window, 2s);
  EXPECT_EQ(o->max_cgroups, 256u);  // not in the file: default
}

TEST_F(ConfigFile, CommandLineWins) {
  const std::string path = write("listen = 127.0.0.1:9999\nwindow = 2s\n");
  const auto o = parse({"--listen", "10.0.0.1:9100", "--config", path});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->listen, "10.0.0.1:9100");
  EXPECT_EQ(o->window, 2s);

  const auto both = parse({"--config", path, "--window", "1m"});
  ASSERT_TRUE(both.ok()) << both.error().message;
  EXPECT_EQ(both->listen, "127.0.0.1:9999");
  EXPECT_EQ(both->window, 1min);
}

TEST_F(ConfigFile, BadValueInFile) {
  const std::string path = write("window = 0s\n");
  const std::string message = error_of({"--config", path});
  EXPECT_TRUE(contains(message, "--window must be greater than 0")) << message;
}

TEST_F(ConfigFile, UnknownOptionInFile) {
  const std::string path = write("colour = blue\n");
  const std::string message = error_of({"--config", path});
  EXPECT_TRUE(contains(message, "colour")) << message;
}

TEST_F(ConfigFile, Unreadable) {
  const std::string path = (dir_ / "missing" / "stallwatch.conf").string();
  const std::string message = error_of({"--config", path});
  EXPECT_TRUE(contains(message, path)) << message;
  EXPECT_TRUE(contains(message, "cannot read config file")) << message;
}

}  // namespace
}  // namespace cli
}  // namespace stallwatch
