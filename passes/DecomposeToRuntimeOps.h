// The `decompose` pass: rewrites the exported graph into the ATen ops DTensor receives at run time
// (aten/Decomposer.h), on the CPU or the plan's CUDA target.
//
// Reads:  the program graph; the plan's mesh device type and, for a CUDA plan, its gradient leaves
//         (autograd/Engine.h gradLeaves); options.cudaTarget.
// Writes: the program graph (replaced by runtime ops).
#pragma once

#include "passes/Pass.h"

namespace commlens {

class DecomposeToRuntimeOps : public Pass {
public:
  llvm::StringRef name() const override; // passes/Passes.def
  llvm::Error run(PassContext &ctx) override;
};

} // namespace commlens
