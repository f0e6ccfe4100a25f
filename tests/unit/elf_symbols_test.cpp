// Tests for trace/elf_symbols: offsets checked against the loader itself (the bytes at each
// file offset must be the bytes dlopen maps at the dlsym'd address), default symbol versions,
// and refusal of missing, foreign, truncated and corrupted files without crashing; and the
// hostile files of issue 35 built for real (sparse files whose headers claim 2^34 sections or a
// 200 MiB symbol table inside a hole): an error naming the file, and no memory spent on them.
// Needs MOCK_CUDART_PATH: the built tests/mock/mock_cudart.c (libcudart.so.12).
#include "trace/elf_symbols.h"

#include "support/hostile_elf.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#ifndef MOCK_CUDART_PATH
#error "define MOCK_CUDART_PATH as the path of the built mock libcudart.so.12"
#endif

namespace stallwatch::trace {
namespace {

const char* const kRuntimeSymbols[] = {
    "cudaMalloc",
    "cudaFree",
    "cudaMallocManaged",
    "cudaMallocAsync",
    "cudaMallocAsync_ptsz",
    "cudaFreeAsync",
    "cudaFreeAsync_ptsz",
    "cudaLaunchKernel",
    "cudaLaunchKernel_ptsz",
    "cudaMemcpy",
    "cudaMemcpy_ptds",
    "cudaMemcpyAsync",
    "cudaMemcpyAsync_ptsz",
    "cudaMemset",
    "cudaMemset_ptds",
    "cudaStreamSynchronize",
    "cudaStreamSynchronize_ptsz",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaGraphLaunch",
    "cudaGraphLaunch_ptsz",
};

// A concurrently running privileged test may have a uprobe on the same file, which patches the
// first instruction in memory (1 byte on x86, 4 on arm64); code is compared after that.
constexpr std::size_t kPatchedPrefix = 4;

std::vector<char> read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::map<std::string, ElfSymbol> by_name(const std::vector<ElfSymbol>& symbols) {
  std::map<std::string, ElfSymbol> m;
  for (const auto& s : symbols) m.emplace(s.name, s);
  return m;
}

// Asserts that the file bytes at sym.file_offset are the code dlopen mapped at `loaded`.
void expect_same_code(const std::vector<char>& file, const ElfSymbol& sym, const void* loaded) {
  std::size_t n = sym.size != 0 ? std::min<std::size_t>(sym.size, 64) : 16;
  ASSERT_GT(n, kPatchedPrefix) << sym.name;
  ASSERT_LE(sym.file_offset + n, file.size()) << sym.name;
  const auto* mem = static_cast<const unsigned char*>(loaded);
  EXPECT_EQ(0, std::memcmp(file.data() + sym.file_offset + kPatchedPrefix, mem + kPatchedPrefix,
                           n - kPatchedPrefix))
      << sym.name << " at file offset 0x" << std::hex << sym.file_offset;
}

class TempFile {
 public:
  explicit TempFile(const std::string& name)
      : path_(::testing::TempDir() + "elf_symbols_test_" + std::to_string(getpid()) + "_" + name) {}
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }
  void write(const char* data, std::size_t n) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(data, static_cast<std::streamsize>(n));
  }

 private:
  std::string path_;
};

TEST(ElfSymbolsTest, MockCudartExportsEveryRuntimeSymbolAtDistinctOffsets) {
  auto symbols = read_function_symbols(MOCK_CUDART_PATH);
  ASSERT_TRUE(symbols.ok()) << symbols.error().message;
  auto m = by_name(*symbols);
  std::set<std::uint64_t> offsets;
  for (const char* name : kRuntimeSymbols) {
    auto it = m.find(name);
    ASSERT_NE(it, m.end()) << name << " missing";
    EXPECT_NE(it->second.file_offset, 0u) << name;
    EXPECT_GT(it->second.size, 0u) << name;
    EXPECT_TRUE(offsets.insert(it->second.file_offset).second) << name << " shares an offset";
  }
  EXPECT_TRUE(std::is_sorted(symbols->begin(), symbols->end(),
                             [](const auto& a, const auto& b) { return a.name < b.name; }));
}

TEST(ElfSymbolsTest, FileBytesAtOffsetAreTheCodeDlsymFinds) {
  auto symbols = read_function_symbols(MOCK_CUDART_PATH);
  ASSERT_TRUE(symbols.ok()) << symbols.error().message;
  auto m = by_name(*symbols);
  auto file = read_whole(MOCK_CUDART_PATH);
  void* handle = dlopen(MOCK_CUDART_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  for (const char* name : kRuntimeSymbols) {
    void* loaded = dlsym(handle, name);
    ASSERT_NE(loaded, nullptr) << name;
    ASSERT_TRUE(m.count(name)) << name;
    expect_same_code(file, m.at(name), loaded);
#if defined(__x86_64__)
    // x86 uprobes refuse lock-prefixed instructions; the mock must stay probe-able.
    EXPECT_NE(static_cast<unsigned char>(file[m.at(name).file_offset]), 0xF0) << name;
#endif
  }
  dlclose(handle);
}

TEST(ElfSymbolsTest, VersionedNamesAreBareAndResolveToTheDefaultVersion) {
  // glibc exports several versions of some names (e.g. realpath, pthread_cond_wait on x86_64);
  // dlsym binds the default one, and so must we.
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (libc == nullptr) GTEST_SKIP() << "libc.so.6 is not loaded: " << dlerror();
  void* puts_addr = dlsym(libc, "puts");
  Dl_info info{};
  ASSERT_NE(puts_addr, nullptr);
  ASSERT_NE(dladdr(puts_addr, &info), 0);
  std::string path = info.dli_fname;

  auto symbols = read_function_symbols(path);
  ASSERT_TRUE(symbols.ok()) << symbols.error().message;
  for (const auto& s : *symbols) ASSERT_EQ(s.name.find('@'), std::string::npos) << s.name;
  auto m = by_name(*symbols);
  auto file = read_whole(path);
  for (const char* name : {"puts", "realpath", "pthread_cond_wait", "fopen"}) {
    void* loaded = dlsym(libc, name);
    ASSERT_NE(loaded, nullptr) << name;
    Dl_info where{};
    ASSERT_NE(dladdr(loaded, &where), 0);
    if (path != where.dli_fname) continue;  // defined in another object on this system
    ASSERT_TRUE(m.count(name)) << name;
    expect_same_code(file, m.at(name), loaded);
  }
  dlclose(libc);
}

TEST(ElfSymbolsTest, MissingFileIsAnErrorNamingThePath) {
  const std::string path = "/nonexistent/stallwatch/libcudart.so.12";
  auto r = read_function_symbols(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find(path), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().err, ENOENT);
}

TEST(ElfSymbolsTest, NonElfFilesAreErrors) {
  TempFile text("text");
  const char kText[] = "this is not an ELF file, just some text that is long enough\n";
  text.write(kText, sizeof(kText) - 1);
  auto r = read_function_symbols(text.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find(text.path()), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("not an ELF"), std::string::npos) << r.error().message;

  TempFile empty("empty");
  empty.write("", 0);
  EXPECT_FALSE(read_function_symbols(empty.path()).ok());
  EXPECT_FALSE(read_function_symbols(::testing::TempDir()).ok());  // a directory
}

TEST(ElfSymbolsTest, ThirtyTwoBitAndBigEndianAreRefused) {
  auto lib = read_whole(MOCK_CUDART_PATH);
  ASSERT_GT(lib.size(), 64u);
  TempFile f("class");
  auto elf32 = lib;
  elf32[EI_CLASS] = ELFCLASS32;
  f.write(elf32.data(), elf32.size());
  auto r = read_function_symbols(f.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("32-bit"), std::string::npos) << r.error().message;

  auto big = lib;
  big[EI_DATA] = ELFDATA2MSB;
  f.write(big.data(), big.size());
  r = read_function_symbols(f.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("big-endian"), std::string::npos) << r.error().message;
}

TEST(ElfSymbolsTest, TruncatedLibraryIsAnError) {
  auto lib = read_whole(MOCK_CUDART_PATH);
  ASSERT_GT(lib.size(), 100u);
  TempFile f("trunc100");
  f.write(lib.data(), 100);
  auto r = read_function_symbols(f.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find(f.path()), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("truncated"), std::string::npos) << r.error().message;

  // Every shorter length: the section headers sit at the end, so all must be refused.
  for (std::size_t n = 0; n < lib.size(); n += (n < 1024 ? 1 : 61)) {
    f.write(lib.data(), n);
    EXPECT_FALSE(read_function_symbols(f.path()).ok()) << "length " << n;
  }
}

TEST(ElfSymbolsTest, CorruptedHeadersNeverCrash) {
  auto lib = read_whole(MOCK_CUDART_PATH);
  ASSERT_GT(lib.size(), 4096u);
  TempFile f("corrupt");
  std::mt19937_64 rng(20240611);
  for (int round = 0; round < 2000; ++round) {
    auto bytes = lib;
    int flips = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < flips; ++i) {
      std::size_t pos = 0;
      switch (rng() % 3) {
        case 0:  // ELF header
          pos = rng() % sizeof(Elf64_Ehdr);
          break;
        case 1:  // the tail, where section headers and string tables live
          pos = bytes.size() - 1 - rng() % 2048;
          break;
        default:
          pos = rng() % bytes.size();
      }
      bytes[pos] = (rng() % 2 != 0) ? static_cast<char>(rng()) : static_cast<char>(0xff);
    }
    f.write(bytes.data(), bytes.size());
    auto r = read_function_symbols(f.path());  // either answer is fine; a crash is not
    if (!r.ok()) {
      EXPECT_FALSE(r.error().message.empty());
    }
  }
}

// ---- Hostile files (issue 35, rows 2 and 3) ----

// Writes `image` and extends the file to `apparent` bytes without storing them (a hole)
// (support/hostile_elf.h), and checks the file system really left the hole unstored.
void write_hole(const std::string& path, const std::string& image, off_t apparent) {
  ASSERT_TRUE(test::write_sparse(path, image, apparent)) << path << ": " << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  ASSERT_EQ(st.st_size, apparent);
  ASSERT_LE(st.st_blocks * 512, 64 * 1024) << "the file system stored the hole";
}

using test::hostile_image;
using test::put_section;

// What a parse did in a child process: whether it returned (an exception or abort there kills
// only the child), its error, and how much its peak RSS grew (ru_maxrss, KiB).
struct ChildRun {
  bool returned = false;
  bool ok = false;
  std::string message;
  long rss_growth_kib = -1;
};

ChildRun run_in_child(const std::function<Result<std::vector<ElfSymbol>>()>& parse) {
  int pipefd[2];
  EXPECT_EQ(::pipe2(pipefd, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipefd[0]);
    struct rusage before {}, after {};
    ::getrusage(RUSAGE_SELF, &before);
    auto r = parse();
    ::getrusage(RUSAGE_SELF, &after);
    std::string out = std::to_string(after.ru_maxrss - before.ru_maxrss) + " " +
                      (r.ok() ? "ok" : "error " + r.error().message);
    (void)!::write(pipefd[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(pipefd[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) text.append(buf, n);
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ChildRun run;
  run.returned = WIFEXITED(status) && WEXITSTATUS(status) == 0 && !text.empty();
  if (!run.returned) {
    run.message = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                      : "exit status " + std::to_string(WEXITSTATUS(status));
    return run;
  }
  const auto space = text.find(' ');
  run.rss_growth_kib = std::stol(text.substr(0, space));
  run.ok = text.compare(space + 1, 2, "ok") == 0;
  if (!run.ok) run.message = text.substr(space + 7);
  return run;
}

constexpr long kMaxRssGrowthKib = 4 * 1024;  // a few MiB: nothing sized by the header

// Row 2: 4 KiB on disk, a terabyte apparent, e_shnum 0 and section 0's sh_size 2^34 (extended
// numbering). The old reader reserved 2^34 x 64 bytes: std::bad_alloc, abort.
TEST(ElfSymbolsHostileTest, SparseFileClaiming2To34SectionsIsRefusedWithoutAllocating) {
  const std::string image = test::image_claiming_2to34_sections();
  TempFile f("libcudart.so.12");
  write_hole(f.path(), image, (1ll << 40) + 8192);
  for (bool by_fd : {false, true}) {
    ChildRun run = run_in_child([&]() -> Result<std::vector<ElfSymbol>> {
      if (!by_fd) return read_function_symbols(f.path());
      int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
      auto r = read_function_symbols(fd, f.path());
      ::close(fd);
      return r;
    });
    ASSERT_TRUE(run.returned) << "the parse crashed the process: " << run.message;
    ASSERT_FALSE(run.ok);
    EXPECT_NE(run.message.find(f.path()), std::string::npos) << run.message;
    EXPECT_NE(run.message.find("17179869184 section headers"), std::string::npos) << run.message;
    EXPECT_LT(run.rss_growth_kib, kMaxRssGrowthKib);
  }
  auto addresses = read_symbol_addresses(f.path(), {"_PyRuntime"});
  ASSERT_FALSE(addresses.ok());
  EXPECT_NE(addresses.error().message.find("section headers"), std::string::npos);
}

// Row 3: a .symtab claiming 200 MiB (and, within the budget, 48 MiB) that lies in a hole. The
// old reader allocated and zero-filled it whole: peak RSS +200 MB for a 4 KiB file.
TEST(ElfSymbolsHostileTest, SymbolTableInAHoleIsRefusedWithoutAllocating) {
  for (std::uint64_t claimed : {200ull << 20, 48ull << 20}) {
    const std::string image = test::image_with_symtab_at_1gib(claimed);
    TempFile f("symtab_hole");
    write_hole(f.path(), image, 2ll << 30);
    ChildRun run = run_in_child([&] { return read_function_symbols(f.path()); });
    ASSERT_TRUE(run.returned) << "the parse crashed the process: " << run.message;
    ASSERT_FALSE(run.ok) << claimed << " bytes of zeros were parsed as a symbol table";
    EXPECT_NE(run.message.find(f.path()), std::string::npos) << run.message;
    EXPECT_NE(run.message.find(claimed > kElfTableBudget ? "over the budget" : "hole"),
              std::string::npos)
        << run.message;
    EXPECT_LT(run.rss_growth_kib, kMaxRssGrowthKib) << run.message;
    auto addresses = read_symbol_addresses(f.path(), {"_PyRuntime"});
    EXPECT_FALSE(addresses.ok());
  }
}

// Program headers counted through PN_XNUM (section 0's sh_info, 32 bits) are capped too.
TEST(ElfSymbolsHostileTest, ExtendedProgramHeaderCountIsCapped) {
  std::string image = hostile_image(1);
  Elf64_Ehdr eh;
  std::memcpy(&eh, image.data(), sizeof eh);
  eh.e_phnum = PN_XNUM;
  std::memcpy(image.data(), &eh, sizeof eh);
  Elf64_Shdr zero{};
  zero.sh_info = 0xffffffffu;
  put_section(image, 0, zero);
  auto r = read_function_symbols_in_memory(image);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("4294967295 program headers"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace stallwatch::trace
