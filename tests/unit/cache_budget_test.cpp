// The caches that traced processes feed have byte budgets (issue 35, row 8): the symbolizer's
// function symbols per file and the Python resolver's names and line tables per code object.
// Past the budget the least recently used entries go (and are read again when asked), one entry
// bigger than the whole budget is answered but not kept, and both are counted.
// The symbolizer reads this process's own libraries; the resolver reads code objects forged in
// this process's memory (through /proc/self/mem, as it reads a traced interpreter's).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "host/procfs.h"
#include "trace/python.h"
#include "trace/symbolizer.h"

namespace stallwatch::trace {
namespace {

// The address of a function of a shared library this process has loaded, and its file.
struct Loaded {
  std::uint64_t addr = 0;
  std::string file;
};
Loaded loaded(const char* symbol) {
  Loaded l;
  void* p = dlsym(RTLD_DEFAULT, symbol);
  Dl_info info{};
  if (p != nullptr && dladdr(p, &info) != 0 && info.dli_fname != nullptr) {
    l.addr = reinterpret_cast<std::uint64_t>(p);
    l.file = info.dli_fname;
  }
  return l;
}

TEST(SymbolizerBudget, LeastRecentlyUsedFilesGoPastTheBudget) {
  const Loaded libc = loaded("puts");
  const Loaded cxx = loaded("_ZSt9terminatev");  // std::terminate(), in libstdc++
  ASSERT_FALSE(libc.file.empty());
  ASSERT_FALSE(cxx.file.empty());
  ASSERT_NE(libc.file, cxx.file);
  host::Procfs fs;
  const int pid = getpid();
  const auto name_of = [&](Symbolizer& s, const Loaded& l) {
    auto frames = s.symbolize(pid, {l.addr + 1});  // a return address: looked up at addr
    EXPECT_EQ(frames.size(), 1u);
    EXPECT_NE(frames[0].module, "[unknown]");
    return frames[0].function;
  };

  // What each file costs, with room for both (names as the file has them: puts or an alias).
  Symbolizer roomy(fs, ~std::uint64_t{0});
  const std::string puts_name = name_of(roomy, libc);
  EXPECT_NE(puts_name.find("puts"), std::string::npos) << puts_name;
  const std::uint64_t libc_bytes = roomy.cached_bytes();
  const std::string terminate_name = name_of(roomy, cxx);
  EXPECT_EQ(terminate_name, "std::terminate()");
  const std::uint64_t cxx_bytes = roomy.cached_bytes() - libc_bytes;
  ASSERT_GT(libc_bytes, 0u);
  ASSERT_GT(cxx_bytes, 0u);
  EXPECT_EQ(roomy.evicted_files(), 0u);

  // Room for the larger of the two, not both: each asks the other out.
  const std::uint64_t budget = std::max(libc_bytes, cxx_bytes) + 1024;
  Symbolizer tight(fs, ~std::uint64_t{0}, budget);
  EXPECT_EQ(name_of(tight, libc), puts_name);
  EXPECT_EQ(name_of(tight, cxx), terminate_name);
  EXPECT_LE(tight.cached_bytes(), budget);
  EXPECT_EQ(tight.evicted_files(), 1u);
  EXPECT_EQ(name_of(tight, libc), puts_name) << "an evicted file is read again when asked";
  EXPECT_EQ(tight.evicted_files(), 2u);
  EXPECT_LE(tight.cached_bytes(), budget);
  EXPECT_EQ(tight.refused_files(), 0u);

  // A file whose symbols alone exceed the budget is not kept: its frames stay unnamed.
  Symbolizer tiny(fs, ~std::uint64_t{0}, std::min(libc_bytes, cxx_bytes) / 2);
  EXPECT_EQ(name_of(tiny, libc), "");
  EXPECT_EQ(name_of(tiny, libc), "");  // remembered as refused, not read again
  EXPECT_EQ(tiny.refused_files(), 1u);
  EXPECT_EQ(tiny.cached_bytes(), 0u);
  std::printf("symbol bytes kept: libc %llu, libstdc++ %llu\n",
              static_cast<unsigned long long>(libc_bytes), static_cast<unsigned long long>(cxx_bytes));
}

TEST(SymbolizerBudget, DefaultIsDocumented) {
  EXPECT_EQ(Symbolizer::kSymbolBudget, 64ull << 20);
  EXPECT_EQ(PyResolver::kCodeBudget, 16ull << 20);
}

// CPython 3.12 objects as the resolver reads them (python.cpp layout_312: co_qualname at 128,
// co_filename at 112, co_linetable at 136, co_firstlineno at 68; PyASCIIObject is 40 bytes;
// a PyBytesObject's size at 16 and its bytes at 32).
class ForgedCode {
 public:
  ForgedCode(const std::string& name, const std::string& file, size_t linetable_bytes)
      : name_(ascii(name)), file_(ascii(file)), table_(32 + linetable_bytes, '\0'), code_(256, 0) {
    const std::uint64_t n = linetable_bytes;
    std::memcpy(table_.data() + 16, &n, 8);
    // 3.11+ location table: entries "one line, no column" (code 13, line delta 0), 2 bytes each.
    for (size_t i = 0; i + 1 < linetable_bytes; i += 2) {
      table_[32 + i] = static_cast<char>(0x80 | (13 << 3));
      table_[32 + i + 1] = 0;
    }
    put(128, name_.data());
    put(112, file_.data());
    put(136, table_.data());
    const std::int32_t first = 7;
    std::memcpy(code_.data() + 68, &first, 4);
  }
  std::uint64_t address() const { return reinterpret_cast<std::uint64_t>(code_.data()); }

 private:
  static std::string ascii(const std::string& s) {
    std::string o(40 + s.size() + 1, '\0');
    const std::uint64_t length = s.size();
    std::memcpy(o.data() + 16, &length, 8);
    const std::uint32_t state = (1u << 2) | (1u << 5) | (1u << 6);  // kind 1, compact, ascii
    std::memcpy(o.data() + 32, &state, 4);
    std::memcpy(o.data() + 40, s.data(), s.size());
    return o;
  }
  void put(size_t offset, const char* p) {
    const auto v = reinterpret_cast<std::uint64_t>(p);
    std::memcpy(code_.data() + offset, &v, 8);
  }
  std::string name_, file_, table_, code_;
};

PythonRegistry::Found this_process() {
  PythonRegistry::Found f;
  f.process.pid = getpid();
  f.process.layout = *builtin_layout(3, 12);
  f.serial = 1;
  return f;
}

TEST(PyResolverBudget, LineTablesAreKeptUnderTheBudget) {
  host::Procfs fs;
  const auto p = this_process();
  constexpr std::uint64_t kBudget = 64 << 10;
  PyResolver resolver(fs, kBudget);
  std::vector<std::unique_ptr<ForgedCode>> codes;
  for (int i = 0; i < 8; ++i) {
    codes.push_back(std::make_unique<ForgedCode>("fn" + std::to_string(i), "/app/train.py", 20000));
    auto f = resolver.resolve(p, codes.back()->address(), 0);
    ASSERT_TRUE(f) << i;
    EXPECT_EQ(f->function, "fn" + std::to_string(i));
    EXPECT_EQ(f->file, "/app/train.py");
    EXPECT_EQ(f->line, 7);
    EXPECT_LE(resolver.cached_bytes(), kBudget);
  }
  EXPECT_LE(resolver.cached_codes(), 3u);
  EXPECT_GE(resolver.evicted(), 5u);
  // The least recently used went first: the latest is still cached, the first is read again.
  const auto evicted = resolver.evicted();
  EXPECT_EQ(resolver.resolve(p, codes.back()->address(), 0)->function, "fn7");
  EXPECT_EQ(resolver.evicted(), evicted);
  EXPECT_EQ(resolver.resolve(p, codes.front()->address(), 0)->function, "fn0");
  EXPECT_EQ(resolver.evicted(), evicted + 1);

  // A line table bigger than the whole budget: answered, not kept.
  ForgedCode huge("huge", "/app/gen.py", 200000);
  auto f = resolver.resolve(p, huge.address(), 0);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->function, "huge");
  EXPECT_EQ(resolver.refused(), 1u);
  EXPECT_LE(resolver.cached_bytes(), kBudget);

  // Past kMaxLineTable the table is not read at all: the name still is.
  ForgedCode over("over", "/app/gen.py", PyResolver::kMaxLineTable + 2);
  auto g = resolver.resolve(p, over.address(), 0);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->function, "over");
  EXPECT_EQ(g->line, 0);
}

}  // namespace
}  // namespace stallwatch::trace
