// Bad input: one clear line naming the problem (and the fix), a non-zero exit, for every
// failure an operator can cause: unknown flag, unreadable or malformed config, port in use,
// missing capabilities. Runs the real binary.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>

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

TEST(Cli, UnknownCommandShowsUsage) {
  auto r = run(kBin + " frobnicate");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("unknown command 'frobnicate'"), std::string::npos) << r.output;
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
  EXPECT_NE(r.output.find("--window: invalid duration '5 seconds'"), std::string::npos) << r.output;
}

TEST(Cli, UnwritableDatabaseIsOneClearLineBeforeAnyProbe) {
  // A regular file where a directory should be: not even root can create the database.
  const std::string dir = "/tmp/stallwatch-cli-" + std::to_string(getpid());
  std::ofstream(dir) << "not a directory\n";
  auto r = run(kBin + " run --listen 127.0.0.1:" + std::to_string(free_port()) + " --db " + dir +
               "/sub/stallwatch.db");
  unlink(dir.c_str());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("error: cannot create directory " + dir + "/sub for the database"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("pass --db PATH in a writable directory"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("tracing "), std::string::npos) << "no probe before the store opened";
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
  EXPECT_NE(r.output.find("pick one with --listen"), std::string::npos) << r.output;
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
}

TEST(Cli, CheckPassesHereAndJsonSaysSo) {
  auto r = run(kBin + " check --json");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.rfind("{\"ok\":true,\"checks\":[{\"name\":\"kernel\"", 0), 0u) << r.output;
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
