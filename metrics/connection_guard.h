// The deadlines and per-address limits of the HTTP listener's connections (issue #35, row 5),
// apart from libmicrohttpd: metrics/http_server.cpp reports each accept, request, completion and
// close, and calls tick() every 200 ms, which cuts what overran. It owns:
// - per-address connection counts: one client address (an IPv4 host, or an IPv6 /64, what one
//   host is normally given) holds at most `per_address` connections, refused at accept beyond,
//   so a flood from one address leaves the other slots to the scrapers;
// - the header deadline (a request head within `header_timeout` of accept, `idle_timeout`
//   between the requests of a kept-alive connection), as before;
// - the request deadline: from a request's head to the last byte of its response acknowledged
//   by the client (the socket's unacknowledged bytes, SIOCOUTQ) at most `request_timeout`. A
//   reader that takes its response a byte at a time, or never, is reset at the deadline; a
//   response still unacknowledged when libmicrohttpd closes its connection (`Connection: close`)
//   is kept here, on a dup of the socket, until it is delivered or its deadline passes, so no
//   orphaned socket outlives the deadline either (up to max_draining such sockets at once).
// Thread-safe: one mutex; every call is short (no I/O but shutdown, ioctl and close).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

struct sockaddr;

namespace stallwatch::metrics {

// The bytes that name a client for the limits: 4 for IPv4 (IPv4-mapped IPv6 included), the
// first 8 (the /64) for IPv6; "" for anything else (not limited).
std::string client_key(const sockaddr* address);
// The key for a log line: "127.0.0.2", "2001:db8:1:2::/64".
std::string client_key_text(const std::string& key);

struct GuardLimits {
  unsigned per_address = 16;
  std::chrono::milliseconds header_timeout{5000};
  std::chrono::milliseconds idle_timeout{30000};
  std::chrono::milliseconds request_timeout{15000};
  unsigned max_draining = 64;  // closed connections kept to deliver their last response
  // The connection cap (--web.max-connections; 0: none here). A connection that takes the
  // open count past it evicts one: of the address holding the most, its longest idle
  // (waiting for a request head or between requests) before any with a request in flight,
  // while that address holds more than the newcomer's (or as many, if the victim is idle).
  // So a scraper's one connection gets in while other addresses hold the cap (issue #49).
  unsigned max_open = 0;
};

struct GuardCounters {
  std::uint64_t refused_per_address = 0;  // connections refused at accept (per-address limit)
  std::uint64_t cut_idle = 0;             // closed at the header or idle deadline
  std::uint64_t cut_request = 0;          // reset at the request deadline (slow readers)
  std::uint64_t evicted = 0;              // cut to make room under the cap for a newcomer
  unsigned open = 0;                      // connections libmicrohttpd holds now
  unsigned draining = 0;                  // closed by it, response still being delivered
};

class ConnectionGuard {
 public:
  struct Conn;  // one connection, owned by the guard from opened() to closing()
  using Clock = std::chrono::steady_clock;

  explicit ConnectionGuard(GuardLimits limits);
  ~ConnectionGuard();  // closes the sockets it still drains

  // At accept: false when the address already holds its share (the connection is refused).
  bool admits(const sockaddr* address);
  Conn* opened(int fd, const sockaddr* address, Clock::time_point now = Clock::now());
  // The head of a request is in; its response must be delivered by the request deadline.
  void request_started(Conn* c, Clock::time_point now = Clock::now());
  // libmicrohttpd finished the request (the response is written to the socket, or it failed).
  void request_completed(Conn* c, Clock::time_point now = Clock::now());
  // Before libmicrohttpd closes the socket; `c` is freed.
  void closing(Conn* c, Clock::time_point now = Clock::now());
  // Cuts every connection past a deadline; returns a summary line when something was refused
  // or cut since the last line and `report_every` has passed ("" otherwise), for the log.
  std::string tick(Clock::time_point now = Clock::now(),
                   std::chrono::seconds report_every = std::chrono::seconds(60));

  const std::string& client(const Conn* c) const;
  // Connections held now, less those cut and not yet closed by libmicrohttpd.
  unsigned open() const;
  GuardCounters counters() const;

 private:
  struct Draining {
    int fd;
    Clock::time_point deadline;
  };
  void cut(Conn* c, bool reset);
  void release(const std::string& key);
  // Past max_open: cuts the connection the cap's rule picks for `newcomer`, if any.
  void evict_for(const Conn* newcomer);

  GuardLimits limits_;
  mutable std::mutex mu_;
  std::unordered_set<Conn*> conns_;
  std::unordered_map<std::string, unsigned> held_;  // open connections per client key
  std::vector<Draining> draining_;
  GuardCounters counters_;
  unsigned cut_open_ = 0;  // cut, not yet closed
  GuardCounters reported_;
  Clock::time_point last_report_{};
  std::string last_refused_;  // the client key of the last refusal, for the log line
};

}  // namespace stallwatch::metrics
