#include "metrics/exposition.h"

#include "metrics/text_format.h"

namespace stallwatch::metrics {

std::string render_exposition(const Snapshot& snap, const BuildInfo& build) {
  return render_text(build_model(snap, build));
}

}  // namespace stallwatch::metrics
