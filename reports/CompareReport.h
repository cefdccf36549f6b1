// `commlens compare`: predicted vs measured collective counts, cell by cell.
//
// A cell is (module, collective key, phase). The report lists every cell where either side is
// non-zero, modules in tree order (the measured side's order, modules only predicted inserted
// after their predicted predecessor), keys sorted, forward before backward within a key.
#pragma once

#include "reports/CommCounts.h"

#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace commlens {

struct CompareCell {
  std::string module;
  unsigned depth = 0;
  std::string collective;
  CommPhase phase = CommPhase::Forward;
  int64_t predicted = 0;
  int64_t measured = 0;
  bool approximate = false; // the predicted count is approximate
  /// Bytes sent on one rank, where the source records them; compared when both sides do.
  std::optional<int64_t> predictedBytes, measuredBytes;
  /// The predicted bytes' bounds where they depend on the routing of MoE tokens: the measured
  /// bytes must lie within them (the run's routing is its own).
  std::optional<std::pair<int64_t, int64_t>> predictedBytesBounds;

  int64_t diff() const { return predicted - measured; }
  bool bytesCompared() const { return predictedBytes && measuredBytes; }
  bool bytesDiffer() const {
    if (!bytesCompared())
      return false;
    if (predictedBytesBounds)
      return *measuredBytes < predictedBytesBounds->first || *measuredBytes > predictedBytesBounds->second;
    return *predictedBytes != *measuredBytes;
  }
  bool differs() const { return predicted != measured || bytesDiffer(); }
};

struct CompareReport {
  std::vector<CompareCell> cells;
  std::vector<CommPhase> phases;              // the phases compared
  int64_t predictedTotal = 0, measuredTotal = 0; // over the phases compared (Global or roots)
  std::string predictedPath, measuredPath;
  CountsFormat predictedFormat = CountsFormat::CommlensCounts, measuredFormat = CountsFormat::CommlensCounts;

  /// `phase`: nullopt compares both phases.
  static CompareReport build(const CommCounts &predicted, const CommCounts &measured,
                             std::optional<CommPhase> phase = std::nullopt);

  size_t numDiffering() const;
  size_t numApproximate() const;
  bool identical() const { return numDiffering() == 0; }

  /// The table, an optional legend for approximate cells, and the summary line.
  void printText(llvm::raw_ostream &os) const;
  std::string summaryLine() const;
  std::string toJson() const;
};

} // namespace commlens
