// Unit tier, issue #17: call sites as explain, the store and the flame graph show them.
#include <gtest/gtest.h>

#include "chains/sites.h"
#include <unistd.h>

#include "host/procfs.h"
#include "trace/elf_symbols.h"
#include "trace/symbolizer.h"

namespace stallwatch::chains {
namespace {

SiteFrame py(std::string fn, int line) {
  SiteFrame f;
  f.python = true;
  f.function = std::move(fn);
  f.file = "/app/train.py";
  f.line = line;
  return f;
}

SiteFrame native(std::string fn, std::string module, std::uint64_t offset) {
  SiteFrame f;
  f.function = std::move(fn);
  f.module = std::move(module);
  f.offset = offset;
  return f;
}

CallSite site(std::string call, std::uint64_t ns, std::vector<SiteFrame> frames) {
  CallSite s;
  s.call = std::move(call);
  s.count = 1;
  s.stalled_ns = ns;
  s.frames = std::move(frames);
  return s;
}

TEST(Sites, TextShowsPythonFramesInnermostFirstElseNamedNativeOnes) {
  CallSite s = site("cudaStreamSynchronize", 1,
                    {py("settle", 87), py("epoch", 120), py("main", 200), py("<module>", 210),
                     native("", "libffi.so.8", 0x6f7a), native("_PyEval_EvalFrameDefault", "libpython3.12.so", 0x40)});
  EXPECT_EQ(s.text(), "settle() at /app/train.py:87  <- epoch() at /app/train.py:120  <- "
                      "main() at /app/train.py:200");
  EXPECT_EQ(s.folded(),
            "<module>() at /app/train.py:210;main() at /app/train.py:200;epoch() at "
            "/app/train.py:120;settle() at /app/train.py:87;_PyEval_EvalFrameDefault;"
            "libffi.so.8+0x6f7a;cudaStreamSynchronize");
  // Library frames inside the user's line are not what the line shows.
  CallSite torch = site("cudaDeviceSynchronize", 1, {py("synchronize", 1162), py("settle", 13), py("step", 21)});
  torch.frames[0].file = "/opt/venv/lib/python3.12/site-packages/torch/cuda/__init__.py";
  EXPECT_EQ(torch.user_frame()->function, "settle");
  EXPECT_EQ(torch.text(), "settle() at /app/train.py:13  <- step() at /app/train.py:21");
  EXPECT_TRUE(library_file("/usr/lib/python3.12/threading.py"));
  EXPECT_TRUE(library_file("/usr/local/lib/python3.10/dist-packages/x.py"));
  EXPECT_TRUE(library_file("<frozen runpy>"));
  EXPECT_FALSE(library_file("/app/lib/python3.12x/train.py"));
  EXPECT_FALSE(library_file("/home/me/train.py"));
  CallSite c = site("cudaMemcpy", 1,
                    {native("", "app", 0x1234), native("load_batch", "app", 0x10),
                     native("std::vector<int>::push_back(int const&)", "app", 3)});
  EXPECT_EQ(c.text(), "app+0x1234  <- load_batch() in app  <- std::vector<int>::push_back(int const&) in app");
  CallSite none = site("cudaMalloc", 1, {});
  EXPECT_EQ(none.text(), "(no frames)");
  // A ';' or newline in a hostile name cannot split a folded line or a frame.
  CallSite evil = site("cudaFree", 1, {native("a;b\nc", "m", 1)});
  EXPECT_EQ(evil.folded(), "a:b c;cudaFree");
}

TEST(Sites, TopSitesRankByStalledTimePreferTheChainsCallAndMergeOffsets) {
  std::vector<ResolvedSite> all;
  auto add = [&](int pid, CallSite s) { all.push_back({pid, 7, 0, std::move(s)}); };
  add(10, site("cudaStreamSynchronize", 300, {py("settle", 87), native("f", "m", 5)}));
  add(10, site("cudaStreamSynchronize", 100, {py("settle", 87), native("f", "m", 9)}));  // same site
  add(10, site("cudaStreamSynchronize", 200, {py("step", 40)}));
  add(10, site("cudaMalloc", 5000, {py("alloc", 12)}));
  add(11, site("cudaStreamSynchronize", 9999, {py("other", 1)}));
  auto top = top_sites(all, 10, 0, "cudaStreamSynchronize");
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].frames[0].function, "settle");
  EXPECT_EQ(top[0].stalled_ns, 400u);
  EXPECT_EQ(top[0].count, 2u);
  EXPECT_DOUBLE_EQ(top[0].share, 400.0 / 600.0);
  EXPECT_EQ(top[1].frames[0].function, "step");
  // A call with no sites of its own: every call of the process.
  auto any = top_sites(all, 10, 0, "cudaMemcpy");
  ASSERT_EQ(any.size(), 3u);
  EXPECT_EQ(any[0].call, "cudaMalloc");
  EXPECT_TRUE(top_sites(all, 12, 0, "cudaMalloc").empty());
}

// Seen on an H100: one line of a training loop reached cuLaunchKernel through two C++ paths,
// and explain showed the same site line twice (66.6% and 33.4%). A Python site is its Python
// frames; native-only sites still differ by their native frames.
TEST(Sites, OnePythonLineReachedThroughTwoNativePathsIsOneSite) {
  std::vector<ResolvedSite> all;
  auto add = [&](CallSite s) { all.push_back({10, 7, 0, std::move(s)}); };
  add(site("cuLaunchKernel", 100, {py("main", 72), py("<module>", 90), native("at::conv", "libtorch_cuda.so", 4)}));
  add(site("cuLaunchKernel", 200, {py("main", 72), py("<module>", 90), native("at::relu", "libtorch_cuda.so", 8)}));
  add(site("cuLaunchKernel", 50, {py("main", 75), py("<module>", 90), native("at::relu", "libtorch_cuda.so", 8)}));
  add(site("cudaMemcpy", 30, {native("load", "app", 1)}));
  add(site("cudaMemcpy", 20, {native("store", "app", 1)}));
  auto top = top_sites(all, 10, 0, "cuLaunchKernel");
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].text(), "main() at /app/train.py:72  <- <module>() at /app/train.py:90");
  EXPECT_EQ(top[0].count, 2u);
  EXPECT_EQ(top[0].stalled_ns, 300u);
  EXPECT_DOUBLE_EQ(top[0].share, 300.0 / 350.0);
  EXPECT_EQ(top[0].frames.back().function, "at::relu");  // the heavier member's frames
  EXPECT_EQ(top[1].frames[0].line, 75);
  auto copies = top_sites(all, 10, 0, "cudaMemcpy");
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].frames[0].function, "load");
  EXPECT_EQ(copies[1].frames[0].function, "store");
}

TEST(Sites, JsonRoundTripsAndDamagedTextGivesNothing) {
  std::vector<CallSite> sites = {site("cudaStreamSynchronize", 42, {py("settle", 87), native("", "libx.so", 0x10)})};
  sites[0].share = 0.83;
  const std::string text = dump_json(sites_to_json(sites));
  EXPECT_EQ(text,
            R"([{"call":"cudaStreamSynchronize","share":0.83,"count":1,"stalled_ns":42,"frames":[)"
            R"({"kind":"python","function":"settle","file":"/app/train.py","line":87},)"
            R"({"kind":"native","function":"","module":"libx.so","offset":16}]}])");
  EXPECT_EQ(sites_from_json(text), sites);
  EXPECT_TRUE(sites_from_json("not json").empty());
  EXPECT_TRUE(sites_from_json(R"({"call":1})").empty());
  auto odd = sites_from_json(R"([{"call":5,"frames":[1,{"line":"x"}]}])");
  ASSERT_EQ(odd.size(), 1u);
  EXPECT_EQ(odd[0].call, "");
}

TEST(Sites, DemanglesCppNamesAndLeavesOthers) {
  EXPECT_EQ(trace::demangle("_ZN3foo3barEv"), "foo::bar()");
  EXPECT_EQ(trace::demangle("cudaMalloc"), "cudaMalloc");
  EXPECT_EQ(trace::demangle("_Znot-valid"), "_Znot-valid");
}

}  // namespace

// A function of this test binary to name: its address, seen as a return address into it.
extern "C" __attribute__((noinline, used)) int sites_test_marker(int x) { return x * 3 + 1; }

namespace {

// Seen on an H100: naming a loop's first sites read libtorch's symbol tables on the window
// thread for 1.9 s. A large file is read in the background: its frames are unnamed until then.
TEST(Sites, ALargeFilesSymbolsAreReadInTheBackground) {
  host::Procfs fs;
  const auto ip = reinterpret_cast<std::uint64_t>(&sites_test_marker) + 4;
  trace::Symbolizer now(fs, ~std::uint64_t{0});  // no file in the background
  auto named = now.symbolize(getpid(), {ip});
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].function, "sites_test_marker");
  EXPECT_EQ(named[0].offset, 4u);

  trace::Symbolizer later(fs, 0);  // every file in the background
  auto first = later.symbolize(getpid(), {ip});
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].function, "");
  EXPECT_EQ(first[0].module, named[0].module);
  EXPECT_GT(first[0].offset, 4u);  // into the file
  later.wait_for_loads();
  auto second = later.symbolize(getpid(), {ip});
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].function, "sites_test_marker");
  EXPECT_EQ(second[0].offset, 4u);
}

TEST(Sites, SymbolAddressesOfTheMockRuntime) {
  auto a = trace::read_symbol_addresses(MOCK_CUDART_PATH, {"cudaMalloc", "no_such_symbol"});
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_TRUE(a->vaddr.count("cudaMalloc"));
  EXPECT_FALSE(a->vaddr.count("no_such_symbol"));
  EXPECT_FALSE(trace::read_symbol_addresses("/nonexistent", {"x"}));
  EXPECT_FALSE(trace::read_symbol_addresses_in_memory("\x7f" "ELF junk", {"x"}));
}

}  // namespace
}  // namespace stallwatch::chains
