// The last line of defence of every long-lived thread (issue #35): a step that throws (a
// std::bad_alloc from a hostile file, a parser's std::out_of_range, nlohmann's type_error) must
// not take the root daemon down, and with it every restart that meets the same input. Each
// thread's loop runs its step through run_guarded, which logs what escaped (escaped, once per
// place and message, then counted) and lets the loop go on.
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace stallwatch {

// Runs `step`; returns false when it threw, after logging the first throw of each distinct
// (where, message) pair. `where` names the thread or step: "discovery", "window".
bool run_guarded(std::string_view where, const std::function<void()>& step);

// Exceptions run_guarded caught since start (stallwatch_events_lost_total{source="thread_failure"}).
std::uint64_t guarded_failures();

}  // namespace stallwatch
