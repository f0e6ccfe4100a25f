// Call sites: where in the program the slow CUDA calls were made. The kernel gives each outlier
// its native and Python stack (trace/records.h); OutlierSink groups them per (process, call,
// stack); SiteResolver names the frames (trace/symbolizer.h, trace/python.h) once per window;
// the engine puts each chain's top sites, ranked by stalled time, on the chain.
// Plain values and pure functions, except SiteResolver (not thread-safe; the pipeline owns it).
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"

namespace stallwatch::host {
class Procfs;
}
namespace stallwatch::trace {
class PythonRegistry;
class PyResolver;
class Symbolizer;
}  // namespace stallwatch::trace

namespace stallwatch::chains {

struct OutlierWindow;

struct SiteFrame {
  bool python = false;
  std::string function;  // Python: co_qualname; native: demangled symbol, empty when stripped
  std::string file;      // Python only
  int line = 0;          // Python only; 0 when unknown
  std::string module;    // native only: the file's base name
  std::uint64_t offset = 0;  // native only: into the function, or into the file when unnamed

  auto operator<=>(const SiteFrame&) const = default;
  // "settle() at /app/train.py:87", "settle() in app", "libfoo.so+0x1a2b"
  std::string text() const;
};

struct CallSite {
  std::string call;  // the CUDA call made there
  double share = 0;  // of the stalled time of the outliers considered (0..1)
  std::uint64_t count = 0;
  std::uint64_t stalled_ns = 0;
  std::vector<SiteFrame> frames;  // innermost first: Python frames, then native ones

  bool operator==(const CallSite&) const = default;
  bool has_python() const;
  // The frame a person would change: the innermost Python frame of their own code (not of an
  // installed package, site-packages or dist-packages, nor of the standard library), else the
  // innermost Python frame, else the innermost named native one; null when none.
  const SiteFrame* user_frame() const;
  // The line explain shows: up to `depth` frames joined by "  <- " from user_frame() outwards,
  // Python ones when there are any, else the named native ones.
  std::string text(size_t depth = 3) const;
  // Folded stack for flame graphs, outermost first, ';'-separated: the Python frames, then the
  // native ones (the kernel's walk from the call reaches the C++ under Python and stops at an
  // interpreter built without frame pointers), then the call.
  std::string folded() const;
};

// An installed package's or the standard library's file: "/usr/lib/python3.12/threading.py",
// ".../site-packages/torch/cuda/__init__.py", "<frozen runpy>".
bool library_file(std::string_view file);

// A site resolved for one process in one window.
struct ResolvedSite {
  int pid = 0;
  std::uint64_t cgroup_id = 0;
  std::uint32_t call_id = 0;
  CallSite site;
};

// The top `n` sites of a process (pid > 0) or a cgroup's processes (pid == 0, by cgroup_id
// when non-zero), ranked by stalled time; sites of `call` first when it has any. Shares are of
// the stalled time of the sites considered.
std::vector<CallSite> top_sites(const std::vector<ResolvedSite>& sites, int pid,
                                std::uint64_t cgroup_id, std::string_view call, size_t n = 3);

// The `sites` JSON of explain --json and the store's chains.sites: an array of objects with
// call, share, count, stalled_ns and frames (kind python|native, function, file, line, module,
// offset). from_json skips what does not parse (the store's text may be old or damaged).
Json sites_to_json(const std::vector<CallSite>& sites);
std::vector<CallSite> sites_from_json(std::string_view text);

class SiteResolver {
 public:
  SiteResolver(const host::Procfs& fs, const trace::PythonRegistry* python);
  ~SiteResolver();
  // Names the frames of the window's raw sites into window.resolved.
  void resolve(OutlierWindow& window);

 private:
  const trace::PythonRegistry* python_;
  std::unique_ptr<trace::Symbolizer> native_;
  std::unique_ptr<trace::PyResolver> py_;
};

}  // namespace stallwatch::chains
