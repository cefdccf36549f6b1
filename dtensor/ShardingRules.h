// The registry of op -> DTensor sharding strategy (torch 2.13 semantics), in one place. Given an
// op node and the placements of its DTensor operands, it reproduces the strategy DTensor's
// sharding propagation selects: the placements each operand must be redistributed to, and the
// placements of each result. Most rules are built from one einsum-like description.
#pragma once

#include "dtensor/ShardingDecision.h"
#include "ir/Graph.h"
#include "ir/Mesh.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace commlens {

class ShardingRules {
public:
  /// The process-wide registry.
  static const ShardingRules &get();

  /// Whether `op` ("aten::mm.default") has a rule.
  bool supports(llvm::StringRef op) const;

  /// Whether `op` is one DTensor registers as pointwise (its operands broadcast together).
  bool isPointwise(llvm::StringRef op) const;

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
