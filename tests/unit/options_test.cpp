// Unit tests for exporter/common/duration.h (durations as users write them) and
// exporter/cli/options.h (flags of `stallwatch run`, from the command line, STALLWATCH_*
// variables and --config, and their precedence with OTEL_* for the OTLP settings).
#include "cli/options.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "cli/flags.h"
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

TEST(ParseRunOptionsTest, CostBudget) {
  auto o = parse({});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_DOUBLE_EQ(o->cost_budget, 0.01) << "1 % by default";
  o = parse({"--cost-budget", "0.5%"});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_DOUBLE_EQ(o->cost_budget, 0.005);
  o = parse({"--cost-budget", "0"});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->cost_budget, 0);
  // A bare number is ambiguous (1 = 1 % or 100 %?): refused, as are shares out of range.
  for (const char* bad : {"1", "0.05%", "51%", "1%%", "x%", "-1%", "nan%", ""}) {
    o = parse({"--cost-budget", bad});
    ASSERT_FALSE(o) << bad;
    EXPECT_NE(o.error().message.find("expected a percentage of CPU time from 0.1% to 50%"),
              std::string::npos)
        << o.error().message;
    EXPECT_NE(o.error().message.find("--cost-budget"), std::string::npos) << o.error().message;
  }
}

// Issue #50: --cgroup-roots, paths from the cgroup2 mount; duplicates and trailing slashes
// folded; a relative path, a `..` or more than 8 refused with the fix.
TEST(ParseRunOptionsTest, CgroupRoots) {
  auto o = parse({});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_TRUE(o->cgroup_roots.empty()) << "every cgroup by default";
  o = parse({"--cgroup-roots", "/kubepods.slice/,/slurm.slice,/kubepods.slice"});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->cgroup_roots, (std::vector<std::string>{"/kubepods.slice", "/slurm.slice"}));
  for (const char* bad : {"kubepods.slice", "/a/../etc", "/a/.."}) {
    o = parse({"--cgroup-roots", bad});
    ASSERT_FALSE(o) << bad;
    EXPECT_NE(o.error().message.find("is not a cgroup path from the cgroup2 mount"),
              std::string::npos)
        << o.error().message;
  }
  o = parse({"--cgroup-roots", "/a,/b,/c,/d,/e,/f,/g,/h,/i"});
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("at most 8 cgroups (9 given)"), std::string::npos)
      << o.error().message;
}

TEST(ParseRunOptionsTest, ProbeSites) {
  auto o = parse({});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_TRUE(o->move_probe_sites) << "auto by default";
  o = parse({"--probe-sites", "entry"});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_FALSE(o->move_probe_sites);
  o = parse({"--probe-sites", "auto"});
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->move_probe_sites);
  o = parse({"--probe-sites", "middle"});
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("middle: expected auto or entry"), std::string::npos)
      << o.error().message;
}

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
  EXPECT_EQ(zero, "--window 0s is out of range: use 100ms to 1h");
  const std::string bare = error_of({"--window", "5"});
  EXPECT_TRUE(contains(bare, "--window")) << bare;
  EXPECT_TRUE(contains(bare, "'5'")) << bare;
  const std::string outlier = error_of({"--outlier-threshold", "fast"});
  EXPECT_TRUE(contains(outlier, "--outlier-threshold")) << outlier;
  EXPECT_TRUE(contains(outlier, "'fast'")) << outlier;
  const std::string rescan = error_of({"--rescan-interval", "0ms"});
  EXPECT_EQ(rescan, "--rescan-interval 0ms is out of range: use 1s to 1d");
}

// Issue #15: every duration, size and count has a range, enforced at parse time.
TEST(ParseRunOptionsTest, RangesAreEnforced) {
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--window", "1ns"},
           {"--window", "100000d"},
           {"--retention", "1ns"},
           {"--outlier-threshold", "1ns"},
           {"--hang-threshold", "500ms"},
           {"--hang-threshold", "2d"},
           {"--rescan-interval", "1ns"},
           {"--detach-linger", "2d"},
           {"--max-db", "2EiB"},
           {"--max-cgroups", "0"},
           {"--max-cgroups", "-1"},
           {"--max-cgroups", "100001"}}) {
    const std::string message = error_of({flag, value});
    EXPECT_TRUE(message.starts_with(flag + " " + value + " is out of range: use ") ||
                contains(message, flag))
        << flag << " " << value << ": " << message;
    EXPECT_TRUE(contains(message, "out of range") || contains(message, "unknown size unit"))
        << flag << " " << value << ": " << message;
  }
  const auto edge = parse({"--window", "100ms", "--retention", "1m", "--outlier-threshold",
                           "10us", "--detach-linger", "0s", "--max-cgroups", "100000",
                           "--max-libraries", "4096", "--hang-threshold", "1s"});
  ASSERT_TRUE(edge.ok()) << edge.error().message;
  EXPECT_EQ(edge->hang_threshold, std::chrono::seconds(1));
  EXPECT_EQ(edge->max_cgroups, 100000u);
  EXPECT_EQ(edge->max_libraries, 4096u);
  EXPECT_EQ(parse({"--max-libraries", "0"}).error().message,
            "--max-libraries 0 is out of range: use 1 to 4096");
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
  EXPECT_EQ(fast, "--kube-refresh 500ms is out of range: use 1s to 1d");
  const std::string bad = error_of({"--kube-refresh", "often"});
  EXPECT_TRUE(contains(bad, "--kube-refresh")) << bad;
  EXPECT_TRUE(contains(bad, "'often'")) << bad;
}

TEST(ParseRunOptionsTest, HostPaths) {
  const auto defaults = parse({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->procfs, "/proc");
  EXPECT_EQ(defaults->sysfs, "/sys");
  const auto o = parse({"--path.procfs", "/host/proc/", "--path.sysfs=/host/sys"});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->procfs, "/host/proc") << "a trailing slash is dropped";
  EXPECT_EQ(o->sysfs, "/host/sys");
  EXPECT_EQ(error_of({"--path.procfs", "host/proc"}),
            "--path.procfs: expected an absolute path, e.g. /host/proc");
  EXPECT_EQ(error_of({"--path.sysfs", ""}), "--path.sysfs: expected an absolute path, e.g. /host/proc");
}

// Issue #40: which launches get probes, and whether the standard directories' libraries are
// attached at start (auto: decided by the daemon from the kernel's multi-uprobe links).
TEST(ParseRunOptionsTest, LaunchLayerAndAttachOnDisk) {
  const auto defaults = parse({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->launch_layer, trace::LaunchLayer::kDriver);
  EXPECT_EQ(defaults->attach_on_disk, std::nullopt);
  const auto o = parse({"--launch-layer", "runtime", "--attach-on-disk=false"});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->launch_layer, trace::LaunchLayer::kRuntime);
  EXPECT_EQ(o->attach_on_disk, false);
  EXPECT_EQ(parse({"--launch-layer", "both", "--attach-on-disk", "true"})->launch_layer,
            trace::LaunchLayer::kBoth);
  EXPECT_EQ(parse({"--attach-on-disk", "true"})->attach_on_disk, true);
  EXPECT_EQ(parse({"--attach-on-disk", "auto"})->attach_on_disk, std::nullopt);
  EXPECT_EQ(error_of({"--launch-layer", "kernel"}),
            "--launch-layer kernel: expected driver, runtime, both or none");
  EXPECT_EQ(parse({"--launch-layer", "none"})->launch_layer, trace::LaunchLayer::kNone);
  EXPECT_EQ(error_of({"--attach-on-disk", "sometimes"}),
            "--attach-on-disk sometimes: expected true or false or auto");
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
  EXPECT_FALSE(short_help->version);
}

// --help groups the flags under headings, each value flag with a typed placeholder (issue #51).
TEST(ParseRunOptionsTest, HelpGroupsTheFlagsWithPlaceholders) {
  std::string usage;
  ASSERT_TRUE(parse({"--help"}, &usage).ok());
  for (const char* heading :
       {"\nGeneral:\n", "\nWeb:\n", "\nMetrics:\n", "\nStore:\n", "\nTracing:\n", "\nGPU:\n",
        "\nKubernetes:\n", "\nOTLP:\n", "\nLogging:\n", "\nPaths:\n"}) {
    EXPECT_TRUE(contains(usage, heading)) << heading << " in:\n" << usage;
  }
  for (const char* line : {"  --window DURATION ", "  --max-db SIZE ", "  --db PATH ",
                           "  --web.listen-address ADDR:PORT ", "  --otlp-header KEY=VALUE ",
                           "  --log.level LEVEL ", "  --stacks on|off "}) {
    EXPECT_TRUE(contains(usage, line)) << line << " in:\n" << usage;
  }
  EXPECT_FALSE(contains(usage, " arg ")) << "a value flag without a placeholder:\n" << usage;
  EXPECT_LT(usage.find("\nStore:\n"), usage.find("  --db PATH ")) << usage;
  EXPECT_LT(usage.find("  --db PATH "), usage.find("\nTracing:\n")) << usage;
}

// --version: the version text, answered before the environment and the config file are read.
TEST(ParseRunOptionsTest, Version) {
  std::string text;
  const auto o = parse_run_options({"--version"}, {"STALLWATCH_WINDOW=5"}, &text);
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_TRUE(o->help);
  EXPECT_TRUE(o->version);
  EXPECT_TRUE(text.starts_with("stallwatch, version ")) << text;
  EXPECT_TRUE(contains(text, "\n  platform: linux/")) << text;
  // STALLWATCH_VERSION is no setting: said once, as any other unknown variable.
  EXPECT_EQ(unknown_run_variables({"STALLWATCH_VERSION=1"}).size(), 1u);
  EXPECT_TRUE(parse({"--config", "/nonexistent/x.conf", "--version"}).ok());
  // --help still reads them: `run OPTIONS --help` checks OPTIONS (tests/deploy/systemd_test.sh).
  EXPECT_FALSE(parse({"--config", "/nonexistent/x.conf", "--help"}).ok());
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
  EXPECT_EQ(message, path + ":1: window 0s is out of range: use 100ms to 1h");
}

// A directory or a device where the config file should be is refused at once (reading
// /dev/zero would never end).
TEST_F(ConfigFile, NotARegularFileIsRefused) {
  for (const char* path : {"/dev/zero", "/tmp"}) {
    const std::string message = error_of({"--config", path});
    EXPECT_EQ(message, std::string("config file ") + path +
                           " is not a regular file (pass a file of `name = value` lines)");
  }
}

// Issue #49: a config file another user can change sets root's options (its --nvml-library
// ran that user's code as uid 0): refused with the fix, for the file and for its directory.
TEST_F(ConfigFile, OneOthersCanWriteIsRefused) {
  const std::string path = write("window = 2s\n");
  ASSERT_TRUE(parse({"--config", path})) << "0644 in a 0700 directory";
  ::chmod(path.c_str(), 0666);
  EXPECT_EQ(error_of({"--config", path}),
            "config file " + path +
                " is writable by group or others (mode 0666); it sets what stallwatch does as "
                "root: chmod go-w it");
  ::chmod(path.c_str(), 0644);
  ::chmod(dir_.c_str(), 0777);
  const std::string message = error_of({"--config", path});
  EXPECT_TRUE(message.starts_with("config file " + path + " lies in " + dir_.string() +
                                  ", which users other than root can change"))
      << message;
  EXPECT_TRUE(contains(message, "move it to a directory only root can write")) << message;
  ::chmod(dir_.c_str(), 01777);  // sticky: others cannot rename the file out of it
  EXPECT_TRUE(parse({"--config", path}));
  ::chmod(dir_.c_str(), 0700);
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


// ---- STALLWATCH_* environment variables ----

Result<RunOptions> parse_env(const std::vector<std::string>& args,
                             const std::vector<std::string>& env) {
  return parse_run_options(args, env, nullptr);
}

std::string env_error_of(const std::vector<std::string>& env) {
  const auto o = parse_env({}, env);
  EXPECT_FALSE(o.ok());
  return o.ok() ? "" : o.error().message;
}

// A value for every run flag, each different from the default. A new flag fails
// EveryFlagHasItsVariable until it has one here.
const std::map<std::string, std::string>& samples() {
  static const std::map<std::string, std::string> kSamples = {
      {"listen", "127.0.0.1:9100"},
      {"web.listen-address", "127.0.0.1:9101"},
      {"web.telemetry-path", "/stats"},
      {"lock-file", "/tmp/stallwatch-options-test.lock"},
      {"web.classic-histograms", "false"},
      {"metrics.identity-labels", "pod,namespace"},
      {"metrics.calls", "call"},
      {"metrics.histogram-ladder", "x16"},
      {"db", "/tmp/sw-env.db"},
      {"max-db", "1GiB"},
      {"retention", "12h"},
      {"window", "2s"},
      {"outlier-threshold", "2ms"},
      {"stacks", "off"},
      {"library-dirs", "/opt/cuda/lib"},
      {"cgroup-roots", "/kubepods.slice"},
      {"attach-on-disk", "true"},
      {"uprobe-multi", "off"},
      {"probe-sites", "entry"},
      {"cost-budget", "2%"},
      {"launch-layer", "both"},
      {"hang-threshold", "90s"},
      {"gpu-monitor", "off"},
      {"nvml-library", "/opt/nvidia/lib/libnvidia-ml.so.1"},
      {"gpu-sample-interval", "500ms"},
      {"rescan-interval", "1m"},
      {"detach-linger", "5s"},
      {"max-cgroups", "16"},
      {"max-libraries", "64"},
      {"kube-api", "none"},
      {"kube-node", "gpu-node-7"},
      {"kube-refresh", "2m"},
      {"path.procfs", "/host/proc"},
      {"path.sysfs", "/host/sys"},
      {"log.level", "warn"},
      {"log.format", "json"},
      {"verbose", ""},  // a switch: `--verbose` / STALLWATCH_VERBOSE=true
      {"web.config.file", "/etc/stallwatch/web.yml"},
      {"web.enable-debug", ""},  // a switch
      {"web.max-connections", "16"},
      {"otlp-endpoint", "http://127.0.0.1:4318"},
      {"otlp-logs-endpoint", "none"},
      {"otlp-header", "dd-api-key=k"},
      {"otlp-headers-file", "/etc/stallwatch/otlp-headers"},
      {"otlp-temporality", "delta"},
      {"otlp-histogram", "exponential"},
      {"otlp-interval", "30s"},
      {"otlp-compression", "none"},
      {"otlp-timeout", "5s"},
      {"otlp-max-retry-time", "1m"},
      {"otlp-max-queue", "1MiB"},
      {"otlp-certificate", "/etc/ssl/certs/ca-certificates.crt"},
      {"otlp-client-certificate", "/etc/stallwatch/otlp.crt"},
      {"otlp-client-key", "/etc/stallwatch/otlp.key"},
      {"config", ""},  // the ConfigFile fixture's file
  };
  return kSamples;
}

TEST_F(ConfigFile, EveryFlagHasItsVariable) {
  const std::string config = write("max-cgroups = 8\n");
  const auto defaults = parse({});
  ASSERT_TRUE(defaults.ok());
  const std::vector<std::string> names = run_flag_names();
  ASSERT_GT(names.size(), 20u);
  for (const std::string& name : names) {
    if (name == "help" || name == "version") continue;  // not settings
    const auto sample = samples().find(name);
    ASSERT_NE(sample, samples().end()) << "add a sample value for --" << name << " to samples()";
    const std::string value = name == "config" ? config : sample->second;
    const bool is_switch = name == "verbose" || name == "web.enable-debug";
    const std::string var = env_var_name(kRunEnvPrefix, name);
    EXPECT_TRUE(var.starts_with("STALLWATCH_")) << var;
    EXPECT_EQ(var.find_first_of("-.abcdefghijklmnopqrstuvwxyz"), std::string::npos) << var;

    const auto flag = is_switch ? parse({"--" + name}) : parse({"--" + name, value});
    ASSERT_TRUE(flag.ok()) << name << ": " << flag.error().message;
    EXPECT_FALSE(*flag == *defaults) << "the sample for --" << name << " is its default";
    auto from_env = parse_env({}, {var + "=" + (is_switch ? "true" : value)});
    ASSERT_TRUE(from_env.ok()) << var << ": " << from_env.error().message;
    EXPECT_EQ(from_env->from_env[name], var);
    from_env->from_env.clear();
    EXPECT_TRUE(*from_env == *flag) << var << " does not set what --" << name << " sets";
  }
}

// Boost's error message filler looped for ever on an option named after one of its
// placeholders (found by fuzz_run_config): the error comes back at once, '%' shown as '?'.
TEST(ParseRunOptionsTest, PlaceholderInAnOptionNameIsAnErrorNotAHang) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/placeholder.conf";
  std::ofstream(path) << "%canonical_option% = 1\n";
  std::string usage;
  const auto o = parse_run_options({"--config", path}, {}, &usage);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error().message,
            path + ":1: unknown option '%canonical_option%' (see `stallwatch run --help`)");
  EXPECT_EQ(error_of({"--%option%"}),
            "unrecognised option '--?option?' (see `stallwatch run --help`)");
}

TEST(ParseRunOptionsTest, WebFlags) {
  const auto o = parse({"--web.enable-debug", "--web.max-connections", "100"});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_TRUE(o->web_enable_debug);
  EXPECT_EQ(o->web_max_connections, 100u);
  EXPECT_FALSE(parse({})->web_enable_debug);
  EXPECT_EQ(error_of({"--web.max-connections", "3"}),
            "--web.max-connections 3 is out of range: use 4 to 10000");
  EXPECT_EQ(error_of({"--web.max-connections", "-1"}),
            "--web.max-connections -1 is out of range: use 4 to 10000");
  EXPECT_TRUE(parse({})->web_classic_histograms);
  EXPECT_FALSE(parse({"--web.classic-histograms", "false"})->web_classic_histograms);
  EXPECT_TRUE(parse({"--web.classic-histograms=true"})->web_classic_histograms);
  EXPECT_EQ(error_of({"--web.classic-histograms", "yes"}),
            "--web.classic-histograms yes: expected true or false");
  const auto m = parse({"--metrics.identity-labels", "pod,namespace", "--metrics.histogram-ladder",
                        "x16"});
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_FALSE(m->exposition.container_id);
  EXPECT_TRUE(m->exposition.pod);
  EXPECT_TRUE(m->exposition.pod_namespace);
  EXPECT_FALSE(m->exposition.container);
  EXPECT_EQ(m->exposition.ladder_step, 4);
  EXPECT_FALSE(parse({"--metrics.identity-labels", "none"})->exposition.pod);
  // Issue #37's defaults: the Kubernetes names, no container id or cgroup path, calls by class,
  // a bound every power of four.
  const metrics::ExpositionOptions d = parse({})->exposition;
  EXPECT_TRUE(d.pod && d.pod_namespace && d.container);
  EXPECT_FALSE(d.container_id || d.cgroup || d.per_call);
  EXPECT_EQ(d.ladder_step, 2);
  const auto all = parse({"--metrics.identity-labels", "cgroup,container_id", "--metrics.calls",
                          "call", "--metrics.histogram-ladder", "x2"});
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_TRUE(all->exposition.cgroup && all->exposition.container_id && all->exposition.per_call);
  EXPECT_FALSE(all->exposition.pod);
  EXPECT_EQ(all->exposition.ladder_step, 1);
  EXPECT_EQ(parse({"--metrics.histogram-ladder", "x4"})->exposition.ladder_step, 2);
  EXPECT_EQ(error_of({"--metrics.identity-labels", "pod,uid"}),
            "--metrics.identity-labels pod,uid: unknown label 'uid' (pod, namespace, container, "
            "container_id, cgroup, or none)");
  EXPECT_EQ(error_of({"--metrics.histogram-ladder", "x8"}),
            "--metrics.histogram-ladder x8: expected x4, x2 or x16");
  EXPECT_EQ(error_of({"--metrics.calls", "api"}), "--metrics.calls api: expected class or call");
}

TEST(ParseRunOptionsTest, RepeatedFlagIsStillAnError) {
  const std::string message = error_of({"--window", "1s", "--window", "2s"});
  EXPECT_TRUE(contains(message, "'--window' cannot be specified more than once")) << message;
}

TEST(RunEnvironmentTest, NamesAndRepeatableLists) {
  EXPECT_EQ(env_var_name(kRunEnvPrefix, "outlier-threshold"), "STALLWATCH_OUTLIER_THRESHOLD");
  EXPECT_EQ(env_var_name(kRunEnvPrefix, "log.level"), "STALLWATCH_LOG_LEVEL");
  const auto o = parse_env({}, {"STALLWATCH_OTLP_HEADER=a=1, b=2", "STALLWATCH_VERBOSE=false"});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->otlp.headers, (std::vector<std::string>{"a=1", "b=2"}));
  EXPECT_FALSE(o->verbose);
  // The command line's headers add to the environment's and come last (they win by key).
  const auto both = parse_env({"--otlp-header", "c=3"}, {"STALLWATCH_OTLP_HEADER=a=1"});
  ASSERT_TRUE(both.ok()) << both.error().message;
  EXPECT_EQ(both->otlp.headers, (std::vector<std::string>{"a=1", "c=3"}));
}

TEST(RunEnvironmentTest, OtherVariablesAreIgnored) {
  // STALLWATCH_OPTS is the systemd unit's; empty values are unset, as for OTEL_*.
  const auto o = parse_env({}, {"STALLWATCH_OPTS=--window 1s", "STALLWATCH_BIN=/x",
                                "STALLWATCH_WINDOW=", "STALLWATCH_HELP=1", "WINDOW=1s",
                                "stallwatch_window=1s", "PATH=/usr/bin"});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_TRUE(*o == *parse({}));
}

TEST(RunEnvironmentTest, UnknownVariablesAreNamedWithASuggestion) {
  EXPECT_EQ(unknown_run_variables({"STALLWATCH_WINDOWS=5s", "STALLWATCH_WINDOW=5s",
                                   "STALLWATCH_OPTS=--window 1s", "PATH=/usr/bin",
                                   "STALLWATCH_SOMETHING_ELSE=1", "STALLWATCH_LOG_LEVL=debug"}),
            (std::vector<std::string>{
                "STALLWATCH_WINDOWS sets nothing and is ignored (did you mean STALLWATCH_WINDOW?)",
                "STALLWATCH_SOMETHING_ELSE sets nothing and is ignored; every flag of "
                "`stallwatch run --help` has its STALLWATCH_<FLAG> variable",
                "STALLWATCH_LOG_LEVL sets nothing and is ignored (did you mean "
                "STALLWATCH_LOG_LEVEL?)"}));
  EXPECT_TRUE(unknown_run_variables({"STALLWATCH_PATH_PROCFS=/host/proc"}).empty());
}

TEST(RunEnvironmentTest, MalformedValueNamesTheVariable) {
  struct Case {
    const char* env;
    const char* want;
  };
  for (const Case& c : {
           Case{"STALLWATCH_WINDOW=5", "STALLWATCH_WINDOW: invalid duration '5'"},
           Case{"STALLWATCH_WINDOW=0s", "STALLWATCH_WINDOW 0s is out of range: use 100ms to 1h"},
           Case{"STALLWATCH_KUBE_REFRESH=10ms",
                "STALLWATCH_KUBE_REFRESH 10ms is out of range: use 1s to 1d"},
           Case{"STALLWATCH_LISTEN=9464", "STALLWATCH_LISTEN 9464: expected ADDR:PORT"},
           Case{"STALLWATCH_MAX_DB=12XB", "STALLWATCH_MAX_DB: unknown size unit"},
           Case{"STALLWATCH_MAX_CGROUPS=many", "STALLWATCH_MAX_CGROUPS: "},
           Case{"STALLWATCH_VERBOSE=maybe", "STALLWATCH_VERBOSE: expected true or false"},
           Case{"STALLWATCH_LOG_LEVEL=loud", "STALLWATCH_LOG_LEVEL: unknown level 'loud'"},
           Case{"STALLWATCH_OTLP_INTERVAL=soon", "STALLWATCH_OTLP_INTERVAL: invalid duration"},
           Case{"STALLWATCH_CONFIG=/nonexistent/sw.conf",
                "cannot read config file /nonexistent/sw.conf named by STALLWATCH_CONFIG"},
       }) {
    const std::string message = env_error_of({c.env});
    EXPECT_TRUE(message.starts_with(c.want)) << c.env << " -> " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(RunEnvironmentTest, LaterErrorsNameTheVariable) {
  const auto o = parse_env({}, {"STALLWATCH_OTLP_ENDPOINT=ftp://collector"});
  ASSERT_TRUE(o.ok()) << o.error().message;
  const auto push = otlp::resolve_push_config(
      o->otlp, o->otlp_file, [](const char*) -> const char* { return nullptr; }, "host", "1.0");
  ASSERT_FALSE(push.ok());
  EXPECT_TRUE(name_run_flag_source(*o, push.error().message)
                  .starts_with("STALLWATCH_OTLP_ENDPOINT ftp://collector: expected an http://"))
      << name_run_flag_source(*o, push.error().message);
  EXPECT_EQ(name_run_flag_source(*o, "--otlp-endpoint-other x"), "--otlp-endpoint-other x");
  EXPECT_EQ(name_run_flag_source(*parse({}), "--window x"), "--window x");
}

TEST(RunLogFlagsTest, LevelFormatAndVerbose) {
  const auto defaults = parse({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->log, LogSettings{});
  const auto warn = parse({"--log.level=warn", "--log.format", "logfmt"});
  ASSERT_TRUE(warn.ok()) << warn.error().message;
  EXPECT_EQ(warn->log.level, LogLevel::kWarn);
  EXPECT_EQ(warn->log.format, LogFormat::kLogfmt);
  EXPECT_FALSE(warn->verbose);
  const auto debug = parse({"--log.level", "debug"});
  ASSERT_TRUE(debug.ok());
  EXPECT_TRUE(debug->verbose) << "-v and --log.level=debug are the same";
  const auto v = parse({"-v", "--log.format=json"});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->log.level, LogLevel::kDebug);
  EXPECT_EQ(v->log.format, LogFormat::kJson);
  EXPECT_EQ(error_of({"--log.level", "trace"}),
            "--log.level: unknown level 'trace'; use debug, info, warn or error");
  EXPECT_EQ(error_of({"--log.format", "text"}),
            "--log.format: unknown format 'text'; use logfmt or json");
  // The command line's -v is above the environment's level.
  const auto layered = parse_env({"-v"}, {"STALLWATCH_LOG_LEVEL=error"});
  ASSERT_TRUE(layered.ok()) << layered.error().message;
  EXPECT_EQ(layered->log.level, LogLevel::kDebug);
}

TEST_F(ConfigFile, PrecedenceFlagOverEnvironmentOverFileOverDefault) {
  const std::string path =
      write("window = 2s\nretention = 12h\nmax-cgroups = 32\nlog.format = logfmt\n");
  const auto o = parse_env({"--config", path, "--window", "4s"},
                           {"STALLWATCH_WINDOW=3s", "STALLWATCH_RETENTION=1d"});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->window, 4s);        // flag
  EXPECT_EQ(o->retention, 24h);    // environment over the file
  EXPECT_EQ(o->max_cgroups, 32u);  // file
  EXPECT_EQ(o->log.format, LogFormat::kLogfmt);
  EXPECT_EQ(o->outlier_threshold, 1ms);  // default
  EXPECT_EQ(o->from_env,
            (std::map<std::string, std::string>{{"retention", "STALLWATCH_RETENTION"}}));

  // The file can come from STALLWATCH_CONFIG; --config wins over it.
  const auto via_env = parse_env({}, {"STALLWATCH_CONFIG=" + path});
  ASSERT_TRUE(via_env.ok()) << via_env.error().message;
  EXPECT_EQ(via_env->config, path);
  EXPECT_EQ(via_env->window, 2s);
  const auto flag_wins = parse_env({"--config", path}, {"STALLWATCH_CONFIG=/nonexistent"});
  ASSERT_TRUE(flag_wins.ok()) << flag_wins.error().message;
  EXPECT_EQ(flag_wins->config, path);
}

TEST_F(ConfigFile, BadValueInFileIsNamedByItsLineEvenWithEnvironment) {
  const std::string path = write("window = 0s\n");
  const auto o = parse_env({"--config", path}, {"STALLWATCH_RETENTION=1d"});
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error().message, path + ":1: window 0s is out of range: use 100ms to 1h");
  // Set above the file, the file's bad value is never read.
  EXPECT_TRUE(parse_env({"--config", path}, {"STALLWATCH_WINDOW=1s"}).ok());
}

// OTLP settings: flag > STALLWATCH_OTLP_* > OTEL_* > config file > default.
TEST_F(ConfigFile, OtlpPrecedenceWithOtelVariables) {
  const std::string path = write(
      "otlp-endpoint = http://file:4318\notlp-temporality = delta\notlp-timeout = 3s\n"
      "otlp-header = k=file\notlp-header = x=file\n");
  std::map<std::string, std::string> otel = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"},
                                             {"OTEL_EXPORTER_OTLP_HEADERS", "k=otel,y=otel"},
                                             {"OTEL_EXPORTER_OTLP_TIMEOUT", "7000"}};
  auto getenv = [&](const char* name) -> const char* {
    auto it = otel.find(name);
    return it == otel.end() ? nullptr : it->second.c_str();
  };
  const auto o = parse_env({"--config", path, "--otlp-header", "k=flag"},
                           {"STALLWATCH_OTLP_HISTOGRAM=exponential"});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->otlp.headers, (std::vector<std::string>{"k=flag"}));
  EXPECT_EQ(o->otlp_file.endpoint, "http://file:4318");
  auto c = otlp::resolve_push_config(o->otlp, o->otlp_file, getenv, "host", "1.0");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->delivery.metrics_url, "http://otel:4318/v1/metrics");  // OTEL_* over the file
  EXPECT_EQ(c->delivery.timeout, 7s);                                 // OTEL_* over the file
  EXPECT_EQ(c->temporality, otlp::Temporality::kDelta);               // the file
  EXPECT_EQ(c->histogram, otlp::HistogramFormat::kExponential);       // STALLWATCH_*
  EXPECT_EQ(c->delivery.headers, (otlp::Headers{{"k", "flag"}, {"x", "file"}, {"y", "otel"}}));

  // STALLWATCH_OTLP_ENDPOINT is above OTEL_*; without OTEL_* the file's endpoint is used.
  const auto env = parse_env({"--config", path}, {"STALLWATCH_OTLP_ENDPOINT=http://sw:4318"});
  ASSERT_TRUE(env.ok()) << env.error().message;
  c = otlp::resolve_push_config(env->otlp, env->otlp_file, getenv, "host", "1.0");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->delivery.metrics_url, "http://sw:4318/v1/metrics");
  otel.clear();
  c = otlp::resolve_push_config(env->otlp, o->otlp_file, getenv, "host", "1.0");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->delivery.metrics_url, "http://sw:4318/v1/metrics");
  c = otlp::resolve_push_config(otlp::PushFlags{}, o->otlp_file, getenv, "host", "1.0");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->delivery.metrics_url, "http://file:4318/v1/metrics");
  EXPECT_EQ(c->delivery.timeout, 3s);
  EXPECT_EQ(c->delivery.headers, (otlp::Headers{{"k", "file"}, {"x", "file"}}));
}

}  // namespace
}  // namespace cli
}  // namespace stallwatch
