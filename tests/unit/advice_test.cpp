// A chain's Fix is pasted into a root shell (issue #35: a cgroup named `x;echo${IFS}INJECTED;#`
// ran when memory_pressure's Fix line was pasted). Every demo scenario is run with hostile
// comm, cgroup, unit and pod names, and each kind's advice is checked the way a shell reads it:
// every command line parses (`bash -n`), bash reads each written word back as exactly the word
// intended, no line but a typed command carries a host word, and every line is one printable
// line (no control bytes, C1 controls or bidi overrides).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "app/demo_runner.h"
#include "chains/advice.h"
#include "chains/kinds.h"
#include "common/strings.h"
#include "demo/scenarios.h"
#include "metrics/http_server.h"

namespace stallwatch {
namespace {

using chains::Command;

// What the tests hand the daemon instead of a name: a shell injection, quotes of both kinds, a
// command substitution, a newline, ESC and CSI (C1), a bidi override and a backslash. The
// marker is what must never appear outside a typed command or an escaped comment.
constexpr std::string_view kMarker = "INJECTED";
const std::string kHostile =
    "x;echo${IFS}INJECTED;#'\"$(id)`id`\n\x1b[31m\xc2\x9b" "1m\xe2\x80\xae\\z";

std::string hostile_cgroup(const std::string& cg) {
  // A hostile parent directory keeps kubepods paths kubepods paths (the pod's UID and container
  // id still name it); a systemd unit gets a hostile stem and keeps its suffix.
  std::string out = "/" + kHostile + cg;
  const size_t slash = out.rfind('/');
  const std::string last = out.substr(slash + 1);
  for (std::string_view suffix : {".service", ".scope", ".slice"}) {
    if (last.ends_with(suffix) && last.find("containerd") == std::string::npos &&
        last.find("kubepods") == std::string::npos) {
      out = out.substr(0, slash + 1) + last.substr(0, last.size() - suffix.size()) + kHostile +
            std::string(suffix);
      break;
    }
  }
  return out;
}

// Runs `script` with bash and returns what it printed; `status` gets the exit status.
std::string run_bash(const std::vector<std::string>& argv, int* status) {
  std::string cmd = "bash";
  for (const auto& a : argv) cmd += " " + shell_quote(a);
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return "popen failed";
  std::string out;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  const int rc = pclose(f);
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

// Each printed word followed by a NUL, split back.
std::vector<std::string> split_nul(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\0') {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// Checks one typed command the way a person's shell would read it.
void expect_reads_back(const Command& c, const std::string& where) {
  int status = 0;
  const std::string text = c.text();
  const std::string parse = run_bash({"-n", "-c", text}, &status);
  EXPECT_EQ(status, 0) << where << ": bash -n rejects\n  " << text << "\n  " << parse;
  const auto intended = c.words_intended();
  const auto written = c.words_written();
  ASSERT_EQ(intended.size(), written.size());
  for (size_t i = 0; i < intended.size(); ++i) {
    // bash reads the written words as a function's arguments: no command runs, no file opens.
    std::string script = "args() { printf '%s\\0' \"$@\"; }; args";
    for (const auto& w : written[i]) script += " " + (w == ">" ? shell_quote(">") : w);
    const std::string got = run_bash({"-c", script}, &status);
    EXPECT_EQ(status, 0) << where << ": " << script;
    EXPECT_EQ(split_nul(got), intended[i]) << where << ": words of\n  " << text;
  }
}

// One printable line: no byte below 0x20 or 0x7f, valid UTF-8, no C1 control or bidi override.
// escape_name leaves exactly such text alone, backslashes apart (which it doubles).
bool printable_line(std::string_view line) {
  for (;;) {
    const size_t b = line.find('\\');
    const std::string_view piece = line.substr(0, b);
    if (escape_name(piece) != piece) return false;
    if (b == std::string_view::npos) return true;
    line.remove_prefix(b + 1);
  }
}

TEST(Command, WordsAreQuotedOnlyWhereNeeded) {
  Command c("taskset -acp");
  c.arg("0-3").number(4242);
  EXPECT_EQ(c.text(), "taskset -acp 0-3 4242");
  Command s("systemctl set-property");
  s.arg("fluent bit.service").words("CPUQuota=");
  EXPECT_EQ(s.text(), "systemctl set-property 'fluent bit.service' CPUQuota=");
  Command e("echo max");
  e.to_file("/sys/fs/cgroup/a'b/cpu.max");
  EXPECT_EQ(e.text(), "echo max > '/sys/fs/cgroup/a'\\''b/cpu.max'");
  Command p("ethtool -S");
  p.placeholder("iface").pipe(Command("grep -iE").arg("err|drop"));
  EXPECT_EQ(p.text(), "ethtool -S '<iface>' | grep -iE 'err|drop'");
  Command j("renice -n 19 -p");
  j.number(7).then(Command("taskset -acp 1").number(7));
  EXPECT_EQ(j.text(), "renice -n 19 -p 7; taskset -acp 1 7");
}

TEST(Command, ControlBytesAreAnsiCQuotedOnOneLine) {
  Command c("cat");
  c.arg("/a\nb\x1b[31m\xc2\x9b\xe2\x80\xae'\\");
  EXPECT_EQ(c.text(), "cat $'/a\\x0ab\\x1b[31m\\xc2\\x9b\\xe2\\x80\\xae\\'\\\\'");
  EXPECT_EQ(c.text().find('\n'), std::string::npos);
  expect_reads_back(c, "ansi-c");
  Command h("systemctl set-property");
  h.arg(kHostile + ".service").words("CPUQuota=");
  expect_reads_back(h, "hostile unit");
}

TEST(Advice, NotesAndReasonsAreOnePrintableLine) {
  chains::Advice a;
  a.note("lower " + kHostile);
  a.command(Command("nvidia-smi"), "why " + kHostile);
  const std::string text = a.text();
  std::istringstream in(text);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_TRUE(printable_line(line)) << line;
  }
  EXPECT_EQ(lines, 2);
}

TEST(Advice, EveryKindsFixParsesWithHostileNames) {
  std::set<chains::Kind> seen;
  int hostile_commands = 0;
  for (const std::string& name : demo::scenario_names()) {
    auto scenario = demo::make_scenario(name);
    ASSERT_TRUE(scenario) << name;
    demo::RunnerOptions o;
    o.realtime = false;
    o.end_ns = 1795478400LL * 1000000000LL;
    o.seed = 42;
    o.rename_cgroup = hostile_cgroup;
    o.rename_comm = [](const std::string& comm) { return escape_name(comm + kHostile); };
    o.rename_pod = [](const std::string& n) { return n + kHostile; };
    metrics::SnapshotBoard board;
    std::ostringstream narration;
    const auto result = demo::run_scenario(*scenario, o, board, nullptr, narration);
    for (const auto& c : result.opened) {
      seen.insert(c.kind);
      const std::string where = name + "/" + std::string(chains::kind_name(c.kind));
      size_t next = 0;  // the next typed command, in order
      std::istringstream in(c.recommendation);
      std::string line;
      while (std::getline(in, line)) {
        EXPECT_TRUE(printable_line(line)) << where << ": " << line;
        if (line.starts_with("# ")) continue;
        if (next < c.commands.size() && line.starts_with(c.commands[next].text() + "   # ")) {
          const std::string cmd = c.commands[next].text();
          if (cmd.find(kMarker) != std::string::npos) ++hostile_commands;
          expect_reads_back(c.commands[next++], where);
          continue;
        }
        // A code snippet: our own text, so no host word before its reason.
        const std::string code = line.substr(0, line.find("   # "));
        EXPECT_EQ(code.find(kMarker), std::string::npos) << where << ": " << line;
      }
      EXPECT_EQ(next, c.commands.size()) << where << ": commands not in the text in order";
      // Every line of the chain a person reads is one printable line too.
      for (const std::string* s : {&c.summary, &c.root_cause, &c.effect}) {
        std::istringstream lines(*s);
        while (std::getline(lines, line)) EXPECT_TRUE(printable_line(line)) << where << ": " << line;
      }
    }
  }
  // The demo scenarios open a chain of every kind.
  for (const auto& k : chains::kKinds) {
    EXPECT_TRUE(seen.contains(k.kind)) << "no demo scenario opened " << k.name;
  }
  // The hostile names reached commands (the renaming worked, and quoting was exercised).
  EXPECT_GE(hostile_commands, 3);
}

}  // namespace
}  // namespace stallwatch
