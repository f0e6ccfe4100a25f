// Basic authentication against the bcrypt hashes of --web.config.file (metrics/web_config.h),
// made cheap for the scraper and bounded for everyone else (issue #35, row 7):
// - bcrypt is slow on purpose (~50-100 ms at cost 10, on one of the listener's two threads), and
//   Prometheus sends the same credentials at every scrape, so a success is remembered for
//   10 minutes by a SHA-256 of user, hash and password (never the password), as exporter-toolkit
//   does; a remembered success is checked before anything else and never throttled;
//   each use extends it (issue #49: a scraper's login lapsed every 10 minutes, into a flood);
// - every other attempt takes a token before bcrypt runs: a bucket per client address (burst 5,
//   one more every 2 s) and a shared one. Addresses that have failed share one bucket (burst 10,
//   one more every 500 ms); addresses that never failed (or succeeded since) share another
//   (burst 3, one more a second), so a flood of wrong passwords from any number of addresses
//   cannot keep a scraper that just restarted from logging in (issue #49: 12 of 12 scrapes were
//   answered 429 under a 12-address flood). With no token the attempt is answered 429 without
//   hashing: a flood costs at most one bcrypt per 2 s per address and 3 per second in all. A
//   success gives its token back and clears the address's failures;
// - one bcrypt at a time: an attempt from an address that has failed, arriving while another
//   runs, is answered 429 at once, so one of the listener's two threads is always free for the
//   scrapers; one from a clean address waits for it (at most 1 s);
// - an unknown user costs a bcrypt too, so timing does not tell users apart.
// Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "metrics/web_config.h"

namespace stallwatch::metrics {

// crypt(3) of `password` with the salt and cost of `hash`, compared in constant time.
bool bcrypt_matches(const std::string& hash, const std::string& password);

// Token buckets of failed-login attempts, one per client key and one for all of them.
class LoginThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  struct Limits {
    double burst = 5;
    Clock::duration refill = std::chrono::seconds(2);
    double total_burst = 10;
    Clock::duration total_refill = std::chrono::milliseconds(500);
    double clean_burst = 3;
    Clock::duration clean_refill = std::chrono::seconds(1);
    std::size_t max_clients = 4096;  // buckets kept; full clean ones are dropped first
  };
  explicit LoginThrottle(Limits limits)
      : limits_(limits), total_{limits.total_burst, {}}, clean_{limits.clean_burst, {}} {}

  // Takes a token from the client's bucket and the shared one of its kind (failed or clean);
  // false (nothing taken) when either is empty. *clean: whether the client has no failure.
  bool take(const std::string& client, Clock::time_point now, bool* clean = nullptr);
  // Returns the token of an attempt that succeeded; the client is clean again.
  void give_back(const std::string& client, Clock::time_point now);
  // The attempt was denied: the client takes from the failed clients' bucket from now on.
  void failed(const std::string& client);

 private:
  struct Bucket {
    double tokens;
    Clock::time_point at;
    bool failed = false;
  };
  static void refill(Bucket& b, double burst, Clock::duration every, Clock::time_point now);
  void evict(Clock::time_point now);

  Limits limits_;
  std::mutex mu_;
  Bucket total_;  // addresses that have failed
  Bucket clean_;  // addresses that have not
  std::unordered_map<std::string, Bucket> clients_;
};

enum class Login { kGranted, kDenied, kThrottled };

class PasswordChecker {
 public:
  using Clock = std::chrono::steady_clock;
  explicit PasswordChecker(LoginThrottle::Limits limits = {}) : throttle_(limits) {}

  // `client`: the address key of metrics/connection_guard.h ("" for none).
  Login check(const WebConfig& config, const std::string& client, const std::string& user,
              const std::string& password, Clock::time_point now = Clock::now());

  struct Counts {
    std::uint64_t bcrypts = 0;    // attempts that ran bcrypt
    std::uint64_t denied = 0;     // wrong user or password (after bcrypt)
    std::uint64_t throttled = 0;  // answered 429 without bcrypt
  };
  Counts counts() const;

 private:
  using Key = std::array<unsigned char, 32>;
  struct Good {
    Key key;
    Clock::time_point until;
  };
  bool remembered(const Key& key, Clock::time_point now);

  std::mutex mu_;
  std::vector<Good> good_;  // recent successes (bounded)
  std::timed_mutex bcrypt_mu_;  // held while bcrypt runs
  LoginThrottle throttle_;
  std::atomic<std::uint64_t> bcrypts_{0}, denied_{0}, throttled_{0};
};

}  // namespace stallwatch::metrics
