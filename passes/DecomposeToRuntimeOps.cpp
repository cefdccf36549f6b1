#include "passes/DecomposeToRuntimeOps.h"

#include "aten/Decomposer.h"
#include "autograd/Engine.h"
#include "ir/TensorMetaUtils.h"

#include "llvm/ADT/STLExtras.h"

namespace commlens {

llvm::Error DecomposeToRuntimeOps::run(PassContext &ctx) {
  bool cuda = ctx.plan && ctx.plan->mesh.deviceType == MeshDeviceType::Cuda;
  llvm::DenseSet<const Value *> requiresGrad;
  if (cuda) {
    requiresGrad = gradLeaves(ctx.program.graph(), *ctx.plan, nullptr);
    for (const auto &n : ctx.program.graph().nodes())
      if (n->gradEnabled() && llvm::any_of(n->operands(), [&](Value *v) { return requiresGrad.count(v); }))
        for (Value *r : n->results())
          if (r->meta() && isFloating(r->meta()->dtype))
            requiresGrad.insert(r);
  }
  return decomposeToRuntimeOps(ctx.program, cuda ? &ctx.options.cudaTarget : nullptr, std::move(requiresGrad));
}

} // namespace commlens
