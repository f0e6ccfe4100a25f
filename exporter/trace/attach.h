// Uprobes on one library file: an entry and a return probe on every exported symbol that is a
// traced call or a variant of one, at the site probe_sites.h chooses from the symbol's first
// instructions (the driver stub's je at +10, not its single-stepped compare), the call id as
// bpf_cookie
// (trace::cookie_of: the call id, plus how NCCL probes read arguments). Probes attach to the file (its
// inode), so every process that maps it is traced, including ones that map it later.
// Where the kernel has multi-uprobe links (Linux 6.6; CallPrograms::enter_multi is set), a file
// gets one link per direction holding every probe, created with a raw BPF_LINK_CREATE (libbpf
// 1.1 predates them); elsewhere, or when that fails, one link per probe.
// Kernel launches (calls.h kernel_launch) are the hot probes the cost budget may duty-cycle per
// process (--cost-budget, discovery.h): on multi-uprobe kernels they sit in links of their own
// (one per direction), every process's at first, and the object keeps the file open so that
// per-process links (the kernel's pid filter: the breakpoints go into that process only) can
// replace them. On kernels without multi-uprobe links the launches share the per-probe links
// and are never cycled.
// Destroying the object detaches; on 6.x kernels each per-probe detach waits for an RCU grace
// period (about 110 ms here, serialised by the kernel), a multi link once per link, so callers
// destroy off hot threads.
// Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "trace/calls.h"
#include "trace/probe_sites.h"

struct bpf_program;
struct bpf_link;

namespace stallwatch::trace {

struct LinkDeleter {
  void operator()(bpf_link* link) const;
};
using LinkPtr = std::unique_ptr<bpf_link, LinkDeleter>;

// The entry and return programs per api: NCCL calls get programs that also read arguments.
struct CallPrograms {
  bpf_program* enter = nullptr;
  bpf_program* exit = nullptr;
  bpf_program* nccl_enter = nullptr;
  bpf_program* nccl_exit = nullptr;
  // The same programs loaded for multi-uprobe links; nullptr where the kernel lacks them.
  bpf_program* enter_multi = nullptr;
  bpf_program* exit_multi = nullptr;
  bpf_program* nccl_enter_multi = nullptr;
  bpf_program* nccl_exit_multi = nullptr;
};

// A link created by a raw bpf() call: its descriptor, closed (detached) on destruction.
class FdLink {
 public:
  explicit FdLink(int fd) : fd_(fd) {}
  ~FdLink();
  FdLink(FdLink&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FdLink& operator=(FdLink&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  FdLink(const FdLink&) = delete;

 private:
  int fd_;
};

// How sites are chosen: what the running kernel emulates (probe_cost.h measures it) and
// whether probes may leave +0 at all (--probe-sites: auto moves them, entry keeps +0).
struct SitePolicy {
  Emulation emulation = default_emulation();
  bool moves = true;
};

// Where one symbol's probe pair sits (`check`, the log, tests).
struct SymbolSite {
  std::string symbol;
  std::uint32_t call_id = 0;
  std::uint64_t offset = 0;  // the symbol's file offset; the probes are at offset + site.delta
  ProbeSite site;
};

// "38 emulated (36 jcc at +10, 2 push at +0), 2 single-stepped (cuFoo, cuBar)": symbol names
// escaped, at most four listed.
std::string describe_sites(const std::vector<SymbolSite>& sites);

// What attach() would do to a file, without touching the kernel: one site per distinct symbol
// address of a traced call (file-offset order), and the calls the file lacks. `check` shows it.
struct ProbePlan {
  std::vector<SymbolSite> sites;
  std::vector<std::string> missing_calls;
};
Result<ProbePlan> plan_probes(const std::string& path, Api api, LaunchLayer layer,
                              const SitePolicy& policy);

class LibraryProbes {
 public:
  LibraryProbes() = default;
  LibraryProbes(const LibraryProbes&) = delete;
  LibraryProbes& operator=(const LibraryProbes&) = delete;
  // Attaches to `path` (a path this process can open): the calls probed under `layer`
  // (calls.h). Fails only when nothing could be attached; calls the library lacks are listed in
  // missing_calls() (the caller warns once).
  static Result<std::unique_ptr<LibraryProbes>> attach(const CallPrograms& programs,
                                                       const std::string& path, Api api,
                                                       LaunchLayer layer,
                                                       const SitePolicy& policy = {});

  size_t probe_count() const { return probes_; }
  bool multi() const { return !multi_links_.empty(); }  // attached through multi-uprobe links
  const std::vector<std::string>& attached_symbols() const { return attached_symbols_; }
  const std::vector<std::string>& missing_calls() const { return missing_calls_; }
  // Per attached symbol (in file-offset order), the site and its class.
  const std::vector<SymbolSite>& sites() const { return sites_; }
  // Probes (entry and return each) by the class of their site.
  size_t probes_of(SiteClass cls) const;

  // The kernel launches' probes (see above): whether they can be moved to per-process links,
  // how many there are (entry and return each), and whether the every-process links hold them.
  bool cyclable() const { return file_fd_ >= 0 && !hot_offsets_.empty(); }
  size_t hot_probes() const { return 2 * hot_offsets_.size(); }
  bool hot_for_all() const { return !hot_links_.empty(); }
  // The launches' entry and return links for one process (pid 0: every process). The caller
  // holds them; closing them detaches.
  Result<std::vector<FdLink>> attach_hot(std::uint32_t pid) const;
  // Takes the every-process launch links (the caller detaches them, after the per-process
  // ones are on: a call seen twice meanwhile is counted once, bpf/calls.bpf.h), or gives them
  // back.
  std::vector<FdLink> take_hot_for_all() { return std::move(hot_links_); }
  void set_hot_for_all(std::vector<FdLink> links) { hot_links_ = std::move(links); }
  ~LibraryProbes();

 private:
  std::vector<LinkPtr> links_;
  std::vector<FdLink> multi_links_;
  std::vector<FdLink> hot_links_;  // the launches' multi links for every process, when held
  std::vector<std::uint64_t> hot_offsets_, hot_cookies_;
  bpf_program* hot_enter_ = nullptr;
  bpf_program* hot_exit_ = nullptr;
  int file_fd_ = -1;  // the file, kept open for per-process links (cyclable files only)
  size_t probes_ = 0;
  std::vector<std::string> attached_symbols_;
  std::vector<std::string> missing_calls_;
  std::vector<SymbolSite> sites_;
};

// The first kSiteWindow bytes of the function at `file_offset` of an open file (fewer where the
// file ends); empty when it cannot be read.
std::vector<std::uint8_t> read_code(int fd, std::uint64_t file_offset);

}  // namespace stallwatch::trace
