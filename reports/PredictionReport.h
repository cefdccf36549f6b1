// The prediction report: collective counts per module and phase, aggregated the way
// CommDebugMode aggregates them (a collective counts for its module, every ancestor and
// "Global"), as CommDebugMode's tracing table or its generate_json_dump tree, extended with one
// record per collective (op key, mesh dims, placements, bytes per rank, the op, operand and
// module that caused it, and why).
#pragma once

#include "state/PredictionState.h"
#include "reports/CommCounts.h"

#include "ir/Cluster.h"
#include "ir/Graph.h"
#include "ir/ShardingPlan.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace commlens {

/// Communication totals of one group of collectives (a phase, a mesh dim).
struct CommTotals {
  int64_t collectives = 0;
  int64_t bytesPerRank = 0;
  double timeUs = 0;
};
inline CommTotals operator+(const CommTotals &a, const CommTotals &b) {
  return {a.collectives + b.collectives, a.bytesPerRank + b.bytesPerRank, a.timeUs + b.timeUs};
}

/// Per mesh dim (or dims, for collectives over several) and phase, with the group's topology.
struct MeshDimTotals {
  std::string dims; // "tp", "dp,tp"
  int64_t ranks = 1, nodes = 1;
  CommTotals forward, backward;
  CommTotals both() const { return forward + backward; }
};

/// "12.3 us", "4.567 ms", "1.234 s".
std::string formatMicroseconds(double us);

/// The routing model a routed collective's bytes are predicted under: "balanced routing", or
/// "routing skew 1.5: the busiest rank" (predict --routing-skew).
std::string routingModel(const CollectiveRecord &c);

struct PredictionReport {
  const ExportedProgram *program = nullptr;
  const ShardingPlan *plan = nullptr;
  const PredictionState *state = nullptr;
  /// The cluster the collectives were timed on (null: no times).
  const Cluster *cluster = nullptr;
  bool forward = true, backward = false;
  /// The forward is a no-grad inference forward (PredictPhase::Inference).
  bool inference = false;
  CommCounts counts;

  /// An error only when the module rows cannot be laid out (a name twice, a row without a
  /// parent): a bug in the scope tree or in build itself, reported rather than assumed away.
  static llvm::Expected<PredictionReport> build(const ExportedProgram &program, const ShardingPlan &plan,
                                                const PredictionState &state, bool forward, bool backward,
                                                const Cluster *cluster = nullptr);
  /// What the report covers, as "phase" names it in the JSON: "forward", "backward", "both" or
  /// "inference".
  llvm::StringRef phaseName() const;
  /// Whether the report covers this collective's phase.
  bool includes(const CollectiveRecord &c) const { return c.phase == Phase::Forward ? forward : backward; }
  /// Step totals per phase over the phases predicted (times only with a cluster).
  CommTotals totals(Phase phase) const;
  /// Totals per mesh dim, in the order of first use.
  std::vector<MeshDimTotals> meshDimTotals() const;
  /// CommDebugMode's tracing table (noise 0: counts; 1: + module types, parameter placements and
  /// one line per collective with its cause).
  void printTable(llvm::raw_ostream &os, int noiseLevel) const;
  /// CommDebugMode's generate_json_dump tree (as at noise level 1 or more: module types and
  /// parameter placements) with "collectives_*_detail" records per module.
  std::string toJson() const;
  /// toJson, written as it is made (an 8 MB tree for a 126-layer model's two phases).
  void writeJson(llvm::raw_ostream &os) const;
  /// The module's own DTensor parameters as CommDebugMode lists them: (name, placements repr).
  llvm::ArrayRef<std::pair<std::string, std::string>> dtensorParameters(const ModuleScope &s) const;

private:
  void printTimeSummary(llvm::raw_ostream &os) const;
  /// dtensorParameters by module path (on the tree checkpoint_wrapper leaves), found once.
  std::map<std::string, std::vector<std::pair<std::string, std::string>>, std::less<>> parameters_;
};

} // namespace commlens
