// Privileged tier, issue #17: the line of code behind a stalled CUDA call. Every CPython this
// machine carries (pyenv's 3.10-3.13 and Debian's python3; an absent one is skipped with the
// reason) runs a script that calls the mock runtime through ctypes from known functions and
// lines, in its main thread and in a second threading.Thread, under real CPU contention; one
// of them is started before the daemon. Each gets a cpu_contention chain whose top site names
// the exact function, file and line, and `stallwatch stacks` shows both threads' stacks. A C
// program with frame pointers gets named native frames, a stripped copy of it module+offset,
// and neither gets Python frames or an error.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "support/harness.h"
#include "support/process.h"

namespace stallwatch::test {
namespace {

const std::string kCudart = std::string(MOCK_DIR) + "/libcudart.so.12";
const std::string kScript = std::string(FIXTURES_DIR) + "/stacks/train_sites.py";

struct Interpreter {
  std::string name;  // "3.12", "debian"
  std::string path;
};

// pyenv's newest patch release of each minor from 3.10 on, and Debian's python3.
std::vector<Interpreter> interpreters(std::vector<std::string>& skipped) {
  std::vector<Interpreter> out;
  const char* env = std::getenv("PYENV_ROOT");
  const std::string root = env && *env ? env : "/root/.pyenv";
  std::map<int, std::pair<int, std::string>> newest;  // minor → (patch, path)
  if (DIR* d = opendir((root + "/versions").c_str())) {
    while (dirent* e = readdir(d)) {
      int major = 0, minor = 0, patch = 0;
      if (std::sscanf(e->d_name, "%d.%d.%d", &major, &minor, &patch) != 3 || major != 3 ||
          minor < 10) {
        continue;
      }
      const std::string bin = root + "/versions/" + e->d_name + "/bin/python3";
      if (access(bin.c_str(), X_OK) != 0) continue;
      auto& n = newest[minor];
      if (n.second.empty() || patch > n.first) n = {patch, bin};
    }
    closedir(d);
  }
  for (int minor : {10, 11, 12, 13}) {
    auto it = newest.find(minor);
    if (it == newest.end()) {
      skipped.push_back("CPython 3." + std::to_string(minor) + ": not under " + root + "/versions");
    } else {
      out.push_back({"3." + std::to_string(minor), it->second.second});
    }
  }
  if (access("/usr/bin/python3", X_OK) == 0) {
    out.push_back({"debian", "/usr/bin/python3"});
  } else {
    skipped.push_back("Debian's python3: /usr/bin/python3 is absent");
  }
  return out;
}

// Line numbers of the script's SITE- marks.
std::map<std::string, int> site_lines() {
  std::map<std::string, int> out;
  std::ifstream in(kScript);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    auto at = line.find("# SITE-");
    if (at != std::string::npos) out[line.substr(at + 7)] = n;
  }
  return out;
}

std::string python_frame(const std::string& function, int line) {
  return function + "() at " + kScript + ":" + std::to_string(line);
}

Spawn script(const Interpreter& py, const TestCgroup& cg, int seconds) {
  Spawn s;
  s.argv = {py.path, kScript, kCudart, std::to_string(seconds)};
  s.env = {{"MOCK_CUDA_SYNC_CPU_US", "2000"}};
  s.cgroup_dir = cg.dir();
  s.cpu = 0;
  s.output_path = "/dev/null";
  return s;
}

nlohmann::json explain_json(const Daemon& d) {
  return nlohmann::json::parse(
      capture(std::string(STALLWATCH_BIN) + " explain --db " + d.db_path() + " --since 10m --json"),
      nullptr, false);
}

// The chain of `pid` with sites, or null.
nlohmann::json chain_of(const nlohmann::json& report, int pid) {
  if (!report.is_object() || !report.contains("chains")) return nullptr;
  for (const auto& c : report["chains"]) {
    if (c.value("pid", 0) == pid && c.contains("sites") && !c["sites"].empty()) return c;
  }
  return nullptr;
}

std::string stacks_of(const Daemon& d, int pid) {
  return capture(std::string(STALLWATCH_BIN) + " stacks --db " + d.db_path() +
                 " --since 10m --pid " + std::to_string(pid));
}

TEST(Stacks, EveryInterpreterNamesTheLineOfBothThreadsUnderContention) {
  std::vector<std::string> skipped;
  const auto pythons = interpreters(skipped);
  for (const auto& s : skipped) std::cout << "[ SKIPPED  ] " << s << "\n";
  if (pythons.empty()) GTEST_SKIP() << "no CPython 3.10+ on this machine";
  const auto lines = site_lines();
  ASSERT_EQ(lines.size(), 4u) << kScript;
  const std::string tag = "stallwatch-stacks-" + std::to_string(getpid());
  std::vector<std::unique_ptr<TestCgroup>> cgroups;
  for (const auto& py : pythons) cgroups.push_back(std::make_unique<TestCgroup>(tag + "/" + py.name));
  TestCgroup agents(tag + "/agents");
  std::vector<Child> children;
  // The first interpreter's script starts before the daemon: found by the start-up scan.
  children.emplace_back(script(pythons[0], *cgroups[0], 45));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let it map the runtime

  Daemon daemon({"--window", "500ms"});
  ASSERT_TRUE(daemon.wait_ready()) << "log: " << daemon.log_path();
  for (size_t i = 1; i < pythons.size(); ++i) children.emplace_back(script(pythons[i], *cgroups[i], 45));
  Spawn busy;
  busy.argv = {"/bin/sh", "-c", "while :; do :; done"};
  busy.cgroup_dir = agents.dir();
  busy.cpu = 0;
  busy.comm = "sw-stack-hog";
  Child hog(busy);

  std::map<int, nlohmann::json> chains;
  poll_until(
      [&] {
        auto report = explain_json(daemon);
        for (auto& c : children) {
          auto ch = chain_of(report, c.pid());
          if (!ch.is_null()) chains[c.pid()] = ch;
        }
        return chains.size() == children.size();
      },
      std::chrono::seconds(40), std::chrono::milliseconds(1000));

  for (size_t i = 0; i < pythons.size(); ++i) {
    SCOPED_TRACE("CPython " + pythons[i].name + " (" + pythons[i].path + ")");
    const int pid = children[i].pid();
    ASSERT_TRUE(chains.count(pid)) << "no chain with sites for pid " << pid << "; log "
                                   << daemon.log_path() << "\n"
                                   << explain_json(daemon).dump(1);
    const auto& c = chains[pid];
    const auto& site = c["sites"][0];
    EXPECT_EQ(site["call"], c["call"]) << c.dump(1);
    ASSERT_GE(site["frames"].size(), 2u) << c.dump(1);
    const auto& f0 = site["frames"][0];
    const auto& f1 = site["frames"][1];
    EXPECT_EQ(f0["kind"], "python");
    EXPECT_EQ(f0["file"], kScript);
    if (c["call"] == "cudaStreamSynchronize") {  // the loader thread
      EXPECT_EQ(f0["function"], "settle") << c.dump(1);
      EXPECT_EQ(f0["line"], lines.at("SETTLE")) << c.dump(1);
      EXPECT_EQ(f1["function"], "epoch") << c.dump(1);
      EXPECT_EQ(f1["line"], lines.at("EPOCH")) << c.dump(1);
    } else {  // the main thread
      EXPECT_EQ(c["call"], "cudaDeviceSynchronize") << c.dump(1);
      EXPECT_EQ(f0["function"], "drain") << c.dump(1);
      EXPECT_EQ(f0["line"], lines.at("DRAIN")) << c.dump(1);
      EXPECT_EQ(f1["function"], "<module>") << c.dump(1);
      EXPECT_EQ(f1["line"], lines.at("MAIN")) << c.dump(1);
    }
    // Both threads' stacks, outermost first, in the flame graph input.
    // Python frames first, then the native ones under them (libffi's), then the call.
    const std::string folded = stacks_of(daemon, pid);
    auto has_line = [&](const std::string& python, const std::string& call) {
      std::istringstream in(folded);
      for (std::string l; std::getline(in, l);) {
        if (l.find(python) != std::string::npos && l.find(";" + call + " ") != std::string::npos) {
          return true;
        }
      }
      return false;
    };
    EXPECT_TRUE(has_line(python_frame("epoch", lines.at("EPOCH")) + ";" +
                             python_frame("settle", lines.at("SETTLE")) + ";",
                         "cudaStreamSynchronize"))
        << folded;
    EXPECT_TRUE(has_line(python_frame("<module>", lines.at("MAIN")) + ";" +
                             python_frame("drain", lines.at("DRAIN")) + ";",
                         "cudaDeviceSynchronize"))
        << folded;
  }
  // The text report shows the line under the chain.
  const std::string text = capture(std::string(STALLWATCH_BIN) + " explain --db " +
                                   daemon.db_path() + " --since 10m");
  if (std::getenv("STALLWATCH_TEST_SHOW")) std::cout << text;
  EXPECT_NE(text.find("Site:"), std::string::npos) << text;
  // Each chain's top site, whichever of the two threads' calls the chain is about (the one that
  // waited more: either can be; once all five chains were about the main thread's).
  for (const auto& [pid, c] : chains) {
    const auto& f0 = c["sites"][0]["frames"][0];
    EXPECT_NE(text.find(python_frame(f0["function"].get<std::string>(), f0["line"].get<int>())),
              std::string::npos)
        << "pid " << pid << "\n"
        << text;
  }
  hog.stop();
  for (auto& c : children) c.stop();
  EXPECT_EQ(daemon.stop(), 0) << daemon.log_path();
}

TEST(Stacks, NativeFramesAreNamedAStrippedCopyShowsOffsetsAndNeitherGetsPythonFrames) {
  const std::string dir = std::string(TEST_SCRATCH_DIR) + "/stacks-" + std::to_string(getpid());
  mkdir(dir.c_str(), 0755);
  const std::string stripped = dir + "/stack_app_stripped";
  ASSERT_EQ(run_command({"strip", "-o", stripped, STACK_APP_BIN}), 0);
  Daemon daemon({"--window", "500ms"});
  ASSERT_TRUE(daemon.wait_ready()) << "log: " << daemon.log_path();
  auto start = [&](const std::string& bin, const std::string& out) {
    Spawn s;
    s.argv = {bin, kCudart, "400"};
    s.env = {{"MOCK_CUDA_SYNC_SLEEP_US", "1500"}};  // every call an outlier (1 ms threshold)
    s.output_path = out;
    return Child(s);
  };
  Child named = start(STACK_APP_BIN, dir + "/named.out"), bare = start(stripped, dir + "/bare.out");
  const int named_pid = named.pid(), bare_pid = bare.pid();
  // Each says "done" after its calls and lives on, so its last windows are read while it does.
  ASSERT_TRUE(poll_until(
      [&] {
        return slurp(dir + "/named.out").find("done") != std::string::npos &&
               slurp(dir + "/bare.out").find("done") != std::string::npos;
      },
      std::chrono::seconds(30)));
  ASSERT_TRUE(daemon.wait_windows(3)) << daemon.log_path();
  const std::string a = stacks_of(daemon, named_pid);
  const std::string b = stacks_of(daemon, bare_pid);
  EXPECT_NE(a.find("main;epoch_native;settle_native;cudaStreamSynchronize "), std::string::npos)
      << a;
  EXPECT_EQ(a.find(" at "), std::string::npos) << "Python frames in a C program: " << a;
  EXPECT_NE(b.find("stack_app_stripped+0x"), std::string::npos) << b;
  EXPECT_EQ(b.find("settle_native"), std::string::npos) << b;
  EXPECT_EQ(b.find(" at "), std::string::npos) << b;
  // Every traced call is an outlier (the calls before the runtime was attached are not traced:
  // issue #19), and every outlier has its stack: the counts agree exactly.
  auto count = [&](const std::string& table, int pid) {
    return capture(std::string(STALLWATCH_BIN) + " query --db " + daemon.db_path() +
                   " --format csv \"SELECT sum(count) FROM " + table + " WHERE pid = " +
                   std::to_string(pid) + "\"");
  };
  for (int pid : {named_pid, bare_pid}) {
    const std::string calls = count("call_windows", pid), sites = count("outlier_sites", pid);
    EXPECT_EQ(calls, sites) << "pid " << pid;
    // 300 to all 400: the first calls may be made before the attach (it raced ahead of them
    // once the mocks' probes got cheap, issue #40), never most of them.
    const size_t newline = calls.find('\n');
    const long traced = newline == std::string::npos ? -1 : std::atol(calls.c_str() + newline + 1);
    EXPECT_GE(traced, 300) << "fewer than 300 calls traced: " << calls;
    EXPECT_LE(traced, 400) << calls;
  }
  named.stop();
  bare.stop();
  // A Python function whose name and file name carry a newline and an escape character (what
  // a process can put in its own code objects) shows escaped, one line per stack.
  std::vector<std::string> unused;
  const auto pythons = interpreters(unused);
  if (!pythons.empty()) {
    Spawn evil;
    evil.argv = {pythons.front().path, "-c",
                 "import ctypes, sys\n"
                 "lib = ctypes.CDLL(sys.argv[1])\n"
                 "def f():\n    lib.cudaStreamSynchronize(None)\n"
                 "f.__code__ = f.__code__.replace(co_name='evil\\nname\\x1b[31m', "
                 "co_filename='/tmp/x\\ny.py')\n"
                 "for _ in range(1000): f()\n",
                 kCudart};
    evil.env = {{"MOCK_CUDA_SYNC_SLEEP_US", "1500"}};
    evil.output_path = "/dev/null";
    Child e(evil);
    const int evil_pid = e.pid();
    EXPECT_EQ(e.wait(std::chrono::seconds(30)), 0);
    ASSERT_TRUE(daemon.wait_windows(2)) << daemon.log_path();
    const std::string folded = stacks_of(daemon, evil_pid);
    EXPECT_NE(folded.find("evil\\nname\\x1b[31m() at /tmp/x\\ny.py:"), std::string::npos) << folded;
    for (char ch : folded) {
      EXPECT_TRUE(static_cast<unsigned char>(ch) >= 0x20 || ch == '\n') << static_cast<int>(ch);
    }
  }
  // No warning about either: a process that is not Python is the common case.
  const std::string log = slurp(daemon.log_path());
  EXPECT_EQ(log.find("no Python frames"), std::string::npos) << log;
  EXPECT_EQ(daemon.stop(), 0) << daemon.log_path();
  for (const char* f : {"/stack_app_stripped", "/named.out", "/bare.out"}) unlink((dir + f).c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
