// A step that throws is logged once and counted, and the caller goes on (issue #35: a
// std::bad_alloc from a hostile ELF file aborted the root daemon, and every restart).
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

#include "common/guard.h"

namespace stallwatch {
namespace {

TEST(RunGuarded, AThrowIsCountedAndTheCallerGoesOn) {
  const auto before = guarded_failures();
  EXPECT_TRUE(run_guarded("test", [] {}));
  EXPECT_FALSE(run_guarded("test", [] { throw std::bad_alloc(); }));
  EXPECT_FALSE(run_guarded("test", [] { throw std::out_of_range("index 9 of 3"); }));
  EXPECT_FALSE(run_guarded("test", [] { throw 42; }));
  EXPECT_EQ(guarded_failures(), before + 3);
}

TEST(RunGuarded, TheSameFailureIsLoggedOnce) {
  testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) {
    run_guarded("loop", [] { throw std::runtime_error("same \x1b[31m message"); });
  }
  const std::string err = testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (size_t p = err.find("loop failed"); p != std::string::npos; p = err.find("loop failed", p + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << err;
  EXPECT_EQ(err.find('\x1b'), std::string::npos) << "the message reached the log unescaped";
}

}  // namespace
}  // namespace stallwatch
