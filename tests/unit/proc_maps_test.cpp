// Unit tests for exporter/trace/proc_maps.h: parsing /proc/PID/maps lines and finding the CUDA
// libraries a process maps.
#include "trace/proc_maps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace stallwatch::trace {
namespace {

TEST(ParseMapsLineTest, LibraryFields) {
  MapsEntry e;
  ASSERT_TRUE(
      parse_maps_line("7f3a5c200000-7f3a5c28a000 r-xp 0002a000 103:02 1835102                   "
                      "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                      e));
  EXPECT_EQ(e.start, 0x7f3a5c200000u);
  EXPECT_EQ(e.end, 0x7f3a5c28a000u);
  EXPECT_EQ(e.perms, "r-xp");
  EXPECT_EQ(e.offset, 0x2a000u);
  EXPECT_EQ(e.dev_major, 0x103u);  // 259: NVMe
  EXPECT_EQ(e.dev_minor, 2u);
  EXPECT_EQ(e.inode, 1835102u);
  EXPECT_EQ(e.path, "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
  EXPECT_FALSE(e.deleted());
  EXPECT_EQ(e.file_path(), "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
}

TEST(ParseMapsLineTest, PathWithSpacesDeleted) {
  MapsEntry e;
  ASSERT_TRUE(
      parse_maps_line("7f1c2a000000-7f1c2a021000 r-xp 0001a000 fd:01 1234567                    "
                      "/opt/my env/lib/libcudart.so.12.4.127 (deleted)\n",
                      e));
  EXPECT_EQ(e.start, 0x7f1c2a000000u);
  EXPECT_EQ(e.end, 0x7f1c2a021000u);
  EXPECT_EQ(e.perms, "r-xp");
  EXPECT_EQ(e.offset, 0x1a000u);
  EXPECT_EQ(e.dev_major, 0xfdu);
  EXPECT_EQ(e.dev_minor, 1u);
  EXPECT_EQ(e.inode, 1234567u);
  EXPECT_EQ(e.path, "/opt/my env/lib/libcudart.so.12.4.127 (deleted)");
  EXPECT_TRUE(e.deleted());
  EXPECT_EQ(e.file_path(), "/opt/my env/lib/libcudart.so.12.4.127");
  EXPECT_EQ(api_of_library(e.file_path()), Api::kRuntime);
}

TEST(ParseMapsLineTest, AnonymousAndPseudo) {
  MapsEntry anon;
  ASSERT_TRUE(parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ", anon));
  EXPECT_EQ(anon.path, "");
  EXPECT_EQ(anon.inode, 0u);
  EXPECT_EQ(anon.dev_major, 0u);
  EXPECT_EQ(anon.dev_minor, 0u);
  EXPECT_FALSE(anon.deleted());

  MapsEntry no_pad;
  ASSERT_TRUE(parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0", no_pad));
  EXPECT_EQ(no_pad.path, "");
  EXPECT_EQ(no_pad.perms, "rw-p");

  MapsEntry stack;
  ASSERT_TRUE(parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0   [stack]", stack));
  EXPECT_EQ(stack.path, "[stack]");

  MapsEntry vsyscall;
  ASSERT_TRUE(parse_maps_line(
      "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]",
      vsyscall));
  EXPECT_EQ(vsyscall.start, 0xffffffffff600000u);
  EXPECT_EQ(vsyscall.end, 0xffffffffff601000u);
  EXPECT_EQ(vsyscall.perms, "--xp");
  EXPECT_EQ(vsyscall.path, "[vsyscall]");
}

TEST(ParseMapsLineTest, Malformed) {
  MapsEntry e;
  EXPECT_FALSE(parse_maps_line("", e));
  EXPECT_FALSE(parse_maps_line("not a maps line", e));
  EXPECT_FALSE(parse_maps_line("7f00 r-xp 0 08:01 1 /x", e));        // no range
  EXPECT_FALSE(parse_maps_line("7f00-zz r-xp 0 08:01 1 /x", e));     // bad end
  EXPECT_FALSE(parse_maps_line("7f00-8f00 r-xp 0 0801 1 /x", e));    // dev without ':'
  EXPECT_FALSE(parse_maps_line("7f00-8f00 r-xp 0 zz:01 1 /x", e));   // dev not hex
  EXPECT_FALSE(parse_maps_line("7f00-8f00 r-x 0 08:01 1 /x", e));    // perms too short
  EXPECT_FALSE(parse_maps_line("7f00-8f00 r-xp 0 08:01 x1 /x", e));  // inode not decimal
  EXPECT_FALSE(parse_maps_line("7f00-8f00 r-xp 0 08:01", e));        // no inode
  EXPECT_FALSE(parse_maps_line("7f00-8f00 r-xp g 08:01 1 /x", e));   // offset not hex
}

// A training process: libcudart in four segments, the driver, NCCL from a directory with a space,
// an old driver replaced on disk (deleted), the CUDA debugger, and the usual non-CUDA mappings.
constexpr std::string_view kMaps =
    "55d4c8a00000-55d4c8a2a000 r--p 00000000 103:02 2359338                   /usr/bin/python3.11\n"
    "55d4ca1b3000-55d4ca6f2000 rw-p 00000000 00:00 0                          [heap]\n"
    "7f3a50000000-7f3a50021000 rw-p 00000000 00:00 0 \n"
    "7f3a5a000000-7f3a5a010000 r--p 00000000 fd:01 3145811                    "
    "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12.4.127\n"
    "7f3a5a010000-7f3a5a070000 r-xp 00010000 fd:01 3145811                    "
    "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12.4.127\n"
    "7f3a5a070000-7f3a5a090000 r--p 00070000 fd:01 3145811                    "
    "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12.4.127\n"
    "7f3a5a090000-7f3a5a094000 rw-p 00090000 fd:01 3145811                    "
    "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12.4.127\n"
    "7f3a5c000000-7f3a5c200000 r--p 00000000 103:02 1835102                   "
    "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n"
    "7f3a5c200000-7f3a5c28a000 r-xp 0002a000 103:02 1835102                   "
    "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n"
    "7f3a5e000000-7f3a5e400000 r-xp 00000000 103:02 1835099                   "
    "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05 (deleted)\n"
    "7f3a60000000-7f3a60100000 r-xp 00000000 00:2f 88                         "
    "/opt/my env/lib/libnccl.so.2.21.5\n"
    "7f3a62000000-7f3a62100000 r-xp 00000000 103:02 1835200                   "
    "/usr/lib/x86_64-linux-gnu/libcudadebugger.so.550.54.15\n"
    "7f3a64000000-7f3a64028000 r-xp 00000000 103:02 2097155                   "
    "/usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "7ffd8c5e1000-7ffd8c602000 rw-p 00000000 00:00 0                          [stack]\n"
    "7ffd8c7f9000-7ffd8c7fb000 r-xp 00000000 00:00 0                          [vdso]\n"
    "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n";

TEST(CudaLibrariesInMapsTest, OnePerFile) {
  const std::vector<MappedLibrary> libs = cuda_libraries_in_maps(kMaps);
  ASSERT_EQ(libs.size(), 3u);

  EXPECT_EQ(libs[0].path, "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12.4.127");
  EXPECT_EQ(libs[0].api, Api::kRuntime);
  EXPECT_EQ(libs[0].inode, 3145811u);
  EXPECT_EQ(libs[0].dev_major, 0xfdu);
  EXPECT_EQ(libs[0].dev_minor, 1u);

  EXPECT_EQ(libs[1].path, "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
  EXPECT_EQ(libs[1].api, Api::kDriver);
  EXPECT_EQ(libs[1].inode, 1835102u);
  EXPECT_EQ(libs[1].dev_major, 0x103u);
  EXPECT_EQ(libs[1].dev_minor, 2u);

  EXPECT_EQ(libs[2].path, "/opt/my env/lib/libnccl.so.2.21.5");
  EXPECT_EQ(libs[2].api, Api::kNccl);
  EXPECT_EQ(libs[2].inode, 88u);
  EXPECT_EQ(libs[2].dev_major, 0u);
  EXPECT_EQ(libs[2].dev_minor, 0x2fu);
}

TEST(CudaLibrariesInMapsTest, EmptyAndGarbage) {
  EXPECT_TRUE(cuda_libraries_in_maps("").empty());
  EXPECT_TRUE(cuda_libraries_in_maps("garbage\n\n/usr/lib/libcudart.so.12\n").empty());
  // No trailing newline on the last line.
  const auto libs =
      cuda_libraries_in_maps("7f00-8f00 r-xp 00000000 08:01 42 /usr/lib/libcudart-9335f6a2.so.12");
  ASSERT_EQ(libs.size(), 1u);
  EXPECT_EQ(libs[0].path, "/usr/lib/libcudart-9335f6a2.so.12");
  EXPECT_EQ(libs[0].api, Api::kRuntime);
  // A relative or inode-less name is not a file the host can open.
  EXPECT_TRUE(cuda_libraries_in_maps("7f00-8f00 r-xp 00000000 08:01 42 libcuda.so.1\n").empty());
  EXPECT_TRUE(
      cuda_libraries_in_maps("7f00-8f00 r-xp 00000000 00:00 0 /usr/lib/libcuda.so.1\n").empty());
}

TEST(ProcMapsTest, HostPath) {
  EXPECT_EQ(host_path(host::Procfs(), 1234, "/usr/lib/libcuda.so.1"),
            "/proc/1234/root/usr/lib/libcuda.so.1");
}

}  // namespace
}  // namespace stallwatch::trace

namespace stallwatch::trace {
namespace {

// The same over a procfs fixture tree (`run --path.procfs`): what discovery reads of a process.
TEST(ProcMapsFixture, LibrariesAndPidsUnderAProcfsRoot) {
  const host::Procfs fs(std::string(FIXTURES_DIR) + "/procfs", std::string(FIXTURES_DIR) + "/sysfs");
  auto libs = cuda_libraries_of(fs, 4242);
  ASSERT_EQ(libs.size(), 2u) << "the deleted libnccl copy is replaced on disk: not attached";
  EXPECT_EQ(libs[0].path, "/usr/local/cuda/lib64/libcudart.so.12.4.127");
  EXPECT_EQ(libs[0].api, Api::kRuntime);
  EXPECT_EQ(libs[1].path, "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
  EXPECT_EQ(libs[1].api, Api::kDriver);
  EXPECT_TRUE(cuda_libraries_of(fs, 77).empty()) << "no maps file";
  auto pids = list_pids(fs);
  std::sort(pids.begin(), pids.end());
  EXPECT_EQ(pids, (std::vector<int>{77, 4242}));
  EXPECT_EQ(host_path(fs, 4242, "/usr/lib/libcuda.so.1"),
            std::string(FIXTURES_DIR) + "/procfs/4242/root/usr/lib/libcuda.so.1");
}

}  // namespace
}  // namespace stallwatch::trace
