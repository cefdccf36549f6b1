// What several subsystems read off a TensorMeta: concrete sizes and strides (symbolic ones by
// their hint), contiguity and view strides as c10's TensorImpl and ATen's computeStride decide
// them (c10/core/TensorImpl.h is_contiguous, aten/src/ATen/TensorUtils.cpp computeStride), and
// which dtypes autograd differentiates.
#pragma once

#include "ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace commlens {

/// Each size's hint: the concrete values of sizes or strides, symbolic ones by their hint.
llvm::SmallVector<int64_t, 4> hints(llvm::ArrayRef<SymInt> sizes);
/// Elements of a tensor of these sizes.
int64_t numelOf(llvm::ArrayRef<int64_t> sizes);
/// Concrete sizes / strides of a meta (symbolic ones by hint; unknown strides: contiguous).
llvm::SmallVector<int64_t, 4> sizesOf(const TensorMeta &m);
llvm::SmallVector<int64_t, 4> stridesOf(const TensorMeta &m);
/// The shape two operands broadcast to (torch's infer_size; the sizes assumed compatible).
llvm::SmallVector<int64_t, 4> broadcastSizes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);
/// The size of the first dim (1 for a scalar): the rows an all-to-all of the tensor sends.
int64_t rowsOf(const TensorMeta &m);
/// A concrete meta (contiguous unless strides are given).
TensorMeta metaOf(ScalarType dtype, llvm::ArrayRef<int64_t> sizes, const Device &device,
                  std::optional<llvm::ArrayRef<int64_t>> strides = std::nullopt);

/// `m` with another dtype (a comparison's Bool mask).
inline TensorMeta withDtype(TensorMeta m, ScalarType dtype) {
  m.dtype = dtype;
  return m;
}

/// Strides of a contiguous tensor of these sizes.
llvm::SmallVector<SymInt, 4> contiguousStrides(llvm::ArrayRef<int64_t> sizes);
bool isContiguous(const TensorMeta &meta);
/// The strides a view to `newSizes` has, or nullopt when no view exists (ATen's computeStride).
std::optional<llvm::SmallVector<int64_t, 4>> viewStrides(const TensorMeta &meta, llvm::ArrayRef<int64_t> newSizes);

/// The strides of a contiguous local shard of a tensor with `globalStrides`: its dims laid out in
/// the global tensor's stride order (DTensor's compute_local_stride; a transposed view of a
/// shard keeps its transposition).
llvm::SmallVector<int64_t, 4> localStrides(llvm::ArrayRef<int64_t> localSizes, llvm::ArrayRef<int64_t> globalStrides);
/// Whether aten::_grouped_mm takes an operand of these sizes and strides (torch 2.13
/// _meta_grouped_mm_common's check_valid_strides, the CPU and CUDA kernels' own check): one of
/// the last two dims has stride 1, the other a stride of at least that dim's size and a multiple
/// of 16 bytes.
bool groupedMmTakesStrides(llvm::ArrayRef<int64_t> sizes, llvm::ArrayRef<int64_t> strides, ScalarType dtype);

/// Dtypes autograd differentiates (floating and complex).
bool isFloating(ScalarType t);
/// c10::isComplexType.
bool isComplex(ScalarType t);

} // namespace commlens
