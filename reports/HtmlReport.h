// Self-contained HTML pages (one file: inline CSS and SVG, no script from the network) for a
// prediction (`predict --format html`) and a comparison (`compare --html`). Each page carries the
// JSON it was made from in a <script type="application/json" id="commlens-data"> element, and
// marks its numbers with data-* attributes so tests can read them back.
#pragma once

#include "reports/CompareReport.h"
#include "reports/PredictionReport.h"

#include <string>

namespace commlens {

/// The module tree with forward/backward counts, bytes and (with a cluster) times, bar charts of
/// time (or bytes) per module and per collective kind, and every collective with its "why".
std::string predictionHtml(const PredictionReport &report, llvm::StringRef title);

/// The predicted-vs-measured cells, coloured by agreement, with the summary.
std::string compareHtml(const CompareReport &report);

} // namespace commlens
