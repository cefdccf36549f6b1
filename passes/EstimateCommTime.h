// The `estimate-time` pass: times every predicted collective on options.cluster with the
// communication model (comm/CommTimeModel.h); a no-op without a cluster.
//
// Reads:  options.cluster; the plan's mesh; state.collectives.
// Writes: CollectiveRecord::time of state.collectives.
#pragma once

#include "passes/Pass.h"

namespace commlens {

class EstimateCommTime : public Pass {
public:
  llvm::StringRef name() const override; // passes/Passes.def
  llvm::Error run(PassContext &ctx) override;
};

} // namespace commlens
