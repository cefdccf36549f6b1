// The machinery shared by every sharding rule (torch 2.13 `_sharding_prop.py`, `_ops/utils.py`,
// `_ops/single_dim_strategy.py`, `_collective_utils.py`), written for commlens:
//
//   * OpCall: one op call as DTensor's sharding propagation sees it (the DTensor operands with
//     their current placements and global metas, plain scalar tensors promoted to Replicate);
//   * Candidate: one OpSpec of a strategy (input placements, output placements, costs);
//   * expandSingleDim: a single-mesh-dim rule list -> the full-mesh candidate list (the implicit
//     all-Replicate rule first, placeholder filling, Cartesian product over mesh dims with the
//     first mesh dim varying slowest, mixed-Partial / in-place / shardability filters, costs);
//   * redistributeCost: DTensor's `redistribute_cost` (ring-collective latency/bandwidth model
//     over the greedy transform steps of RedistributePlanner);
//   * selectMinCost: DTensor's `_select_min_cost_strategy`.
#pragma once

#include "ir/Error.h"
#include "ir/Graph.h"
#include "ir/Mesh.h"
#include "dtensor/ShardingDecision.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"

#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace commlens::rules {

inline constexpr double kInfCost = std::numeric_limits<double>::infinity();

/// One tensor operand of an op call, as a DTensorSpec.
struct OpInput {
  Placements placements; ///< current placements (normalised shard dims)
  TensorMeta meta;       ///< global meta
  bool isDTensor = true; ///< false: a plain numel-1 tensor DTensor treats as Replicate
  Value *value = nullptr;
};

/// One op call as sharding propagation sees it.
struct OpCall {
  const Node *node = nullptr;
  std::string op; ///< "aten::mm.default"
  const DeviceMesh *mesh = nullptr;
  llvm::SmallVector<OpInput, 4> inputs; ///< aligned with the node's tensor operands
  llvm::SmallVector<Value *, 2> results;

  /// The argument with schema name `name`, else the `pos`-th positional (non-keyword) argument;
  /// null when absent (the schema default applies).
  const Argument *arg(llvm::StringRef name, unsigned pos) const;
  std::optional<int64_t> intArg(llvm::StringRef name, unsigned pos) const;
  std::optional<IntList> intListArg(llvm::StringRef name, unsigned pos) const;
  /// Sizes of the global shape of input `i` (symbolic sizes by hint).
  llvm::SmallVector<int64_t, 4> shape(unsigned i) const;
  llvm::SmallVector<int64_t, 4> resultShape(unsigned i) const;
  int64_t rank(unsigned i) const { return inputs[i].meta.rank(); }

  template <typename... Args> llvm::Error error(fmt::format_string<Args...> format, Args &&...args) const {
    return makeError("{}: {}", op, fmt::format(format, std::forward<Args>(args)...));
  }
};

/// One OpSpec of a strategy.
struct Candidate {
  /// Per result (node result order); nullopt for a result that is not a DTensor.
  llvm::SmallVector<std::optional<Placements>, 2> outputs;
  /// Per OpCall input: the placements the input is redistributed to.
  llvm::SmallVector<Placements, 4> inputs;
  /// Per OpCall input: redistribute cost from its current placements.
  llvm::SmallVector<double, 4> costs;

  double totalCost() const;
  std::string str() const; ///< "[S(0) | S(0), R]"
};

/// DTensor's redistribute_cost(current, target) for a tensor of global `meta`.
double specRedistributeCost(const DeviceMesh &mesh, const TensorMeta &meta, llvm::ArrayRef<Placement> current,
                        llvm::ArrayRef<Placement> target);

/// Fills `costs` of a candidate from the call's current input placements.
/// A strategy's candidates, in DTensor's order.
using Cands = llvm::SmallVector<Candidate, 8>;

void assignCosts(const OpCall &call, Candidate &c);
/// A rule with one candidate: its costs assigned, as the only entry.
Cands singleCandidate(const OpCall &call, Candidate c);

/// How selectMinCost chose.
enum class SelectReason : uint8_t { Only, NegativeCost, NoRedistribute, ZeroCost, MinCost };
llvm::StringRef name(SelectReason r);

/// DTensor's `_select_min_cost_strategy` (with the op schema, so the negative / no-redistribute /
/// zero-cost preferences apply). Candidates must be non-empty.
size_t selectMinCost(const OpCall &call, llvm::ArrayRef<Candidate> cands, SelectReason *reason = nullptr);

/// One entry of a single-mesh-dim rule: a placement, a sharding placeholder (filled with Shard of
/// `dim` when some input is sharded, the rule dropped otherwise), or None (a masked-off output).
struct RulePlacement {
  enum class Kind : uint8_t { Concrete, Placeholder, None } kind = Kind::Concrete;
  Placement p; ///< Concrete
  int64_t dim = 0; ///< Placeholder
  static RulePlacement of(Placement p) { return {Kind::Concrete, p, 0}; }
  static RulePlacement ph(int64_t d) { return {Kind::Placeholder, Placement::replicate(), d}; }
  static RulePlacement none() { return {Kind::None, Placement::replicate(), 0}; }
  static RulePlacement R() { return of(Placement::replicate()); }
  static RulePlacement P(ReduceOp op = ReduceOp::Sum) { return of(Placement::partial(op)); }
};
/// [outputs..., inputs...] over one mesh dim.
using SingleDimRule = llvm::SmallVector<RulePlacement, 6>;

struct ExpandOptions {
  unsigned numOutputs = 1;
  bool allowUneven = false; ///< accept an unshardable input spec equal to its current placements
  bool inplace = false;     ///< input 0 and output 0 must keep input 0's current placements
  bool insertReplicate = true; ///< single-dim strategies: prepend the all-Replicate rule
  bool fillPlaceholders = true;
};

/// expand_to_full_mesh_op_strategy over rules (placeholders filled from the call's inputs).
/// Output slots map to node results 1:1 when `numOutputs` equals the result count.
Cands expandSingleDim(const OpCall &call, std::vector<SingleDimRule> rules,
                                                const ExpandOptions &opts);

/// DTensor's OpSchema.is_inplace_op: the op's name ends with '_'.
bool isInplaceName(llvm::StringRef op);

/// is_tensor_shardable for concrete sizes.
bool isShardable(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<Placement> placements, const DeviceMesh &mesh);
bool isEvenlyShardableOnDim(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<Placement> placements,
                            const DeviceMesh &mesh, int64_t dim);

/// A strategy function: the candidate list of one call (errors name the op).
using StrategyFn = llvm::Expected<Cands> (*)(const OpCall &);

/// DTensor's expansion of a foreach / fused list op (a TupleStrategy): per list index an element
/// call named `elementOp` (the index-th tensor of every list operand, every non-list tensor
/// operand, the index-th tensor of every result list) is decided by `elementRule` and its
/// min-cost candidate selected on its own; a non-list operand takes the first element's choice.
/// Returns the composition as the one candidate of the list op.
llvm::Expected<Cands> perElement(const OpCall &call, llvm::StringRef elementOp, StrategyFn elementRule);

/// The one candidate following the single input's placements exactly (contiguous, detach, alias,
/// ...: DTensor's default_strategy): the only rule a _StridedShard operand may go through.
llvm::Expected<Cands> followInputRule(const OpCall &call);

/// Registration tables, filled per family.
using RuleTable = llvm::StringMap<StrategyFn>;
/// Whether DTensor registers `op` as a functional pointwise op (PointwiseRules' families).
bool isPointwiseOp(llvm::StringRef op);
void registerMatrixRules(RuleTable &t);
void registerPointwiseRules(RuleTable &t);
void registerViewRules(RuleTable &t);
void registerTensorRules(RuleTable &t);
void registerReductionRules(RuleTable &t);
void registerNormEmbeddingRules(RuleTable &t);
void registerBackwardRules(RuleTable &t);
void registerSpatialRules(RuleTable &t);
void registerConvolutionRules(RuleTable &t);
void registerLinalgRules(RuleTable &t);
void registerAttentionRules(RuleTable &t);
/// Ops without a DTensor strategy whose strategy DTensor derives from their decomposition.
void registerDecompositionRules(RuleTable &t);
bool hasDecompositionRule(llvm::StringRef op);

// Small helpers shared by rule files.
int64_t normDim(int64_t d, int64_t rank);
Placements replicatePlacements(const DeviceMesh &mesh);
/// Replicates Shard(dim) entries (unshard_tensor_dim).
Placements unshardDim(llvm::ArrayRef<Placement> ps, int64_t dim);
/// Shard(d) for d > removed -> Shard(d-1) (shift_shard_dims_after_remove).
Placements shiftAfterRemove(llvm::ArrayRef<Placement> ps, int64_t removed);
bool isDimSharded(llvm::ArrayRef<Placement> ps, int64_t dim);
/// A candidate whose outputs are all `out` (one per node result).
Candidate followCandidate(const OpCall &call, Placements in, Placements out);

} // namespace commlens::rules
