#include "metrics/basic_auth.h"

#include <crypt.h>
#include <gnutls/crypto.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>

namespace stallwatch::metrics {
namespace {

constexpr std::size_t kMaxGoodKeys = 64;
constexpr auto kRemember = std::chrono::minutes(10);

}  // namespace

bool bcrypt_matches(const std::string& hash, const std::string& password) {
  auto data = std::make_unique<crypt_data>();
  const char* out = crypt_r(password.c_str(), hash.c_str(), data.get());
  if (!out || out[0] == '*') return false;  // libxcrypt's failure token
  const std::size_t n = std::strlen(out);
  if (n != hash.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(out[i] ^ hash[i]);
  return diff == 0;
}

void LoginThrottle::refill(Bucket& b, double burst, Clock::duration every, Clock::time_point now) {
  if (now > b.at) {
    b.tokens = std::min(burst, b.tokens + std::chrono::duration<double>(now - b.at) /
                                              std::chrono::duration<double>(every));
  }
  b.at = now;
}

void LoginThrottle::evict(Clock::time_point now) {
  // Full clean buckets say nothing a new one would not; drop them first, then everything (the
  // shared buckets still bound a flood from more addresses than we keep).
  for (auto it = clients_.begin(); it != clients_.end();) {
    refill(it->second, limits_.burst, limits_.refill, now);
    const bool idle = it->second.tokens >= limits_.burst && !it->second.failed;
    it = idle ? clients_.erase(it) : std::next(it);
  }
  if (clients_.size() >= limits_.max_clients) clients_.clear();
}

bool LoginThrottle::take(const std::string& client, Clock::time_point now, bool* clean) {
  std::lock_guard lock(mu_);
  refill(total_, limits_.total_burst, limits_.total_refill, now);
  refill(clean_, limits_.clean_burst, limits_.clean_refill, now);
  auto it = clients_.find(client);
  if (it == clients_.end()) {
    if (clients_.size() >= limits_.max_clients) evict(now);
    it = clients_.emplace(client, Bucket{limits_.burst, now}).first;
  }
  Bucket& mine = it->second;
  refill(mine, limits_.burst, limits_.refill, now);
  Bucket& shared = mine.failed ? total_ : clean_;
  if (clean) *clean = !mine.failed;
  if (mine.tokens < 1 || shared.tokens < 1) return false;
  mine.tokens -= 1;
  shared.tokens -= 1;
  return true;
}

void LoginThrottle::give_back(const std::string& client, Clock::time_point now) {
  std::lock_guard lock(mu_);
  refill(total_, limits_.total_burst, limits_.total_refill, now);
  refill(clean_, limits_.clean_burst, limits_.clean_refill, now);
  if (auto it = clients_.find(client); it != clients_.end()) {
    Bucket& shared = it->second.failed ? total_ : clean_;
    shared.tokens = std::min(shared.tokens + 1,
                             it->second.failed ? limits_.total_burst : limits_.clean_burst);
    refill(it->second, limits_.burst, limits_.refill, now);
    it->second.tokens = std::min(limits_.burst, it->second.tokens + 1);
    it->second.failed = false;
  }
}

void LoginThrottle::failed(const std::string& client) {
  std::lock_guard lock(mu_);
  if (auto it = clients_.find(client); it != clients_.end()) it->second.failed = true;
}

bool PasswordChecker::remembered(const Key& key, Clock::time_point now) {
  std::lock_guard lock(mu_);
  std::erase_if(good_, [&](const Good& g) { return g.until <= now; });
  bool found = false;
  for (Good& g : good_) {  // every entry, every byte: the time says nothing
    unsigned char diff = 0;
    for (std::size_t i = 0; i < key.size(); ++i) diff |= g.key[i] ^ key[i];
    if (diff == 0) g.until = now + kRemember;  // in use: kept while the scraper scrapes
    found |= diff == 0;
  }
  return found;
}

Login PasswordChecker::check(const WebConfig& config, const std::string& client,
                             const std::string& user, const std::string& password,
                             Clock::time_point now) {
  // A fixed valid bcrypt hash (cost 10), so unknown users cost the same as known ones.
  static const std::string kDummy = "$2b$10$CwTycUXWue0Thq9StjUM0uJ8.pi8wEJ0lI3Ky5M6S7S2rNnTP7Iky";
  const auto it = config.users.find(user);
  const std::string& hash = it == config.users.end() ? kDummy : it->second;
  const std::string material = user + '\0' + hash + '\0' + password;
  Key key;
  gnutls_hash_fast(GNUTLS_DIG_SHA256, material.data(), material.size(), key.data());
  if (it != config.users.end() && remembered(key, now)) return Login::kGranted;

  // One bcrypt at a time: the listener has two threads, and a second attempt while one runs
  // would take the other (and the scrapes queued on it) too.
  // A clean client (no failure yet: the scraper after a restart) waits for a running bcrypt;
  // the clean bucket bounds how many can.
  bool clean = false;
  if (!throttle_.take(client, now, &clean)) {
    throttled_.fetch_add(1);
    return Login::kThrottled;
  }
  std::unique_lock single(bcrypt_mu_, std::defer_lock);
  if (!(clean ? single.try_lock_for(std::chrono::seconds(1)) : single.try_lock())) {
    throttled_.fetch_add(1);
    return Login::kThrottled;
  }
  bcrypts_.fetch_add(1);
  const bool ok = bcrypt_matches(hash, password) && it != config.users.end();
  single.unlock();
  if (!ok) {
    throttle_.failed(client);
    denied_.fetch_add(1);
    return Login::kDenied;
  }
  throttle_.give_back(client, now);
  std::lock_guard lock(mu_);
  if (good_.size() >= kMaxGoodKeys) good_.erase(good_.begin());
  good_.push_back({key, now + kRemember});
  return Login::kGranted;
}

PasswordChecker::Counts PasswordChecker::counts() const {
  return {bcrypts_.load(), denied_.load(), throttled_.load()};
}

}  // namespace stallwatch::metrics
