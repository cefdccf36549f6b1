// Collective counts per module and phase: what CommDebugMode measures and what the predictor
// predicts, in one data model.
//
// A CommCounts holds modules in tree order (pre-order, as CommDebugMode's module tracker first
// sees them run forward; "Global" is the root when present). Each module has, per phase
// (forward, backward), a map from collective key (exactly as CommDebugMode prints the op
// packet: "c10d_functional.all_reduce", "_dtensor.shard_dim_alltoall", ...) to a cell: a count,
// inclusive of descendants like CommDebugMode's, and an `approximate` flag (the predictor marks
// counts that depend on ops it does not model).
//
// Two input formats, auto-detected:
//  * CommDebugMode's `generate_json_dump` tree: {"fqn", "module_type", "parameters", "children",
//    "collectives_forward": [[op, count], ...], "collectives_backward": [...], "operations_*"};
//    unknown keys are ignored; a module called twice appears twice with the same counts.
//  * the flat counts file: {"format": "commlens-counts", "version": 1, "modules": [{"fqn",
//    "forward": {op: count}, "backward": {op: count}}, ...], ...}.
// Bytes per cell, where recorded: "collective_bytes_<phase>" (tree) / "<phase>_bytes" (counts), and
// for bytes that depend on an MoE layer's routing "collective_bytes_bounds_<phase>" /
// "<phase>_bytes_bounds": {op: [fewest, most]}.
// Both may carry a top-level "phase" ("forward", "backward" or "both": which phases were run),
// and, per module, "approximate_forward" / "approximate_backward": [op, ...], the
// collective keys whose counts are approximate (a key listed there without a count is an
// approximate 0).
#pragma once

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace commlens {

enum class CommPhase : uint8_t { Forward = 0, Backward = 1 };
constexpr std::array<CommPhase, 2> kCommPhases = {CommPhase::Forward, CommPhase::Backward};
llvm::StringRef phaseName(CommPhase phase); // "forward" / "backward"

struct CommCell {
  int64_t count = 0;
  bool approximate = false;
  /// Bytes all these collectives send on one rank (rank 0), when the source records them.
  std::optional<int64_t> bytes;
  /// Their estimated time on the prediction's cluster (predict --cluster), microseconds.
  std::optional<double> timeUs;
  /// Where the bytes depend on the routing of MoE tokens (a prediction's expert-parallel
  /// all-to-alls): the fewest and most they can be; `bytes` is then the balanced-routing value.
  std::optional<std::pair<int64_t, int64_t>> bytesBounds{};
  bool operator==(const CommCell &) const = default;
};

/// Collective key -> cell, sorted by key.
using CommCellMap = std::map<std::string, CommCell, std::less<>>;

struct ModuleCounts {
  std::string fqn;        // CommDebugMode's name: "Global", "Transformer", "Transformer.layers.0.attention"
  std::string moduleType; // CommDebugMode's module_type ("class 'torch.nn.modules.linear.Linear'"); may be empty
  unsigned depth = 0;     // 0 for a root ("Global"); children are one deeper than their parent
  std::array<CommCellMap, 2> phases;

  CommCellMap &phase(CommPhase p) { return phases[static_cast<size_t>(p)]; }
  const CommCellMap &phase(CommPhase p) const { return phases[static_cast<size_t>(p)]; }
  /// The count for `key` in `p` (0 when absent).
  int64_t count(CommPhase p, llvm::StringRef key) const;
  int64_t total(CommPhase p) const;
};

enum class CountsFormat { CommDebugModeTree, CommlensCounts };
llvm::StringRef formatName(CountsFormat format); // "commdebugmode-tree" / "commlens-counts"

class CommCounts {
public:
  CountsFormat format = CountsFormat::CommlensCounts;
  /// From an optional top-level "phase": "forward" / "backward" (the file holds only that
  /// phase's counts, like `commlens.measure --phase`); nullopt for "both" or no "phase".
  std::optional<CommPhase> onlyPhase;
  /// "phase": "inference": the forward counts of a no-grad inference forward (onlyPhase is Forward),
  /// which a training forward's counts are not compared with.
  bool inference = false;
  /// The file states a "phase" (CommDebugMode's own dump does not).
  bool phaseStated = false;
  /// The "phase" value the file states: "forward", "backward", "both" or "inference".
  llvm::StringRef phaseLabel() const;

  const std::vector<ModuleCounts> &modules() const { return modules_; }
  const ModuleCounts *find(llvm::StringRef fqn) const;
  ModuleCounts *find(llvm::StringRef fqn);
  /// Appends a module (pre-order: its parent, if any, must already be there, with depth - 1).
  /// Fails on a duplicate fqn.
  llvm::Expected<ModuleCounts *> addModule(llvm::StringRef fqn, unsigned depth, llvm::StringRef moduleType = "");

  /// Total collectives issued in `p`: the "Global" module's counts when present, else the sum
  /// over the roots (depth 0).
  int64_t total(CommPhase p) const;

  /// The flat commlens-counts document (modules in order, keys sorted, approximate_* lists only
  /// where some cell is approximate).
  std::string toCountsJson() const;
  /// CommDebugMode's generate_json_dump tree (noise level 0: no operations, no parameters),
  /// plus approximate_forward/backward where some cell is approximate. Needs a single root.
  std::string toTreeJson() const;

private:
  std::vector<ModuleCounts> modules_;
  llvm::StringMap<size_t> index_;
};

/// Parses either format (auto-detected). Messages are one line: "<json path>: <what>" (the path
/// is dotted, e.g. "children[0].collectives_forward[1]", and absent at the top level).
llvm::Expected<CommCounts> parseCommCounts(llvm::StringRef text);
/// Reads and parses a file. Messages are one line and start with "<path>: ".
llvm::Expected<CommCounts> loadCommCounts(llvm::StringRef path);

} // namespace commlens
