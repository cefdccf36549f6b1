#include "passes/PassRegistry.h"

#include "passes/AppendLoss.h"
#include "passes/ApplyShardingPlan.h"
#include "passes/Autodiff.h"
#include "passes/BackwardPropagation.h"
#include "passes/DecomposeToRuntimeOps.h"
#include "passes/EstimateCommTime.h"
#include "passes/ShardingPropagation.h"

namespace commlens {

// Each pass's name, as the registry spells it.
#define COMMLENS_PASS(NAME, CLASS, IN_FORWARD, PRINTS_BACKWARD)                                                      \
  llvm::StringRef CLASS::name() const { return NAME; }
#include "passes/Passes.def"
#undef COMMLENS_PASS

namespace {

const PassInfo kPasses[] = {
#define COMMLENS_PASS(NAME, CLASS, IN_FORWARD, PRINTS_BACKWARD)                                                      \
  {NAME, IN_FORWARD, PRINTS_BACKWARD, []() -> std::unique_ptr<Pass> { return std::make_unique<CLASS>(); }},
#include "passes/Passes.def"
#undef COMMLENS_PASS
};

} // namespace

llvm::ArrayRef<PassInfo> registeredPasses() { return kPasses; }

const PassInfo *findPass(llvm::StringRef name) {
  for (const PassInfo &info : kPasses)
    if (info.name == name)
      return &info;
  return nullptr;
}

std::vector<std::string> pipelinePassNames(bool backward) {
  std::vector<std::string> names;
  for (const PassInfo &info : kPasses)
    if (info.inPipeline(backward))
      names.push_back(info.name.str());
  return names;
}

} // namespace commlens
