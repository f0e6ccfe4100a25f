// What the kernel side could not record (bpf/stallwatch.h, enum sw_lost_source): per-CPU
// counters in map events_lost, summed into Snapshot::lost (stallwatch_events_lost_total).
#include "trace/sources.h"
#include "trace/tracer.h"

namespace stallwatch::trace {
namespace {

class LostSource : public Source {
 public:
  explicit LostSource(const Tracer& t) : fd_(t.map_fd("events_lost")) {}
  std::string_view name() const override { return "lost"; }
  void read(SourceContext&, Snapshot& snap) override { snap.lost = read_lost(fd_); }

 private:
  int fd_;
};

}  // namespace

std::unique_ptr<Source> make_lost_source(const SourceDeps& d) {
  return std::make_unique<LostSource>(d.tracer);
}

}  // namespace stallwatch::trace
