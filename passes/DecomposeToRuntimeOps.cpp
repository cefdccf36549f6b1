#include "passes/DecomposeToRuntimeOps.h"

#include "aten/Decomposer.h"
#include "autograd/Engine.h"
#include "ir/Error.h"
#include "ir/TensorMetaUtils.h"

#include "llvm/ADT/STLExtras.h"

namespace commlens {

llvm::Error DecomposeToRuntimeOps::run(PassContext &ctx) {
  bool cuda = ctx.plan && ctx.plan->mesh.deviceType == MeshDeviceType::Cuda;
  if (ctx.program.decomposedForCpu) {
    if (cuda)
      return makeError("the program was decomposed for CPU dispatch; a device_type=\"cuda\" plan needs the "
                       "exported program");
    return llvm::Error::success();
  }
  llvm::DenseSet<const Value *> requiresGrad;
  if (cuda)
    requiresGrad = valuesRequiringGrad(ctx.program.graph(), *ctx.plan, nullptr);
  if (llvm::Error err =
          decomposeToRuntimeOps(ctx.program, cuda ? &ctx.options.cudaTarget : nullptr, std::move(requiresGrad)))
    return err;
  ctx.program.decomposedForCpu = !cuda;
  return llvm::Error::success();
}

} // namespace commlens
