// The `loss` pass: appends the plan's loss to the forward graph (autograd/Engine.h appendLoss),
// outside every module.
//
// Reads:  the plan (loss, loss_parallel); the program graph's outputs.
// Writes: the program graph (the loss ops); state.loss.
#pragma once

#include "passes/Pass.h"

namespace commlens {

class AppendLoss : public Pass {
public:
  llvm::StringRef name() const override; // passes/Passes.def
  llvm::Error run(PassContext &ctx) override;
};

} // namespace commlens
