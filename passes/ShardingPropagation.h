// Walks the runtime ops in execution order, tracking which values are DTensors and their
// placements: the plan's boundary ops (commlens::annotate, ...) run their from_local /
// redistribute / to_local steps; every ATen op with a DTensor operand asks ShardingRules for
// DTensor's strategy, and each operand whose placements differ is redistributed. Every
// redistribution is planned by RedistributePlanner and its collectives are recorded with the
// module CommDebugMode would charge, the op and operand that caused it, and why.
#pragma once

#include "passes/PassManager.h"

namespace commlens {

class ShardingPropagation : public Pass {
public:
  llvm::StringRef name() const override { return "propagate"; }
  llvm::Error run(PassContext &ctx) override;
};

/// The same walk over the backward runtime ops the autodiff pass built (PredictionState::backward),
/// recording collectives as backward ones, charged to each node's scope (null: Global only).
class BackwardPropagation : public Pass {
public:
  llvm::StringRef name() const override { return "propagate-backward"; }
  llvm::Error run(PassContext &ctx) override;
};

} // namespace commlens
