#include "metrics/exposition.h"

#include "metrics/otlp/wire.h"
#include "metrics/text_format.h"

namespace stallwatch::metrics {

std::string render_exposition(const Snapshot& snap, const BuildInfo& build,
                              const ExpositionOptions& options, bool openmetrics) {
  std::vector<Family> families = build_model(snap, build);
  std::deque<identity::Identity> stripped;
  shape_families(families, options, stripped);
  return render_text(families, options.ladder_step, openmetrics);
}

std::string render_exposition_gzip(const Snapshot& snap, const BuildInfo& build,
                                   const ExpositionOptions& options, bool openmetrics, int level) {
  std::vector<Family> families = build_model(snap, build);
  std::deque<identity::Identity> stripped;
  shape_families(families, options, stripped);
  otlp::GzipStream gzip(level);
  render_text_in_pieces(families, options.ladder_step, openmetrics, kGzipPiece,
                        [&](std::string_view piece) { gzip.write(piece); });
  return gzip.finish();
}

}  // namespace stallwatch::metrics
