// The helpers the derivative procedures share (autograd/Derivatives.cpp defines them; the
// procedures of one op family may live in their own file, as autograd/LinalgDerivatives.cpp).
#pragma once

#include "autograd/GradCall.h"

#include <initializer_list>
#include <utility>

namespace commlens::derivatives {

/// op(x) / op(x, y) with x's meta.
Value *unary(GradCall &c, llvm::StringRef op, Value *x, llvm::StringRef hint);
Value *binary(GradCall &c, llvm::StringRef op, Value *x, Argument y, llvm::StringRef hint);
/// x * y (mul.Tensor).
Value *mul(GradCall &c, Value *x, Argument y);
/// x.pow(exponent), pow.Tensor_Scalar.
Value *powScalar(GradCall &c, Value *x, Argument exponent);
/// A Bool meta of v's sizes (masks).
TensorMeta boolLike(const Value *v);
/// A 0-dim zero of the gradient's dtype (the `zeros` operand of the where()s formulas run).
Value *zeroScalar(GradCall &c);
/// The tensor, or None where it is null (an optional operand or result).
Argument orNone(Value *v);
/// Gives each named operand its gradient, where there is one.
void setGrads(GradCall &c, std::initializer_list<std::pair<const char *, Value *>> grads);

} // namespace commlens::derivatives
