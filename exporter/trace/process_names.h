// The names of the CUDA processes discovery found, kept a while after they exit: a job shorter
// than a window is gone before the collector reads it alive, and its last window still needs a
// name (trace::CollectorOptions::exited_name). Discovery's thread writes, the window loop reads.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace stallwatch::trace {

class ProcessNames {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxEntries = 65536;                 // live and recently gone
  static constexpr std::chrono::seconds kKeepGone{120};        // more than any window

  void found(int pid, std::string comm, std::uint32_t start_tag, Clock::time_point now = Clock::now()) {
    std::lock_guard lk(mu_);
    purge(now);
    if (names_.size() >= kMaxEntries && !names_.count(pid)) return;
    names_[pid] = Entry{std::move(comm), start_tag, {}};
  }
  void gone(int pid, Clock::time_point now = Clock::now()) {
    std::lock_guard lk(mu_);
    if (auto it = names_.find(pid); it != names_.end()) it->second.gone_at = now;
  }
  // "" when unknown, or when the PID was another process's (start tags differ).
  std::string name(int pid, std::uint32_t start_tag) const {
    std::lock_guard lk(mu_);
    auto it = names_.find(pid);
    if (it == names_.end()) return {};
    const Entry& e = it->second;
    if (start_tag != 0 && e.start_tag != 0 && e.start_tag != start_tag) return {};
    return e.comm;
  }
  size_t size() const {
    std::lock_guard lk(mu_);
    return names_.size();
  }

 private:
  struct Entry {
    std::string comm;
    std::uint32_t start_tag = 0;
    Clock::time_point gone_at{};  // epoch while alive
  };
  void purge(Clock::time_point now) {  // at most every 10 s: found() stays cheap
    if (now - last_purge_ < std::chrono::seconds(10)) return;
    last_purge_ = now;
    for (auto it = names_.begin(); it != names_.end();) {
      const bool old = it->second.gone_at != Clock::time_point{} && now - it->second.gone_at > kKeepGone;
      it = old ? names_.erase(it) : std::next(it);
    }
  }
  mutable std::mutex mu_;
  std::map<int, Entry> names_;
  Clock::time_point last_purge_{};
};

}  // namespace stallwatch::trace
