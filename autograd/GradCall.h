// What a derivative formula runs with: the GradEmitter that appends its ops to the backward
// graph with the helpers formulas share (torch's FunctionsManual), the GradCall it reads the node
// and its gradients from, and the table autograd/gen_derivatives.py compiles from
// autograd/derivatives.yaml (DerivativeTableData.cpp in the build tree), whose generated formulas
// call the helpers in `derivatives` beside the procedures of autograd/Derivatives.cpp. The engine
// looks formulas up through autograd/Derivatives.h.
#pragma once

#include "ir/Graph.h"
#include "ir/TensorMetaUtils.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <optional>

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

  /// The gradient of result i (null: undefined, or no such result).
  Value *g(size_t i = 0) const { return i < grads.size() ? grads[i] : nullptr; }
  const Value *result(unsigned i = 0) const;
  Value *operand(llvm::StringRef name) const;
  Value *self() const { return operand("self"); }
  bool want(llvm::StringRef name) const;
  void set(llvm::StringRef name, Value *v);
  /// The error for an operand that needs a gradient torch's autograd refuses to give (torch raises
  /// "not differentiable with respect to argument" when it requires grad).
  llvm::Error notDifferentiable(llvm::StringRef name) const;
  std::optional<int64_t> intArg(llvm::StringRef name, std::optional<int64_t> dflt = std::nullopt) const;
  std::optional<double> floatArg(llvm::StringRef name) const;
  bool boolArg(llvm::StringRef name, bool dflt = false) const;
  /// A reduction's `dim` argument, normalised and sorted (all dims when absent or empty).
  IntList reducedDims(llvm::StringRef name = "dim") const;
  /// The `dim` list as the node passes it ([] when absent or None): what FunctionsManual hands on to
  /// ops such as mask.sum(dim, true), where DTensor reads [] as no dim.
  IntList dimsAsPassed(llvm::StringRef name = "dim") const;
};

using DerivativeFormula = llvm::Error (*)(GradCall &);

namespace derivatives {

/// One row of the table: a forward op and its formula (generated or a procedure).
struct DerivativeEntry {
  const char *op;
  DerivativeFormula formula;
};
/// Every row of derivatives.yaml's `derivatives`, in the file's order.
llvm::ArrayRef<DerivativeEntry> derivativeTable();
/// derivatives.yaml's `non_differentiable`.
llvm::ArrayRef<const char *> nonDifferentiableTable();

inline NamedArgument A(llvm::StringRef name, Argument v) { return {name.str(), std::move(v), false}; }
inline NamedArgument K(llvm::StringRef name, Argument v) { return {name.str(), std::move(v), true}; }
/// A forward value (a node's result) as a backward op's operand.
inline Value *mut(const Value *v) { return const_cast<Value *>(v); }
inline IntList sizesList(const Value *v) {
  auto s = sizesOf(*v->meta());
  return IntList(s.begin(), s.end());
}

/// A Scalar argument (alpha, beta, value) as a double, when it is a number.
std::optional<double> numberOf(const Argument *a);
/// maybe_multiply(x, s): x * s unless s is absent, None or the number 1.
Value *maybeMultiply(GradCall &c, Value *x, const Argument *s);
/// A 0-dim tensor of `like`'s dtype holding `value` (at::scalar_tensor: the `0` or `eps` operand a
/// formula's where() takes, a plain tensor DTensor treats as a replicated scalar).
Value *scalarTensor(GradCall &c, const Argument &value, const Value *like);
/// `scalar - x` / `scalar / x` as autograd computes them for a Scalar on the left:
/// empty_like(x).fill_(scalar), then the in-place op (sub_, div_) with x.
Value *scalarLeft(GradCall &c, llvm::StringRef inplaceOp, const Argument &scalar, Value *x);
/// Tensor.contiguous(): the tensor itself when it already is, else a contiguous clone.
Value *contiguous(GradCall &c, Value *x);

} // namespace derivatives

} // namespace commlens
