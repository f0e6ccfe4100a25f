#include "support/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

namespace stallwatch::test {

using Clock = std::chrono::steady_clock;

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    stop();
    pid_ = o.pid_;
    o.pid_ = -1;
  }
  return *this;
}

int Child::wait(std::chrono::seconds limit) {
  if (pid_ <= 0) return -1;
  int status = wait_exit(pid_, limit);  // kills and reaps on timeout
  pid_ = -1;
  return status;
}

bool Child::running() const {
  if (pid_ <= 0) return false;
  siginfo_t info{};
  return waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == 0;
}

void Child::stop() {
  if (pid_ > 0) kill_and_reap(pid_);
  pid_ = -1;
}

Pipe::Pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) == 0) {
    read_end = fds[0];
    write_end = fds[1];
  }
}

Pipe::~Pipe() {
  close_read();
  close_write();
}

void Pipe::close_read() {
  if (read_end >= 0) close(read_end);
  read_end = -1;
}

void Pipe::close_write() {
  if (write_end >= 0) close(write_end);
  write_end = -1;
}

bool read_byte(int fd, std::chrono::seconds limit) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(limit.count() * 1000)) != 1) return false;
  char b;
  return read(fd, &b, 1) == 1;
}

bool write_byte(int fd) { return write(fd, "g", 1) == 1; }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

int run_command(const std::vector<std::string>& argv, std::string* output,
                std::chrono::seconds limit) {
  int fds[2];
  if (argv.empty() || pipe2(fds, O_CLOEXEC) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return -1;
  }
  auto deadline = Clock::now() + limit;
  std::string out;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (output) *output = out;
  auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now());
  return wait_exit(pid, std::max(left, std::chrono::seconds(1)));
}

bool poll_until(const std::function<bool()>& done, std::chrono::seconds limit,
                std::chrono::milliseconds step) {
  auto deadline = Clock::now() + limit;
  for (;;) {
    if (done()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(step);
  }
}

}  // namespace stallwatch::test
