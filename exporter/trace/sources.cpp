#include "trace/sources.h"

namespace stallwatch::trace {

// One factory per source file, defined there.
std::unique_ptr<Source> make_cuda_source(const SourceDeps& d);      // cuda_source.cpp
std::unique_ptr<Source> make_sched_source(const SourceDeps& d);     // sched_source.cpp
std::unique_ptr<Source> make_host_source(const SourceDeps& d);      // host_source.cpp (memory)
std::unique_ptr<Source> make_net_source(const SourceDeps& d);       // net_source.cpp
std::unique_ptr<Source> make_io_source(const SourceDeps& d);        // io_source.cpp
std::unique_ptr<Source> make_nccl_source(const SourceDeps& d);      // nccl_source.cpp
std::unique_ptr<Source> make_pressure_source(const SourceDeps& d);  // pressure_source.cpp
std::unique_ptr<Source> make_cpu_limit_source(const SourceDeps& d);  // cpu_limit_source.cpp
std::unique_ptr<Source> make_lost_source(const SourceDeps& d);      // lost_source.cpp
std::unique_ptr<Source> make_inflight_source(const SourceDeps& d);  // inflight_source.cpp

std::vector<std::unique_ptr<Source>> default_sources(const SourceDeps& d) {
  std::vector<std::unique_ptr<Source>> out;
  for (auto make : {make_cuda_source, make_sched_source, make_host_source, make_net_source,
                    make_io_source, make_nccl_source, make_pressure_source, make_cpu_limit_source, make_lost_source, make_inflight_source}) {
    out.push_back(make(d));
  }
  return out;
}

}  // namespace stallwatch::trace
