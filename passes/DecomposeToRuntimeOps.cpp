#include "passes/DecomposeToRuntimeOps.h"

#include "aten/Decomposer.h"
#include "autograd/Engine.h"
#include "ir/TensorMetaUtils.h"

#include "llvm/ADT/STLExtras.h"

namespace commlens {

llvm::Error DecomposeToRuntimeOps::run(PassContext &ctx) {
  bool cuda = ctx.plan && ctx.plan->mesh.deviceType == MeshDeviceType::Cuda;
  llvm::DenseSet<const Value *> requiresGrad;
  if (cuda)
    requiresGrad = valuesRequiringGrad(ctx.program.graph(), *ctx.plan, nullptr);
  return decomposeToRuntimeOps(ctx.program, cuda ? &ctx.options.cudaTarget : nullptr, std::move(requiresGrad));
}

} // namespace commlens
