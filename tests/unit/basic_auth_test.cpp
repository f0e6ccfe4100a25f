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

// Many addresses together: the shared buckets (clean: burst 3, 1 a second; failed: burst 10,
// 2 a second) bound bcrypt in all.
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
  // Each address's first attempt draws on the clean addresses' bucket (burst 3); once failed,
  // on the failed ones' (burst 10); the 197 that never got a token stay on the empty clean one:
  // 6 bcrypts for 400 attempts.
  EXPECT_EQ(denied, 3);
  EXPECT_EQ(check.counts().throttled, 197u);
  for (int i = 0; i < 200; ++i) {
    const std::string client = {'\x0a', '\0', static_cast<char>(i >> 8), static_cast<char>(i)};
    denied += check.check(c, client, "u", "bad", t) == Login::kDenied;
  }
  EXPECT_EQ(denied, 6);
}

// Issue #49 (e): under a 12-address flood of wrong passwords, the scraper that just restarted
// logs in at its first scrape and every one after (the failed addresses share a bucket of
// their own), and its login, extended at each use, never lapses into the flood.
TEST(PasswordCheckerTest, TheScraperKeepsItsAnswersUnderAFlood) {
  WebConfig c = one_user();
  ASSERT_TRUE(c.users["u"].starts_with("$2y$")) << "no bcrypt from crypt_gensalt/crypt_r";
  PasswordChecker check;
  const std::string scraper("\x7f\0\0\1", 4);
  const auto t0 = std::chrono::steady_clock::now();
  int granted = 0, scrapes = 0;
  // 25 minutes (past the 10 a login is remembered): the flood sends 5 wrong passwords a second
  // from each of 12 addresses; the scraper scrapes every 15 s from the 10th second.
  for (int tenth = 0; tenth < 25 * 60 * 10; ++tenth) {
    const auto t = t0 + tenth * 100ms;
    for (int a = 0; a < 12 && tenth % 2 == 0; ++a) {
      const std::string attacker = {'\x7f', '\0', '\1', static_cast<char>(a)};
      check.check(c, attacker, "u", "wrong", t);
    }
    if (tenth >= 100 && tenth % 150 == 0) {
      ++scrapes;
      granted += check.check(c, scraper, "u", "pw", t) == Login::kGranted;
    }
  }
  EXPECT_EQ(granted, scrapes) << "scrapes answered 429 or denied";
  EXPECT_GE(scrapes, 95);
  // bcrypt ran for the scraper once; for the flood, 2 a second (the failed addresses' bucket)
  // after its burst of 10, and each address's first try from the clean bucket.
  EXPECT_LE(check.counts().bcrypts, 2u * 25 * 60 + 10 + 12 + 1 + 2);
}

}  // namespace
}  // namespace stallwatch::metrics
