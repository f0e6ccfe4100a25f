#include "trace/proc_maps.h"

#include <dirent.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace stallwatch::trace {
namespace {

template <typename T>
bool parse_hex(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string_view next_field(std::string_view& rest) {
  size_t b = rest.find_first_not_of(' ');
  if (b == std::string_view::npos) {
    rest = {};
    return {};
  }
  rest.remove_prefix(b);
  size_t e = rest.find(' ');
  std::string_view f = rest.substr(0, e);
  rest = e == std::string_view::npos ? std::string_view{} : rest.substr(e);
  return f;
}

}  // namespace

bool parse_maps_line(std::string_view line, MapsEntry& out) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  std::string_view rest = line;
  std::string_view range = next_field(rest), perms = next_field(rest), off = next_field(rest),
                   dev = next_field(rest), ino = next_field(rest);
  size_t dash = range.find('-'), colon = dev.find(':');
  if (dash == std::string_view::npos || colon == std::string_view::npos || perms.size() != 4)
    return false;
  if (!parse_hex(range.substr(0, dash), out.start) || !parse_hex(range.substr(dash + 1), out.end) ||
      !parse_hex(off, out.offset) || !parse_hex(dev.substr(0, colon), out.dev_major) ||
      !parse_hex(dev.substr(colon + 1), out.dev_minor))
    return false;
  auto [p, ec] = std::from_chars(ino.data(), ino.data() + ino.size(), out.inode);
  if (ec != std::errc() || p != ino.data() + ino.size()) return false;
  out.perms = std::string(perms);
  size_t b = rest.find_first_not_of(' ');
  out.path = b == std::string_view::npos ? std::string() : std::string(rest.substr(b));
  return true;
}

std::vector<MappedLibrary> cuda_libraries_in_maps(std::string_view maps_text) {
  std::vector<MappedLibrary> libs;
  while (!maps_text.empty()) {
    size_t nl = maps_text.find('\n');
    std::string_view line = maps_text.substr(0, nl);
    maps_text = nl == std::string_view::npos ? std::string_view{} : maps_text.substr(nl + 1);
    MapsEntry e;
    if (!parse_maps_line(line, e) || e.inode == 0 || e.path.empty() || e.path[0] != '/') continue;
    if (e.deleted()) continue;  // replaced on disk; the new file is attached
    auto api = api_of_library(e.path);
    if (!api) continue;
    bool seen = false;
    for (const auto& l : libs) seen = seen || l.path == e.path;
    if (!seen) libs.push_back({e.path, *api, e.inode, e.dev_major, e.dev_minor});
  }
  return libs;
}

std::vector<MappedLibrary> cuda_libraries_of(const host::Procfs& fs, int pid) {
  return cuda_libraries_in_maps(host::Procfs::read_bounded(fs.pid_path(pid, "maps"), kMaxMapsBytes));
}

std::vector<int> list_pids(const host::Procfs& fs) {
  std::vector<int> pids;
  DIR* d = opendir(fs.proc_root().c_str());
  if (!d) return pids;
  while (dirent* e = readdir(d)) {
    int pid = 0;
    std::string_view name = e->d_name;
    auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (ec == std::errc() && p == name.data() + name.size() && pid > 0) pids.push_back(pid);
  }
  closedir(d);
  return pids;
}

std::string host_path(const host::Procfs& fs, int pid, const std::string& path) {
  return fs.pid_path(pid, "root") + path;
}

}  // namespace stallwatch::trace
