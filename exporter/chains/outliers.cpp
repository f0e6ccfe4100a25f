#include "chains/outliers.h"

#include <algorithm>

namespace stallwatch::chains {
namespace {

bool longer(const trace::OutlierRecord& a, const trace::OutlierRecord& b) {
  return a.duration_ns > b.duration_ns;
}

}  // namespace

void OutlierSink::add(const trace::OutlierRecord& e) {
  std::lock_guard lock(mu_);
  cur_.total++;
  total_++;
  PidOutliers& p = cur_.by_pid[e.tgid];
  p.count++;
  p.runnable_ns += e.runnable_ns;
  if (e.duration_ns > p.worst_ns) {
    p.worst_ns = e.duration_ns;
    p.worst_runnable_ns = e.runnable_ns;
    p.worst_call_id = e.call_id;
  }
  if (!e.native.empty() || !e.python.empty()) {
    RawSiteKey key{e.tgid, e.call_id, e.native, e.python};
    auto it = cur_.sites.find(key);
    if (it == cur_.sites.end() && cur_.sites.size() < OutlierWindow::kMaxSites) {
      it = cur_.sites.emplace(std::move(key), RawSite{e.cgroup_id, 0, 0, e.py_status}).first;
    }
    if (it != cur_.sites.end()) {
      it->second.count++;
      it->second.stalled_ns += e.duration_ns;
    } else {
      cur_.sites_dropped++;
    }
  }
  // A min-heap of the longest `keep_` records: O(log keep) only when a record qualifies.
  auto& w = cur_.worst;
  if (w.size() < keep_) {
    w.push_back(e);
    std::push_heap(w.begin(), w.end(), longer);
  } else if (!w.empty() && e.duration_ns > w.front().duration_ns) {
    std::pop_heap(w.begin(), w.end(), longer);
    w.back() = e;
    std::push_heap(w.begin(), w.end(), longer);
  }
}

OutlierWindow OutlierSink::drain() {
  OutlierWindow out;
  {
    std::lock_guard lock(mu_);
    std::swap(out, cur_);
  }
  std::sort(out.worst.begin(), out.worst.end(), longer);
  return out;
}

std::uint64_t OutlierSink::total() const {
  std::lock_guard lock(mu_);
  return total_;
}

}  // namespace stallwatch::chains
