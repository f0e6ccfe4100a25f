// A scripted HTTP/1.1 server on 127.0.0.1 for unit tests of HTTP clients (OTLP delivery, the
// Kubernetes pod list): raw sockets, keep-alive, one thread per connection. Each request is
// answered from a script (status, body, Retry-After, delay, hold until released, close without
// answering; past the script's end, 200 with an empty body) and recorded.
// Thread-safety: every public member is safe from any thread.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace stallwatch::test {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

struct Action {
  int status = 200;
  std::string body;
  std::string retry_after;  // "" = no header
  milliseconds delay{0};    // before answering
  bool hold = false;        // answer only once the test calls release()
  bool close = false;       // close the connection instead of answering
  std::string content_type = "application/x-protobuf";
};

struct Request {
  std::string method;
  std::string path;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  Clock::time_point at;  // when it was read in full
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class ScriptedServer {
 public:
  explicit ScriptedServer(std::vector<Action> script = {}) : script_(script.begin(), script.end()) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listen_fd_, 16) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
        ::pipe2(wake_, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "test server: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~ScriptedServer() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (acceptor_.joinable()) {
      ssize_t ignored = ::write(wake_[1], "x", 1);
      (void)ignored;
      acceptor_.join();
    }
    {
      std::lock_guard lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);  // unblocks recv()
    }
    for (auto& t : threads_) t.join();
    for (int fd : fds_) ::close(fd);
    for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
      if (fd >= 0) ::close(fd);
    }
  }

  std::string url(std::string_view path = "/v1/metrics") const {
    return "http://127.0.0.1:" + std::to_string(port_) + std::string(path);
  }
  int port() const { return port_; }

  std::vector<Request> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  std::vector<std::string> bodies() const {
    std::vector<std::string> out;
    for (const auto& r : requests()) out.push_back(r.body);
    return out;
  }
  size_t connections() const {
    std::lock_guard lock(mu_);
    return fds_.size();
  }
  bool wait_requests(size_t n, milliseconds limit = 3s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return requests_.size() >= n; });
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }

 private:
  void accept_loop() {
    for (;;) {
      pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (p[1].revents) return;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard lock(mu_);
      fds_.push_back(fd);
      threads_.emplace_back([this, fd] { serve(fd); });
    }
  }

  void serve(int fd) {
    std::string buf;
    for (;;) {
      Request req;
      if (!read_request(fd, buf, req)) break;
      Action act;
      {
        std::lock_guard lock(mu_);
        req.at = Clock::now();
        requests_.push_back(std::move(req));
        if (!script_.empty()) {
          act = std::move(script_.front());
          script_.pop_front();
        }
      }
      cv_.notify_all();
      std::unique_lock lock(mu_);
      if (act.hold) cv_.wait(lock, [&] { return released_ || stop_; });
      cv_.wait_for(lock, act.delay, [&] { return stop_; });
      if (stop_ || act.close) break;
      lock.unlock();
      std::string head = "HTTP/1.1 " + std::to_string(act.status) + " Scripted\r\n" +
                         "Content-Type: " + act.content_type + "\r\nContent-Length: " +
                         std::to_string(act.body.size()) + "\r\n";
      if (!act.retry_after.empty()) head += "Retry-After: " + act.retry_after + "\r\n";
      if (!send_all(fd, head + "\r\n" + act.body)) break;
    }
    ::shutdown(fd, SHUT_RDWR);  // closed by the destructor, so the number is never reused early
  }

  static bool recv_more(int fd, std::string& buf) {
    char tmp[16384];
    for (;;) {
      const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buf.append(tmp, static_cast<size_t>(n));
      return true;
    }
  }

  static bool send_all(int fd, std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  static bool read_request(int fd, std::string& buf, Request& req) {
    size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      if (!recv_more(fd, buf)) return false;
    }
    std::istringstream head(buf.substr(0, end));
    std::string line;
    std::getline(head, line);
    std::istringstream(line) >> req.method >> req.path;
    size_t length = 0;
    while (std::getline(head, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      const std::string name = lower(line.substr(0, colon));
      if (name == "content-length") length = std::stoul(value);
      req.headers[name] = value;
    }
    buf.erase(0, end + 4);
    while (buf.size() < length) {
      if (!recv_more(fd, buf)) return false;
    }
    req.body = buf.substr(0, length);
    buf.erase(0, length);
    return true;
  }

  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Action> script_;
  std::vector<Request> requests_;
  bool released_ = false;
  bool stop_ = false;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace stallwatch::test
