#include "ir/TensorMetaUtils.h"

#include <algorithm>
#include <functional>
#include <numeric>

namespace commlens {

llvm::SmallVector<int64_t, 4> hints(llvm::ArrayRef<SymInt> s) {
  llvm::SmallVector<int64_t, 4> out;
  for (const SymInt &x : s)
    out.push_back(x.hint);
  return out;
}

int64_t numelOf(llvm::ArrayRef<int64_t> sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<>());
}

llvm::SmallVector<int64_t, 4> sizesOf(const TensorMeta &m) {
  return hints(m.sizes);
}

llvm::SmallVector<int64_t, 4> stridesOf(const TensorMeta &m) {
  if (m.strides.size() != m.sizes.size())
    return hints(contiguousStrides(sizesOf(m)));
  return hints(m.strides);
}

llvm::SmallVector<int64_t, 4> broadcastSizes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b) {
  llvm::SmallVector<int64_t, 4> out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1, y = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[out.size() - 1 - i] = x == 1 ? y : x;
  }
  return out;
}

int64_t rowsOf(const TensorMeta &m) { return m.rank() ? sizesOf(m)[0] : 1; }

TensorMeta metaOf(ScalarType dtype, llvm::ArrayRef<int64_t> sizes, const Device &device,
                  std::optional<llvm::ArrayRef<int64_t>> strides) {
  TensorMeta m;
  m.dtype = dtype;
  m.device = device;
  for (int64_t s : sizes)
    m.sizes.push_back(SymInt::concrete(s));
  if (strides)
    for (int64_t s : *strides)
      m.strides.push_back(SymInt::concrete(s));
  else
    m.strides = contiguousStrides(sizes);
  m.storageOffset = SymInt::concrete(0);
  return m;
}

llvm::SmallVector<SymInt, 4> contiguousStrides(llvm::ArrayRef<int64_t> sizes) {
  llvm::SmallVector<SymInt, 4> strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = SymInt::concrete(stride);
    stride *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

bool isContiguous(const TensorMeta &meta) {
  int64_t expected = 1;
  for (size_t i = meta.sizes.size(); i-- > 0;) {
    int64_t size = meta.sizes[i].hint;
    if (size == 1)
      continue;
    if (meta.strides[i].hint != expected)
      return false;
    expected *= size;
  }
  return true;
}

std::optional<llvm::SmallVector<int64_t, 4>> viewStrides(const TensorMeta &meta, llvm::ArrayRef<int64_t> newSizes) {
  auto oldShape = hints(meta.sizes);
  auto oldStride = hints(meta.strides);
  llvm::SmallVector<int64_t, 4> newStride(newSizes.size(), 1);
  if (oldShape.empty())
    return newStride;
  int64_t numel = std::accumulate(oldShape.begin(), oldShape.end(), int64_t{1}, std::multiplies<>());
  if (numel == 0)
    return llvm::SmallVector<int64_t, 4>(contiguousStrides(newSizes).size(), 1);
  // Walk chunks of dims that are contiguous with each other; each chunk must map onto a run of
  // new dims with the same element count (ATen's computeStride).
  int64_t viewD = static_cast<int64_t>(newSizes.size()) - 1;
  int64_t chunkBaseStride = oldStride.back();
  int64_t tensorNumel = 1, viewNumel = 1;
  for (int64_t d = static_cast<int64_t>(oldShape.size()) - 1; d >= 0; --d) {
    tensorNumel *= oldShape[d];
    if (d == 0 || (oldShape[d - 1] != 1 && oldStride[d - 1] != tensorNumel * chunkBaseStride)) {
      while (viewD >= 0 && (viewNumel < tensorNumel || newSizes[viewD] == 1)) {
        newStride[viewD] = viewNumel * chunkBaseStride;
        viewNumel *= newSizes[viewD];
        --viewD;
      }
      if (viewNumel != tensorNumel)
        return std::nullopt;
      if (d > 0) {
        chunkBaseStride = oldStride[d - 1];
        tensorNumel = viewNumel = 1;
      }
    }
  }
  if (viewD != -1)
    return std::nullopt;
  return newStride;
}

bool isFloating(ScalarType t) {
  switch (t) {
  case ScalarType::Half: case ScalarType::Float: case ScalarType::Double: case ScalarType::BFloat16:
  case ScalarType::ComplexHalf: case ScalarType::ComplexFloat: case ScalarType::ComplexDouble:
  case ScalarType::Float8_e4m3fn: case ScalarType::Float8_e5m2: case ScalarType::Float8_e4m3fnuz:
  case ScalarType::Float8_e5m2fnuz:
    return true;
  default:
    return false;
  }
}

bool isComplex(ScalarType t) {
  return t == ScalarType::ComplexHalf || t == ScalarType::ComplexFloat || t == ScalarType::ComplexDouble;
}

llvm::SmallVector<int64_t, 4> localStrides(llvm::ArrayRef<int64_t> localSizes, llvm::ArrayRef<int64_t> globalStrides) {
  llvm::SmallVector<size_t, 4> order(localSizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return globalStrides[a] > globalStrides[b]; });
  llvm::SmallVector<int64_t, 4> strides(localSizes.size());
  int64_t run = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = run;
    run *= localSizes[*it];
  }
  return strides;
}

bool groupedMmTakesStrides(llvm::ArrayRef<int64_t> sizes, llvm::ArrayRef<int64_t> strides, ScalarType dtype) {
  if (sizes.size() < 2)
    return false;
  int64_t alignment = 16 / elementSize(dtype), e = static_cast<int64_t>(sizes.size()) - 1;
  if (strides[e - 1] == 1 && strides[e] >= std::max<int64_t>(1, sizes[e - 1]))
    return strides[e] % alignment == 0;
  if (strides[e] == 1 && strides[e - 1] >= std::max<int64_t>(1, sizes[e]))
    return strides[e - 1] % alignment == 0;
  return false;
}

} // namespace commlens
