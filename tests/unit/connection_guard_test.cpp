// metrics/connection_guard.h without a listener: which bytes name a client for the per-address
// limit (an IPv4 host, IPv4-mapped IPv6 the same host, an IPv6 /64), and the share one address
// may hold. The deadlines are exercised on real sockets in http_server_test and, against the
// daemon, in tests/privileged/http_flood_test.cpp.
#include "metrics/connection_guard.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <string>

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

}  // namespace
}  // namespace stallwatch::metrics
