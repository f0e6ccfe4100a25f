// Bad input: one clear line naming the problem (and the fix), a non-zero exit, for every
// failure an operator can cause: unknown flag, unreadable or malformed config, port in use,
// missing capabilities. A store that cannot open is the exception: tracing goes on without it.
// Runs the real binary.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "support/harness.h"

namespace stallwatch::test {
namespace {

struct Outcome {
  int status;
  std::string output;  // stdout and stderr
};

Outcome run(const std::string& command) {
  std::string out;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, out};
}

const std::string kBin = STALLWATCH_BIN;

TEST(Cli, UnknownFlagIsOneLineAndExit2) {
  auto r = run(kBin + " run --bogus-flag");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output,
            "stallwatch run: unrecognised option '--bogus-flag' (see `stallwatch run --help`)\n");
}

// Issue #50: a --cgroup-roots entry that is no cgroup is refused at start (a typo must not
// trace nothing in silence): exit 2, the error and the hint.
TEST(Cli, ACgroupRootThatIsNoCgroupIsRefused) {
  auto r = run(kBin + " run --cgroup-roots /kubepods.slice-typo-" +
               std::to_string(getpid()));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--cgroup-roots: /kubepods.slice-typo-"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is not a cgroup (no directory"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("name cgroups as paths from the cgroup2 mount"), std::string::npos)
      << r.output;
}

// One line, as every usage error (issue #51): no usage text after it.
TEST(Cli, UnknownCommandIsOneLine) {
  auto r = run(kBin + " frobnicate");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "stallwatch: unknown command 'frobnicate' (see `stallwatch --help`)\n");
}

TEST(Cli, UnreadableConfigNamesThePath) {
  auto r = run(kBin + " run --config /nonexistent/stallwatch.conf");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output,
            "stallwatch run: cannot read config file /nonexistent/stallwatch.conf (check the path "
            "and permissions)\n");
}

TEST(Cli, MalformedConfigValueNamesTheOption) {
  std::string path = "/tmp/stallwatch-cli-test-" + std::to_string(getpid()) + ".conf";
  std::ofstream(path) << "window = 5 seconds\n";
  auto r = run(kBin + " run --config " + path);
  unlink(path.c_str());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find(path + ":1: window: invalid duration '5 seconds'"), std::string::npos)
      << r.output;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Issue #15: the store may fail, tracing and /metrics may not. A database that cannot be
// created: the daemon becomes ready, says why once, and exports stallwatch_store_up 0.
TEST(Cli, UnwritableDatabaseLeavesTracingRunning) {
  // A regular file where a directory should be: not even root can create the database.
  const std::string dir = "/tmp/stallwatch-cli-" + std::to_string(getpid());
  std::ofstream(dir) << "not a directory\n";
  Daemon d({"--db", dir + "/sub/stallwatch.db"});
  ASSERT_TRUE(d.wait_ready()) << slurp(d.log_path());
  ASSERT_TRUE(d.wait_windows());
  EXPECT_NE(d.metrics().find("\nstallwatch_store_up 0\n"), std::string::npos) << d.metrics();
  EXPECT_EQ(d.stop(), 0);
  unlink(dir.c_str());
  const std::string log = slurp(d.log_path());
  EXPECT_NE(log.find("error: store: cannot create directory " + dir + "/sub for the database"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("tracing and /metrics go on without the store"), std::string::npos) << log;
  EXPECT_NE(log.find("ready: listening"), std::string::npos) << log;
}

// A file that is not a database (garbage, a half-written copy): moved aside, kept, and a new
// store started.
TEST(Cli, CorruptDatabaseIsMovedAsideAndANewOneStarted) {
  const std::string path = "/tmp/stallwatch-cli-corrupt-" + std::to_string(getpid()) + ".db";
  const std::string garbage(65536, 'Z');
  std::ofstream(path, std::ios::binary) << garbage;
  Daemon d({"--db", path});
  ASSERT_TRUE(d.wait_ready()) << slurp(d.log_path());
  ASSERT_TRUE(d.wait_windows());
  EXPECT_NE(d.metrics().find("\nstallwatch_store_up 1\n"), std::string::npos) << d.metrics();
  EXPECT_EQ(d.stop(), 0);
  const std::string log = slurp(d.log_path());
  const size_t at = log.find("moved it aside to " + path + ".corrupt-");
  ASSERT_NE(at, std::string::npos) << log;
  const size_t start = at + std::string("moved it aside to ").size();
  const std::string aside = log.substr(start, log.find(' ', start) - start);
  EXPECT_EQ(slurp(aside), garbage) << "the old file is kept as it was";
  EXPECT_EQ(slurp(path).rfind("SQLite format 3", 0), 0u) << "a new database in its place";
  for (const std::string& f : {path, path + "-wal", path + "-shm", aside}) unlink(f.c_str());
}

// A tmpfs of `size` at a directory of this test's own, unmounted and removed at the end.
class SmallFileSystem {
 public:
  SmallFileSystem(const std::string& name, const std::string& size)
      : dir_("/tmp/stallwatch-cli-" + name + "-" + std::to_string(getpid())) {
    std::filesystem::create_directories(dir_);
    mounted_ = run("mount -t tmpfs -o size=" + size + ",mode=0755 tmpfs " + dir_).status == 0;
  }
  ~SmallFileSystem() {
    if (mounted_) run("umount " + dir_);
    std::filesystem::remove_all(dir_);
  }
  bool mounted() const { return mounted_; }
  const std::string& dir() const { return dir_; }
  // Fills what is left with one file, as a runaway log would.
  void fill() const { run("dd if=/dev/zero of=" + dir_ + "/filler bs=64k"); }
  void free_space() const { std::filesystem::remove(dir_ + "/filler"); }

 private:
  std::string dir_;
  bool mounted_ = false;
};

// `stallwatch query --format csv` of a one-value statement: the value (CSV lines end in \r\n).
std::string query_value(const std::string& db, const std::string& sql) {
  const std::string out = run(kBin + " query --db " + db + " --format csv \"" + sql + "\"").output;
  const size_t line = out.find("\r\n");
  if (line == std::string::npos) return "";
  const size_t end = out.find("\r\n", line + 2);
  return out.substr(line + 2, end == std::string::npos ? std::string::npos : end - line - 2);
}

double sample(const Daemon& d, const std::string& name) {
  return find_sample(parse_exposition(d.metrics()), name, {}).value_or(-1);
}

// Polls until `done` holds or `limit` passes.
template <typename F>
bool wait_until(F done, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

// Issue #51: a file system that fills up under the running daemon (not --max-db): the store
// gives back its reserve file (PATH.reserve, 1 MiB for --max-db 100MiB), prunes the oldest
// tenth of the windows into it, shrinks the file and goes on writing the new windows; the
// disk stays full. Before, the deletes of pruning found no room either and the store was off
// until someone freed space.
TEST(Cli, AFullFileSystemIsPrunedToFitAndTheStoreGoesOn) {
  SmallFileSystem fs("full", "16m");
  ASSERT_TRUE(fs.mounted()) << "tmpfs is needed";
  const std::string db = fs.dir() + "/sw.db";
  Daemon d({"--db", db, "--max-db", "100MiB", "--window", "100ms"});
  ASSERT_TRUE(d.wait_ready()) << slurp(d.log_path());
  struct stat st {};
  ASSERT_EQ(::stat((db + ".reserve").c_str(), &st), 0) << slurp(d.log_path());
  EXPECT_EQ(st.st_size, 1 << 20);
  EXPECT_GE(st.st_blocks * 512, 1 << 20) << "allocated, not sparse";
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  // Many windows first, so that a tenth of them is a few.
  ASSERT_TRUE(wait_until(
      [&] { return std::atoi(query_value(db, "SELECT count(*) FROM windows").c_str()) >= 100; },
      std::chrono::seconds(30)));

  fs.fill();
  const auto filled = std::chrono::steady_clock::now();
  EXPECT_TRUE(wait_until([&] { return sample(d, "stallwatch_store_rows_pruned_total") > 0; },
                         std::chrono::seconds(60)))
      << d.metrics();
  const auto recovered = std::chrono::steady_clock::now();
  const double written = sample(d, "stallwatch_store_rows_written_total");
  // The store goes on: 30 more windows (3 s) are written on the full disk.
  EXPECT_TRUE(
      wait_until([&] { return sample(d, "stallwatch_store_rows_written_total") >= written + 30; },
                 std::chrono::seconds(20)))
      << d.metrics();
  EXPECT_TRUE(
      wait_until([&] { return d.metrics().find("\nstallwatch_store_up 1\n") != std::string::npos; },
                 std::chrono::seconds(5)))
      << d.metrics();
  EXPECT_TRUE(std::filesystem::exists(fs.dir() + "/filler")) << "the disk is still full";
  const std::int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  const std::string newest = query_value(db, "SELECT max(ts_ns) FROM windows");
  ASSERT_FALSE(newest.empty());
  EXPECT_LT(now_ns - std::stoll(newest), 5'000'000'000) << "the newest window is recent";
  EXPECT_EQ(query_value(db, "PRAGMA integrity_check"), "ok");
  EXPECT_EQ(std::filesystem::file_size(db + ".reserve"), 1u << 20) << "taken back after pruning";
  std::cout << "pruned after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(recovered - filled).count()
            << " ms: " << sample(d, "stallwatch_store_rows_pruned_total") << " rows pruned, "
            << sample(d, "stallwatch_store_write_errors_total") << " write errors, "
            << query_value(db, "SELECT count(*) FROM windows") << " windows kept\n";

  EXPECT_EQ(d.stop(), 0);
  EXPECT_FALSE(std::filesystem::exists(db + ".reserve"))
      << "the reserve lives while the store is open";
  const std::string log = slurp(d.log_path());
  EXPECT_NE(log.find("warn: store: the file system holding " + db + " is full: pruned the oldest "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("the store goes on with less history (free disk space to keep more)"),
            std::string::npos)
      << log;
}

// Without a reserve (here the path is a directory, which the store refuses to touch) nothing
// can be pruned on a full disk: the writes fail and are counted, stallwatch_store_up drops to 0
// and /metrics keeps answering; once there is room again the store takes writes again without
// a restart (issue #15).
TEST(Cli, AFullFileSystemWithNoRoomToPruneTurnsTheStoreOffUntilThereIsRoom) {
  SmallFileSystem fs("noroom", "16m");
  ASSERT_TRUE(fs.mounted()) << "tmpfs is needed";
  const std::string db = fs.dir() + "/sw.db";
  std::filesystem::create_directories(db + ".reserve/kept");
  Daemon d({"--db", db, "--max-db", "100MiB", "--window", "1s"});
  ASSERT_TRUE(d.wait_ready()) << slurp(d.log_path());
  auto has = [&](const std::string& line) { return d.metrics().find(line) != std::string::npos; };
  ASSERT_TRUE(wait_until([&] { return sample(d, "stallwatch_store_rows_written_total") >= 2; },
                         std::chrono::seconds(20)));
  EXPECT_TRUE(has("\nstallwatch_store_up 1\n")) << d.metrics();

  fs.fill();
  EXPECT_TRUE(
      wait_until([&] { return has("\nstallwatch_store_up 0\n"); }, std::chrono::seconds(30)))
      << d.metrics();
  EXPECT_GT(sample(d, "stallwatch_store_write_errors_total"), 0);
  fs.free_space();
  EXPECT_TRUE(
      wait_until([&] { return has("\nstallwatch_store_up 1\n"); }, std::chrono::seconds(20)))
      << d.metrics();
  EXPECT_EQ(d.stop(), 0);
  EXPECT_TRUE(std::filesystem::is_directory(db + ".reserve/kept")) << "left alone";
  const std::string log = slurp(d.log_path());
  EXPECT_NE(log.find("store: no reserve file: " + db +
                     ".reserve exists and is not a regular file; left alone"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("free disk space or lower --max-db"), std::string::npos) << log;
}

// A database from a newer stallwatch: left untouched, the store stays off, tracing goes on.
TEST(Cli, NewerSchemaLeavesTheFileAloneAndTracingRunning) {
  const std::string path = "/tmp/stallwatch-cli-newer-" + std::to_string(getpid()) + ".db";
  ASSERT_EQ(run("sqlite3 " + path + " 'CREATE TABLE future(x); PRAGMA user_version = 99'").status, 0)
      << "the sqlite3 shell is needed";
  Daemon d({"--db", path});
  ASSERT_TRUE(d.wait_ready()) << slurp(d.log_path());
  ASSERT_TRUE(d.wait_windows());
  EXPECT_NE(d.metrics().find("\nstallwatch_store_up 0\n"), std::string::npos) << d.metrics();
  EXPECT_EQ(d.stop(), 0);
  EXPECT_NE(slurp(d.log_path()).find("is newer than this stallwatch understands"),
            std::string::npos)
      << slurp(d.log_path());
  EXPECT_EQ(run("sqlite3 " + path + " 'PRAGMA user_version'").output, "99\n");
  for (const std::string& f : {path, path + "-wal", path + "-shm"}) unlink(f.c_str());
}

TEST(Cli, BadStoreLimitsNameTheFlag) {
  auto r = run(kBin + " run --max-db 12XB");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "stallwatch run: --max-db: unknown size unit in '12XB'; use B, KiB, MiB, "
                      "GiB, TiB (or KB, MB, GB, TB)\n");
  r = run(kBin + " run --retention forever");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--retention: "), std::string::npos) << r.output;
}

TEST(Cli, BadListenAddress) {
  auto r = run(kBin + " run --listen 9464");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("expected ADDR:PORT"), std::string::npos) << r.output;
}

TEST(Cli, PortInUseIsOneClearLine) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::string port = std::to_string(ntohs(a.sin_port));
  auto r = run(kBin + " run --listen 127.0.0.1:" + port);
  close(fd);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("error: cannot listen on 127.0.0.1:" + port), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("pick one with --web.listen-address"), std::string::npos) << r.output;
}

TEST(Cli, WithoutCapabilitiesRunNamesThemAndCheckFails) {
  if (system("command -v setpriv >/dev/null") != 0) GTEST_SKIP() << "setpriv not installed";
  std::string drop = "setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all ";
  auto r = run(drop + kBin + " run --listen 127.0.0.1:" + std::to_string(free_port()));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("capabilities: missing CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN"),
            std::string::npos)
      << r.output;
  auto c = run(drop + kBin + " check");
  EXPECT_EQ(c.status, 1);
  EXPECT_NE(c.output.find("tracing: NOT possible"), std::string::npos) << c.output;
  // Without CAP_BPF the kernel features cannot be probed: said so, never guessed.
  for (const std::string feature : {"ringbuf", "task_storage", "attach_cookie", "bpf_loop"}) {
    std::istringstream lines(c.output);
    bool said = false;
    for (std::string l; std::getline(lines, l);) {
      said |= l.starts_with("warn " + feature + " ") &&
              l.find("not probed: probing loads a map or a program, which needs CAP_BPF") !=
                  std::string::npos;
    }
    EXPECT_TRUE(said) << feature << ": " << c.output;
  }
}

// check reports the store run would use, and what run will do with it; a store it cannot
// open is a warning, never a reason to say tracing is impossible (issue #15).
TEST(Cli, CheckReportsTheStore) {
  const std::string dir = "/tmp/stallwatch-check-store-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto fresh = run(kBin + " check --db " + dir + "/new.db");
  EXPECT_EQ(fresh.status, 0) << fresh.output;
  EXPECT_NE(fresh.output.find("no database yet at " + dir + "/new.db; run creates it"),
            std::string::npos)
      << fresh.output;
  std::ofstream(dir + "/bad.db") << std::string(8192, 'Z');
  auto bad = run(kBin + " check --json --db " + dir + "/bad.db");
  EXPECT_EQ(bad.status, 0) << bad.output;
  EXPECT_NE(bad.output.find("\"detail\":\"" + dir + "/bad.db: file is not a database: "),
            std::string::npos)
      << bad.output;
  EXPECT_NE(bad.output.find("run moves a corrupt file aside and starts a new one"),
            std::string::npos)
      << bad.output;
  EXPECT_NE(bad.output.find("\"name\":\"store\",\"status\":\"warn\""), std::string::npos)
      << bad.output;
  std::filesystem::remove_all(dir);
}

TEST(Cli, CheckPassesHereAndJsonSaysSo) {
  auto r = run(kBin + " check --json");
  EXPECT_EQ(r.status, 0) << r.output;
  // Issue #51: the paths run would be given come first (here the defaults, /proc and /sys).
  EXPECT_EQ(r.output.rfind("{\"ok\":true,\"checks\":[{\"name\":\"paths\",\"status\":\"ok\"", 0),
            0u)
      << r.output;
  EXPECT_NE(r.output.find("{\"name\":\"kernel\",\"status\":\"ok\""), std::string::npos) << r.output;
  // Issue #38: each kernel feature the programs use, probed by loading; this kernel (>= 6.6)
  // has them all.
  for (const char* feature : {"ringbuf", "task_storage", "attach_cookie", "task_iter", "bpf_loop"}) {
    EXPECT_NE(r.output.find(std::string("{\"name\":\"") + feature + "\",\"status\":\"ok\""),
              std::string::npos)
        << feature << ": " << r.output;
  }
}

// Issue #51: a config file's mistakes name FILE:LINE and, for a misspelt option, the closest.
TEST(Cli, ConfigErrorsNameFileLineAndTheClosestOption) {
  const std::string path = "/tmp/stallwatch-cli-lines-" + std::to_string(getpid()) + ".conf";
  struct Case {
    std::string text, said;
  };
  for (const Case& c : {Case{"# comment\n\nwindow = 5s\nretension = 7d\n",
                             path + ":4: unknown option 'retension' (did you mean 'retention'?)"},
                        Case{"window = 5s\nmax-db\n", path + ":2: expected `name = value`"},
                        Case{"window = 5s\nwindow = 1s\n",
                             path + ":2: window is set twice (first on line 1)"},
                        Case{"db = none\nmax-db = 1KiB\n", path + ":2: max-db 1KiB is out of range"}}) {
    std::ofstream(path) << c.text;
    auto r = run(kBin + " run --config " + path);
    EXPECT_EQ(r.status, 2) << c.text;
    EXPECT_NE(r.output.find(c.said), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << "one line: " << r.output;
  }
  unlink(path.c_str());
}

// Issue #51: paths the user typed are checked before anything starts ("ready" and blind was
// the old answer to --path.procfs /nope): one error, one hint, exit 2.
TEST(Cli, PathsThatDoNotExistAreRefusedAtStart) {
  struct Case {
    std::string flags, said;
  };
  for (const Case& c :
       {Case{"--path.procfs /nope", "--path.procfs /nope is not a procfs mount (no /nope/stat)"},
        Case{"--path.sysfs /nope", "--path.sysfs /nope is not a sysfs mount (no /nope/kernel)"},
        Case{"--library-dirs /usr/lib,/nope/lib64", "--library-dirs: /nope/lib64 is not a directory"},
        Case{"--nvml-library /nope/libnvidia-ml.so.1",
             "--nvml-library /nope/libnvidia-ml.so.1 does not exist"}}) {
    auto r = run(kBin + " run --db none " + c.flags);
    EXPECT_EQ(r.status, 2) << c.flags << "\n" << r.output;
    EXPECT_NE(r.output.find("error: " + c.said), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("hint: "), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("ready"), std::string::npos) << r.output;
  }
}

// Issue #51: one daemon per node and one per store. The second exits 1 naming the first's PID;
// the first goes on.
TEST(Cli, ASecondDaemonOnTheNodeOrTheStoreIsRefusedNamingTheFirst) {
  const std::string lock = "/tmp/stallwatch-cli-node-" + std::to_string(getpid()) + ".lock";
  Daemon first({"--lock-file", lock});
  ASSERT_TRUE(first.wait_ready()) << slurp(first.log_path());
  const std::string pid = std::to_string(first.pid());
  auto node = run(kBin + " run --db none --listen 127.0.0.1:" + std::to_string(free_port()) + " --lock-file " + lock);
  EXPECT_EQ(node.status, 1) << node.output;
  EXPECT_NE(node.output.find("error: another stallwatch (PID " + pid + ") holds " + lock +
                             ": one stallwatch per node"),
            std::string::npos)
      << node.output;
  auto store = run(kBin + " run --listen 127.0.0.1:" + std::to_string(free_port()) + " --lock-file none --db " + first.db_path());
  EXPECT_EQ(store.status, 1) << store.output;
  EXPECT_NE(store.output.find("error: another stallwatch (PID " + pid + ") holds " +
                              first.db_path() + ".lock: one stallwatch per store"),
            std::string::npos)
      << store.output;
  EXPECT_EQ(http_get(first.url("/healthz")).value_or(""), "ok\n") << "the first goes on";
  EXPECT_EQ(first.stop(), 0);
  unlink(lock.c_str());
}

// Issue #51: SIGHUP reloads (the log level, from the config file) and says so; it no longer
// kills the daemon. --web.telemetry-path moves the metrics.
TEST(Cli, SighupReloadsTheLogLevelAndTheTelemetryPathMoves) {
  const std::string conf = "/tmp/stallwatch-cli-hup-" + std::to_string(getpid()) + ".conf";
  std::ofstream(conf) << "log.level = info\n";
  Daemon d({"--config", conf, "--web.telemetry-path", "/stats"});
  ASSERT_TRUE(d.wait_ready()) << slurp(d.log_path());
  long status = 0;
  EXPECT_TRUE(http_get(d.url("/stats"), &status).has_value());
  EXPECT_EQ(status, 200);
  http_get(d.url("/metrics"), &status);
  EXPECT_EQ(status, 404);
  std::ofstream(conf) << "log.level = debug\n";
  ASSERT_EQ(::kill(d.pid(), SIGHUP), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (slurp(d.log_path()).find("reload (SIGHUP)") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string log = slurp(d.log_path());
  EXPECT_NE(log.find("info: reload (SIGHUP): log level debug (changed); --web.config.file is "
                     "re-read when it changes; nothing else changed"),
            std::string::npos)
      << log;
  EXPECT_EQ(http_get(d.url("/healthz")).value_or(""), "ok\n") << "alive after SIGHUP";
  EXPECT_EQ(d.stop(), 0);
  unlink(conf.c_str());
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) {
  // The runs of the binary here are not the node's daemon: they take no node lock.
  ::setenv("STALLWATCH_LOCK_FILE", "none", 0);
  return stallwatch::test::run_privileged_tests(argc, argv);
}
