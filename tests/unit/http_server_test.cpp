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
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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

// A connection to the server from `source`: any 127.x.y.z works, the whole 127/8 is loopback, so
// tests play clients on different addresses. `rcvbuf` > 0 shrinks the receive buffer first.
int connect_to(int port, const char* source = "127.0.0.1", int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
    ::close(fd);
    return -1;
  }
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

// The TCP state of our end: TCP_CLOSE after a reset, TCP_CLOSE_WAIT after the server's FIN.
int tcp_state(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 ? info.tcpi_state : -1;
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
  // 40 clients that sent half a request and stopped (the audit needed 4 to take CivetWeb down),
  // each from its own address (one address holds at most 16: OneAddressHoldsAQuarterOfTheSlots).
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) {
    const std::string source = "127.0.1." + std::to_string(i + 1);
    const int fd = connect_to(server_->port(), source.c_str());
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

// Issue #49 (e): idle connections from other addresses hold the cap no longer. Each one past
// it evicts the longest idle, so a scrape is answered at once (a request past the cap with
// every held connection answering a request of its own would still get 503: connection_guard_test).
TEST_F(HttpServerTest, BeyondTheConnectionCapTheIdlestConnectionGoes) {
  HttpOptions o;
  o.max_connections = 4;
  start(o);
  std::vector<int> held;
  for (int i = 0; i < 6; ++i) {
    held.push_back(connect_to(server_->port(), ("127.0.2." + std::to_string(i + 1)).c_str()));
  }
  const Reply r = curl(base_ + "/healthz");
  EXPECT_EQ(r.status, 200) << r.body;
  // The two past the cap and the scrape each evicted one of the oldest: they read the end.
  int closed = 0;
  for (int fd : held) {
    pollfd p{fd, POLLIN, 0};
    char c;
    if (::poll(&p, 1, 2000) > 0 && ::recv(fd, &c, 1, MSG_DONTWAIT) <= 0) ++closed;
    if (closed == 3) break;
  }
  EXPECT_EQ(closed, 3);
  for (int i = 0; i < 50 && server_->counters().evicted < 3; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(server_->counters().evicted, 3u);
  for (int fd : held) ::close(fd);
}

// Issue #35, row 5: one address that opens 40 idle connections holds 16 (a quarter of the 64
// served); the rest are refused at accept and another address is still answered at once.
TEST_F(HttpServerTest, OneAddressHoldsAQuarterOfTheSlots) {
  start(HttpOptions{});
  std::vector<int> fds;
  for (int i = 0; i < 40; ++i) {
    const int fd = connect_to(server_->port(), "127.0.0.2");
    ASSERT_GE(fd, 0);
    const char half[] = "GET /metrics HTTP/1.1\r\n";
    ::send(fd, half, sizeof half - 1, MSG_NOSIGNAL);
    fds.push_back(fd);
  }
  // A refused connection is closed at once; a held one stays until the 5 s header deadline.
  int refused = 0;
  const auto until = Clock::now() + 300ms;
  for (int fd : fds) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    refused += closed_by_server(fd, std::max(left, 1ms));
  }
  EXPECT_GE(refused, 40 - 16 - 2) << "the limit is 16; two workers may each admit one over it";
  EXPECT_LE(refused, 40 - 16);
  EXPECT_EQ(server_->counters().refused_per_address, static_cast<std::uint64_t>(refused));
  for (const char* p : {"/healthz", "/metrics"}) {
    const Reply r = curl(base_ + p);  // from 127.0.0.1
    EXPECT_EQ(r.status, 200) << p;
    EXPECT_LT(r.seconds, 1.0) << p;
  }
  for (int fd : fds) ::close(fd);
}

// Keep-alive works (Prometheus reuses its connection): two requests, one after the other, on one
// socket are both answered and the socket stays open.
TEST_F(HttpServerTest, KeptAliveConnectionsServeSeveralRequests) {
  start(HttpOptions{});
  const int fd = connect_to(server_->port());
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 2; ++i) {
    const std::string request = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    std::string reply;
    char buf[4096];
    while (reply.find("\r\n\r\n") == std::string::npos || !reply.ends_with("ok\n")) {
      pollfd p{fd, POLLIN, 0};
      ASSERT_EQ(::poll(&p, 1, 2000), 1) << reply;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      ASSERT_GT(n, 0) << "closed after request " << i << ": " << reply;
      reply.append(buf, static_cast<std::size_t>(n));
    }
    EXPECT_TRUE(reply.starts_with("HTTP/1.1 200")) << reply;
    EXPECT_EQ(reply.find("Connection: close"), std::string::npos) << reply;
  }
  ::close(fd);
}

// Issue #35, row 5: a reader that never takes its responses is reset at the request deadline,
// whether libmicrohttpd still holds the connection (its responses do not fit the buffers) or
// has closed it after `Connection: close` with the last bytes still queued (a dup is kept until
// the deadline, so no orphaned socket lingers at the reader's pace).
TEST_F(HttpServerTest, ReadersThatDoNotReadAreResetAtTheRequestDeadline) {
  HttpOptions o;
  o.request_timeout = 1s;
  start(o);
  std::string keep, close;
  for (int i = 0; i < 2000; ++i) keep += "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int i = 0; i < 8; ++i) close += "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  close += "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  std::vector<int> fds;
  const auto begin = Clock::now();
  for (const std::string* request : {&keep, &close}) {
    const int fd = connect_to(server_->port(), "127.0.0.3", 1);
    ASSERT_GE(fd, 0);
    ::send(fd, request->data(), request->size(), MSG_NOSIGNAL);
    fds.push_back(fd);
  }
  std::vector<double> cut(fds.size(), -1);
  while (Clock::now() - begin < 5s &&
         std::any_of(cut.begin(), cut.end(), [](double c) { return c < 0; })) {
    for (std::size_t i = 0; i < fds.size(); ++i) {
      const int state = tcp_state(fds[i]);
      if (cut[i] < 0 && (state == TCP_CLOSE || state == TCP_CLOSE_WAIT)) {
        cut[i] = std::chrono::duration<double>(Clock::now() - begin).count();
      }
    }
    std::this_thread::sleep_for(20ms);  // polling the TCP state: there is nothing to wait on
  }
  for (std::size_t i = 0; i < fds.size(); ++i) {
    EXPECT_GE(cut[i], 0.9) << (i ? "Connection: close" : "kept alive") << ": not cut, or early";
    EXPECT_LT(cut[i], 2.0) << (i ? "Connection: close" : "kept alive");
    EXPECT_EQ(tcp_state(fds[i]), TCP_CLOSE) << "a reset, not a FIN behind the unread bytes";
    ::close(fds[i]);
  }
  EXPECT_EQ(server_->counters().cut_request, 2u);
  EXPECT_EQ(curl(base_ + "/healthz").status, 200);
}

// Issue #35, row 7, through the listener: after five wrong passwords from one address the next
// ones are answered 429 with Retry-After and no bcrypt, while the scraper on another address,
// and the right password from the attacker's own address once remembered, get 200.
TEST_F(HttpServerTest, WrongPasswordsFromOneAddressGet429) {
  write("web.yml", "basic_auth_users:\n  prometheus: " + bcrypt("s3cret") + "\n");
  HttpOptions o;
  o.web_config_file = path("web.yml");
  start(o);
  EXPECT_EQ(curl(base_ + "/metrics", "--interface 127.0.0.2 -u prometheus:s3cret").status, 200);
  std::vector<int> statuses;
  for (int i = 0; i < 12; ++i) {
    statuses.push_back(
        curl(base_ + "/metrics", "--interface 127.0.0.2 -u prometheus:bad" + std::to_string(i))
            .status);
  }
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 401), 5);
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 429), 7);
  const Reply throttled = curl(base_ + "/metrics", "--interface 127.0.0.2 -u x:y -D -");
  EXPECT_EQ(throttled.status, 429);
  EXPECT_NE(throttled.body.find("Retry-After: 2"), std::string::npos) << throttled.body;
  EXPECT_EQ(curl(base_ + "/metrics", "--interface 127.0.0.2 -u prometheus:s3cret").status, 200)
      << "remembered credentials are not throttled";
  EXPECT_EQ(curl(base_ + "/metrics", "-u prometheus:s3cret").status, 200);
  EXPECT_EQ(curl(base_ + "/metrics", "-u prometheus:wrong").status, 401) << "another address";
  const HttpCounters n = server_->counters();
  EXPECT_EQ(n.auth_bcrypts, 7u) << "1 good + 5 wrong from 127.0.0.2, 1 wrong from 127.0.0.1";
  EXPECT_EQ(n.auth_throttled, 8u);
}

// Issue #37: every reply says it varies by Accept and Accept-Encoding (the body is text or
// protobuf, plain or gzip'd, by those headers), errors and plain replies included.
TEST_F(HttpServerTest, EveryReplyVariesByAccept) {
  start(HttpOptions{});
  for (const auto& [path, args] :
       std::vector<std::pair<std::string, std::string>>{{"/metrics", ""},
                                                         {"/metrics", "--compressed"},
                                                         {"/healthz", ""},
                                                         {"/nowhere", ""},
                                                         {"/metrics", "-X POST"}}) {
    const Reply r = curl(base_ + path, args + " -D -");
    EXPECT_NE(r.body.find("Vary: Accept, Accept-Encoding\r\n"), std::string::npos)
        << path << " " << args << ": " << r.body.substr(0, 300);
  }
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
  EXPECT_NE(s.error().message.find("--web.listen-address"), std::string::npos);
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
