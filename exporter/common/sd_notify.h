// The systemd notification protocol (sd_notify(3)) without libsystemd: datagrams such as
// "READY=1", "STATUS=...", "WATCHDOG=1", "STOPPING=1" sent to the socket named by $NOTIFY_SOCKET
// (a path, or an abstract name starting with '@'). Outside systemd (no $NOTIFY_SOCKET) every
// call is a no-op. Thread-safe (each call opens, sends and closes its own socket).
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace stallwatch {

// Sends `state` ("READY=1\nSTATUS=..."). True when sent, false when there is no
// $NOTIFY_SOCKET or sending failed.
bool sd_notify(std::string_view state);

// The watchdog interval systemd expects keep-alives within ($WATCHDOG_USEC, when
// $WATCHDOG_PID is unset or names this process); nullopt when the watchdog is off.
std::optional<std::chrono::microseconds> sd_watchdog_interval();

}  // namespace stallwatch
