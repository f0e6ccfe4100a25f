// io_stall: the CUDA-issuing threads sit blocked outside CUDA calls (the GPU starves) while the
// workload's block I/O is busy or slow; names the device and the submitters. docs/chains.md.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"
#include "trace/histogram.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  // The starvation ratio of the CUDA threads (the share that makes it high is in kinds.h), and
  // how busy or slow the series' block I/O must be: Σ request time / window, or p99 with a
  // smaller busy share.
  double starvation = 0.20;
  double busy_share = 0.20;
  double slow_p99_s = 0.020;
  double slow_busy_share = 0.05;
};

// `device`: the busiest block device of the workload ("" when unknown).
Advice advise(const Chain& c, const std::string& device) {
  Advice out;
  out.code("DataLoader(num_workers=<more>, prefetch_factor=4, persistent_workers=True)",
           "more reads in flight hide the storage latency from the training loop");
  if (!device.empty()) {
    out.command(Command("iostat -x 1").arg(device),
                "is " + device + " saturated (%util, aqu-sz) or just slow (r_await)?");
  }
  out.note(
      "copy the dataset to local NVMe first, or keep it in the page cache "
      "(vmtouch -t DATASET_DIR); read-ahead large sequential shards (WebDataset, "
      "TFRecord) instead of many small files");
  if (!c.identity.pod_uid.empty()) {
    out.note(
        "in Kubernetes: a local-NVMe emptyDir or hostPath cache instead of network "
        "storage for the dataset");
  }
  out.command(Command("ionice -c3 -p").placeholder("PID"),
              "lower the I/O priority of other processes that read or write the same device");
  return out;
}

class IoStall : public Rule {
 public:
  Kind kind() const override { return Kind::kIoStall; }

  void series(const WindowContext& ctx, const SeriesWindow& s, std::vector<Finding>& out) override {
    if (s.starvation_ratio < th_.starvation || s.io.empty()) return;
    const double window = static_cast<double>(ctx.view.window_ns);
    const IoTotals all = s.io_total();
    const double busy = share(static_cast<double>(all.sum_ns), window);
    const double p99 = trace::quantile_seconds(all.buckets, 0.99, all.max_ns);
    const bool busy_enough = busy >= th_.busy_share;
    const bool slow = all.count > 0 && p99 >= th_.slow_p99_s && busy >= th_.slow_busy_share;
    if (!busy_enough && !slow) return;

    Finding f;
    Chain& c = f.chain;
    c = ctx.base_chain(kind(), s.cgroup);
    c.severity = kind_info(kind()).cutoffs.of(s.starvation_ratio);
    // The busiest device (by request time) names the storage.
    std::map<std::string, IoTotals> by_device;
    for (const auto& [key, t] : s.io) by_device[key.device].add(t);
    std::string device;
    std::uint64_t device_ns = 0;
    for (const auto& [dev, t] : by_device) {
      if (t.sum_ns > device_ns) {
        device = dev;
        device_ns = t.sum_ns;
      }
    }
    // Submitters, by request time.
    struct Submitter {
      std::string comm;
      std::uint64_t ns = 0, count = 0, bytes = 0;
    };
    std::map<int, Submitter> subs;
    for (const auto& pio : s.io_processes) {
      Submitter& k = subs[pio.pid];
      k.comm = pio.comm;
      k.ns += pio.totals.sum_ns;
      k.count += pio.totals.count;
      k.bytes += pio.totals.bytes;
    }
    std::vector<std::pair<int, Submitter>> ranked(subs.begin(), subs.end());
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
    for (const auto& [pid, k] : ranked) {
      if (c.contributors.size() == 10) break;
      c.contributors.push_back(Contributor{k.comm, pid, s.cgroup, "I/O submitter", k.ns, k.count, {}});
    }
    const auto procs = ctx.cuda_processes(s.cgroup);
    const ProcessWindow* main = procs.empty() ? nullptr : procs[0];
    const double mean = all.count ? secs(all.sum_ns) / static_cast<double>(all.count) : 0;
    c.evidence = {{"starvation_share", s.starvation_ratio},
                  {"io_in_flight", busy},
                  {"io_p99_s", p99},
                  {"io_mean_s", mean},
                  {"io_requests", static_cast<double>(all.count)},
                  {"io_bytes", static_cast<double>(all.bytes)},
                  {"device_in_flight", share(static_cast<double>(device_ns), window)}};
    const std::string workload = process_or_workload(main, c);
    c.root_cause = "the CUDA-issuing threads of " + workload + " sat blocked outside CUDA calls " +
                   percent(s.starvation_ratio) + " of the window while the workload's block I/O " +
                   "was busy: " + thousands(all.count) + " requests (" +
                   human_bytes(static_cast<double>(all.bytes)) + "), p99 " + human_seconds(p99) +
                   ", " + short_number(busy) + " requests in flight on average, most on " + device;
    if (!c.contributors.empty()) {
      const Submitter& top = ranked[0].second;
      c.root_cause += "; top submitter " + process_text(top.comm, ranked[0].first) + " moved " +
                      human_bytes(static_cast<double>(top.bytes)) + " and waited " +
                      human_ns(top.ns) + " on its requests";
    }
    c.effect =
        "the GPU starves between steps: the training loop waits for the next batch, not "
        "for the GPU";
    c.summary = summary_of(c, workload + " starved " + percent(s.starvation_ratio) +
                                  " of the time waiting on " + device + " I/O (p99 " +
                                  human_seconds(p99) + ")");
    set_advice(c, advise(c, device));
    out.push_back(std::move(f));
  }

 private:
  Thresholds th_;
};

}  // namespace

std::unique_ptr<Rule> make_io_stall_rule() { return std::make_unique<IoStall>(); }

}  // namespace stallwatch::chains
