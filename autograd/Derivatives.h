// Derivative formulas: for each differentiable forward runtime op, the backward ATen ops torch
// 2.13's autograd runs for it (derivatives.yaml and FunctionsManual semantics, as DTensor receives
// them). One table, op name -> formula: autograd/derivatives.yaml, compiled at build time
// (autograd/gen_derivatives.py), its formulas compositions of ops and, where a formula is a
// procedure, a function of autograd/Derivatives.cpp; adding an op is one entry there and one oracle
// case (tests/backward/op_cases.py). The autograd engine (autograd/Engine.cpp) applies a node's
// formula with a GradEmitter that appends the ops to the backward graph.
#pragma once

#include "autograd/GradCall.h"

#include <string>
#include <vector>

namespace commlens {

/// The formula for a runtime op (e.g. "aten::mm.default"), or null.
DerivativeFormula findDerivative(llvm::StringRef op);
/// Ops whose floating results autograd never differentiates (creation-like, detach, ...).
bool isNonDifferentiable(llvm::StringRef op);
/// Every op with a formula, and every op listed as non-differentiable, sorted.
std::vector<std::string> derivativeOps();
std::vector<std::string> nonDifferentiableOps();

} // namespace commlens
