// Derivative formulas: for each differentiable forward runtime op, the backward ATen ops torch
// 2.13's autograd runs for it (derivatives.yaml and FunctionsManual semantics, as DTensor receives
// them). One registry, op name -> formula; adding an op is one entry (autograd/Derivatives.cpp) and
// one oracle case (tests/backward/op_cases.py). The autograd engine (autograd/Engine.cpp) applies
// a node's formula with a GradEmitter that appends the ops to the backward graph.
#pragma once

#include "ir/Graph.h"
#include "ir/TensorMetaUtils.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace commlens {

/// Where a formula's ops go, plus the helpers formulas share.
class GradEmitter {
public:
  virtual ~GradEmitter() = default;
  /// A fresh backward value with this meta.
  virtual Value *newValue(llvm::StringRef hint, TensorMeta meta) = 0;
  /// Appends one backward node (in the current module).
  virtual Node *emitNode(llvm::StringRef name, llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> &&args,
                         llvm::SmallVector<Argument, 1> &&results) = 0;
  /// Whether the plan runs under loss_parallel().
  virtual bool lossParallel() const = 0;
  /// Whether forward propagation made this value a DTensor.
  virtual bool isDTensor(const Value *v) const = 0;

  /// Emits a single-result op.
  Value *emit(llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> &&args, TensorMeta meta, llvm::StringRef hint);
  /// Contiguous meta of v's dtype and sizes.
  static TensorMeta like(const Value *v);
  static TensorMeta withSizes(const Value *v, llvm::ArrayRef<int64_t> sizes);

  Value *t(Value *x);
  Value *transpose(Value *x, int64_t d0, int64_t d1);
  Value *mm(Value *a, Value *b);
  Value *bmm(Value *a, Value *b);
  Value *unsqueeze(Value *x, int64_t d);
  /// g.new_zeros(target's sizes): zeros of `target`'s shape and dtype, for a gradient to be put in.
  Value *newZerosLike(Value *g, const Value *target);
  /// Tensor.reshape: a view when the strides allow one, else clone + _unsafe_view.
  Value *reshape(Value *x, llvm::ArrayRef<int64_t> sizes);
  /// at::sum_to(g, target sizes).
  Value *sumTo(Value *g, const TensorMeta &target);
  /// mm_mat1_backward / mm_mat2_backward (a column-major operand gets its grad column-major).
  Value *mmMat1Backward(Value *g, Value *mat2, const Value *mat1);
  Value *mmMat2Backward(Value *g, Value *mat1, const Value *mat2);
  /// sum_backward: unsqueeze the reduced dims (unless keepdim), expand to `sizes`.
  Value *sumBackward(Value *g, llvm::ArrayRef<int64_t> sizes, llvm::ArrayRef<int64_t> dims, bool keepdim);
  /// unsqueeze_multiple: unsqueeze each (sorted) reduced dim unless keepdim.
  Value *unsqueezeMultiple(Value *g, llvm::ArrayRef<int64_t> dims, bool keepdim);
};

/// One application of a formula to one autograd node.
struct GradCall {
  GradEmitter &e;
  const Node &n;
  /// The gradient of each tensor result (null: undefined).
  llvm::ArrayRef<Value *> grads;
  /// Whether each tensor operand (Node::operands() order, tensors only) needs a gradient.
  llvm::ArrayRef<bool> needed;
  /// The gradient per tensor operand (out).
  llvm::SmallVectorImpl<Value *> &out;

  Value *g() const { return grads.empty() ? nullptr : grads[0]; }
  const Value *result(unsigned i = 0) const;
  Value *operand(llvm::StringRef name) const;
  Value *self() const { return operand("self"); }
  bool want(llvm::StringRef name) const;
  void set(llvm::StringRef name, Value *v);
  std::optional<int64_t> intArg(llvm::StringRef name, std::optional<int64_t> dflt = std::nullopt) const;
  std::optional<double> floatArg(llvm::StringRef name) const;
  bool boolArg(llvm::StringRef name, bool dflt = false) const;
  /// A reduction's `dim` argument, normalised and sorted (all dims when absent or empty).
  IntList reducedDims(llvm::StringRef name = "dim") const;
};

using DerivativeFormula = llvm::Error (*)(GradCall &);

/// The formula for a runtime op (e.g. "aten::mm.default"), or null.
DerivativeFormula findDerivative(llvm::StringRef op);
/// Ops whose floating results autograd never differentiates (creation-like, detach, ...).
bool isNonDifferentiable(llvm::StringRef op);
/// Every op with a formula, and every op listed as non-differentiable, sorted.
std::vector<std::string> derivativeOps();
std::vector<std::string> nonDifferentiableOps();

} // namespace commlens
