#include "metrics/http_server.h"

#include <arpa/inet.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "common/guard.h"
#include "common/log.h"
#include "common/privileges.h"
#include "metrics/basic_auth.h"
#include "metrics/connection_guard.h"
#include "metrics/web_config.h"

namespace stallwatch::metrics {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxPemBytes = 1 << 20;
constexpr auto kTick = std::chrono::milliseconds(200);
constexpr auto kReloadEvery = std::chrono::seconds(2);
constexpr int kListenBacklog = 1024;  // the kernel caps it at net.core.somaxconn

// The PEM contents the running daemon was started with.
struct TlsMaterial {
  std::string cert, key, ca;
  bool operator==(const TlsMaterial&) const = default;
};

Result<TlsMaterial> load_tls(const WebConfig& c) {
  TlsMaterial m;
  if (!c.tls) return m;
  for (auto [path, into] : {std::pair{&c.cert_file, &m.cert}, std::pair{&c.key_file, &m.key},
                            std::pair{&c.client_ca_file, &m.ca}}) {
    if (path->empty()) continue;
    auto text = read_small_file(*path, kMaxPemBytes);
    if (!text) return make_error("--web.config.file: " + text.error().message);
    *into = std::move(*text);
  }
  return m;
}

// Identity of the files whose change means a reload: size, mtime and inode.
std::vector<std::int64_t> stamp(const std::vector<std::string>& paths) {
  std::vector<std::int64_t> out;
  for (const auto& p : paths) {
    struct stat st{};
    if (p.empty() || ::stat(p.c_str(), &st) != 0) {
      out.insert(out.end(), {-1, -1, -1});
      continue;
    }
    out.insert(out.end(), {static_cast<std::int64_t>(st.st_size),
                           st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec,
                           static_cast<std::int64_t>(st.st_ino)});
  }
  return out;
}

std::vector<std::string> watched_files(const std::string& config_path, const WebConfig& c) {
  return {config_path, c.cert_file, c.key_file, c.client_ca_file};
}

Result<std::pair<int, int>> bind_listen(const std::string& listen) {
  const auto colon = listen.rfind(':');
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int gai = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
  if (gai != 0) {
    return make_error("cannot listen on " + listen + ": " + gai_strerror(gai) +
                      " (use ADDR:PORT with a numeric address, e.g. 127.0.0.1:9464)");
  }
  std::string why;
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    // A deep accept queue: a flood of connections that are refused at accept (per-address
    // limit) must not fill it, or the kernel drops a scraper's SYN and it waits 1 s to retry.
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, kListenBacklog) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      const int bound = ss.ss_family == AF_INET6
                            ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                            : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      freeaddrinfo(res);
      return std::pair{fd, bound};
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(res);
  return make_error("cannot listen on " + listen + ": " + why +
                    " (is another process using the port? pick one with --web.listen-address ADDR:PORT)");
}

void mhd_log(void*, const char* fmt, va_list ap) {
  if (!log_enabled(LogLevel::kDebug)) return;
  char buf[512];
  vsnprintf(buf, sizeof buf, fmt, ap);
  std::string line(buf);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  SW_LOG(kDebug) << "http: " << line;
}

}  // namespace

struct HttpServer::Impl {
  HttpOptions options;
  Routes routes;
  int listen_fd = -1;
  int port = 0;

  std::shared_ptr<const WebConfig> config = std::make_shared<WebConfig>();  // atomic access
  TlsMaterial tls;  // what `daemon` was started with (manager thread)
  PasswordChecker passwords;
  ConnectionGuard guard;
  std::atomic<std::uint64_t> over_cap{0};
  std::uint64_t reported_throttled = 0;  // manager thread
  Clock::time_point last_auth_report{};

  MHD_Daemon* daemon = nullptr;  // manager thread only, once started
  std::thread manager;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;

  Impl(const HttpOptions& o, const SnapshotBoard& board, BuildInfo build)
      : options(o),
        routes(board, std::move(build), o.enable_debug, o.classic_histograms, o.exposition,
               o.telemetry_path),
        guard(guard_limits(o)) {}

  static GuardLimits guard_limits(const HttpOptions& o) {
    GuardLimits l;
    l.per_address = o.max_connections_per_address != 0 ? o.max_connections_per_address
                                                       : std::max(2u, o.max_connections / 4);
    l.header_timeout = o.header_timeout;
    l.idle_timeout = o.idle_timeout;
    l.request_timeout = o.request_timeout;
    l.max_draining = o.max_connections;
    l.max_open = o.max_connections;
    return l;
  }

  std::shared_ptr<const WebConfig> current_config() const { return std::atomic_load(&config); }

  // --- MHD callbacks -------------------------------------------------------------------
  static ConnectionGuard::Conn* conn_of(MHD_Connection* c) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? static_cast<ConnectionGuard::Conn*>(info->socket_context) : nullptr;
  }

  static MHD_Result on_accept(void* cls, const sockaddr* address, socklen_t) {
    return static_cast<Impl*>(cls)->guard.admits(address) ? MHD_YES : MHD_NO;
  }

  static void on_connection(void* cls, MHD_Connection* c, void** socket_context,
                            MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<Impl*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      const MHD_ConnectionInfo* fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
      const MHD_ConnectionInfo* from =
          MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
      *socket_context =
          self->guard.opened(fd ? fd->connect_fd : -1, from ? from->client_addr : nullptr);
    } else if (*socket_context) {  // closed: the fd is closed after this returns
      self->guard.closing(static_cast<ConnectionGuard::Conn*>(*socket_context));
      *socket_context = nullptr;
    }
  }

  static void on_completed(void* cls, MHD_Connection* c, void**, MHD_RequestTerminationCode) {
    if (auto* conn = conn_of(c)) static_cast<Impl*>(cls)->guard.request_completed(conn);
  }

  MHD_Result send(MHD_Connection* c, const HttpResponse& r, const WebConfig& cfg, bool close,
                  bool auth_challenge = false, const char* retry_after = nullptr) {
    auto* holder = new std::shared_ptr<const std::string>(r.body);
    const std::string& body = **holder;
    MHD_Response* resp = MHD_create_response_from_buffer_with_free_callback_cls(
        body.size(), const_cast<char*>(body.data()),
        [](void* p) { delete static_cast<std::shared_ptr<const std::string>*>(p); }, holder);
    if (!resp) {
      delete holder;
      return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type.c_str());
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    // On every reply, not only the gzip'd ones: /metrics answers text or protobuf by Accept, so
    // a cache in between must never hand one client's form to another (issue #37).
    MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Accept, Accept-Encoding");
    if (r.gzip) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
    for (const auto& [name, value] : cfg.headers) {
      MHD_add_response_header(resp, name.c_str(), value.c_str());
    }
    if (close) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (retry_after) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, retry_after);
    const MHD_Result ok = auth_challenge
                              ? MHD_queue_basic_auth_fail_response(c, "stallwatch", resp)
                              : MHD_queue_response(c, static_cast<unsigned>(r.status), resp);
    MHD_destroy_response(resp);
    return ok;
  }

  // The client certificate rules of tls_server_config.client_auth_type; "" when they pass.
  static std::string client_cert_problem(MHD_Connection* c, const WebConfig& cfg) {
    if (!cfg.tls || cfg.client_auth == ClientAuth::kNone ||
        cfg.client_auth == ClientAuth::kRequest) {
      return "";
    }
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (!info || !info->tls_session) return "this listener needs TLS\n";
    auto session = static_cast<gnutls_session_t>(info->tls_session);
    unsigned count = 0;
    const gnutls_datum_t* peers = gnutls_certificate_get_peers(session, &count);
    const bool given = peers && count > 0;
    if (!given) {
      if (cfg.client_auth == ClientAuth::kVerifyIfGiven) return "";
      return "a client certificate is required\n";
    }
    if (cfg.client_auth == ClientAuth::kRequireAny) return "";
    unsigned status = 0;
    if (gnutls_certificate_verify_peers2(session, &status) != GNUTLS_E_SUCCESS || status != 0) {
      return "the client certificate is not signed by client_ca_file or not valid now\n";
    }
    return "";
  }

  // libmicrohttpd is C: an exception must not cross it. A request whose handling throws is
  // logged once and its connection closed (MHD_NO); the listener goes on.
  static MHD_Result on_request(void* cls, MHD_Connection* c, const char* url, const char* method,
                               const char* version, const char* upload, size_t* upload_size,
                               void** request) {
    MHD_Result result = MHD_NO;
    run_guarded("HTTP request", [&] {
      result = handle_request(cls, c, url, method, version, upload, upload_size, request);
    });
    return result;
  }

  static MHD_Result handle_request(void* cls, MHD_Connection* c, const char* url,
                                   const char* method, const char*, const char*,
                                   size_t* upload_size, void** request) {
    auto* self = static_cast<Impl*>(cls);
    ConnectionGuard::Conn* conn = conn_of(c);
    if (!*request) {
      // The head is in: the request deadline starts. The answer is queued on a later call, once
      // any body is read: one queued on this first call makes libmicrohttpd close the
      // connection after it (no keep-alive).
      *request = self;
      if (conn) self->guard.request_started(conn);
      return MHD_YES;
    }
    if (*upload_size != 0) {  // a body (GET and HEAD only): discarded
      *upload_size = 0;
      return MHD_YES;
    }

    const auto cfg = self->current_config();
    if (self->guard.open() > self->options.max_connections) {
      self->over_cap.fetch_add(1);
      return self->send(c,
                        text_response(503, "too many connections (--web.max-connections " +
                                               std::to_string(self->options.max_connections) +
                                               ")\n"),
                        *cfg, true);
    }
    if (std::string problem = client_cert_problem(c, *cfg); !problem.empty()) {
      return self->send(c, text_response(403, problem), *cfg, true);
    }
    if (!cfg->users.empty()) {
      char* password = nullptr;
      char* user = MHD_basic_auth_get_username_password(c, &password);
      static const std::string kNoClient;
      const std::string& client = conn ? self->guard.client(conn) : kNoClient;
      const Login login =
          user && password ? self->passwords.check(*cfg, client, user, password) : Login::kDenied;
      if (user) MHD_free(user);
      if (password) MHD_free(password);
      if (login == Login::kThrottled) {  // closed, so the next try passes the accept limit again
        return self->send(c, text_response(429, "too many failed logins; try again later\n"),
                          *cfg, true, false, "2");
      }
      if (login != Login::kGranted) {
        return self->send(c, text_response(401, "unauthorized\n"), *cfg, false, true);
      }
    }
    const char* enc = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept-Encoding");
    const char* accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
    HttpRequest req{method ? method : "", url ? url : "",
                    enc && std::strstr(enc, "gzip") != nullptr, accept ? accept : ""};
    return self->send(c, self->routes.handle(req), *cfg, false);
  }

  // --- the daemon ----------------------------------------------------------------------
  Result<MHD_Daemon*> start_daemon(const WebConfig& cfg, const TlsMaterial& m) {
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (cfg.tls) flags |= MHD_USE_TLS;
    const std::string priorities = cfg.tls_priorities();
    std::vector<MHD_OptionItem> opts = {
        {MHD_OPTION_LISTEN_SOCKET, listen_fd, nullptr},
        {MHD_OPTION_THREAD_POOL_SIZE, 2, nullptr},
        {MHD_OPTION_CONNECTION_LIMIT, static_cast<intptr_t>(options.max_connections * 2), nullptr},
        {MHD_OPTION_CONNECTION_TIMEOUT,
         static_cast<intptr_t>(std::max<long>(1, options.idle_timeout.count() / 1000)), nullptr},
        {MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(&on_connection), this},
        {MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&on_completed), this},
        {MHD_OPTION_EXTERNAL_LOGGER, reinterpret_cast<intptr_t>(&mhd_log), nullptr},
    };
    if (cfg.tls) {
      opts.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(m.cert.c_str())});
      opts.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(m.key.c_str())});
      opts.push_back({MHD_OPTION_HTTPS_PRIORITIES, 0, const_cast<char*>(priorities.c_str())});
      if (!m.ca.empty()) {
        opts.push_back({MHD_OPTION_HTTPS_MEM_TRUST, 0, const_cast<char*>(m.ca.c_str())});
      }
    }
    opts.push_back({MHD_OPTION_END, 0, nullptr});
    MHD_Daemon* d = MHD_start_daemon(flags, 0, &on_accept, this, &on_request, this,
                                     MHD_OPTION_ARRAY, opts.data(), MHD_OPTION_END);
    if (!d) {
      return make_error(cfg.tls ? "cannot start the HTTPS listener: check cert_file and key_file "
                                  "of --web.config.file (PEM, the key matching the certificate)"
                                : "cannot start the HTTP listener");
    }
    return d;
  }

  // One line a minute at most when wrong passwords were answered 429 (the guard's own line
  // covers refused connections and slow readers).
  void report(Clock::time_point now) {
    if (std::string line = guard.tick(now); !line.empty()) SW_LOG(kWarn) << line;
    const std::uint64_t throttled = passwords.counts().throttled;
    if (throttled == reported_throttled || now - last_auth_report < std::chrono::minutes(1)) return;
    SW_LOG(kWarn) << "http: answered " << (throttled - reported_throttled)
                  << " logins 429 without checking them (more than 5 failures from one address, "
                     "then one every 2 s; or 2 a second from all)";
    reported_throttled = throttled;
    last_auth_report = now;
  }

  // Re-reads the web config and its certificates when one of the files changed. A change of
  // the TLS side starts a second daemon on the same socket before the first is quiesced, so
  // the port never stops answering and a bad certificate leaves the old one serving.
  void reload(std::vector<std::int64_t>& stamps) {
    auto now_stamps = stamp(watched_files(options.web_config_file, *current_config()));
    if (now_stamps == stamps) return;
    stamps = now_stamps;
    auto cfg = load_web_config(options.web_config_file);
    if (!cfg) {
      SW_LOG(kWarn) << cfg.error().message << "; keeping the last good web config";
      return;
    }
    auto m = load_tls(*cfg);
    if (!m) {
      SW_LOG(kWarn) << m.error().message << "; keeping the last good web config";
      return;
    }
    stamps = stamp(watched_files(options.web_config_file, *cfg));
    const WebConfig& old = *current_config();
    const bool restart = cfg->tls != old.tls || *m != tls || cfg->client_auth != old.client_auth ||
                         cfg->tls_priorities() != old.tls_priorities();
    if (restart) {
      auto d = start_daemon(*cfg, *m);
      if (!d) {
        SW_LOG(kWarn) << d.error().message << "; keeping the last good web config";
        return;
      }
      MHD_quiesce_daemon(daemon);
      MHD_stop_daemon(daemon);
      daemon = *d;
      tls = std::move(*m);
    }
    std::atomic_store(&config, std::make_shared<const WebConfig>(std::move(*cfg)));
    SW_LOG(kInfo) << "web config " << options.web_config_file << " reloaded"
                  << (restart ? " (TLS settings changed; listener restarted)" : "");
  }

  void run(std::promise<Result<Ok>>& started) {
    if (auto dropped = drop_thread_capabilities("sw-http"); !dropped) {
      started.set_value(dropped.error());
      return;
    }
    auto d = start_daemon(*current_config(), tls);
    if (!d) {
      started.set_value(d.error());
      return;
    }
    daemon = *d;
    started.set_value(Ok{});
    std::vector<std::int64_t> stamps;
    if (!options.web_config_file.empty()) {
      stamps = stamp(watched_files(options.web_config_file, *current_config()));
    }
    auto next_reload = Clock::now() + kReloadEvery;
    std::unique_lock lock(mu);
    while (!stopping) {
      cv.wait_for(lock, kTick);
      if (stopping) break;
      lock.unlock();
      report(Clock::now());
      if (!options.web_config_file.empty() && Clock::now() >= next_reload) {
        reload(stamps);
        next_reload = Clock::now() + kReloadEvery;
      }
      lock.lock();
    }
    MHD_stop_daemon(daemon);  // closes the listening socket too
    daemon = nullptr;
  }
};

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpOptions& options,
                                                      const SnapshotBoard& board,
                                                      BuildInfo build) {
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->impl_ = std::make_unique<Impl>(options, board, std::move(build));
  Impl& impl = *s->impl_;
  if (!options.web_config_file.empty()) {
    auto cfg = load_web_config(options.web_config_file);
    if (!cfg) return cfg.error();
    auto m = load_tls(*cfg);
    if (!m) return m.error();
    impl.tls = std::move(*m);
    impl.config = std::make_shared<const WebConfig>(std::move(*cfg));
  }
  auto bound = bind_listen(options.listen);
  if (!bound) return bound.error();
  impl.listen_fd = bound->first;
  impl.port = bound->second;
  std::promise<Result<Ok>> started;
  auto result = started.get_future();
  impl.manager = std::thread([&impl, &started] { impl.run(started); });
  if (auto r = result.get(); !r) {
    impl.manager.join();
    ::close(impl.listen_fd);
    return r.error();
  }
  const auto cfg = impl.current_config();
  const std::string shown = options.listen.ends_with(":0")
                               ? options.listen.substr(0, options.listen.size() - 1) +
                                     std::to_string(impl.port)
                               : options.listen;
  SW_LOG(kInfo) << "listening on " << (cfg->tls ? "https://" : "http://") << shown
                << (cfg->users.empty() ? "" : " with basic auth")
                << (options.enable_debug ? " (/debug/snapshot on)" : "");
  return s;
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& listen,
                                                      const SnapshotBoard& board,
                                                      BuildInfo build) {
  HttpOptions o;
  o.listen = listen;
  o.enable_debug = true;  // the demo's and benchmarks' own data, no host to protect
  return start(o, board, std::move(build));
}

HttpServer::~HttpServer() {
  if (!impl_ || !impl_->manager.joinable()) return;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->manager.join();
}

int HttpServer::port() const { return impl_->port; }

HttpCounters HttpServer::counters() const {
  const GuardCounters g = impl_->guard.counters();
  const PasswordChecker::Counts a = impl_->passwords.counts();
  return {g.refused_per_address, impl_->over_cap.load(), g.cut_idle, g.cut_request,
          g.evicted, a.bcrypts, a.denied, a.throttled};
}

}  // namespace stallwatch::metrics
