// Unit tests for exporter/cli/flags.h (what every subcommand's Boost parsing shares) and for the
// parsers of explain, query, demo and check: `--flag VALUE` and `--flag=VALUE` both work, an
// unknown option is bad usage (exit 2).
#include <gtest/gtest.h>

#include <sstream>

#include "app/demo.h"
#include "cli/check.h"
#include "cli/explain.h"
#include "cli/flags.h"
#include "cli/query.h"

namespace stallwatch::cli {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

po::options_description sample_description() {
  po::options_description desc;
  desc.add_options()("name", po::value<std::string>(), "")("count", po::value<int>(), "")(
      "list", po::value<std::vector<std::string>>()->composing(), "")("on", "")(
      "log.level", po::value<std::string>(), "")("help", "");
  return desc;
}

// ---- cli/flags.h ----

TEST(EnvVarNameTest, UpperCaseDotsAndDashesAsUnderscores) {
  EXPECT_EQ(env_var_name("STALLWATCH_", "outlier-threshold"), "STALLWATCH_OUTLIER_THRESHOLD");
  EXPECT_EQ(env_var_name("STALLWATCH_", "web.listen-address"), "STALLWATCH_WEB_LISTEN_ADDRESS");
  EXPECT_EQ(env_var_name("STALLWATCH_", "log.level"), "STALLWATCH_LOG_LEVEL");
  EXPECT_EQ(env_var_name("STALLWATCH_", "db"), "STALLWATCH_DB");
}

TEST(ParseFlagsTest, BothSpellingsAndErrors) {
  const auto desc = sample_description();
  auto vm = parse_flags({"--name", "a", "--count=3", "--on"}, desc);
  ASSERT_TRUE(vm.ok()) << vm.error().message;
  EXPECT_EQ((*vm)["name"].as<std::string>(), "a");
  EXPECT_EQ((*vm)["count"].as<int>(), 3);
  EXPECT_EQ(vm->count("on"), 1u);

  EXPECT_EQ(parse_flags({"--bogus"}, desc).error().message, "unrecognised option '--bogus'");
  EXPECT_EQ(parse_flags({"stray"}, desc).error().message, "unexpected argument 'stray'");
  EXPECT_TRUE(contains(parse_flags({"--name"}, desc).error().message, "'--name' is missing"));
  EXPECT_FALSE(parse_flags({"--on=yes"}, desc).ok());
  EXPECT_FALSE(parse_flags({"--na", "x"}, desc).ok()) << "no abbreviations";
}

TEST(ParseFlagsTest, LastOneWinsUnlessAskedNotTo) {
  const auto desc = sample_description();
  auto vm =
      parse_flags({"--name", "a", "--on", "--list", "x", "--name=b", "--on", "--list=y"}, desc);
  ASSERT_TRUE(vm.ok()) << vm.error().message;
  EXPECT_EQ((*vm)["name"].as<std::string>(), "b");
  EXPECT_EQ((*vm)["list"].as<std::vector<std::string>>(), (std::vector<std::string>{"x", "y"}));
  const auto strict = parse_flags({"--name", "a", "--name", "b"}, desc, nullptr, kFlagStyle, false);
  ASSERT_FALSE(strict.ok());
  EXPECT_TRUE(contains(strict.error().message, "cannot be specified more than once"));
}

TEST(ParseEnvironmentTest, MapsOnlyKnownVariables) {
  const auto desc = sample_description();
  auto vm = parse_environment({"SW_NAME=a", "SW_LOG_LEVEL= warn ", "SW_LIST=x, y,,z", "SW_ON=true",
                               "SW_UNKNOWN=1", "SW_COUNT=", "SW_HELP=1", "PATH=/bin", "NOEQUALS"},
                              desc, "SW_", {"help"});
  ASSERT_TRUE(vm.ok()) << vm.error().message;
  EXPECT_EQ((*vm)["name"].as<std::string>(), "a");
  EXPECT_EQ((*vm)["log.level"].as<std::string>(), "warn");
  EXPECT_EQ((*vm)["list"].as<std::vector<std::string>>(),
            (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(vm->count("on"), 1u);
  EXPECT_EQ(vm->count("count"), 0u) << "an empty value is unset";
  EXPECT_EQ(vm->count("help"), 0u) << "skipped";

  auto off = parse_environment({"SW_ON=false"}, desc, "SW_");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->count("on"), 0u);
}

TEST(ParseEnvironmentTest, ErrorsNameTheVariableNotTheValue) {
  const auto desc = sample_description();
  const auto bad_switch = parse_environment({"SW_ON=secret-ish"}, desc, "SW_");
  ASSERT_FALSE(bad_switch.ok());
  EXPECT_EQ(bad_switch.error().message,
            "SW_ON: expected true or false (the switch --on); fix or unset the variable");
  const auto bad_number = parse_environment({"SW_COUNT=many"}, desc, "SW_");
  ASSERT_FALSE(bad_number.ok());
  EXPECT_TRUE(bad_number.error().message.starts_with("SW_COUNT: ")) << bad_number.error().message;
  EXPECT_TRUE(contains(bad_number.error().message, "fix or unset the variable"));
}

TEST(LayeredFlagsTest, FirstLayerWinsAndNamesItsSource) {
  const auto desc = sample_description();
  LayeredFlags flags;
  flags.add(*parse_flags({"--name", "cli"}, desc));
  flags.add(*parse_environment({"SW_NAME=env", "SW_COUNT=2"}, desc, "SW_"), "SW_");
  std::string source;
  ASSERT_NE(flags.find("name", &source), nullptr);
  EXPECT_EQ(flags.find("name")->as<std::string>(), "cli");
  EXPECT_EQ(source, "--name");
  ASSERT_NE(flags.find("count", &source), nullptr);
  EXPECT_EQ(source, "SW_COUNT");
  EXPECT_EQ(flags.find("list"), nullptr);
  EXPECT_EQ(LayeredFlags::relabel("--count must be positive", "count", "SW_COUNT"),
            "SW_COUNT must be positive");
  EXPECT_EQ(LayeredFlags::relabel("--count must be positive", "count", "--count"),
            "--count must be positive");
}

TEST(LogFlagsTest, LevelFormatAndVerbose) {
  po::options_description desc;
  add_log_flags(desc);
  auto settings = [&](const std::vector<std::string>& args) {
    auto vm = parse_flags(args, desc);
    EXPECT_TRUE(vm.ok()) << vm.error().message;
    return log_settings(*vm);
  };
  EXPECT_EQ(*settings({}), LogSettings{});
  EXPECT_EQ(settings({"--log.level", "warn"})->level, LogLevel::kWarn);
  EXPECT_EQ(settings({"--log.level=error"})->level, LogLevel::kError);
  EXPECT_EQ(settings({"-v"})->level, LogLevel::kDebug);
  EXPECT_EQ(settings({"--verbose"})->level, LogLevel::kDebug);
  EXPECT_EQ(settings({"-v", "--log.level=debug"})->level, LogLevel::kDebug);
  EXPECT_EQ(settings({"--log.format", "logfmt"})->format, LogFormat::kLogfmt);
  EXPECT_EQ(settings({"--log.format=json"})->format, LogFormat::kJson);
  EXPECT_EQ(settings({"--log.level", "loud"}).error().message,
            "--log.level: unknown level 'loud'; use debug, info, warn or error");
  EXPECT_EQ(settings({"--log.format=xml"}).error().message,
            "--log.format: unknown format 'xml'; use logfmt or json");
  EXPECT_EQ(settings({"-v", "--log.level=info"}).error().message,
            "-v/--verbose means --log.level=debug, not info; drop one of them");
}

TEST(LogFlagsTest, EnvironmentLayerIsNamedAndBelowTheCommandLine) {
  po::options_description desc;
  add_log_flags(desc);
  LayeredFlags flags;
  flags.add(*parse_flags({"-v"}, desc));
  flags.add(*parse_environment({"SW_LOG_LEVEL=error", "SW_LOG_FORMAT=json"}, desc, "SW_"), "SW_");
  const auto s = log_settings(flags);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->level, LogLevel::kDebug);
  EXPECT_EQ(s->format, LogFormat::kJson);

  LayeredFlags bad;
  bad.add(*parse_flags({}, desc));
  bad.add(*parse_environment({"SW_LOG_FORMAT=yaml"}, desc, "SW_"), "SW_");
  EXPECT_EQ(log_settings(bad).error().message,
            "SW_LOG_FORMAT: unknown format 'yaml'; use logfmt or json");
}

// ---- explain ----

TEST(ExplainFlagsTest, BothSpellings) {
  for (const auto& args :
       {std::vector<std::string>{"--db", "/x.db", "--since", "2h", "--cgroup", "/a"},
        std::vector<std::string>{"--db=/x.db", "--since=2h", "--cgroup=/a"}}) {
    const auto o = parse_explain_options(args);
    ASSERT_TRUE(o.ok()) << o.error().message;
    EXPECT_EQ(o->db, "/x.db");
    EXPECT_EQ(o->since, 2h);
    EXPECT_EQ(o->cgroup, "/a");
    EXPECT_FALSE(o->json);
  }
  EXPECT_EQ(parse_explain_options({"--since", "1h", "--since=2h"})->since, 2h);
}

TEST(ExplainFlagsTest, UnknownOptionIsUsage2) {
  const auto o = parse_explain_options({"--bogus"});
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error().message, "unrecognised option '--bogus'");
  EXPECT_EQ(parse_explain_options({"stray"}).error().message, "unexpected argument 'stray'");
  EXPECT_EQ(parse_explain_options({"--db", ""}).error().message, "--db needs a path");
  EXPECT_EQ(parse_explain_options({})->timeout, 30s);
  EXPECT_EQ(parse_explain_options({"--timeout", "2m"})->timeout, 2min);
  EXPECT_EQ(parse_explain_options({"--timeout", "0"})->timeout, 0s);
  EXPECT_EQ(parse_explain_options({"--timeout", "25h"}).error().message,
            "--timeout 25h is out of range: use 100ms to 24h, or 0 for no limit");
  EXPECT_EQ(parse_explain_options({"--since=0s"}).error().message, "--since must be longer than 0");
  EXPECT_EQ(explain_main({"--bogus"}), 2);
  EXPECT_EQ(explain_main({"--help"}), 0);
  EXPECT_TRUE(parse_explain_options({"--version"})->version);
}

// ---- query ----

struct QueryOutcome {
  int code;
  std::string out, err;
};

QueryOutcome query(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = query_main(args, out, err);
  return {code, out.str(), err.str()};
}

TEST(QueryFlagsTest, BothSpellings) {
  // A database that is not there: the options were accepted when the error is about the file.
  for (const auto& args :
       {std::vector<std::string>{"--db", "/nonexistent/q.db", "--format", "csv", "SELECT 1"},
        std::vector<std::string>{"--db=/nonexistent/q.db", "--format=csv", "SELECT 1"},
        std::vector<std::string>{"--db=/nonexistent/q.db", "--", "SELECT 1"}}) {
    const QueryOutcome o = query(args);
    EXPECT_EQ(o.code, 1) << o.err;
    EXPECT_TRUE(o.err.starts_with("stallwatch query: no database at /nonexistent/q.db")) << o.err;
  }
}

TEST(QueryFlagsTest, UnknownOptionIsUsage2) {
  const QueryOutcome o = query({"--frobnicate", "SELECT 1"});
  EXPECT_EQ(o.code, 2);
  // One line, as every command's usage error (issue #51).
  EXPECT_EQ(
      o.err,
      "stallwatch query: unrecognised option '--frobnicate' (see `stallwatch query --help`)\n");
  EXPECT_EQ(query({"--format=yaml", "SELECT 1"}).code, 2);
  EXPECT_EQ(query({"SELECT", "1"}).code, 2);
  EXPECT_EQ(query({"--help"}).code, 0);
  const QueryOutcome v = query({"--version"});
  EXPECT_EQ(v.code, 0);
  EXPECT_TRUE(v.out.starts_with("stallwatch, version ")) << v.out;
}

// ---- demo ----

TEST(DemoFlagsTest, BothSpellings) {
  for (const auto& args :
       {std::vector<std::string>{"cold-start",    "--listen",      "127.0.0.1:1", "--db",
                                 "/x.db",         "--window",      "250ms",       "--otlp-endpoint",
                                 "http://h:4318", "--otlp-header", "a=b",         "--otlp-header",
                                 "c=d",           "--log.level",   "warn",        "--log.format",
                                 "logfmt",        "--fast",        "--hold",      "--json"},
        std::vector<std::string>{"--listen=127.0.0.1:1", "--db=/x.db", "--window=250ms",
                                 "--otlp-endpoint=http://h:4318", "--otlp-header=a=b",
                                 "--otlp-header=c=d", "--log.level=warn", "--log.format=logfmt",
                                 "--fast", "--hold", "--json", "cold-start"}}) {
    const auto o = parse_demo_options(args);
    ASSERT_TRUE(o.ok()) << o.error().message;
    EXPECT_EQ(o->scenario, "cold-start");
    EXPECT_EQ(o->listen, "127.0.0.1:1");
    EXPECT_EQ(o->db, "/x.db");
    EXPECT_EQ(o->window, 250ms);
    EXPECT_EQ(o->otlp.endpoint, "http://h:4318");
    EXPECT_EQ(o->otlp.headers, (std::vector<std::string>{"a=b", "c=d"}));
    EXPECT_EQ(o->log.level, LogLevel::kWarn);
    EXPECT_EQ(o->log.format, LogFormat::kLogfmt);
    EXPECT_TRUE(o->fast);
    EXPECT_TRUE(o->hold);
    EXPECT_TRUE(o->json);
  }
  const auto d = parse_demo_options({});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->scenario, "incident");
  EXPECT_EQ(d->window, 1s);
  EXPECT_FALSE(d->fast);
  EXPECT_EQ(d->log, LogSettings{});
  // Scripts append to a base command line: the last --window wins (tests/dashboards do).
  EXPECT_EQ(parse_demo_options({"--window", "1s", "--window", "200ms"})->window, 200ms);
  EXPECT_EQ(parse_demo_options({"-v"})->log.level, LogLevel::kDebug);
}

TEST(DemoFlagsTest, UnknownOptionIsUsage2) {
  EXPECT_EQ(parse_demo_options({"--bogus"}).error().message, "unrecognised option '--bogus'");
  EXPECT_EQ(parse_demo_options({"--window", "0s"}).error().message,
            "--window 0s: must be greater than 0");
  EXPECT_EQ(parse_demo_options({"incident", "healthy"}).error().message,
            "one scenario at a time, not 'incident' and 'healthy'");
  EXPECT_TRUE(parse_demo_options({"--otlp-interval=soon"})
                  .error()
                  .message.starts_with("--otlp-interval: invalid duration 'soon'"));
  EXPECT_EQ(demo_main({"--bogus"}), 2);
  EXPECT_TRUE(parse_demo_options({"--list"})->list);
  EXPECT_TRUE(parse_demo_options({"--version"})->version);
  EXPECT_EQ(demo_main({"--log.level=loud"}), 2);
}

// ---- check ----

TEST(CheckFlagsTest, ParsesAndRejects) {
  EXPECT_TRUE(parse_check_options({"--json"})->json);
  EXPECT_FALSE(parse_check_options({})->json);
  EXPECT_TRUE(parse_check_options({"-h"})->help);
  EXPECT_TRUE(parse_check_options({"--help"})->help);
  EXPECT_TRUE(parse_check_options({"--version"})->version);
  EXPECT_FALSE(parse_check_options({"--json"})->version);
  EXPECT_EQ(parse_check_options({"--bogus"}).error().message,
            "unrecognised option '--bogus'");
  // run's flags and variables: check looks at what run would use.
  EXPECT_EQ(parse_check_options({"--db", "/tmp/x.db", "--path.procfs", "/host/proc"})->run.db,
            "/tmp/x.db");
  EXPECT_EQ(parse_check_options({"--json", "--path.procfs", "/host/proc"})->run.procfs, "/host/proc");
  EXPECT_EQ(parse_check_options({}, {"STALLWATCH_PATH_SYSFS=/host/sys"})->run.sysfs, "/host/sys");
  EXPECT_FALSE(parse_check_options({"--json=yes"}).ok());
  EXPECT_FALSE(parse_check_options({"extra"}).ok());
  EXPECT_EQ(check_main({"--bogus"}), 2);
  EXPECT_EQ(check_main({"--help"}), 0);
}

}  // namespace
}  // namespace stallwatch::cli
