// Reverse mode, as torch 2.13's autograd runs it on the predicted forward program:
//
//   loss       appends the plan's loss to the forward graph, outside every module (CommDebugMode
//              counts its collectives under Global only): `sum` (sum of every output, added up)
//              or `cross_entropy` (flatten, _log_softmax, nll_loss_forward; the targets become a
//              Replicate DTensor when the logits are one).
//   autodiff   builds the autograd graph the forward recorded (one node per differentiable runtime
//              op, per DTensor boundary step -- from_local, redistribute, to_local -- per module
//              call's BackwardHookFunction on its inputs and on its outputs, one AccumulateGrad per
//              leaf), then runs the engine: the ready node with the highest sequence number first
//              (AccumulateGrad first of all), gradients summed (`add`) in a node's input buffer when
//              a value has several consumers, broadcast gradients reduced (`sum_to`) as the engine
//              validates outputs. Each node's backward formula (derivatives.yaml semantics) is
//              emitted as runtime ops into PredictionState::backward, in execution order, each in
//              the module whose output hook (CommDebugMode's full-backward pre-hook) fired last.
//              Boundary steps become commlens::from_local_backward / redistribute_backward /
//              to_local_backward, run by BackwardPropagation.
#pragma once

#include "ir/Graph.h"
#include "ir/ShardingPlan.h"
#include "state/PredictionState.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Error.h"

namespace commlens {

/// The values autograd starts from: trainable floating parameters (not frozen by the plan,
/// unless `retrained` re-registered them) and user inputs the plan marks requires_grad.
llvm::DenseSet<const Value *> gradLeaves(const Graph &g, const ShardingPlan &plan,
                                         const llvm::DenseSet<const Value *> *retrained);

/// The values of `g` that require grad: gradLeaves and the floating results of every grad-enabled
/// op reading one.
llvm::DenseSet<const Value *> valuesRequiringGrad(const Graph &g, const ShardingPlan &plan,
                                                  const llvm::DenseSet<const Value *> *retrained);

/// The `loss` step: appends the plan's loss to the forward graph (state.loss).
llvm::Error appendLoss(Graph &forward, const ShardingPlan &plan, PredictionState &state);

/// The `autodiff` step: builds the autograd graph of `forward` and runs the engine, filling
/// state.backward.
llvm::Error runAutograd(const Graph &forward, const ShardingPlan &plan, PredictionState &state);

} // namespace commlens
