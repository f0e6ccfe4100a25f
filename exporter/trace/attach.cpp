#include "trace/attach.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "common/log.h"
#include "common/strings.h"
#include "trace/elf_symbols.h"
#include "trace/uprobe_multi.h"

namespace stallwatch::trace {

void LinkDeleter::operator()(bpf_link* link) const { bpf_link__destroy(link); }

FdLink::~FdLink() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

Result<LinkPtr> attach_one(bpf_program* prog, const std::string& path, std::uint64_t offset,
                           std::uint32_t call_id, bool retprobe) {
  bpf_uprobe_opts opts{};
  opts.sz = sizeof(opts);
  opts.bpf_cookie = cookie_of(call_id);
  opts.retprobe = retprobe;
  bpf_link* link = bpf_program__attach_uprobe_opts(prog, -1, path.c_str(), offset, &opts);
  if (!link) {
    int err = errno;
    return make_error(std::string(retprobe ? "uretprobe" : "uprobe") + " at offset " +
                          std::to_string(offset) + ": " + std::strerror(err),
                      err);
  }
  return LinkPtr(link);
}

// union bpf_attr as BPF_LINK_CREATE reads it for a multi-uprobe link (include/uapi/linux/bpf.h,
// Linux 6.6: link_create.uprobe_multi); Debian 12's headers predate it.
struct UprobeMultiAttr {
  std::uint32_t prog_fd;
  std::uint32_t target_fd;
  std::uint32_t attach_type;
  std::uint32_t link_flags;
  std::uint64_t path;             // const char *
  std::uint64_t offsets;          // const __u64 *, file offsets
  std::uint64_t ref_ctr_offsets;  // none
  std::uint64_t cookies;          // const __u64 *, bpf_get_attach_cookie() per offset
  std::uint32_t cnt;
  std::uint32_t flags;  // BPF_F_UPROBE_MULTI_RETURN
  std::uint32_t pid;    // 0: every process
  std::uint32_t pad;
};
static_assert(sizeof(UprobeMultiAttr) == 64);
constexpr std::uint32_t kBpfLinkCreate = 28;         // enum bpf_cmd BPF_LINK_CREATE
constexpr std::uint32_t kUprobeMultiReturn = 1;       // BPF_F_UPROBE_MULTI_RETURN

// File descriptors this process may still open (RLIMIT_NOFILE minus those open); -1 unknown.
long free_descriptors() {
  struct rlimit l {};
  if (getrlimit(RLIMIT_NOFILE, &l) != 0 || l.rlim_cur == RLIM_INFINITY) return -1;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  long open = -1;  // the directory's own descriptor is listed too
  while (const dirent* e = ::readdir(d)) open += e->d_name[0] != '.';
  ::closedir(d);
  return static_cast<long>(l.rlim_cur) - open;
}

}  // namespace

Result<FdLink> attach_uprobe_multi(bpf_program* prog, const std::string& path,
                                   const std::vector<std::uint64_t>& offsets,
                                   const std::vector<std::uint64_t>& cookies, bool retprobe,
                                   std::uint32_t pid) {
  UprobeMultiAttr attr{};
  attr.prog_fd = static_cast<std::uint32_t>(bpf_program__fd(prog));
  attr.attach_type = static_cast<std::uint32_t>(kUprobeMultiAttachType);
  attr.path = reinterpret_cast<std::uintptr_t>(path.c_str());
  attr.offsets = reinterpret_cast<std::uintptr_t>(offsets.data());
  attr.cookies = reinterpret_cast<std::uintptr_t>(cookies.data());
  attr.cnt = static_cast<std::uint32_t>(offsets.size());
  attr.flags = retprobe ? kUprobeMultiReturn : 0;
  attr.pid = pid;
  const long fd = ::syscall(__NR_bpf, kBpfLinkCreate, &attr, sizeof(attr));
  if (fd < 0) {
    const int err = errno;
    return make_error(std::string(retprobe ? "multi-uretprobe" : "multi-uprobe") + " link of " +
                          std::to_string(offsets.size()) + " offsets: " + std::strerror(err),
                      err);
  }
  return FdLink(static_cast<int>(fd));
}

bool kernel_has_uprobe_multi() {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (libbpf_get_error(vmlinux)) return false;
  const bool has = btf__find_by_name_kind(vmlinux, "bpf_uprobe_multi_link", BTF_KIND_STRUCT) >= 0;
  btf__free(vmlinux);
  return has;
}

std::vector<std::uint8_t> read_code(int fd, std::uint64_t file_offset) {
  std::vector<std::uint8_t> code(kSiteWindow);
  const ssize_t n = ::pread(fd, code.data(), code.size(), static_cast<off_t>(file_offset));
  code.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return code;
}

std::string describe_sites(const std::vector<SymbolSite>& sites) {
  std::map<std::pair<InsnKind, std::uint32_t>, size_t> emulated;
  std::vector<std::string> stepped;
  for (const SymbolSite& s : sites) {
    if (s.site.cls == SiteClass::kEmulated) {
      emulated[{s.site.at, s.site.delta}]++;
    } else {
      stepped.push_back(escape_name(s.symbol));
    }
  }
  size_t n = 0;
  std::string shapes;
  for (const auto& [shape, count] : emulated) {
    n += count;
    shapes += (shapes.empty() ? "" : ", ") + std::to_string(count) + " " +
              std::string(insn_kind_name(shape.first)) + " at +" + std::to_string(shape.second);
  }
  std::string out = std::to_string(n) + " emulated";
  if (!shapes.empty()) out += " (" + shapes + ")";
  out += ", " + std::to_string(stepped.size()) + " single-stepped";
  if (!stepped.empty()) {
    const size_t shown = std::min<size_t>(stepped.size(), 4);
    for (size_t i = 0; i < shown; ++i) out += (i == 0 ? " (" : ", ") + stepped[i];
    out += stepped.size() > shown ? ", ...)" : ")";
  }
  return out;
}

size_t LibraryProbes::probes_of(SiteClass cls) const {
  size_t n = 0;
  for (const SymbolSite& s : sites_) n += s.site.cls == cls ? 2 : 0;
  return n;
}

LibraryProbes::~LibraryProbes() {
  if (file_fd_ >= 0) ::close(file_fd_);
}

Result<std::vector<FdLink>> LibraryProbes::attach_hot(std::uint32_t pid) const {
  if (!cyclable()) return make_error("no launch probes of their own in this file", EINVAL);
  const std::string path = "/proc/self/fd/" + std::to_string(file_fd_);
  auto in = attach_uprobe_multi(hot_enter_, path, hot_offsets_, hot_cookies_, false, pid);
  if (!in) return in.error();
  auto out = attach_uprobe_multi(hot_exit_, path, hot_offsets_, hot_cookies_, true, pid);
  if (!out) return out.error();
  std::vector<FdLink> links;
  links.push_back(std::move(*in));
  links.push_back(std::move(*out));
  return links;
}

Result<ProbePlan> plan_probes(const std::string& path, Api api, LaunchLayer layer,
                              const SitePolicy& policy) {
  auto symbols = read_function_symbols(path);
  if (!symbols) return symbols.error();
  ProbePlan plan;
  // Aliases share an address: one pair per offset, keeping the first name for the log.
  std::map<std::uint64_t, SymbolSite> targets;
  std::map<std::uint64_t, std::uint64_t> sizes;
  std::set<std::uint32_t> found;
  for (const auto& s : *symbols) {
    auto id = call_for_symbol(s.name, api);
    if (!id || !probed_under(*id, layer)) continue;
    if (targets.emplace(s.file_offset, SymbolSite{s.name, *id, s.file_offset, {}}).second) {
      sizes[s.file_offset] = s.size;
    }
    found.insert(*id);
  }
  auto calls = all_calls();
  for (std::uint32_t i = 0; i < calls.size(); ++i) {
    if (calls[i].api == api && probed_under(i, layer) && !found.count(i)) {
      plan.missing_calls.emplace_back(calls[i].name);
    }
  }
  if (targets.empty()) {
    return make_error(path + ": exports none of the traced " + std::string(api_name(api)) +
                      " calls (stripped or not a CUDA library?)");
  }
  // Each pair's site (probe_sites.h): read from the same file, bounded by the symbol's size
  // where the ELF gives one. A file that cannot be read here keeps every probe at +0.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  for (auto& [offset, site] : targets) {
#if defined(__x86_64__)
    if (fd >= 0) {
      std::vector<std::uint8_t> code = read_code(fd, offset);
      if (const std::uint64_t size = sizes[offset]; size > 0 && size < code.size()) {
        code.resize(size);
      }
      site.site = choose_site(code, policy.emulation, policy.moves);
    }
#else
    (void)policy;
#endif
    plan.sites.push_back(std::move(site));
  }
  if (fd >= 0) ::close(fd);
  return plan;
}

Result<std::unique_ptr<LibraryProbes>> LibraryProbes::attach(const CallPrograms& programs,
                                                             const std::string& path, Api api,
                                                             LaunchLayer layer,
                                                             const SitePolicy& policy) {
  bpf_program* enter = api == Api::kNccl ? programs.nccl_enter : programs.enter;
  bpf_program* exit = api == Api::kNccl ? programs.nccl_exit : programs.exit;
  auto plan = plan_probes(path, api, layer, policy);
  if (!plan) return plan.error();
  auto probes = std::make_unique<LibraryProbes>();
  probes->missing_calls_ = std::move(plan->missing_calls);
  probes->sites_ = std::move(plan->sites);
  const std::vector<SymbolSite>& targets = probes->sites_;
  bpf_program* enter_multi = api == Api::kNccl ? programs.nccl_enter_multi : programs.enter_multi;
  bpf_program* exit_multi = api == Api::kNccl ? programs.nccl_exit_multi : programs.exit_multi;
  if (enter_multi && exit_multi) {
    // The launches in links of their own (the cost budget moves them per process); the rest
    // in one link per direction.
    std::vector<std::uint64_t> offsets, cookies;
    for (const SymbolSite& t : targets) {
      const bool hot = t.call_id < all_calls().size() && all_calls()[t.call_id].kernel_launch;
      (hot ? probes->hot_offsets_ : offsets).push_back(t.offset + t.site.delta);
      (hot ? probes->hot_cookies_ : cookies).push_back(cookie_of(t.call_id));
    }
    probes->hot_enter_ = enter_multi;
    probes->hot_exit_ = exit_multi;
    Result<FdLink> in = make_error("no probe"), out = make_error("no probe");
    bool ok = true;
    if (!offsets.empty()) {
      in = attach_uprobe_multi(enter_multi, path, offsets, cookies, false);
      out = in ? attach_uprobe_multi(exit_multi, path, offsets, cookies, true) : Result<FdLink>(in.error());
      ok = in && out;
    }
    Result<std::vector<FdLink>> hot = std::vector<FdLink>{};
    if (ok && !probes->hot_offsets_.empty()) {
      // Kept open for per-process links later: reopened through the caller's path, the same
      // file (a /proc/self/fd link or one this process resolved).
      probes->file_fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      hot = probes->attach_hot(0);
      ok = hot.ok();
    }
    if (ok) {
      if (!offsets.empty()) {
        probes->multi_links_.push_back(std::move(*in));
        probes->multi_links_.push_back(std::move(*out));
      }
      probes->hot_links_ = std::move(*hot);
      probes->probes_ = 2 * targets.size();
      for (const SymbolSite& t : targets) probes->attached_symbols_.push_back(t.symbol);
      return probes;
    }
    if (probes->file_fd_ >= 0) ::close(probes->file_fd_);
    probes->file_fd_ = -1;
    probes->hot_offsets_.clear();
    probes->hot_cookies_.clear();
    const Error& why = !offsets.empty() && !in ? in.error()
                       : !offsets.empty() && !out ? out.error()
                                                  : hot.error();
    // A kernel that refuses them for this file: the per-probe links below, said once per file.
    SW_LOG(kWarn) << escape_name(path) << ": " << why.message
                  << "; one link per probe for this file";
  }
  // Two descriptors per probe and pair: find out before attaching, rather than attach part of
  // the set and give it back (each detach waits for an RCU grace period).
  const long needed = 4 * static_cast<long>(targets.size()) + 8;
  if (const long free = free_descriptors(); free >= 0 && free < needed) {
    return make_error(path + ": " + std::to_string(targets.size()) + " probe pairs need " +
                          std::to_string(needed) + " file descriptors, " + std::to_string(free) +
                          " are free (RLIMIT_NOFILE): Too many open files",
                      EMFILE);
  }
  Error last;
  const size_t planned = targets.size();
  for (const SymbolSite& t : targets) {
    auto in = attach_one(enter, path, t.offset + t.site.delta, t.call_id, false);
    if (!in) {
      last = in.error();
      continue;
    }
    auto out = attach_one(exit, path, t.offset + t.site.delta, t.call_id, true);
    if (!out) {
      last = out.error();
      continue;  // `in` is detached here: a call without its return would never close
    }
    probes->links_.push_back(std::move(*in));
    probes->links_.push_back(std::move(*out));
    probes->attached_symbols_.push_back(t.symbol);
  }
  if (probes->links_.empty()) {
    return make_error(path + ": no probe could be attached: " + last.message, last.err);
  }
  // Only the symbols whose pair attached keep a site.
  const std::set<std::string> paired(probes->attached_symbols_.begin(),
                                     probes->attached_symbols_.end());
  std::erase_if(probes->sites_, [&](const SymbolSite& s) { return !paired.count(s.symbol); });
  probes->probes_ = probes->links_.size();
  if (probes->attached_symbols_.size() < planned) {
    // Out of file descriptors or memory part way: a partial set would stay partial for good
    // (the file counts as traced). Give it all back and let discovery retry the whole file.
    if (last.err == EMFILE || last.err == ENFILE || last.err == ENOMEM) {
      const size_t attached = probes->attached_symbols_.size();
      probes.reset();
      return make_error(path + ": only " + std::to_string(attached) + " of " +
                            std::to_string(planned) + " probes could be attached: " +
                            last.message,
                        last.err);
    }
  }
  return probes;
}

}  // namespace stallwatch::trace
