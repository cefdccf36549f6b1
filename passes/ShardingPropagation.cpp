#include "passes/ShardingPropagation.h"

#include "runtime/OpDispatch.h"

namespace commlens {

llvm::Error ShardingPropagation::run(PassContext &ctx) {
  return dispatchRuntimeOps(ctx.program, ctx.plan, ctx.program.graph(), Phase::Forward, ctx.options.dispatch,
                            ctx.state);
}

} // namespace commlens
