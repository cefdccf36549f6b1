// The registry of op -> DTensor sharding strategy (torch 2.13 semantics), in one place. Given an
// op node and the placements of its DTensor operands, it reproduces the strategy DTensor's
// sharding propagation selects: the placements each operand must be redistributed to, and the
// placements of each result. Most rules are built from one einsum-like description.
#pragma once

#include "ir/Graph.h"
#include "ir/Mesh.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

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

class ShardingRules {
public:
  /// The process-wide registry.
  static const ShardingRules &get();

  /// Whether `op` ("aten::mm.default") has a rule.
  bool supports(llvm::StringRef op) const;

  /// Every op with a rule, sorted ("aten::mm.default", ...).
  std::vector<std::string> supportedOps() const;

  /// Decides the strategy for `node` on `mesh`. `operands` is aligned with the node's tensor
  /// operands (Node::operands() restricted to ValueKind::Tensor): the DTensor spec of each, or
  /// nullopt for a plain local tensor. Global result metas are on the node's results.
  /// Errors name the op and the reason (unsupported op, unsupported argument form).
  llvm::Expected<ShardingDecision> decide(const Node &node, llvm::ArrayRef<std::optional<DTensorSpec>> operands,
                                          const DeviceMesh &mesh) const;
};

} // namespace commlens
