// The command line as exporters shape it (issue #51), through the real binary: `stallwatch help
// CMD`, --version on every command and at the top, one-line usage errors with exit 2 from every
// command, `demo --list`, and the no-database hint that never sends the demo to the missing path.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/version.h"
#include "demo/scenarios.h"
#include "stallwatch_version.h"  // generated (cmake/GitVersion.cmake)

namespace stallwatch::cli {
namespace {

struct Outcome {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// STALLWATCH_BIN with `args` (each single-quoted), stdout and stderr apart.
Outcome run(const std::vector<std::string>& args) {
  const std::string base = ::testing::TempDir() + "/cli_usage_" + std::to_string(getpid());
  std::string cmd = STALLWATCH_BIN;
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " </dev/null >" + base + ".out 2>" + base + ".err";
  Outcome o;
  const int st = std::system(cmd.c_str());
  o.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  o.out = slurp(base + ".out");
  o.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return o;
}

const std::vector<std::string> kCommands = {"run",    "check", "explain", "query",  "export",
                                            "stacks", "mcp",   "demo",    "version"};

TEST(CliHelp, HelpCommandIsTheCommandsHelp) {
  for (const auto& cmd : kCommands) {
    const Outcome help = run({"help", cmd});
    const Outcome direct = run({cmd, "--help"});
    EXPECT_EQ(help.rc, 0) << cmd << ": " << help.err;
    EXPECT_EQ(direct.rc, 0) << cmd << ": " << direct.err;
    EXPECT_EQ(help.out, direct.out) << cmd;
    EXPECT_FALSE(help.out.empty()) << cmd;
    EXPECT_EQ(help.err, "") << cmd;
  }
}

TEST(CliHelp, TopLevelUsage) {
  const Outcome help = run({"help"});
  EXPECT_EQ(help.rc, 0);
  EXPECT_TRUE(help.out.starts_with("usage: stallwatch <command> [options]\n")) << help.out;
  for (const auto& cmd : kCommands) {
    EXPECT_NE(help.out.find("\n  " + cmd + " "), std::string::npos) << cmd << " in " << help.out;
  }
  EXPECT_EQ(run({"--help"}).out, help.out);
  EXPECT_EQ(run({"-h"}).out, help.out);
  const Outcome none = run({});
  EXPECT_EQ(none.rc, 2);
  EXPECT_EQ(none.err, help.out);
}

TEST(CliHelp, HelpForAnUnknownCommandIsOneLine) {
  const Outcome o = run({"help", "bogus"});
  EXPECT_EQ(o.rc, 2);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err, "stallwatch help: unknown command 'bogus' (see `stallwatch --help`)\n");
}

TEST(CliVersion, VersionTextIsTheExportersShape) {
  const std::string text = version_text();
  EXPECT_EQ(text.substr(0, text.find('\n')), std::string("stallwatch, version ") +
                                                 STALLWATCH_VERSION +
                                                 " (revision: " + STALLWATCH_REVISION + ")");
  const std::regex shape(
      "stallwatch, version [0-9][^ ]* \\(revision: ([0-9a-f]{12}|unknown)\\)\n"
      "  build date: ([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z|unknown)\n"
      "  compiler: (gcc|clang) [0-9][^\n]*\n"
      "  platform: linux/(amd64|arm64|ppc64le|s390x|riscv64|unknown)\n");
  EXPECT_TRUE(std::regex_match(text, shape)) << text;
#if defined(__x86_64__)
  EXPECT_EQ(platform_name(), "linux/amd64");
#elif defined(__aarch64__)
  EXPECT_EQ(platform_name(), "linux/arm64");
#endif
}

TEST(CliVersion, EveryCommandAndTheTopLevelPrintIt) {
  const std::string text = version_text();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--version"}, std::vector<std::string>{"version"}}) {
    const Outcome o = run(args);
    EXPECT_EQ(o.rc, 0) << args[0] << ": " << o.err;
    EXPECT_EQ(o.out, text) << args[0];
  }
  for (const auto& cmd : kCommands) {
    const Outcome o = run({cmd, "--version"});
    EXPECT_EQ(o.rc, 0) << cmd << ": " << o.err;
    EXPECT_EQ(o.out, text) << cmd;
    EXPECT_EQ(o.err, "") << cmd;
  }
  // Answered before the environment and the config file are read.
  EXPECT_EQ(run({"run", "--config", "/nonexistent/stallwatch.conf", "--version"}).out, text);
}

// Every command's usage error: one line naming the command and where its help is, exit 2.
TEST(CliUsageErrors, OneLineAndExit2FromEveryCommand) {
  for (const auto& cmd : kCommands) {
    const Outcome o = run({cmd, "--bogus"});
    EXPECT_EQ(o.rc, 2) << cmd;
    EXPECT_EQ(o.out, "") << cmd;
    EXPECT_EQ(o.err, "stallwatch " + cmd + ": unrecognised option '--bogus' (see `stallwatch " +
                         cmd + " --help`)\n")
        << cmd;
  }
  struct Case {
    std::vector<std::string> args;
    std::string line;
  };
  const std::vector<Case> cases = {
      {{"explain", "--since", "forever"},
       "stallwatch explain: --since: invalid duration 'forever'"},
      {{"query"}, "stallwatch query: no SQL statement given"},
      {{"export", "-o", "-"}, "stallwatch export: --format is required (perfetto or chrome-json)"},
      {{"stacks", "--pid", "x"}, "stallwatch stacks: --pid 'x' is not a process id"},
      {{"mcp", "stray"}, "stallwatch mcp: unexpected argument 'stray'"},
      {{"check", "stray"}, "stallwatch check: unexpected argument 'stray'"},
      {{"demo", "--window", "0s"}, "stallwatch demo: --window 0s: must be greater than 0"},
      {{"demo", "--hold", "--fast"}, "stallwatch demo: --hold needs --listen"},
      {{"version", "extra"}, "stallwatch version: unexpected argument 'extra'"},
  };
  for (const Case& c : cases) {
    const Outcome o = run(c.args);
    EXPECT_EQ(o.rc, 2) << c.line;
    EXPECT_EQ(o.out, "") << c.line;
    EXPECT_TRUE(o.err.starts_with(c.line)) << o.err;
    EXPECT_TRUE(o.err.ends_with(" (see `stallwatch " + c.args[0] + " --help`)\n")) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  }
}

TEST(CliUsageErrors, UnknownCommandIsOneLine) {
  Outcome o = run({"frobnicate"});
  EXPECT_EQ(o.rc, 2);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err, "stallwatch: unknown command 'frobnicate' (see `stallwatch --help`)\n");
  o = run({"--frobnicate"});
  EXPECT_EQ(o.rc, 2);
  EXPECT_EQ(o.err, "stallwatch: unrecognised option '--frobnicate' (see `stallwatch --help`)\n");
}

TEST(CliDemo, ListNamesEveryScenarioWithItsStory) {
  const Outcome o = run({"demo", "--list"});
  ASSERT_EQ(o.rc, 0) << o.err;
  std::istringstream lines(o.out);
  std::vector<std::string> names;
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.find(' ');
    ASSERT_NE(space, std::string::npos) << line;
    names.push_back(line.substr(0, space));
    const auto scenario = demo::make_scenario(names.back());
    ASSERT_TRUE(scenario) << line;
    EXPECT_TRUE(line.ends_with("  " + scenario->title)) << line;
  }
  EXPECT_EQ(names, demo::scenario_names());
  const Outcome bad = run({"demo", "nosuch"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_TRUE(bad.err.ends_with(" (see `stallwatch demo --list`)\n")) << bad.err;
}

// The hint for a missing store sends the demo to a file of its own: by default the missing path
// is the daemon's store, and a demo's fake incident there would read as a real one.
TEST(CliHint, NoDatabaseNeverSendsTheDemoToTheMissingPath) {
  const std::string missing = ::testing::TempDir() + "/no-such-store-" + std::to_string(getpid());
  for (const std::string cmd : {"explain", "stacks", "query"}) {
    std::vector<std::string> args = {cmd, "--db", missing};
    if (cmd == "query") args.push_back("SELECT 1");
    const Outcome o = run(args);
    EXPECT_EQ(o.rc, 1) << cmd << ": " << o.err;
    EXPECT_NE(o.err.find("no database at " + missing), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("`stallwatch demo incident --fast --db /tmp/stallwatch-demo.db`, then "
                         "`stallwatch " +
                         cmd + " --db /tmp/stallwatch-demo.db`"),
              std::string::npos)
        << o.err;
    EXPECT_EQ(o.err.find("--db " + missing), std::string::npos) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  }
}

}  // namespace
}  // namespace stallwatch::cli
