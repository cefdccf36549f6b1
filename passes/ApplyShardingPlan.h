// Applies the plan the way parallelize_module does at run time: parameters become DTensors with
// the placements the styles give them, and at every styled module call the steps its hooks take
// are inserted as `commlens::` boundary ops, in the module's scope (CommDebugMode charges hook
// collectives to the module):
//   commlens::annotate(x, layout, desired, use_local_output)   PrepareModuleInput/Output, and the
//       input side of Colwise/Rowwise: from_local(layout) when x is a plain tensor, redistribute
//       to `desired` when the layouts differ (compared unnormalised, as torch compares them),
//       to_local when use_local_output.
//   commlens::sequence_parallel_input(x, sharding)   redistribute a DTensor whose placements
//       differ, or from_local a plain tensor.
//   commlens::redistribute_output(y, layout, use_local_output)   Colwise/Rowwise/SequenceParallel
//       outputs: redistribute when the placements differ (no layout: none), to_local if asked.
// Which values are DTensors is decided later, by ShardingPropagation, which runs these ops.
//
// Reads:  the program graph; the plan (styles, placements, frozen parameters, activation
//         checkpoints, fully_shard units).
// Writes: the program graph (boundary ops, checkpoint wrapper scopes, FSDP class names);
//         state.dtensorMeshes, dtensors (parameters), retrainedByStyle,
//         gradAllReduced, fsdp.units, checkpointed, warnings.
#pragma once

#include "passes/Pass.h"

namespace commlens {

class ApplyShardingPlan : public Pass {
public:
  llvm::StringRef name() const override; // passes/Passes.def
  llvm::Error run(PassContext &ctx) override;
};

} // namespace commlens
