// Tests for trace/library_files: the on-disk scan opens each file from the directory it read,
// O_NOFOLLOW, and only in directories no user but root can change (issue #49 (a), (b)).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "trace/library_files.h"

namespace stallwatch::trace {
namespace {

class LibraryFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sw-libfiles-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);
    std::ofstream(dir_ + "/libcudart.so.12") << "runtime";
    std::ofstream(dir_ + "/libnccl.so.2") << "nccl";
    std::ofstream(dir_ + "/secret") << "root only";
    ::chmod((dir_ + "/secret").c_str(), 0600);
    std::filesystem::create_symlink(dir_ + "/secret", dir_ + "/libcuda.so.1");
    ASSERT_EQ(::mkfifo((dir_ + "/libcuda.so").c_str(), 0644), 0);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
};

TEST_F(LibraryFilesTest, RegularFilesOnlyOnePerFile) {
  // The directory twice (as /usr/local/cuda and /usr/local/cuda-13 are): each file once.
  const auto files = cuda_library_files({dir_, dir_ + "/."});
  ASSERT_EQ(files.size(), 2u);  // not the symlink, not the FIFO (and the scan did not block)
  EXPECT_EQ(files[0].path, dir_ + "/libcudart.so.12");
  EXPECT_EQ(files[0].api, Api::kRuntime);
  EXPECT_EQ(files[1].path, dir_ + "/libnccl.so.2");
  EXPECT_EQ(files[1].api, Api::kNccl);
}

// A user swaps the file for a symlink to a root-only file after the scan: what root attaches
// is the descriptor the scan opened, the file that was there.
TEST_F(LibraryFilesTest, TheScanPinsTheFileItFound) {
  if (::geteuid() != 0) GTEST_SKIP() << "a directory only root can change needs root to make";
  ASSERT_TRUE(root_only_dir(dir_)) << dir_ << " (its parents: /tmp is sticky)";
  auto files = cuda_library_files({dir_});
  ASSERT_EQ(files.size(), 2u);
  ASSERT_TRUE(files[0].trusted_dir);
  ASSERT_GE(files[0].file.get(), 0);
  struct stat before {};
  ASSERT_EQ(::stat((dir_ + "/libcudart.so.12").c_str(), &before), 0);
  std::filesystem::remove(dir_ + "/libcudart.so.12");
  std::filesystem::create_symlink(dir_ + "/secret", dir_ + "/libcudart.so.12");
  struct stat opened {};
  ASSERT_EQ(::stat(files[0].file.proc_path().c_str(), &opened), 0);
  EXPECT_EQ(opened.st_ino, before.st_ino);
  std::ifstream in(files[0].file.proc_path());
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "runtime");
}

// Anyone may write it: listed, never opened (a user's copies are traced when mapped).
TEST_F(LibraryFilesTest, FilesOfDirectoriesUsersCanWriteAreNotOpened) {
  ::chmod(dir_.c_str(), 01777);  // sticky does not help the directory itself
  EXPECT_FALSE(root_only_dir(dir_));
  const auto files = cuda_library_files({dir_});
  ASSERT_EQ(files.size(), 2u);
  for (const auto& f : files) {
    EXPECT_FALSE(f.trusted_dir) << f.path;
    EXPECT_LT(f.file.get(), 0) << f.path;
  }
  ::chmod(dir_.c_str(), 0755);
  EXPECT_EQ(root_only_dir(dir_), ::geteuid() == 0);
  EXPECT_FALSE(root_only_dir(dir_ + "/missing"));
  EXPECT_FALSE(root_only_dir(dir_ + "/libnccl.so.2")) << "a file is not a directory";
}

}  // namespace
}  // namespace stallwatch::trace
