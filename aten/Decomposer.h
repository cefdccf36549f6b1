// Rewrites the exported graph's ops into the ATen ops DTensor receives at run time in torch 2.13:
// CompositeImplicitAutograd ops are decomposed the way their C++ kernels decompose them, which
// depends on rank, bias, contiguity and device (e.g. Linear on a contiguous 3-D input with bias
// becomes view, t, addmm, view; without bias t, view, mm, _unsafe_view).
#pragma once

#include "aten/SdpaBackendSelection.h"
#include "ir/Graph.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Error.h"

namespace commlens {

/// Rewrites `program`'s graph into runtime ops. `cuda`: the GPU whose dispatch a CUDA program
/// follows (null: CPU dispatch); `requiresGrad`: the values that require grad there (the SDPA
/// backend choice depends on it).
llvm::Error decomposeToRuntimeOps(ExportedProgram &program, const CudaTarget *cuda,
                                  llvm::DenseSet<const Value *> requiresGrad);

} // namespace commlens
