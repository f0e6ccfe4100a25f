// Tests for open_mapped_file (trace/proc_maps.h) and discovery's memory of failed files, over a
// procfs tree built here (issue 35, row 4 and the "remembered by dev/inode" point of row 2):
// a traced process's root with a library path planted as a symlink to a host file is never
// followed out of that root; a path that now names another file than the mapping is refused;
// the real file is opened; and a hostile library is parsed and logged once, not at every scan,
// until it changes. No root needed: /proc/PID/map_files is absent in the tree, so the openat2
// path is the one taken (the real /proc is used for the map_files path at the end).
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "host/procfs.h"
#include "trace/discovery.h"
#include "trace/proc_maps.h"

namespace stallwatch::trace {
namespace {

namespace fs = std::filesystem;

// A procfs root with one process (4242) whose root directory is `root()`.
class FakeProc {
 public:
  FakeProc() {
    char tmpl[] = "/tmp/sw-mapped-file-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    fs::create_directories(root() + "/usr/lib");
    fs::create_directories(dir_ + "/host");
  }
  ~FakeProc() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string root() const { return dir_ + "/proc/4242/root"; }
  std::string host_dir() const { return dir_ + "/host"; }
  host::Procfs procfs() const { return host::Procfs(dir_ + "/proc", "/sys"); }
  // The maps line of a mapping of `path` (as the process names it) with this device/inode.
  static MapsEntry mapping(const std::string& path, const struct stat& st) {
    MapsEntry m;
    m.start = 0x7f0000000000;
    m.end = 0x7f0000001000;
    m.perms = "r-xp";
    m.dev_major = major(st.st_dev);
    m.dev_minor = minor(st.st_dev);
    m.inode = st.st_ino;
    m.path = path;
    return m;
  }
  void write_maps(const MapsEntry& m) const {
    std::ofstream out(dir_ + "/proc/4242/maps");
    char line[512];
    std::snprintf(line, sizeof line, "%lx-%lx %s 00000000 %x:%x %lu %s\n",
                  static_cast<unsigned long>(m.start), static_cast<unsigned long>(m.end),
                  m.perms.c_str(), m.dev_major, m.dev_minor, static_cast<unsigned long>(m.inode),
                  m.path.c_str());
    out << line;
  }

 private:
  std::string dir_;
};

struct stat stat_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st;
}

std::string read_fd(int fd) {
  char buf[256];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

TEST(OpenMappedFile, OpensTheFileTheMappingHolds) {
  FakeProc proc;
  const std::string lib = proc.root() + "/usr/lib/libcudart.so.12";
  std::ofstream(lib) << "the container's own library";
  auto fd = open_mapped_file(proc.procfs(), 4242,
                             FakeProc::mapping("/usr/lib/libcudart.so.12", stat_of(lib)));
  ASSERT_TRUE(fd) << fd.error().message;
  EXPECT_EQ(read_fd(fd->get()), "the container's own library");
}

// The audit's finding: /proc/PID/root/<path> follows the process's absolute symlink against
// the host's root. Even with the host file's own device and inode in the maps line (the worst
// case), open_mapped_file resolves the link inside the process's root and finds nothing there.
TEST(OpenMappedFile, SymlinkPlantedToAHostFileIsNotFollowedOutOfTheRoot) {
  FakeProc proc;
  const std::string secret = proc.host_dir() + "/shadow";
  std::ofstream(secret) << "root:SECRET-HASH:19000::::::";
  const std::string planted = proc.root() + "/usr/lib/libcudart.so.12";
  ASSERT_EQ(::symlink(secret.c_str(), planted.c_str()), 0);
  const MapsEntry m = FakeProc::mapping("/usr/lib/libcudart.so.12", stat_of(secret));

  // What the old code did: the naive path reaches the host file.
  const int naive = ::open(host_path(proc.procfs(), 4242, m.path).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(naive, 0) << "the attack setup does not reproduce";
  EXPECT_NE(read_fd(naive).find("SECRET"), std::string::npos);
  ::close(naive);

  auto fd = open_mapped_file(proc.procfs(), 4242, m);
  ASSERT_FALSE(fd) << "the planted symlink was followed to " << secret;
  EXPECT_EQ(fd.error().err, ENOENT) << fd.error().message;
  EXPECT_NE(fd.error().message.find("/usr/lib/libcudart.so.12"), std::string::npos);

  // A relative link climbing out of the root stops at the root, too.
  const std::string climbing = proc.root() + "/usr/lib/libcuda.so.1";
  const std::string up = "../../../../../../../../../.." + secret;
  ASSERT_EQ(::symlink(up.c_str(), climbing.c_str()), 0);
  auto fd2 = open_mapped_file(proc.procfs(), 4242,
                              FakeProc::mapping("/usr/lib/libcuda.so.1", stat_of(secret)));
  EXPECT_FALSE(fd2) << "the relative symlink climbed out of the root";
}

// A path that resolves inside the root but to another file than the mapping (swapped since
// the maps were read, or a symlink to a different library) is refused by device and inode.
TEST(OpenMappedFile, AnotherFileThanTheMappingIsRefused) {
  FakeProc proc;
  const std::string real = proc.root() + "/usr/lib/libcudart.so.12.4";
  const std::string other = proc.root() + "/usr/lib/other.so";
  std::ofstream(real) << "mapped";
  std::ofstream(other) << "not mapped";
  const MapsEntry m = FakeProc::mapping("/usr/lib/libcudart.so.12", stat_of(real));
  ASSERT_EQ(::symlink("other.so", (proc.root() + "/usr/lib/libcudart.so.12").c_str()), 0);
  auto fd = open_mapped_file(proc.procfs(), 4242, m);
  ASSERT_FALSE(fd);
  EXPECT_EQ(fd.error().err, EXDEV);
  EXPECT_NE(fd.error().message.find("is not the file pid 4242 maps"), std::string::npos)
      << fd.error().message;

  // A directory or FIFO under the name is refused before anything reads it.
  ::unlink((proc.root() + "/usr/lib/libcudart.so.12").c_str());
  ASSERT_EQ(::mkfifo((proc.root() + "/usr/lib/libcudart.so.12").c_str(), 0600), 0);
  auto fifo = open_mapped_file(proc.procfs(), 4242, m);
  ASSERT_FALSE(fifo);
  EXPECT_EQ(fifo.error().err, EINVAL) << fifo.error().message;
}

// The real /proc: this process's own mapping of its executable (map_files/ as root, openat2
// otherwise), and the same file by device and inode.
TEST(OpenMappedFile, OwnMappingThroughTheRealProc) {
  const std::string maps = host::Procfs::read_bounded("/proc/self/maps", 1 << 20);
  std::istringstream in(maps);
  std::string line;
  MapsEntry exe;
  while (std::getline(in, line)) {
    MapsEntry e;
    if (parse_maps_line(line, e) && e.inode != 0 && !e.path.empty() && e.path[0] == '/') {
      exe = e;
      break;
    }
  }
  ASSERT_NE(exe.inode, 0u) << maps;
  auto fd = open_mapped_file(host::Procfs(), ::getpid(), exe);
  ASSERT_TRUE(fd) << fd.error().message;
  struct stat st {};
  ASSERT_EQ(::fstat(fd->get(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_ino), exe.inode);
}

// Writes a sparse ELF whose header claims 2^34 sections (issue 35, row 2).
void write_hostile_library(const std::string& path) {
  std::string image(4096, '\0');
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_type = ET_DYN;
  eh.e_phoff = 64;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = 1;
  eh.e_shoff = 128;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = 0;
  std::memcpy(image.data(), &eh, sizeof eh);
  Elf64_Shdr zero{};
  zero.sh_size = 1ull << 34;
  std::memcpy(image.data() + 128, &zero, sizeof zero);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, image.data(), image.size()), 4096);
  ASSERT_EQ(::ftruncate(fd, (1ll << 40) + 8192), 0);
  ::close(fd);
}

// Standard error of `f`, captured through a file.
template <typename F>
std::string stderr_of(F&& f) {
  std::fflush(stderr);
  char tmpl[] = "/tmp/sw-mapped-file-log-XXXXXX";
  const int log = ::mkstemp(tmpl);
  const int saved = ::dup(2);
  ::dup2(log, 2);
  f();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::string text(1 << 16, '\0');
  const ssize_t n = ::pread(log, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  ::close(log);
  ::unlink(tmpl);
  return text;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// At start and at every rescan the daemon meets the same hostile file: parsed and logged once;
// read again only once it changed.
TEST(DiscoveryFailedFiles, AHostileLibraryIsParsedAndLoggedOncePerVersion) {
  FakeProc proc;
  const std::string lib = proc.root() + "/usr/lib/libcudart.so.12";
  write_hostile_library(lib);
  proc.write_maps(FakeProc::mapping("/usr/lib/libcudart.so.12", stat_of(lib)));
  const host::Procfs procfs = proc.procfs();
  Discovery discovery(CallPrograms{}, DiscoveryOptions{}, procfs);
  const std::string first = stderr_of([&] {
    for (int scan = 0; scan < 5; ++scan) EXPECT_EQ(discovery.scan_all(), 0u);
  });
  EXPECT_EQ(count(first, "not tracing"), 1u) << first;
  EXPECT_EQ(count(first, "17179869184 section headers"), 1u) << first;

  // Rewritten in place (same inode, another mtime): read again, once.
  struct timespec times[2] = {{0, UTIME_OMIT}, {1'000'000'000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, lib.c_str(), times, 0), 0);
  const std::string second = stderr_of([&] {
    for (int scan = 0; scan < 3; ++scan) discovery.scan_all();
  });
  EXPECT_EQ(count(second, "not tracing"), 1u) << second;
}

// A planted path that is another file than the mapping: refused and said once, not per scan.
TEST(DiscoveryFailedFiles, ARefusedPathIsLoggedOnce) {
  FakeProc proc;
  const std::string real = proc.root() + "/usr/lib/real.so";
  std::ofstream(real) << "mapped";
  std::ofstream(proc.root() + "/usr/lib/other.so") << "planted";
  ASSERT_EQ(::symlink("other.so", (proc.root() + "/usr/lib/libcudart.so.12").c_str()), 0);
  proc.write_maps(FakeProc::mapping("/usr/lib/libcudart.so.12", stat_of(real)));
  const host::Procfs procfs = proc.procfs();
  Discovery discovery(CallPrograms{}, DiscoveryOptions{}, procfs);
  const std::string log = stderr_of([&] {
    for (int scan = 0; scan < 4; ++scan) discovery.scan_all();
  });
  EXPECT_EQ(count(log, "not tracing"), 1u) << log;
  EXPECT_EQ(count(log, "is not the file pid 4242 maps"), 1u) << log;
}

}  // namespace
}  // namespace stallwatch::trace
