// metrics/basic_auth.h without a listener: bcrypt and the cache of good credentials agree, and
// wrong passwords are throttled per address and in all before bcrypt runs (issue #35, row 7),
// with explicit times instead of waiting.
#include "metrics/basic_auth.h"

#include <crypt.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace stallwatch::metrics {
namespace {

using namespace std::chrono_literals;

// A cheap bcrypt hash (cost 4) of `password`, made with a fresh salt.
std::string bcrypt(const char* password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (!crypt_gensalt_rn("$2y$", 4, nullptr, 0, salt, sizeof salt)) return {};
  crypt_data data{};
  const char* hash = crypt_r(password, salt, &data);
  return hash ? hash : "";
}

// A web config with user "u", password "pw".
WebConfig one_user() {
  WebConfig c;
  c.users["u"] = bcrypt("pw");
  return c;
}

TEST(PasswordCheckerTest, BcryptAndTheCacheAgree) {
  WebConfig c = one_user();
  ASSERT_TRUE(c.users["u"].starts_with("$2y$")) << "no bcrypt from crypt_gensalt/crypt_r";
  PasswordChecker check;
  const std::string client("\x7f\0\0\1", 4);
  EXPECT_EQ(check.check(c, client, "u", "pw"), Login::kGranted);
  EXPECT_EQ(check.check(c, client, "u", "pw"), Login::kGranted);  // from the cache
  EXPECT_EQ(check.counts().bcrypts, 1u);
  EXPECT_EQ(check.check(c, client, "u", "pw2"), Login::kDenied);
  EXPECT_EQ(check.check(c, client, "v", "pw"), Login::kDenied);
  c.users["u"] = bcrypt("other");  // the hash rotated: the cached success is void
  EXPECT_EQ(check.check(c, client, "u", "pw"), Login::kDenied);
}

// Row 7 of issue #35: wrong passwords from one address stop costing a bcrypt after the burst,
// the scraper's remembered credentials pass even from that address, other addresses are not
// throttled by it, and tokens come back with time; remembered successes expire.
TEST(PasswordCheckerTest, WrongPasswordsAreThrottledBeforeBcrypt) {
  WebConfig c = one_user();
  ASSERT_TRUE(c.users["u"].starts_with("$2y$")) << "no bcrypt from crypt_gensalt/crypt_r";
  PasswordChecker check;
  const std::string attacker("\x7f\0\0\2", 4), scraper("\x7f\0\0\1", 4);
  auto t = std::chrono::steady_clock::now();
  EXPECT_EQ(check.check(c, scraper, "u", "pw", t), Login::kGranted);  // remembered from now on
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(check.check(c, attacker, "u", "bad" + std::to_string(i), t), Login::kDenied) << i;
  }
  const auto before = check.counts().bcrypts;
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(check.check(c, attacker, i % 2 ? "u" : "nobody", "bad", t), Login::kThrottled);
  }
  EXPECT_EQ(check.counts().bcrypts, before) << "a throttled attempt ran bcrypt";
  EXPECT_EQ(check.counts().throttled, 100u);
  EXPECT_EQ(check.check(c, attacker, "u", "pw", t), Login::kGranted) << "remembered credentials";
  EXPECT_EQ(check.check(c, scraper, "u", "bad", t), Login::kDenied) << "another address";
  // One more try every 2 s.
  EXPECT_EQ(check.check(c, attacker, "u", "bad", t + 1s), Login::kThrottled);
  EXPECT_EQ(check.check(c, attacker, "u", "bad", t + 2100ms), Login::kDenied);
  EXPECT_EQ(check.check(c, attacker, "u", "bad", t + 2200ms), Login::kThrottled);
  // Remembered for 10 minutes, then bcrypt'd again (and remembered again).
  const auto later = t + std::chrono::minutes(11);
  const auto runs = check.counts().bcrypts;
  EXPECT_EQ(check.check(c, scraper, "u", "pw", later), Login::kGranted);
  EXPECT_EQ(check.counts().bcrypts, runs + 1);
}

// Many addresses together: the shared bucket (burst 10, 2 a second) bounds bcrypt in all.
TEST(PasswordCheckerTest, AFloodFromManyAddressesIsBoundedToo) {
  WebConfig c = one_user();
  ASSERT_TRUE(c.users["u"].starts_with("$2y$")) << "no bcrypt from crypt_gensalt/crypt_r";
  PasswordChecker check;
  const auto t = std::chrono::steady_clock::now();
  int denied = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string client = {'\x0a', '\0', static_cast<char>(i >> 8), static_cast<char>(i)};
    denied += check.check(c, client, "u", "bad", t) == Login::kDenied;
  }
  EXPECT_EQ(denied, 10);
  EXPECT_EQ(check.counts().throttled, 190u);
}

}  // namespace
}  // namespace stallwatch::metrics
