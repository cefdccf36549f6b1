// What a sharding rule decides for one op call (torch 2.13 torch/distributed/tensor/_op_schema.py:
// the DTensorSpec of each operand, the OpSpec the strategy selection picks), shared by the rule
// registry (ShardingRules.h) and the rules themselves (rules/RuleEngine.h).
#pragma once

#include "ir/Mesh.h"
#include "ir/Types.h"

#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <string>

namespace commlens {

/// A DTensor operand as sharding propagation sees it: its placements and its global meta.
struct DTensorSpec {
  Placements placements;
  TensorMeta meta;
};

/// The strategy DTensor selects for one op call.
struct ShardingDecision {
  /// One entry per tensor operand of the node (Node::operands() order, tensor operands only;
  /// symbolic scalars are skipped): the placements DTensor redistributes that operand to before
  /// running the op, or nullopt when the operand is not a DTensor (plain tensors are never
  /// redistributed).
  llvm::SmallVector<std::optional<Placements>, 4> operandPlacements;
  /// One entry per tensor result (Node::results() order): its placements, or nullopt for a
  /// result that is not a DTensor (e.g. an integer result of a factory-like op).
  llvm::SmallVector<std::optional<Placements>, 2> resultPlacements;
  /// Human-readable reason ("mm: candidate [S(0)|R,S(0)] at zero cost"), for `why` records.
  std::string why;
};

} // namespace commlens
