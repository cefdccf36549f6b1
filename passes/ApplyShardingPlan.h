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
#pragma once

#include "passes/PassManager.h"

namespace commlens {

class ApplyShardingPlan : public Pass {
public:
  llvm::StringRef name() const override { return "apply-plan"; }
  llvm::Error run(PassContext &ctx) override;
};

} // namespace commlens
