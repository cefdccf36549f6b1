#include "passes/Autodiff.h"

#include "autograd/Engine.h"
#include "ir/Error.h"

namespace commlens {

llvm::Error Autodiff::run(PassContext &ctx) {
  if (!ctx.plan)
    return makeError("autodiff needs a plan");
  return runAutograd(ctx.program.graph(), *ctx.plan, ctx.state);
}

} // namespace commlens
