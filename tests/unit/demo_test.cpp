// `stallwatch demo` end to end, no root: every scenario through the real binary (synthetic host
// → chain engine → SQLite store → explain report), then `explain --json` and `query` over the
// database it left; usage errors; and the --listen mode serving /metrics until SIGTERM.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace stallwatch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "demo_test.XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Starts STALLWATCH_BIN with `args`, stdout and stderr into files under `dir`.
pid_t spawn(const std::vector<std::string>& args, const std::string& out, const std::string& err) {
  std::vector<std::string> argv_s = {STALLWATCH_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  EXPECT_EQ(rc, 0) << "posix_spawn " << STALLWATCH_BIN << ": " << strerror(rc);
  return rc == 0 ? pid : -1;
}

// waitpid with a deadline; -1 when it did not exit in time (then it is killed).
int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -2;
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

struct Outcome {
  int code = -1;
  std::string out, err;
};

Outcome run(const std::vector<std::string>& args, const std::string& dir) {
  const std::string out = dir + "/stdout", err = dir + "/stderr";
  Outcome o;
  pid_t pid = spawn(args, out, err);
  if (pid < 0) return o;
  o.code = wait_exit(pid, std::chrono::seconds(20));
  o.out = slurp(out);
  o.err = slurp(err);
  return o;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---------------------------------------------------------------------------------------------

struct Expected {
  std::string scenario;
  std::string opened;  // the "chain opened" line's start, empty: no chain
  std::string kind, severity;
  int open_at_end = 0;
  std::vector<std::string> also;  // more text the run must print
};

void PrintTo(const Expected& e, std::ostream* os) { *os << e.scenario; }

class DemoScenario : public ::testing::TestWithParam<Expected> {};

TEST_P(DemoScenario, RunsStoresAndExplains) {
  const Expected& e = GetParam();
  TempDir tmp;
  const std::string db = tmp.path() + "/x.db";
  Outcome o = run({"demo", e.scenario, "--fast", "--db", db, "--window", "1s"}, tmp.path());
  ASSERT_EQ(o.code, 0) << o.err << o.out;
  EXPECT_TRUE(o.out.starts_with("demo " + e.scenario + ": ")) << o.out;
  EXPECT_TRUE(contains(o.out, "\n== stallwatch explain --db " + db + "\n")) << o.out;
  EXPECT_TRUE(contains(o.out, "\nstored in " + db + "; try: stallwatch explain --db " + db))
      << o.out;
  if (e.opened.empty()) {
    EXPECT_FALSE(contains(o.out, "chain opened")) << o.out;
    EXPECT_TRUE(contains(o.out, "No causal chains in the last 1d")) << o.out;
  } else {
    EXPECT_TRUE(contains(o.out, "       >> chain opened: " + e.opened)) << o.out;
    const size_t first = o.out.find(">> chain opened");
    EXPECT_EQ(o.out.find(">> chain opened", first + 1), std::string::npos) << "one chain";
    EXPECT_TRUE(contains(o.out, "Causal chains (last 1d): 1, " + std::to_string(e.open_at_end) +
                                    " open\n"))
        << o.out;
  }
  for (const auto& s : e.also) EXPECT_TRUE(contains(o.out, s)) << "'" << s << "' not in\n" << o.out;
  EXPECT_TRUE(fs::exists(db));

  Outcome j = run({"explain", "--db", db, "--since", "1h", "--json"}, tmp.path());
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_TRUE(j.out.starts_with("{\"period\":{")) << j.out;
  EXPECT_TRUE(j.out.ends_with("}\n")) << j.out;
  if (e.kind.empty()) {
    EXPECT_TRUE(contains(j.out, "\"chains\":[]")) << j.out;
  } else {
    EXPECT_TRUE(contains(j.out, "\"chains\":[{\"id\":\"")) << j.out;
    EXPECT_TRUE(contains(j.out, "\"kind\":\"" + e.kind + "\",\"severity\":\"" + e.severity + "\""))
        << j.out;
  }

  Outcome q = run({"query", "--db", db, "--format", "csv", "SELECT kind, severity FROM chains"},
                  tmp.path());
  ASSERT_EQ(q.code, 0) << q.err;
  EXPECT_EQ(q.out, e.kind.empty() ? std::string("kind,severity\r\n")
                                  : "kind,severity\r\n" + e.kind + "," + e.severity + "\r\n");
}

INSTANTIATE_TEST_SUITE_P(
    All, DemoScenario,
    ::testing::Values(
        Expected{"incident",
                 "[CRITICAL] cpu_contention: cudaStreamSynchronize in python3 (PID 3821)",
                 "cpu_contention",
                 "critical",
                 0,
                 {"chain closed after 10 windows: [CRITICAL] cpu_contention",
                  "pt_data_worker:0 PID 3822 (preemptor, worker of the job)",
                  "prometheus-node-exporter PID 1205 in prometheus-node-exporter.service",
                  "fluent-bit PID 1311 in fluent-bit.service (preemptor, system service)",
                  "taskset -acp 0-6 3821", "renice -n 19 -p 1205", "persistent_workers=True"}},
        Expected{"cpu-contention",
                 "[HIGH] cpu_contention: cudaStreamSynchronize in python3 (PID 4242)",
                 "cpu_contention",
                 "high",
                 0,
                 {"preempted by fluent-bit", "renice -n 19 -p 1311"}},
        Expected{"cold-start",
                 "[LOW] cold_start: python3 (PID 5150)",
                 "cold_start",
                 "low",
                 0,
                 {"       >> reported once and closed\n", "cudaMalloc"}},
        Expected{"memcpy-bottleneck",
                 "[MEDIUM] memcpy_bound: python3 (PID 6200) spends 38% of wall time",
                 "memcpy_bound",
                 "medium",
                 0,
                 {"chain closed after 8 windows: [MEDIUM] memcpy_bound", "pin_memory=True"}},
        Expected{"periodic-spike",
                 "[MEDIUM] alloc_spike: cudaMalloc in python3 (PID 7300)",
                 "alloc_spike",
                 "medium",
                 1,
                 {"expandable_segments:True"}},
        Expected{"gpu-steal",
                 "[HIGH] gpu_contention: cudaStreamSynchronize in python3 (PID 8100)",
                 "gpu_contention",
                 "high",
                 0,
                 {"tritonserver", "chain closed after 8 windows: [HIGH] gpu_contention"}},
        Expected{"memory-pressure",
                 "[HIGH] memory_pressure: the workload of python3 (PID 2400) spent 18% of the "
                 "window in memcg reclaim",
                 "memory_pressure",
                 "critical",
                 0,
                 {"chain now critical: [CRITICAL] memory_pressure: python3 (PID 2400), a "
                  "CUDA-issuing process, was OOM-killed",
                  "chain closed after 14 windows: [CRITICAL] memory_pressure",
                  "python3 PID 2400 (OOM victim)", "limits: {memory:"}},
        Expected{"io-stall",
                 "[HIGH] io_stall: python3 (PID 2500) starved 46% of the time waiting on sdb I/O",
                 "io_stall",
                 "high",
                 0,
                 {"pt_data_worker:0 PID 2501 (I/O submitter)", "iostat -x 1 sdb",
                  "chain closed after 8 windows: [HIGH] io_stall"}},
        Expected{"network-retransmit",
                 "[HIGH] network_retransmit: ncclAllReduce in python3 (PID 2600)",
                 "network_retransmit",
                 "high",
                 0,
                 {"with 450 TCP retransmits/s", "ethtool -S", "NCCL_SOCKET_IFNAME",
                  "chain closed after 8 windows: [HIGH] network_retransmit"}},
        Expected{"nccl-straggler",
                 "[HIGH] nccl_straggler: rank 2 of 8, python3 (PID 2702), takes 6x its local "
                 "peers' time in ncclAllReduce",
                 "nccl_straggler",
                 "high",
                 0,
                 {"python3 PID 2700 (peer rank)", "python3 PID 2703 (peer rank)",
                  "NCCL_DEBUG=INFO", "chain closed after 8 windows: [HIGH] nccl_straggler"}},
        Expected{"healthy", "", "", "", 0, {"Traced:\n"}}),
    [](const ::testing::TestParamInfo<Expected>& info) {
      std::string n;
      for (char c : info.param.scenario) n += c == '-' ? '_' : c;
      return n;
    });

TEST(DemoCli, UnknownScenarioExits2NamingTheScenarios) {
  TempDir tmp;
  Outcome o = run({"demo", "nosuch"}, tmp.path());
  EXPECT_EQ(o.code, 2);
  EXPECT_TRUE(contains(o.err, "unknown scenario 'nosuch'")) << o.err;
  for (const char* s : {"incident", "cpu-contention", "cold-start", "memcpy-bottleneck",
                        "periodic-spike", "gpu-steal", "memory-pressure", "io-stall",
                        "network-retransmit", "nccl-straggler", "healthy"}) {
    EXPECT_TRUE(contains(o.err, s)) << s << " not in: " << o.err;
  }
  EXPECT_EQ(o.out, "");
}

TEST(DemoCli, HoldWithoutListenExits2) {
  TempDir tmp;
  Outcome o = run({"demo", "--hold", "--fast", "--db", tmp.path() + "/x.db"}, tmp.path());
  EXPECT_EQ(o.code, 2);
  EXPECT_TRUE(contains(o.err, "--hold needs --listen")) << o.err;
  EXPECT_FALSE(contains(o.out, "chain opened")) << o.out;
}

TEST(DemoCli, BadOptionsExit2) {
  TempDir tmp;
  EXPECT_EQ(run({"demo", "--window", "0s"}, tmp.path()).code, 2);
  EXPECT_EQ(run({"demo", "--bogus"}, tmp.path()).code, 2);
  EXPECT_EQ(run({"demo", "--db"}, tmp.path()).code, 2);
}

// ---------------------------------------------------------------------------------------------
// --listen: /metrics shows the open chain while the incident is held; SIGTERM ends it cleanly.

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(a.sin_port);
}

// A plain HTTP/1.0 GET; the body, or "" when nothing answers.
std::string http_get(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string resp;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) resp.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

// The stallwatch_chain_active sample for kind/severity, or "" when absent.
std::string active_sample(const std::string& metrics, const std::string& kind,
                          const std::string& severity) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("stallwatch_chain_active{")) continue;
    if (contains(line, "kind=\"" + kind + "\"") && contains(line, "severity=\"" + severity + "\"")) {
      return line;
    }
  }
  return "";
}

TEST(DemoListen, HoldServesTheCriticalChainUntilSigterm) {
  TempDir tmp;
  const int port = free_port();
  ASSERT_GT(port, 0);
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  const std::string out = tmp.path() + "/stdout", err = tmp.path() + "/stderr";
  pid_t pid = spawn({"demo", "incident", "--listen", addr, "--window", "100ms", "--hold", "--db",
                     tmp.path() + "/x.db"},
                    out, err);
  ASSERT_GT(pid, 0);

  std::string sample, metrics;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      FAIL() << "demo exited early (" << status << "): " << slurp(err) << slurp(out);
    }
    metrics = http_get(port, "/metrics");
    sample = active_sample(metrics, "cpu_contention", "critical");
    if (sample.ends_with("} 1")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(sample.ends_with("} 1")) << "no active critical chain within 20 s:\n" << metrics;
  // The pod's names and key at defaults (issue #37); its container id is on the info series.
  EXPECT_TRUE(contains(sample, "workload=\"ml-training/llm-train-0/trainer\",pod=\"llm-train-0\""))
      << sample;
  EXPECT_FALSE(contains(sample, "container_id=")) << sample;
  EXPECT_TRUE(contains(metrics, "container_id=\"116f54c41d04")) << metrics;
  EXPECT_TRUE(contains(metrics, "stallwatch_chains_total{")) << metrics;

  ASSERT_EQ(kill(pid, SIGTERM), 0);
  const int code = wait_exit(pid, std::chrono::seconds(10));
  EXPECT_EQ(code, 0) << "did not exit cleanly within 10 s after SIGTERM: " << slurp(err);
  const std::string o = slurp(out);
  EXPECT_TRUE(o.starts_with("serving http://" + addr + "/metrics\n")) << o;
  EXPECT_TRUE(contains(o, ">> chain opened: [CRITICAL] cpu_contention")) << o;
  EXPECT_TRUE(contains(o, "-- serving /metrics; repeating")) << o;
  EXPECT_TRUE(contains(o, "\n== stallwatch explain --db ")) << o;
  EXPECT_TRUE(contains(o, "Causal chains (last 1d): 1, 1 open")) << o;
  EXPECT_FALSE(contains(o, "the agents are niced")) << "--hold stops at the incident phase";
}

}  // namespace
}  // namespace stallwatch

namespace stallwatch {
namespace {

// kill -9 while the store writes (the demo in --listen mode writes a window every 20 ms):
// the database still passes integrity_check and explain still reports the chain.
TEST(DemoCrash, Kill9WhileWritingLeavesADatabaseThatExplains) {
  TempDir dir;
  const std::string db = dir.path() + "/crash.db";
  for (int round = 0; round < 3; round++) {
    const int port = 20000 + (getpid() * 7 + round * 13) % 20000;
    pid_t pid = spawn({"demo", "incident", "--listen", "127.0.0.1:" + std::to_string(port),
                       "--hold", "--window", "20ms", "--db", db},
                      dir.path() + "/out", dir.path() + "/err");
    ASSERT_GT(pid, 0);
    // Readiness: the chain has opened (the story printed it), so chains are being written.
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline && !contains(slurp(dir.path() + "/out"), "chain opened")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(contains(slurp(dir.path() + "/out"), "chain opened")) << slurp(dir.path() + "/err");
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + 37 * round));  // mid-write
    kill(pid, SIGKILL);
    ASSERT_EQ(wait_exit(pid, std::chrono::seconds(10)), 128 + SIGKILL);

    Outcome check = run({"query", "--db", db, "--format", "csv", "PRAGMA integrity_check"},
                        dir.path());
    EXPECT_EQ(check.code, 0) << check.err;
    EXPECT_EQ(check.out, "integrity_check\r\nok\r\n") << check.err;
    Outcome report = run({"explain", "--db", db, "--since", "1h", "--json"}, dir.path());
    EXPECT_EQ(report.code, 0) << report.err;
    EXPECT_TRUE(contains(report.out, "\"kind\":\"cpu_contention\"")) << report.out;
  }
}

}  // namespace
}  // namespace stallwatch
