// Unit tests for common/sd_notify.h: the datagrams systemd would read from $NOTIFY_SOCKET (a
// real AF_UNIX socket, path and abstract), the watchdog interval, and the no-op outside systemd.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "common/sd_notify.h"

namespace stallwatch {
namespace {

// A datagram socket bound where $NOTIFY_SOCKET will point; restores the environment.
class NotifySocket {
 public:
  explicit NotifySocket(bool abstract) {
    name_ = (abstract ? "@" : "/tmp/") + std::string("sw-notify-") + std::to_string(getpid());
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name_.c_str(), name_.size());
    if (abstract) addr.sun_path[0] = '\0';
    if (!abstract) unlink(name_.c_str());
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0) << std::strerror(errno);
    setenv("NOTIFY_SOCKET", name_.c_str(), 1);
  }
  ~NotifySocket() {
    unsetenv("NOTIFY_SOCKET");
    close(fd_);
    if (name_[0] == '/') unlink(name_.c_str());
  }
  std::string receive() const {
    char buf[512];
    const ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    return n < 0 ? std::string("<nothing>") : std::string(buf, static_cast<size_t>(n));
  }

 private:
  std::string name_;
  int fd_ = -1;
};

TEST(SdNotify, SendsToAPathSocket) {
  NotifySocket s(false);
  EXPECT_TRUE(sd_notify("READY=1\nSTATUS=tracing 2 library files"));
  EXPECT_EQ(s.receive(), "READY=1\nSTATUS=tracing 2 library files");
  EXPECT_TRUE(sd_notify("WATCHDOG=1"));
  EXPECT_EQ(s.receive(), "WATCHDOG=1");
  EXPECT_EQ(s.receive(), "<nothing>");
}

TEST(SdNotify, SendsToAnAbstractSocket) {
  NotifySocket s(true);
  EXPECT_TRUE(sd_notify("STOPPING=1"));
  EXPECT_EQ(s.receive(), "STOPPING=1");
}

TEST(SdNotify, OutsideSystemdIsANoOp) {
  unsetenv("NOTIFY_SOCKET");
  EXPECT_FALSE(sd_notify("READY=1"));
  setenv("NOTIFY_SOCKET", "relative/path", 1);
  EXPECT_FALSE(sd_notify("READY=1"));
  unsetenv("NOTIFY_SOCKET");
}

TEST(SdNotify, WatchdogIntervalForThisProcessOnly) {
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
  EXPECT_FALSE(sd_watchdog_interval());
  setenv("WATCHDOG_USEC", "60000000", 1);
  ASSERT_TRUE(sd_watchdog_interval());
  EXPECT_EQ(*sd_watchdog_interval(), std::chrono::seconds(60));
  setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
  EXPECT_TRUE(sd_watchdog_interval());
  setenv("WATCHDOG_PID", "1", 1);  // meant for another process
  EXPECT_FALSE(sd_watchdog_interval());
  unsetenv("WATCHDOG_PID");
  setenv("WATCHDOG_USEC", "soon", 1);
  EXPECT_FALSE(sd_watchdog_interval());
  unsetenv("WATCHDOG_USEC");
}

}  // namespace
}  // namespace stallwatch
