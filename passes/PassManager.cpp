#include "passes/PassManager.h"

#include "ir/IRPrinter.h"
#include "passes/ApplyShardingPlan.h"
#include "passes/Autodiff.h"
#include "passes/CommTimeModel.h"
#include "passes/DecomposeToRuntimeOps.h"
#include "passes/ShardingPropagation.h"

#include <chrono>

namespace commlens {

std::vector<std::string> PassManager::names() const {
  std::vector<std::string> out;
  for (const auto &p : passes_)
    out.push_back(p->name().str());
  return out;
}

llvm::Error PassManager::run(PassContext &ctx) {
  for (const auto &pass : passes_) {
    auto start = std::chrono::steady_clock::now();
    if (llvm::Error err = pass->run(ctx))
      return err;
    if (timings_)
      timings_->emplace_back(pass->name().str(),
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (printStream_ && printAfter_.count(pass->name())) {
      *printStream_ << "// -----// IR after " << pass->name() << " //----- //\n";
      bool backward = ctx.state.backward && (pass->name() == "autodiff" || pass->name() == "propagate-backward");
      printAnnotatedGraph(*printStream_, backward ? *ctx.state.backward : ctx.program.graph(), ctx.state);
    }
  }
  return llvm::Error::success();
}

void buildForwardPipeline(PassManager &pm) {
  pm.add(std::make_unique<DecomposeToRuntimeOps>());
  pm.add(std::make_unique<ApplyShardingPlan>());
  pm.add(std::make_unique<ShardingPropagation>());
  pm.add(std::make_unique<EstimateCommTime>());
}

void buildPipeline(PassManager &pm, bool backward) {
  if (!backward)
    return buildForwardPipeline(pm);
  pm.add(std::make_unique<DecomposeToRuntimeOps>());
  pm.add(std::make_unique<ApplyShardingPlan>());
  pm.add(std::make_unique<AppendLoss>());
  pm.add(std::make_unique<ShardingPropagation>());
  pm.add(std::make_unique<Autodiff>());
  pm.add(std::make_unique<BackwardPropagation>());
  pm.add(std::make_unique<EstimateCommTime>());
}

void printAnnotatedGraph(llvm::raw_ostream &os, const Graph &graph, const PredictionState &state) {
  printGraph(os, graph, [&](const Value &v) -> std::string {
    if (const DTensorLayout *l = state.layout(&v))
      return " {" + str(l->placements).substr(1, str(l->placements).size() - 2) + "}";
    return "";
  });
}

} // namespace commlens
