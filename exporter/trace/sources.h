// The evidence sources of `run`, in reading order (the order in which cgroups are first seen,
// and so which of them fall into the overflow series past --max-cgroups, follows it). Adding a
// source: its trio (source.h), its row in sources.cpp, a test and a line in
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

// What a source may need to find its maps and read the host.
struct SourceDeps {
  Tracer& tracer;
  const host::Procfs& fs;
  const identity::CgroupResolver& resolver;
};

std::vector<std::unique_ptr<Source>> default_sources(const SourceDeps& d);

}  // namespace stallwatch::trace
