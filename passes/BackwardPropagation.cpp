#include "passes/BackwardPropagation.h"

#include "ir/Error.h"
#include "runtime/OpDispatch.h"

namespace commlens {

llvm::Error BackwardPropagation::run(PassContext &ctx) {
  if (!ctx.state.backward)
    return makeError("propagate-backward needs the autodiff pass first");
  return dispatchRuntimeOps(ctx.program, ctx.plan, *ctx.state.backward, Phase::Backward, ctx.options.dispatch,
                            ctx.state);
}

} // namespace commlens
