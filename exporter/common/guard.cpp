#include "common/guard.h"

#include <atomic>
#include <exception>
#include <mutex>
#include <set>
#include <string>

#include "common/log.h"

namespace stallwatch {

namespace {

std::atomic<std::uint64_t> g_failures{0};

// Logs the first of each distinct message; at most 64 are remembered, so an input that makes a
// different message each time cannot grow this without bound (later ones are counted only).
void report(std::string_view where, const char* what) noexcept {
  g_failures.fetch_add(1, std::memory_order_relaxed);
  try {
    static std::mutex mu;
    static std::set<std::string> seen;
    std::string key = std::string(where) + ": " + what;
    {
      std::lock_guard lock(mu);
      if (seen.size() >= 64 || !seen.insert(key).second) return;
    }
    SW_LOG(kError) << where << " failed and goes on: " << what
                   << " (logged once; stallwatch_events_lost_total{source=\"thread_failure\"} counts each)";
  } catch (...) {
    // Out of memory while reporting: the count above is all there is.
  }
}

}  // namespace

bool run_guarded(std::string_view where, const std::function<void()>& step) {
  try {
    step();
    return true;
  } catch (const std::exception& e) {
    report(where, e.what());
  } catch (...) {
    report(where, "an exception that is not a std::exception");
  }
  return false;
}

std::uint64_t guarded_failures() { return g_failures.load(std::memory_order_relaxed); }

}  // namespace stallwatch
