#include "trace/sources.h"

namespace stallwatch::trace {

std::vector<std::unique_ptr<Source>> default_sources(const SourceDeps& d) {
  std::vector<std::unique_ptr<Source>> out;
  for (auto make : {make_cuda_source, make_sched_source, make_host_source, make_net_source,
                    make_io_source, make_nccl_source, make_pressure_source, make_lost_source}) {
    out.push_back(make(d));
  }
  return out;
}

}  // namespace stallwatch::trace
