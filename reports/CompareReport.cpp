#include "reports/CompareReport.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

namespace commlens {
namespace {

struct RowModule {
  std::string fqn;
  unsigned depth;
};

/// Measured modules in order, with modules only the prediction has inserted right after the
/// module that precedes them in the prediction.
std::vector<RowModule> mergedModuleOrder(const CommCounts &predicted, const CommCounts &measured) {
  std::vector<RowModule> order;
  for (const ModuleCounts &m : measured.modules())
    order.push_back({m.fqn, m.depth});
  size_t insertAt = 0;
  for (const ModuleCounts &m : predicted.modules()) {
    if (measured.find(m.fqn)) {
      auto it = std::find_if(order.begin(), order.end(), [&](const RowModule &r) { return r.fqn == m.fqn; });
      insertAt = static_cast<size_t>(it - order.begin()) + 1;
      continue;
    }
    order.insert(order.begin() + static_cast<std::ptrdiff_t>(insertAt), RowModule{m.fqn, m.depth});
    ++insertAt;
  }
  return order;
}

std::string phasesLabel(const std::vector<CommPhase> &phases) {
  std::string s;
  for (CommPhase p : phases)
    s += (s.empty() ? "" : "+") + phaseName(p).str();
  return s;
}

} // namespace

CompareReport CompareReport::build(const CommCounts &predicted, const CommCounts &measured,
                                   std::optional<CommPhase> phase) {
  CompareReport r;
  r.predictedFormat = predicted.format;
  r.measuredFormat = measured.format;
  if (phase)
    r.phases = {*phase};
  else
    r.phases = {CommPhase::Forward, CommPhase::Backward};
  for (CommPhase p : r.phases) {
    r.predictedTotal += predicted.total(p);
    r.measuredTotal += measured.total(p);
  }
  static const ModuleCounts kEmpty;
  for (const RowModule &row : mergedModuleOrder(predicted, measured)) {
    const ModuleCounts *pm = predicted.find(row.fqn);
    const ModuleCounts *mm = measured.find(row.fqn);
    if (!pm)
      pm = &kEmpty;
    if (!mm)
      mm = &kEmpty;
    std::set<std::string> keys;
    for (CommPhase p : r.phases) {
      for (const auto &[key, cell] : pm->phase(p))
        keys.insert(key);
      for (const auto &[key, cell] : mm->phase(p))
        keys.insert(key);
    }
    for (const std::string &key : keys) {
      for (CommPhase p : r.phases) {
        CompareCell c;
        c.module = row.fqn;
        c.depth = row.depth;
        c.collective = key;
        c.phase = p;
        if (auto it = pm->phase(p).find(key); it != pm->phase(p).end()) {
          c.predicted = it->second.count;
          c.approximate = it->second.approximate;
          c.predictedBytes = it->second.bytes;
          c.predictedBytesBounds = it->second.bytesBounds;
        }
        c.measured = mm->count(p, key);
        if (auto it = mm->phase(p).find(key); it != mm->phase(p).end())
          c.measuredBytes = it->second.bytes;
        if (c.predicted != 0 || c.measured != 0)
          r.cells.push_back(std::move(c));
      }
    }
  }
  return r;
}

size_t CompareReport::numDiffering() const {
  return std::count_if(cells.begin(), cells.end(), [](const CompareCell &c) { return c.differs(); });
}

size_t CompareReport::numApproximate() const {
  return std::count_if(cells.begin(), cells.end(), [](const CompareCell &c) { return c.approximate; });
}

std::string CompareReport::summaryLine() const {
  size_t approx = numApproximate();
  size_t withBytes = std::count_if(cells.begin(), cells.end(), [](const CompareCell &c) { return c.bytesCompared(); });
  return fmt::format("summary: {} cells, {} differ{}; collectives predicted {}, measured {} ({}){}", cells.size(),
                     numDiffering(), approx ? fmt::format(", {} approximate", approx) : "", predictedTotal,
                     measuredTotal, phasesLabel(phases),
                     withBytes ? fmt::format("; bytes compared on {} cells", withBytes) : "");
}

namespace {
std::string bytesMismatch(const CompareCell &c) {
  if (c.predictedBytesBounds)
    return fmt::format(" (bytes {} measured, outside the routing's bounds [{}, {}])", *c.measuredBytes,
                       c.predictedBytesBounds->first, c.predictedBytesBounds->second);
  return fmt::format(" (bytes {} predicted, {} measured)", *c.predictedBytes, *c.measuredBytes);
}
} // namespace

void CompareReport::printText(llvm::raw_ostream &os) const {
  auto predictedText = [](const CompareCell &c) {
    return c.approximate ? fmt::format("~{}", c.predicted) : fmt::format("{}", c.predicted);
  };
  auto diffText = [](const CompareCell &c) {
    return c.diff() > 0 ? fmt::format("+{}", c.diff()) : fmt::format("{}", c.diff());
  };
  size_t moduleW = 6, keyW = 10, predW = 9, measW = 8, diffW = 4;
  for (const CompareCell &c : cells) {
    moduleW = std::max(moduleW, 2 * c.depth + c.module.size());
    keyW = std::max(keyW, c.collective.size());
    predW = std::max(predW, predictedText(c).size());
    measW = std::max(measW, fmt::format("{}", c.measured).size());
    diffW = std::max(diffW, diffText(c).size());
  }
  os << fmt::format("{:<{}}  {:<{}}  {:<8}  {:>{}}  {:>{}}  {:>{}}\n", "module", moduleW, "collective", keyW, "phase",
                    "predicted", predW, "measured", measW, "diff", diffW);
  for (const CompareCell &c : cells) {
    std::string name = std::string(2 * c.depth, ' ') + c.module;
    os << fmt::format("{:<{}}  {:<{}}  {:<8}  {:>{}}  {:>{}}  {:>{}}{}{}\n", name, moduleW, c.collective, keyW,
                      phaseName(c.phase).str(), predictedText(c), predW, c.measured, measW, diffText(c), diffW,
                      c.differs() ? "  MISMATCH" : "",
                      c.bytesDiffer() ? bytesMismatch(c) : "");
  }
  if (numApproximate())
    os << "~: approximate prediction (depends on ops commlens does not model)\n";
  os << summaryLine() << "\n";
}

std::string CompareReport::toJson() const {
  using ordered_json = nlohmann::ordered_json;
  ordered_json doc;
  doc["format"] = "commlens-compare";
  doc["version"] = 1;
  doc["predicted"] = {{"file", predictedPath}, {"format", formatName(predictedFormat).str()}};
  doc["measured"] = {{"file", measuredPath}, {"format", formatName(measuredFormat).str()}};
  ordered_json phaseList = ordered_json::array();
  for (CommPhase p : phases)
    phaseList.push_back(phaseName(p).str());
  doc["phases"] = phaseList;
  ordered_json rows = ordered_json::array();
  for (const CompareCell &c : cells) {
    ordered_json row;
    row["module"] = c.module;
    row["depth"] = c.depth;
    row["collective"] = c.collective;
    row["phase"] = phaseName(c.phase).str();
    row["predicted"] = c.predicted;
    row["measured"] = c.measured;
    row["diff"] = c.diff();
    row["approximate"] = c.approximate;
    if (c.predictedBytes)
      row["predicted_bytes"] = *c.predictedBytes;
    if (c.predictedBytesBounds)
      row["predicted_bytes_bounds"] = {c.predictedBytesBounds->first, c.predictedBytesBounds->second};
    if (c.measuredBytes)
      row["measured_bytes"] = *c.measuredBytes;
    row["match"] = !c.differs();
    rows.push_back(std::move(row));
  }
  doc["cells"] = std::move(rows);
  ordered_json summary;
  summary["cells"] = cells.size();
  summary["differ"] = numDiffering();
  summary["approximate"] = numApproximate();
  summary["bytes_compared"] =
      std::count_if(cells.begin(), cells.end(), [](const CompareCell &c) { return c.bytesCompared(); });
  summary["identical"] = identical();
  summary["predicted_collectives"] = predictedTotal;
  summary["measured_collectives"] = measuredTotal;
  doc["summary"] = std::move(summary);
  return doc.dump(2) + "\n";
}

} // namespace commlens
