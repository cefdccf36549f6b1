// Walks the runtime ops in execution order, as DTensor's OpDispatcher
// (torch/distributed/tensor/_dispatch.py) dispatches them, tracking which values are DTensors and
// their placements: the plan's boundary ops (commlens::annotate, ...) run their from_local /
// redistribute / to_local steps; every ATen op with a DTensor operand asks ShardingRules for
// DTensor's strategy, and each operand whose placements differ is redistributed. Every
// redistribution is planned by RedistributePlanner and its collectives are recorded with the
// module CommDebugMode would charge, the op and operand that caused it, and why. FSDP2's hooks
// (fsdp/FullyShard.h) and activation checkpoint recomputation (autograd/ActivationCheckpoint.h)
// run at the nodes that stand for them.
#pragma once

#include "ir/Graph.h"
#include "ir/ShardingPlan.h"
#include "state/PredictionState.h"

#include "llvm/Support/Error.h"

namespace commlens {

/// What a dispatch assumes where the program does not say.
struct DispatchOptions {
  /// An op without a sharding rule takes its DTensor operands as replicated and makes what
  /// depends on it approximate.
  bool allowUnsupported = false;
  /// The routing model of MoE tokens: the busiest expert-parallel rank's experts get this many
  /// times the balanced number of routed rows (at most every row of its group); 1 is balanced
  /// top-k routing.
  double routingSkew = 1.0;
};

/// Sets `options.routingSkew`, a finite number of at least 1 (an error naming the value otherwise).
llvm::Error setRoutingSkew(DispatchOptions &options, double skew);

/// Dispatches `graph` (the program's forward graph, or the backward graph autodiff built),
/// recording its collectives as `phase` ones.
llvm::Error dispatchRuntimeOps(const ExportedProgram &program, const ShardingPlan *plan, const Graph &graph, Phase phase,
                               const DispatchOptions &options, PredictionState &state);

} // namespace commlens
