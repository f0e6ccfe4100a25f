// Child processes and commands for the privileged tests, every wait bounded: a child that is
// killed when its owner goes out of scope, O_CLOEXEC pipes to pace children, bounded command
// runs and polling. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "support/harness.h"

namespace stallwatch::test {

// A spawned child that is killed (SIGKILL) and reaped when destroyed, unless already reaped by
// wait(): a failed assertion never leaves a workload running.
class Child {
 public:
  Child() = default;
  explicit Child(const Spawn& s) : pid_(spawn(s)) {}
  ~Child() { stop(); }
  Child(Child&& o) noexcept : pid_(o.pid_) { o.pid_ = -1; }
  Child& operator=(Child&& o) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // Exit status (128+signal when killed), or -1 on timeout (then killed) or with no child.
  int wait(std::chrono::seconds limit = std::chrono::seconds(60));
  bool running() const;  // started and not exited yet (does not reap)
  void stop();           // SIGKILL and reap, when still there

 private:
  pid_t pid_ = -1;
};

// A pipe whose ends are O_CLOEXEC: pass an end to one child with Spawn::pass_fds, then close
// it here so that end of file and EPIPE mean what they say.
struct Pipe {
  Pipe();
  ~Pipe();
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  void close_read();
  void close_write();
  int read_end = -1, write_end = -1;
};
// Reads one byte from fd within `limit`; false on timeout, end of file or error.
bool read_byte(int fd, std::chrono::seconds limit);
bool write_byte(int fd);

// The whole content of a (small) file; empty when unreadable.
std::string slurp(const std::string& path);

// Runs argv (argv[0] a path or a name found on PATH) to completion within `limit`, stdout and
// stderr together into *output when given. Returns the exit status, 128+signal, or -1 when
// it could not start or ran past the limit (then it is killed).
int run_command(const std::vector<std::string>& argv, std::string* output = nullptr,
                std::chrono::seconds limit = std::chrono::seconds(20));

// Calls `done` every `step` until it returns true (→ true) or `limit` passes (→ false).
bool poll_until(const std::function<bool()>& done, std::chrono::seconds limit,
                std::chrono::milliseconds step = std::chrono::milliseconds(100));

}  // namespace stallwatch::test
