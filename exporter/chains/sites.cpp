#include "chains/sites.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "chains/outliers.h"
#include "common/strings.h"
#include "trace/calls.h"
#include "trace/python.h"
#include "trace/symbolizer.h"

namespace stallwatch::chains {
namespace {

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Frames that identify a site. With Python frames, those alone: the native frames under them are
// the interpreter's and the libraries' (one line of a training step reaches cuLaunchKernel through
// many C++ paths), and two sites that differ only there would show as the same line twice. Without
// them, the native frames, where offsets inside a function do not split a site.
std::vector<SiteFrame> identity(const std::vector<SiteFrame>& frames) {
  std::vector<SiteFrame> out;
  const bool python = std::any_of(frames.begin(), frames.end(), [](const SiteFrame& f) { return f.python; });
  for (const auto& f : frames) {
    if (python && !f.python) continue;
    out.push_back(f);
    if (!f.python && !f.function.empty()) out.back().offset = 0;
  }
  return out;
}

}  // namespace

std::string SiteFrame::text() const {
  if (python) {
    return function + "() at " + file + (line > 0 ? ":" + std::to_string(line) : "");
  }
  if (function.empty()) return module + "+" + hex(offset);
  return function + (function.find('(') == std::string::npos ? "()" : "") + " in " + module;
}

bool library_file(std::string_view file) {
  if (file.starts_with("<")) return true;
  if (file.find("/site-packages/") != std::string_view::npos ||
      file.find("/dist-packages/") != std::string_view::npos) {
    return true;
  }
  // The standard library: .../lib/python3.N/<file>
  auto at = file.find("/lib/python3.");
  if (at == std::string_view::npos) return false;
  size_t i = at + 13;
  while (i < file.size() && file[i] >= '0' && file[i] <= '9') ++i;
  return i < file.size() && file[i] == '/';
}

const SiteFrame* CallSite::user_frame() const {
  const SiteFrame* first_python = nullptr;
  for (const auto& f : frames) {
    if (!f.python) continue;
    if (!first_python) first_python = &f;
    if (!library_file(f.file)) return &f;
  }
  if (first_python) return first_python;
  for (const auto& f : frames) {
    if (!f.function.empty()) return &f;
  }
  return nullptr;
}

bool CallSite::has_python() const {
  return std::any_of(frames.begin(), frames.end(), [](const SiteFrame& f) { return f.python; });
}

std::string CallSite::text(size_t depth) const {
  const bool py = has_python();
  const SiteFrame* from = py ? user_frame() : nullptr;
  std::string out;
  size_t shown = 0;
  for (const auto& f : frames) {
    if (from && &f < from) continue;  // library frames inside the user's line
    if (shown == depth) break;
    if (py != f.python) continue;
    if (!py && f.function.empty() && shown > 0) continue;  // unnamed frames past the first
    if (shown++) out += "  <- ";
    out += f.text();
  }
  return out.empty() ? "(no frames)" : out;
}

std::string CallSite::folded() const {
  std::string out;
  for (bool python : {true, false}) {
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
      if (it->python != python) continue;
      std::string t = python              ? it->text()
                      : it->function.empty() ? it->module + "+" + hex(it->offset)
                                             : it->function;
      std::replace(t.begin(), t.end(), ';', ':');
      out += t + ";";
    }
  }
  out += call;
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

std::vector<CallSite> top_sites(const std::vector<ResolvedSite>& sites, int pid,
                                std::uint64_t cgroup_id, std::string_view call, size_t n) {
  auto mine = [&](const ResolvedSite& s) {
    if (pid > 0) return s.pid == pid;
    return cgroup_id == 0 || s.cgroup_id == cgroup_id;
  };
  bool call_has_sites = false;
  for (const auto& s : sites) {
    if (mine(s) && s.site.call == call) call_has_sites = true;
  }
  // Each merged site keeps the frames of its member with the most stalled time.
  struct Merged {
    CallSite site;
    std::uint64_t heaviest = 0;
  };
  std::map<std::pair<std::string, std::vector<SiteFrame>>, Merged> merged;
  std::uint64_t total = 0;
  for (const auto& s : sites) {
    if (!mine(s) || (call_has_sites && s.site.call != call)) continue;
    auto [it, fresh] = merged.try_emplace({s.site.call, identity(s.site.frames)},
                                          Merged{s.site, s.site.stalled_ns});
    if (!fresh) {
      Merged& m = it->second;
      if (s.site.stalled_ns > m.heaviest) {
        m.heaviest = s.site.stalled_ns;
        m.site.frames = s.site.frames;
      }
      m.site.count += s.site.count;
      m.site.stalled_ns += s.site.stalled_ns;
    }
    total += s.site.stalled_ns;
  }
  std::vector<CallSite> out;
  for (auto& [key, m] : merged) {
    m.site.share = total ? static_cast<double>(m.site.stalled_ns) / static_cast<double>(total) : 0;
    out.push_back(std::move(m.site));
  }
  std::sort(out.begin(), out.end(), [](const CallSite& a, const CallSite& b) {
    return a.stalled_ns != b.stalled_ns ? a.stalled_ns > b.stalled_ns : a.count > b.count;
  });
  if (out.size() > n) out.resize(n);
  return out;
}

Json sites_to_json(const std::vector<CallSite>& sites) {
  Json out = Json::array();
  for (const auto& s : sites) {
    Json frames = Json::array();
    for (const auto& f : s.frames) {
      Json j;
      j["kind"] = f.python ? "python" : "native";
      j["function"] = f.function;
      if (f.python) {
        j["file"] = f.file;
        j["line"] = f.line;
      } else {
        j["module"] = f.module;
        j["offset"] = f.offset;
      }
      frames.push_back(std::move(j));
    }
    out.push_back({{"call", s.call},
                   {"share", json_value(s.share)},
                   {"count", s.count},
                   {"stalled_ns", s.stalled_ns},
                   {"frames", std::move(frames)}});
  }
  return out;
}

namespace {

// Typed reads of a JSON object that never throw: a member of another type reads as absent.
std::string str(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}
std::uint64_t unsigned_of(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

}  // namespace

std::vector<CallSite> sites_from_json(std::string_view text) {
  std::vector<CallSite> out;
  Json j = Json::parse(text, nullptr, false);
  if (!j.is_array()) return out;
  for (const auto& s : j) {
    if (!s.is_object()) continue;
    CallSite site;
    site.call = str(s, "call");
    site.share = s.contains("share") && s["share"].is_number() ? s["share"].get<double>() : 0;
    site.count = unsigned_of(s, "count");
    site.stalled_ns = unsigned_of(s, "stalled_ns");
    if (s.contains("frames") && s["frames"].is_array()) {
      for (const auto& f : s["frames"]) {
        if (!f.is_object()) continue;
        SiteFrame frame;
        frame.python = str(f, "kind") == "python";
        frame.function = str(f, "function");
        frame.file = str(f, "file");
        frame.line = f.contains("line") && f["line"].is_number_integer() ? f["line"].get<int>() : 0;
        frame.module = str(f, "module");
        frame.offset = unsigned_of(f, "offset");
        site.frames.push_back(std::move(frame));
      }
    }
    out.push_back(std::move(site));
  }
  return out;
}

SiteResolver::SiteResolver(const host::Procfs& fs, const trace::PythonRegistry* python)
    : python_(python),
      native_(std::make_unique<trace::Symbolizer>(fs)),
      py_(std::make_unique<trace::PyResolver>(fs)) {}

SiteResolver::~SiteResolver() = default;

void SiteResolver::resolve(OutlierWindow& window) {
  const auto calls = trace::all_calls();
  window.resolved.clear();
  for (const auto& [key, raw] : window.sites) {
    const auto& [tgid, call_id, native, python] = key;
    ResolvedSite r;
    r.pid = static_cast<int>(tgid);
    r.cgroup_id = raw.cgroup_id;
    r.call_id = call_id;
    if (call_id < calls.size()) r.site.call = std::string(calls[call_id].name);
    r.site.count = raw.count;
    r.site.stalled_ns = raw.stalled_ns;
    if (!python.empty() && python_) {
      if (auto proc = python_->find(r.pid)) {
        for (const auto& [code, instr] : python) {
          auto f = py_->resolve(*proc, code, instr);
          SiteFrame frame;
          frame.python = true;
          if (f) {
            // Names and paths come from the process's memory: whatever it put there is shown
            // escaped, so no frame can add a line to explain or split a folded stack.
            frame.function = escape_name(f->function);
            frame.file = escape_name(f->file);
            frame.line = f->line;
          } else {
            frame.function = "[unknown]";
            frame.file = "?";
          }
          r.site.frames.push_back(std::move(frame));
        }
      }
    }
    auto named = native_->symbolize(r.pid, native);
    // A frame-pointer walk that ran into code built without them ends in addresses no mapping
    // holds: noise at the outer end, dropped.
    while (!named.empty() && named.back().module == "[unknown]") named.pop_back();
    for (auto& nf : named) {
      SiteFrame frame;
      frame.function = escape_name(nf.function);  // symbol and file names are the host's
      frame.module = escape_name(nf.module);
      frame.offset = nf.offset;
      r.site.frames.push_back(std::move(frame));
    }
    window.resolved.push_back(std::move(r));
  }
}

}  // namespace stallwatch::chains
