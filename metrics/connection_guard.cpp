#include "metrics/connection_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace stallwatch::metrics {
namespace {

// Whether everything written to the socket, FIN included, has been acknowledged, or the
// connection is gone (reset): nothing left to deliver.
bool delivered(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_CLOSE) {
    return true;
  }
  int unacked = 0;
  return ioctl(fd, SIOCOUTQ, &unacked) != 0 || unacked == 0;
}

// Close sends a reset and drops what is queued, instead of a FIN behind bytes nobody reads.
void reset_on_close(int fd) {
  const linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

}  // namespace

std::string client_key(const sockaddr* address) {
  if (!address) return "";
  if (address->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(address);
    return std::string(reinterpret_cast<const char*>(&in->sin_addr), 4);
  }
  if (address->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address);
    const auto* bytes = reinterpret_cast<const char*>(in6->sin6_addr.s6_addr);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) return std::string(bytes + 12, 4);
    return std::string(bytes, 8);
  }
  return "";
}

std::string client_key_text(const std::string& key) {
  char text[INET6_ADDRSTRLEN] = "";
  if (key.size() == 4) {
    inet_ntop(AF_INET, key.data(), text, sizeof text);
    return text;
  }
  if (key.size() == 8) {
    unsigned char full[16] = {};
    std::memcpy(full, key.data(), 8);
    inet_ntop(AF_INET6, full, text, sizeof text);
    return std::string(text) + "/64";
  }
  return "(not an IP address)";
}

struct ConnectionGuard::Conn {
  int fd = -1;
  std::string client;
  Clock::time_point waiting_since;  // accept, or the last response delivered
  Clock::time_point request_since;  // the head of the outstanding request
  bool requesting = false;          // a request is outstanding: head in, response not yet delivered
  bool in_request = false;          // libmicrohttpd is still answering it
  bool served = false;              // has had a request (now between requests)
  bool cut = false;
};

ConnectionGuard::ConnectionGuard(GuardLimits limits) : limits_(limits) {}

ConnectionGuard::~ConnectionGuard() {
  std::lock_guard lock(mu_);
  for (const Draining& d : draining_) ::close(d.fd);
  for (Conn* c : conns_) delete c;
}

bool ConnectionGuard::admits(const sockaddr* address) {
  const std::string key = client_key(address);
  if (key.empty()) return true;
  std::lock_guard lock(mu_);
  const auto it = held_.find(key);
  if (it == held_.end() || it->second < limits_.per_address) return true;
  ++counters_.refused_per_address;
  last_refused_ = key;
  return false;
}

ConnectionGuard::Conn* ConnectionGuard::opened(int fd, const sockaddr* address,
                                               Clock::time_point now) {
  auto* c = new Conn;
  c->fd = fd;
  c->client = client_key(address);
  c->waiting_since = now;
  std::lock_guard lock(mu_);
  conns_.insert(c);
  ++counters_.open;
  // Two workers accept at once, so an address may pass admits() twice at its last slot: its
  // share can be exceeded by one per worker, never more.
  if (!c->client.empty()) ++held_[c->client];
  if (limits_.max_open != 0 && counters_.open - cut_open_ > limits_.max_open) evict_for(c);
  return c;
}

void ConnectionGuard::evict_for(const Conn* newcomer) {
  const auto count = [&](const std::string& key) -> unsigned {
    const auto it = held_.find(key);
    return key.empty() || it == held_.end() ? 1u : it->second;
  };
  const unsigned mine = count(newcomer->client);
  Conn* victim = nullptr;
  unsigned victim_count = 0;
  for (Conn* c : conns_) {
    if (c == newcomer || c->cut || c->fd < 0) continue;
    const unsigned n = count(c->client);
    const bool idle = !c->requesting;
    if (n < mine || (n == mine && !idle)) continue;
    // More connections first; then idle before in flight; then the longest waiting.
    if (victim != nullptr) {
      const bool victim_idle = !victim->requesting;
      if (n != victim_count) {
        if (n < victim_count) continue;
      } else if (idle != victim_idle) {
        if (!idle) continue;
      } else {
        const auto since = idle ? c->waiting_since : c->request_since;
        const auto victim_since = victim_idle ? victim->waiting_since : victim->request_since;
        if (since >= victim_since) continue;
      }
    }
    victim = c;
    victim_count = n;
  }
  if (victim == nullptr) return;
  cut(victim, true);
  ++counters_.evicted;
}

void ConnectionGuard::request_started(Conn* c, Clock::time_point now) {
  std::lock_guard lock(mu_);
  // A request pipelined behind a response not yet delivered keeps the older deadline: reading
  // slowly is not reset by asking again.
  if (!c->requesting) c->request_since = now;
  c->requesting = true;
  c->in_request = true;
}

void ConnectionGuard::request_completed(Conn* c, Clock::time_point now) {
  std::lock_guard lock(mu_);
  c->in_request = false;
  c->served = true;
  c->waiting_since = now;
}

void ConnectionGuard::closing(Conn* c, Clock::time_point now) {
  std::lock_guard lock(mu_);
  conns_.erase(c);
  --counters_.open;
  if (c->cut) --cut_open_;
  // A response still on its way when libmicrohttpd lets go of the socket: hold a dup of it
  // (so the kernel does not keep an orphan going at the reader's pace) until it is delivered
  // or its request deadline passes. Most are a well-behaved client's delayed ACK, gone at the
  // next tick, so a drain does not keep its address's slot; the list is bounded, and beyond it
  // a socket is left to the kernel as before (an orphan holds no slot and no thread).
  if (!c->cut && c->fd >= 0 && draining_.size() < limits_.max_draining && !delivered(c->fd)) {
    const int fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0);
    if (fd >= 0) {
      ::shutdown(fd, SHUT_WR);  // the reader still sees the end right after the last byte
      const auto since = c->requesting ? c->request_since : now;
      draining_.push_back({fd, since + limits_.request_timeout});
    }
  }
  release(c->client);
  delete c;
}

void ConnectionGuard::release(const std::string& key) {
  if (key.empty()) return;
  const auto it = held_.find(key);
  if (it != held_.end() && --it->second == 0) held_.erase(it);
}

void ConnectionGuard::cut(Conn* c, bool reset) {
  if (c->cut) return;
  ++cut_open_;
  if (reset) reset_on_close(c->fd);
  ::shutdown(c->fd, SHUT_RDWR);  // libmicrohttpd sees the end and closes it on its own thread
  c->cut = true;
}

std::string ConnectionGuard::tick(Clock::time_point now, std::chrono::seconds report_every) {
  std::lock_guard lock(mu_);
  for (Conn* c : conns_) {
    if (c->cut || c->fd < 0) continue;
    if (c->requesting) {
      if (!c->in_request && delivered(c->fd)) {
        c->requesting = false;
        c->waiting_since = now;
      } else if (now - c->request_since >= limits_.request_timeout) {
        cut(c, true);
        ++counters_.cut_request;
      }
      continue;
    }
    const auto limit = c->served ? limits_.idle_timeout : limits_.header_timeout;
    if (now - c->waiting_since >= limit) {
      cut(c, false);
      ++counters_.cut_idle;
    }
  }
  for (auto it = draining_.begin(); it != draining_.end();) {
    const bool done = delivered(it->fd);
    if (!done && now < it->deadline) {
      ++it;
      continue;
    }
    if (!done) {
      reset_on_close(it->fd);
      ++counters_.cut_request;
    }
    ::close(it->fd);
    it = draining_.erase(it);
  }
  counters_.draining = static_cast<unsigned>(draining_.size());

  // One line a minute at most, and only about what an operator should know of: refusals and
  // slow readers (idle keep-alive connections closing is routine).
  const std::uint64_t refused = counters_.refused_per_address - reported_.refused_per_address;
  const std::uint64_t slow = counters_.cut_request - reported_.cut_request;
  if ((refused == 0 && slow == 0) || now - last_report_ < report_every) return "";
  std::string line = "http:";
  if (refused > 0) {
    line += " refused " + std::to_string(refused) + " connections over the limit of " +
            std::to_string(limits_.per_address) + " per client address (the last from " +
            client_key_text(last_refused_) + ")";
  }
  if (slow > 0) {
    line += std::string(refused > 0 ? ";" : "") + " reset " + std::to_string(slow) +
            " responses not delivered within " +
            std::to_string(limits_.request_timeout.count() / 1000) + " s of their request";
  }
  reported_ = counters_;
  last_report_ = now;
  return line;
}

const std::string& ConnectionGuard::client(const Conn* c) const { return c->client; }

unsigned ConnectionGuard::open() const {
  std::lock_guard lock(mu_);
  return counters_.open - cut_open_;
}

GuardCounters ConnectionGuard::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

}  // namespace stallwatch::metrics
