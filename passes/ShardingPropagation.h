// The `propagate` pass: dispatches the forward runtime ops as DTensor does (runtime/OpDispatch.h),
// recording the forward collectives.
//
// Reads:  the program graph; the plan (loss_parallel); options.dispatch
//         (allow-unsupported, the routing skew); state.dtensorMeshes, dtensors, fsdp,
//         checkpointed.
// Writes: state.dtensors, approximate, collectives (forward), boundarySteps, fsdp (runtime flags,
//         post-forward order), warnings.
#pragma once

#include "passes/Pass.h"

namespace commlens {

class ShardingPropagation : public Pass {
public:
  llvm::StringRef name() const override; // passes/Passes.def
  llvm::Error run(PassContext &ctx) override;
};

} // namespace commlens
