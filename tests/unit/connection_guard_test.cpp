// metrics/connection_guard.h without a listener: which bytes name a client for the per-address
// limit (an IPv4 host, IPv4-mapped IPv6 the same host, an IPv6 /64), and the share one address
// may hold. The deadlines are exercised on real sockets in http_server_test and, against the
// daemon, in tests/privileged/http_flood_test.cpp.
#include "metrics/connection_guard.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace stallwatch::metrics {
namespace {

sockaddr_in v4(const char* text) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, text, &a.sin_addr);
  return a;
}

sockaddr_in6 v6(const char* text) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  inet_pton(AF_INET6, text, &a.sin6_addr);
  return a;
}

const sockaddr* sa(const auto& a) { return reinterpret_cast<const sockaddr*>(&a); }

TEST(ClientKeyTest, HostsAndPrefixes) {
  const auto a = v4("127.0.0.2");
  const auto mapped = v6("::ffff:127.0.0.2");
  EXPECT_EQ(client_key(sa(a)), client_key(sa(mapped)));
  EXPECT_EQ(client_key_text(client_key(sa(a))), "127.0.0.2");
  EXPECT_NE(client_key(sa(a)), client_key(sa(v4("127.0.0.1"))));
  // One IPv6 host has a /64: every address in it is the same client.
  const auto h1 = v6("2001:db8:1:2::1"), h2 = v6("2001:db8:1:2:ffff::9");
  EXPECT_EQ(client_key(sa(h1)), client_key(sa(h2)));
  EXPECT_NE(client_key(sa(h1)), client_key(sa(v6("2001:db8:1:3::1"))));
  EXPECT_EQ(client_key_text(client_key(sa(h1))), "2001:db8:1:2::/64");
  sockaddr unix_socket{};
  unix_socket.sa_family = AF_UNIX;
  EXPECT_EQ(client_key(&unix_socket), "");
  EXPECT_EQ(client_key(nullptr), "");
}

TEST(ConnectionGuardTest, OneAddressHoldsItsShareAndGetsItBackOnClose) {
  GuardLimits limits;
  limits.per_address = 2;
  ConnectionGuard guard(limits);
  const auto attacker = v4("127.0.0.2"), scraper = v4("127.0.0.1");
  ASSERT_TRUE(guard.admits(sa(attacker)));
  auto* first = guard.opened(-1, sa(attacker));
  ASSERT_TRUE(guard.admits(sa(attacker)));
  auto* second = guard.opened(-1, sa(attacker));
  EXPECT_FALSE(guard.admits(sa(attacker)));
  EXPECT_FALSE(guard.admits(sa(attacker)));
  EXPECT_TRUE(guard.admits(sa(scraper))) << "another address";
  EXPECT_EQ(guard.counters().refused_per_address, 2u);
  EXPECT_EQ(guard.open(), 2u);
  guard.closing(first);
  EXPECT_TRUE(guard.admits(sa(attacker)));
  guard.closing(second);
  EXPECT_EQ(guard.open(), 0u);
  // The log line names the refusals and the last address refused.
  const std::string line = guard.tick();
  EXPECT_NE(line.find("refused 2 connections over the limit of 2 per client address"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("127.0.0.2"), std::string::npos) << line;
  EXPECT_EQ(guard.tick(), "") << "nothing new";
}

// Issue #49 (e): four addresses holding the cap (64 by default; 8 here) no longer lock the
// scraper out: its connection evicts the longest idle one of an address holding more, never
// a request in flight while an idle one is left, and nothing when every holder has as few
// connections as the newcomer and all are answering.
TEST(ConnectionGuardTest, ANewcomerEvictsTheIdlestOfTheBiggestHolder) {
  GuardLimits limits;
  limits.per_address = 4;
  limits.max_open = 8;
  ConnectionGuard guard(limits);
  using Clock = ConnectionGuard::Clock;
  const auto t0 = Clock::now();
  struct Held {
    int ours, peer;
    ConnectionGuard::Conn* conn;
  };
  std::vector<Held> held;
  const auto open = [&](const sockaddr_in& from, Clock::time_point at) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    held.push_back({fds[0], fds[1], guard.opened(fds[0], sa(from), at)});
    return held.back().conn;
  };
  const auto cut = [&](std::size_t i) {  // the guard shut it down: the peer reads the end
    char c;
    return ::recv(held[i].peer, &c, 1, MSG_DONTWAIT) == 0;
  };
  for (int a = 0; a < 4; ++a) {
    const auto from = v4(("127.0.1." + std::to_string(a + 1)).c_str());
    for (int k = 0; k < 2; ++k) open(from, t0 + std::chrono::seconds(a * 2 + k));
  }
  // Address 1's connections are answering; the rest idle. The oldest idle: address 2's first.
  guard.request_started(held[0].conn, t0 + std::chrono::seconds(10));
  guard.request_started(held[1].conn, t0 + std::chrono::seconds(10));
  EXPECT_EQ(guard.open(), 8u);
  open(v4("127.0.0.1"), t0 + std::chrono::seconds(20));  // the scraper
  EXPECT_EQ(guard.counters().evicted, 1u);
  EXPECT_EQ(guard.open(), 8u) << "the evicted one no longer counts toward the cap";
  EXPECT_FALSE(cut(0));
  EXPECT_FALSE(cut(1)) << "a request in flight was evicted while idle ones were left";
  EXPECT_TRUE(cut(2)) << "not the longest idle connection";
  for (std::size_t i = 3; i < held.size(); ++i) EXPECT_FALSE(cut(i)) << i;
  for (const Held& h : held) {
    guard.closing(h.conn, t0 + std::chrono::seconds(30));
    ::close(h.ours);
    ::close(h.peer);
  }
  held.clear();

  // Eight addresses, one connection each, all answering: the newcomer evicts nothing.
  for (int a = 0; a < 8; ++a) {
    auto* c = open(v4(("127.0.2." + std::to_string(a + 1)).c_str()), t0);
    guard.request_started(c, t0);
  }
  open(v4("127.0.0.1"), t0 + std::chrono::seconds(1));
  EXPECT_EQ(guard.counters().evicted, 1u);
  EXPECT_EQ(guard.open(), 9u) << "over the cap: the listener answers it 503";
  for (const Held& h : held) {
    guard.closing(h.conn, t0 + std::chrono::seconds(2));
    ::close(h.ours);
    ::close(h.peer);
  }
}

}  // namespace
}  // namespace stallwatch::metrics
