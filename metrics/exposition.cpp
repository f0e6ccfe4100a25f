#include "metrics/exposition.h"

#include "metrics/text_format.h"

namespace stallwatch::metrics {

std::string render_exposition(const Snapshot& snap, const BuildInfo& build,
                              const ExpositionOptions& options, bool openmetrics) {
  std::vector<Family> families = build_model(snap, build);
  std::deque<identity::Identity> stripped;
  strip_identity(families, options, stripped);
  return render_text(families, options.ladder_step, openmetrics);
}

}  // namespace stallwatch::metrics
