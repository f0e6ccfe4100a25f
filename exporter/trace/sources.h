// The evidence sources of `run`, in reading order (the order in which cgroups are first seen,
// and so which of them fall into the overflow series past --max-cgroups, follows it). Adding a
// source: a factory here and a row in sources.cpp, its trio (source.h), a test and a line in
// docs/architecture.md.
#pragma once

#include <memory>
#include <vector>

#include "host/procfs.h"
#include "trace/source.h"

namespace stallwatch::identity {
class CgroupResolver;
}

namespace stallwatch::trace {

class Tracer;

struct SourceDeps {
  Tracer& tracer;
  const host::Procfs& fs;
  const identity::CgroupResolver& resolver;
};

std::unique_ptr<Source> make_cuda_source(const SourceDeps& d);      // cuda_source.cpp
std::unique_ptr<Source> make_sched_source(const SourceDeps& d);     // sched_source.cpp
std::unique_ptr<Source> make_host_source(const SourceDeps& d);      // host_source.cpp (memory)
std::unique_ptr<Source> make_net_source(const SourceDeps& d);       // net_source.cpp
std::unique_ptr<Source> make_io_source(const SourceDeps& d);        // io_source.cpp
std::unique_ptr<Source> make_nccl_source(const SourceDeps& d);      // nccl_source.cpp
std::unique_ptr<Source> make_pressure_source(const SourceDeps& d);  // pressure_source.cpp
std::unique_ptr<Source> make_lost_source(const SourceDeps& d);      // lost_source.cpp

std::vector<std::unique_ptr<Source>> default_sources(const SourceDeps& d);

}  // namespace stallwatch::trace
