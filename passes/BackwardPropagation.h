// The `propagate-backward` pass: the same dispatch over the backward runtime ops the autodiff pass
// built (state.backward), recording collectives as backward ones, charged to each node's scope
// (null: Global only).
//
// Reads:  state.backward; the program; the plan (loss_parallel); options.dispatch
//         (allow-unsupported, the routing skew); state.dtensorMeshes, dtensors, fsdp,
//         checkpointed.
// Writes: state.dtensors (backward values), approximate, collectives (backward), fsdp (runtime
//         flags), warnings.
#pragma once

#include "passes/Pass.h"

namespace commlens {

class BackwardPropagation : public Pass {
public:
  llvm::StringRef name() const override; // passes/Passes.def
  llvm::Error run(PassContext &ctx) override;
};

} // namespace commlens
