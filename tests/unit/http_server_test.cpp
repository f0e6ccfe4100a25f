// The HTTP listener (metrics/http_server.h) in process, on 127.0.0.1 port 0: idle and slow
// clients cannot starve /metrics and /healthz (issue #15: four sockets that sent half a request
// took CivetWeb down), the connection cap answers 503, TLS and basic auth from an
// exporter-toolkit web config (checked with the curl command line, an independent client),
// certificates and users reloaded when the files change, /debug/snapshot only when enabled,
// and the listener's threads hold no capabilities.
#include <arpa/inet.h>
#include <crypt.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/privileges.h"
#include "metrics/http_server.h"
#include "metrics/web_config.h"

namespace stallwatch::metrics {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Reply {
  int status = 0;  // 0: no HTTP answer (refused, reset, TLS failure)
  std::string body;
  double seconds = 0;
};

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string run(const std::string& cmd, int* rc = nullptr) {
  std::string out;
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  if (rc) *rc = WEXITSTATUS(status);
  return out;
}

// curl with `args` (already quoted), a 5 s limit; the status and body.
Reply curl(const std::string& url, const std::string& args = "") {
  const std::string out =
      run("curl -s -m 5 -w '\\n%{http_code} %{time_total}' " + args + " " + shell_quote(url));
  Reply r;
  const auto nl = out.rfind('\n');
  if (nl == std::string::npos) return r;
  r.body = out.substr(0, nl);
  std::sscanf(out.c_str() + nl + 1, "%d %lf", &r.status, &r.seconds);
  return r;
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True when the server closed `fd` (EOF or reset) within `limit`.
bool closed_by_server(int fd, std::chrono::milliseconds limit) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(limit.count())) <= 0) return false;
  char c;
  return ::recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto snap = std::make_shared<Snapshot>();
    snap->ready = true;
    board_.publish(snap);
    dir_ = std::filesystem::temp_directory_path() /
           ("stallwatch-http-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  void start(HttpOptions o) {
    o.listen = "127.0.0.1:0";
    auto s = HttpServer::start(o, board_, BuildInfo{"t", "t"});
    ASSERT_TRUE(s) << s.error().message;
    server_ = std::move(*s);
    base_ = "http://127.0.0.1:" + std::to_string(server_->port());
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
  }

  // A CA, a server certificate for 127.0.0.1 and a client certificate signed by the CA, and a
  // second CA that signed nothing of ours, with the openssl command line.
  void make_certs() {
    const std::string d = shell_quote(dir_.string());
    const std::string script =
        "set -e; cd " + d +
        "; for ca in ca other; do openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "
        "/CN=$ca -keyout $ca.key -out $ca.crt; done"
        "; printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext"
        "; openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key -out "
        "server.csr; openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
        "-days 2 -extfile san.ext -out server.crt"
        "; for c in client:ca stranger:other; do n=${c%%:*}; ca=${c##*:}; openssl req "
        "-newkey rsa:2048 -nodes -subj /CN=$n -keyout $n.key -out $n.csr; openssl x509 -req "
        "-in $n.csr -CA $ca.crt -CAkey $ca.key -CAcreateserial -days 2 -out $n.crt; done";
    int rc = 0;
    run("bash -c " + shell_quote(script) + " >/dev/null 2>&1", &rc);
    ASSERT_EQ(rc, 0) << "openssl could not make the test certificates";
  }

  static std::string bcrypt(const std::string& password) {
    char salt[CRYPT_GENSALT_OUTPUT_SIZE];
    EXPECT_NE(crypt_gensalt_rn("$2b$", 5, nullptr, 0, salt, sizeof salt), nullptr);
    crypt_data data{};
    return crypt_r(password.c_str(), salt, &data);
  }

  SnapshotBoard board_;
  std::unique_ptr<HttpServer> server_;
  std::filesystem::path dir_;
  std::string base_;
};

TEST_F(HttpServerTest, IdleSocketsDoNotStarveScrapesAndAreClosedAtTheHeaderDeadline) {
  HttpOptions o;
  o.header_timeout = 1500ms;
  start(o);
  // 40 clients that sent half a request and stopped (the audit needed 4 to take CivetWeb down).
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) {
    const int fd = connect_to(server_->port());
    ASSERT_GE(fd, 0);
    const char half[] = "GET /metrics HTTP/1.1\r\n";
    ASSERT_EQ(::send(fd, half, sizeof half - 1, 0), static_cast<ssize_t>(sizeof half - 1));
    idle.push_back(fd);
  }
  for (const char* p : {"/healthz", "/metrics", "/healthz"}) {
    const Reply r = curl(base_ + p);
    EXPECT_EQ(r.status, 200) << p;
    EXPECT_LT(r.seconds, 1.0) << p << " waited behind idle sockets";
  }
  // Past the deadline every one of them is closed by the server.
  const auto until = Clock::now() + 4s;
  int closed = 0;
  for (int fd : idle) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (closed_by_server(fd, std::max(left, 1ms))) ++closed;
    ::close(fd);
  }
  EXPECT_EQ(closed, 40);
}

TEST_F(HttpServerTest, ATrickleOfBytesDoesNotExtendTheHeaderDeadline) {
  HttpOptions o;
  o.header_timeout = 1s;
  start(o);
  const int fd = connect_to(server_->port());
  ASSERT_GE(fd, 0);
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
  const auto begin = Clock::now();
  bool cut = false;
  for (char c : request) {  // one byte every 200 ms: an inactivity timeout would never fire
    if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1 || closed_by_server(fd, 200ms)) {
      cut = true;
      break;
    }
  }
  EXPECT_TRUE(cut);
  EXPECT_LT(Clock::now() - begin, 3s);
  ::close(fd);
}

TEST_F(HttpServerTest, BeyondTheConnectionCapRequestsGet503) {
  HttpOptions o;
  o.max_connections = 4;
  start(o);
  std::vector<int> held;
  for (int i = 0; i < 6; ++i) held.push_back(connect_to(server_->port()));
  std::this_thread::sleep_for(200ms);  // the server has accepted them (no signal to wait on)
  const Reply r = curl(base_ + "/healthz");
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find("--web.max-connections 4"), std::string::npos) << r.body;
  for (int fd : held) ::close(fd);
  // Once they are gone, requests are served again.
  Reply again;
  for (int i = 0; i < 20 && again.status != 200; ++i) {
    std::this_thread::sleep_for(100ms);
    again = curl(base_ + "/healthz");
  }
  EXPECT_EQ(again.status, 200);
}

TEST_F(HttpServerTest, DebugSnapshotOnlyWhenEnabled) {
  start(HttpOptions{});
  Reply r = curl(base_ + "/debug/snapshot");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("--web.enable-debug"), std::string::npos);
  server_.reset();
  HttpOptions o;
  o.enable_debug = true;
  start(o);
  r = curl(base_ + "/debug/snapshot");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("\"series\""), std::string::npos);
  EXPECT_EQ(curl(base_ + "/metrics", "-X POST").status, 405);
}

TEST_F(HttpServerTest, TlsWithVerifiedClientCertificatesAndBasicAuth) {
  make_certs();
  if (HasFatalFailure()) return;
  write("web.yml",
        "tls_server_config:\n"
        "  cert_file: server.crt\n"
        "  key_file: server.key\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
        "  client_ca_file: ca.crt\n"
        "http_server_config:\n"
        "  headers:\n"
        "    X-Content-Type-Options: nosniff\n"
        "basic_auth_users:\n"
        "  prometheus: " + bcrypt("s3cret") + "\n");
  HttpOptions o;
  o.web_config_file = path("web.yml");
  start(o);
  const std::string https = "https://127.0.0.1:" + std::to_string(server_->port());
  const std::string tls = "--cacert " + shell_quote(path("ca.crt"));
  const std::string client =
      tls + " --cert " + shell_quote(path("client.crt")) + " --key " + shell_quote(path("client.key"));

  Reply r = curl(https + "/healthz", client + " -u prometheus:s3cret -D -");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("X-Content-Type-Options: nosniff"), std::string::npos) << r.body;
  EXPECT_EQ(curl(https + "/healthz", client + " -u prometheus:wrong").status, 401);
  EXPECT_EQ(curl(https + "/healthz", client + " -u nobody:s3cret").status, 401);
  EXPECT_EQ(curl(https + "/healthz", client).status, 401);
  EXPECT_EQ(curl(https + "/healthz", tls + " -u prometheus:s3cret").status, 403)
      << "no client certificate";
  const std::string stranger = tls + " --cert " + shell_quote(path("stranger.crt")) + " --key " +
                               shell_quote(path("stranger.key"));
  EXPECT_EQ(curl(https + "/healthz", stranger + " -u prometheus:s3cret").status, 403)
      << "a certificate from another CA";
  EXPECT_EQ(curl(base_ + "/healthz").status, 0) << "plain HTTP on the TLS port";

  // Users change without a restart: the file is re-read within a few seconds.
  write("web.yml",
        "tls_server_config:\n"
        "  cert_file: server.crt\n"
        "  key_file: server.key\n"
        "  client_auth_type: VerifyClientCertIfGiven\n"
        "  client_ca_file: ca.crt\n");
  Reply open;
  for (int i = 0; i < 50 && open.status != 200; ++i) {
    std::this_thread::sleep_for(200ms);
    open = curl(https + "/healthz", tls);
  }
  EXPECT_EQ(open.status, 200) << "the new config (no users, client certificate optional)";

  // A config that no longer parses is logged and the last good one kept.
  write("web.yml", "tls_server_config: [unterminated\n");
  std::this_thread::sleep_for(2500ms);
  EXPECT_EQ(curl(https + "/healthz", tls).status, 200);
}

TEST_F(HttpServerTest, BadWebConfigsFailToStartWithTheReason) {
  struct Case {
    const char* yaml;
    const char* expect;
  } cases[] = {
      {"tls_server_config:\n  cert_file: x.crt\n", "needs both cert_file and key_file"},
      {"basic_auth_users:\n  a: plaintext\n", "expected a bcrypt hash"},
      {"tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [x]\n",
       "cipher_suites is not supported"},
      {"tls_srever_config: {}\n", "unknown key 'tls_srever_config'"},
      {"tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n", "cannot read"},
      {"tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Always\n",
       "unknown type 'Always'"},
  };
  for (const auto& c : cases) {
    write("bad.yml", c.yaml);
    HttpOptions o;
    o.listen = "127.0.0.1:0";
    o.web_config_file = path("bad.yml");
    auto s = HttpServer::start(o, board_, BuildInfo{"t", "t"});
    ASSERT_FALSE(s) << c.yaml;
    EXPECT_NE(s.error().message.find(c.expect), std::string::npos) << s.error().message;
    EXPECT_NE(s.error().message.find("--web.config.file"), std::string::npos);
  }
  HttpOptions o;
  o.listen = "127.0.0.1:0";
  o.web_config_file = dir_.string();  // a directory
  auto s = HttpServer::start(o, board_, BuildInfo{"t", "t"});
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("not a regular file"), std::string::npos) << s.error().message;
}

TEST_F(HttpServerTest, PortInUseIsOneClearLine) {
  start(HttpOptions{});
  HttpOptions o;
  o.listen = "127.0.0.1:" + std::to_string(server_->port());
  auto s = HttpServer::start(o, board_, BuildInfo{"t", "t"});
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("Address already in use"), std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find("--listen"), std::string::npos);
}

TEST_F(HttpServerTest, ListenerThreadsHoldNoCapabilities) {
  start(HttpOptions{});
  EXPECT_EQ(curl(base_ + "/healthz").status, 200);
  // Every thread the listener started: ours is named sw-http, libmicrohttpd names its own MHD-*.
  int listener_threads = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::string comm;
    std::ifstream(e.path() / "comm") >> comm;
    if (comm != "sw-http" && !comm.starts_with("MHD")) continue;
    ++listener_threads;
    EXPECT_EQ(thread_effective_capabilities(std::stoi(e.path().filename())), 0u) << comm;
  }
  EXPECT_GE(listener_threads, 3) << "sw-http and two epoll workers";
  if (geteuid() == 0) {  // the rest of the process keeps what it had
    EXPECT_NE(thread_effective_capabilities(static_cast<int>(gettid())), 0u);
  }
}

TEST(PasswordCheckerTest, BcryptAndTheCacheAgree) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  ASSERT_NE(crypt_gensalt_rn("$2y$", 4, nullptr, 0, salt, sizeof salt), nullptr);
  crypt_data data{};
  WebConfig c;
  c.users["u"] = crypt_r("pw", salt, &data);
  PasswordChecker check;
  EXPECT_TRUE(check.check(c, "u", "pw"));
  EXPECT_TRUE(check.check(c, "u", "pw"));  // from the cache
  EXPECT_FALSE(check.check(c, "u", "pw2"));
  EXPECT_FALSE(check.check(c, "v", "pw"));
  c.users["u"] = crypt_r("other", salt, &data);  // the hash rotated: the cached success is void
  EXPECT_FALSE(check.check(c, "u", "pw"));
}

TEST(WebConfigTest, VersionsBecomeGnutlsPriorities) {
  auto c = parse_web_config(
      "tls_server_config:\n  cert_file: a.crt\n  key_file: /k/b.key\n  min_version: TLS13\n",
      "/etc/sw");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cert_file, "/etc/sw/a.crt");
  EXPECT_EQ(c->key_file, "/k/b.key");
  EXPECT_EQ(c->tls_priorities(), "NORMAL:-VERS-ALL:+VERS-TLS1.3");
  EXPECT_EQ(WebConfig{}.tls_priorities(), "NORMAL:-VERS-ALL:+VERS-TLS1.2:+VERS-TLS1.3");
  auto empty = parse_web_config("", "/");
  ASSERT_TRUE(empty);
  EXPECT_FALSE(empty->tls);
}

}  // namespace
}  // namespace stallwatch::metrics
