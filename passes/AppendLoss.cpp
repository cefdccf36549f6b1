#include "passes/AppendLoss.h"

#include "autograd/Engine.h"
#include "ir/Error.h"

namespace commlens {

llvm::Error AppendLoss::run(PassContext &ctx) {
  if (!ctx.plan)
    return makeError("loss needs a plan");
  return appendLoss(ctx.program.graph(), *ctx.plan, ctx.state);
}

} // namespace commlens
