// Native stack symbolization (symbolizer.h).
#include "trace/symbolizer.h"

#include <cxxabi.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string_view>

namespace stallwatch::trace {
namespace {

constexpr size_t kMaxFiles = 512;      // cached files; the least recently used go past it
constexpr size_t kMaxProcesses = 4096;  // cached process maps
constexpr size_t kMaxLoads = 4;  // files read in the background at once; more wait their turn

std::vector<MapsEntry> read_maps(const host::Procfs& fs, int pid) {
  std::vector<MapsEntry> out;
  const std::string text = host::Procfs::read_bounded(fs.pid_path(pid, "maps"), kMaxMapsBytes);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    MapsEntry e;
    if (parse_maps_line(std::string_view(text).substr(pos, nl - pos), e) &&
        e.perms.size() >= 3 && e.perms[2] == 'x') {
      out.push_back(std::move(e));
    }
    pos = nl + 1;
  }
  return out;
}

std::string base_name(std::string_view path) {
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

}  // namespace

std::string demangle(const std::string& name) {
  if (!name.starts_with("_Z")) return name;
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : name;
}

const MapsEntry* Symbolizer::mapping(int pid, std::uint64_t addr) {
  auto find = [&](const std::vector<MapsEntry>& v) -> const MapsEntry* {
    for (const auto& e : v) {
      if (addr >= e.start && addr < e.end) return &e;
    }
    return nullptr;
  };
  auto it = maps_.find(pid);
  if (it != maps_.end()) {
    if (const MapsEntry* e = find(it->second)) return e;
  }
  // Not cached, or mapped since (dlopen): read the maps again.
  if (maps_.size() >= kMaxProcesses) maps_.clear();
  auto& v = maps_[pid];
  v = read_maps(fs_, pid);
  return find(v);
}

Symbolizer::File Symbolizer::load(ScopedFd fd, const std::string& name, std::uint64_t budget) {
  File f;
  try {
    auto symbols = read_function_symbols(fd.get(), name);
    if (!symbols) return f;
    f.readable = true;
    for (const ElfSymbol& s : *symbols) f.bytes += sizeof(ElfSymbol) + s.name.size();
    if (f.bytes > budget) {
      f.over_budget = true;
      f.bytes = 0;
      return f;
    }
    f.by_offset = std::move(*symbols);
    std::sort(f.by_offset.begin(), f.by_offset.end(),
              [](const ElfSymbol& a, const ElfSymbol& b) { return a.file_offset < b.file_offset; });
  } catch (const std::exception&) {
    f = File{};  // out of memory: unnamed frames, the pipeline goes on
  }
  return f;
}

Symbolizer::~Symbolizer() { wait_for_loads(); }

void Symbolizer::wait_for_loads() {
  for (auto& [key, load] : loading_) load.wait();
}

const Symbolizer::File& Symbolizer::keep(const FileKey& key, File f) {
  if (f.over_budget) refused_files_++;
  // Least recently used first, never the file being added.
  while (!files_.empty() &&
         (cached_bytes_ + f.bytes > symbol_budget_ || files_.size() >= kMaxFiles)) {
    auto oldest = std::min_element(files_.begin(), files_.end(), [](const auto& a, const auto& b) {
      return a.second.last_used < b.second.last_used;
    });
    cached_bytes_ -= oldest->second.bytes;
    files_.erase(oldest);
    evicted_files_++;
  }
  f.last_used = ++use_clock_;
  cached_bytes_ += f.bytes;
  return files_.insert_or_assign(key, std::move(f)).first->second;
}

const Symbolizer::File& Symbolizer::file(int pid, const MapsEntry& m) {
  static const File kPending;  // a file being read in the background: no names yet
  const FileKey key{(std::uint64_t{m.dev_major} << 32) | m.dev_minor, m.inode};
  auto it = files_.find(key);
  if (it != files_.end()) {
    it->second.last_used = ++use_clock_;
    return it->second;
  }
  if (auto l = loading_.find(key); l != loading_.end()) {
    if (l->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return kPending;
    File f = l->second.get();
    loading_.erase(l);
    return keep(key, std::move(f));
  }
  // The file the mapping holds, not what its path names now in the process's root.
  auto fd = open_mapped_file(fs_, pid, m);
  if (!fd) return keep(key, File{});  // refused or gone: unnamed frames, not retried
  struct stat st {};
  const std::string name(m.file_path());
  const std::uint64_t budget = symbol_budget_;
  if (fstat(fd->get(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) >= background_bytes_) {
    if (loading_.size() >= kMaxLoads) return kPending;  // asked again by a later window
    loading_.emplace(key, std::async(std::launch::async, [fd = std::move(*fd), name, budget]() mutable {
                       return load(std::move(fd), name, budget);
                     }));
    return kPending;
  }
  return keep(key, load(std::move(*fd), name, budget));
}

std::vector<NativeFrame> Symbolizer::symbolize(int pid, const std::vector<std::uint64_t>& ips) {
  std::vector<NativeFrame> out;
  out.reserve(ips.size());
  for (std::uint64_t ip : ips) {
    NativeFrame f;
    const std::uint64_t addr = ip > 0 ? ip - 1 : ip;
    const MapsEntry* m = mapping(pid, addr);
    if (!m || m->path.empty() || m->path[0] != '/') {
      f.module = m && !m->path.empty() ? m->path : "[unknown]";
      f.offset = ip;
      out.push_back(std::move(f));
      continue;
    }
    f.module = base_name(m->file_path());
    const std::uint64_t file_offset = addr - m->start + m->offset;
    f.offset = file_offset + 1;
    const File& file = this->file(pid, *m);
    auto after = std::upper_bound(
        file.by_offset.begin(), file.by_offset.end(), file_offset,
        [](std::uint64_t off, const ElfSymbol& s) { return off < s.file_offset; });
    if (after != file.by_offset.begin()) {
      const ElfSymbol& s = *std::prev(after);
      // A symbol without a size covers up to the next one.
      const bool inside = s.size ? file_offset < s.file_offset + s.size
                                 : after != file.by_offset.end();
      if (inside) {
        f.function = demangle(s.name);
        f.offset = file_offset + 1 - s.file_offset;
      }
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace stallwatch::trace
