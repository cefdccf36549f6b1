// Rewrites the exported graph's ops into the ATen ops DTensor receives at run time in torch 2.13:
// CompositeImplicitAutograd ops are decomposed the way their C++ kernels decompose them, which
// depends on rank, bias, contiguity and device (e.g. Linear on a contiguous 3-D input with bias
// becomes view, t, addmm, view; without bias t, view, mm, _unsafe_view).
#pragma once

#include "passes/PassManager.h"

namespace commlens {

class DecomposeToRuntimeOps : public Pass {
public:
  llvm::StringRef name() const override { return "decompose"; }
  llvm::Error run(PassContext &ctx) override;
};

/// Strides of a contiguous tensor of these sizes.
llvm::SmallVector<SymInt, 4> contiguousStrides(llvm::ArrayRef<int64_t> sizes);
bool isContiguous(const TensorMeta &meta);
/// The strides a view to `newSizes` has, or nullopt when no view exists (ATen's computeStride).
std::optional<llvm::SmallVector<int64_t, 4>> viewStrides(const TensorMeta &meta, llvm::ArrayRef<int64_t> newSizes);

} // namespace commlens
