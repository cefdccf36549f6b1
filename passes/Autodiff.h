// The `autodiff` pass: builds the autograd graph the forward recorded and runs torch's autograd
// engine over it (autograd/Engine.h runAutograd), emitting the backward runtime ops in execution
// order.
//
// Reads:  the program graph; the plan (frozen parameters, inputs requiring grad, loss_parallel);
//         state.loss, dtensors, boundarySteps, fsdp, checkpointed, retrainedByStyle, gradAllReduced.
// Writes: state.backward.
#pragma once

#include "passes/Pass.h"

namespace commlens {

class Autodiff : public Pass {
public:
  llvm::StringRef name() const override; // passes/Passes.def
  llvm::Error run(PassContext &ctx) override;
};

} // namespace commlens
