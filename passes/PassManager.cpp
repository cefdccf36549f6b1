#include "passes/PassManager.h"

#include "passes/PassRegistry.h"

#include <chrono>

namespace commlens {

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
      const PassInfo *info = findPass(pass->name());
      bool backward = ctx.state.backward && info && info->printsBackwardGraph;
      printAnnotatedGraph(*printStream_, backward ? *ctx.state.backward : ctx.program.graph(), ctx.state);
    }
  }
  return llvm::Error::success();
}

void buildPipeline(PassManager &pm, bool backward) {
  for (const PassInfo &info : registeredPasses())
    if (info.inPipeline(backward))
      pm.add(info.create());
}

} // namespace commlens
