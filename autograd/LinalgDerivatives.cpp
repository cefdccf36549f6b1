// Derivatives of the linear-algebra kernels DTensor registers (torch 2.13 FunctionsManual's
// linalg backward functions, as DTensor receives them): the `code:` procedures
// autograd/derivatives.yaml names for linalg_inv_ex, the Cholesky, triangular and LU solves and
// factorizations, det / slogdet, eigh, svd, matrix_exp, qr and pinv.
#include "autograd/DerivativeHelpers.h"

#include "ir/Error.h"

#include <algorithm>
#include <cmath>

namespace commlens {
namespace derivatives {

// ---- linear algebra (FunctionsManual's linalg backward functions) -------------------------------
// Modelled for real 2-D matrices, where at::matmul runs as aten::mm; a node with a batched or
// complex operand is refused by name rather than given a wrong op sequence. mH() of a real matrix is
// transpose(-2, -1) (no conjugate op runs), emitted with the dims as torch passes them.

/// The refusal for a node outside the modelled case: an operand of more than 2 dims or complex.
llvm::Error linalgOutOfScope(GradCall &c) {
  for (const NamedArgument &a : c.n.inputs())
    for (const Value *v : a.value.tensors()) {
      if (!v->meta())
        continue;
      if (isComplex(v->meta()->dtype))
        return makeError("autodiff: {}: the derivative of a complex '{}' is not modelled (real matrices only)",
                         c.n.where(), a.name);
      if (v->meta()->rank() > 2)
        return makeError("autodiff: {}: the derivative of a batched ({}-D) '{}' is not modelled (2-D matrices only)",
                         c.n.where(), v->meta()->rank(), a.name);
    }
  return llvm::Error::success();
}

/// x.mH() of a real matrix: transpose(-2, -1).
Value *mH(GradCall &c, Value *x) {
  auto s = sizesOf(*x->meta());
  auto st = stridesOf(*x->meta());
  std::swap(s[0], s[1]);
  std::swap(st[0], st[1]);
  return c.e.emit("aten::transpose.int", {A("self", x), A("dim0", int64_t(-2)), A("dim1", int64_t(-1))},
                  metaOf(x->meta()->dtype, s, x->meta()->device, st), "grad_mH");
}
Value *mH(GradCall &c, const Value *x) { return mH(c, mut(x)); }

/// x.narrow(dim, start, length) of a matrix (dim -2 or -1), as torch runs it: slice(dim, start,
/// start + length), a view.
Value *narrowMatrix(GradCall &c, Value *x, int64_t dim, int64_t start, int64_t length) {
  auto sz = sizesOf(*x->meta());
  sz[dim + 2] = length;
  return c.e.emit("aten::slice.Tensor",
                  {A("self", x), A("dim", dim), A("start", start), A("end", start + length)},
                  metaOf(x->meta()->dtype, sz, x->meta()->device, stridesOf(*x->meta())), "grad_narrow");
}

/// x.unsqueeze(-1).
Value *unsqueezeLast(GradCall &c, const Value *x) {
  auto s = sizesOf(*x->meta());
  s.push_back(1);
  return c.e.emit("aten::unsqueeze.default", {A("self", mut(x)), A("dim", int64_t(-1))}, GradEmitter::withSizes(x, s),
                  "grad_unsqueeze");
}

/// -x.
Value *negOf(GradCall &c, Value *x) { return unary(c, "aten::neg.default", x, "grad_neg"); }

/// x.triu(d) / x.tril(d); the diagonal passed only where it is not 0, as torch's calls pass it.
Value *triangle(GradCall &c, bool upper, Value *x, int64_t d) {
  llvm::SmallVector<NamedArgument, 4> args{A("self", x)};
  if (d != 0)
    args.push_back(A("diagonal", d));
  return c.e.emit(upper ? "aten::triu.default" : "aten::tril.default", std::move(args), GradEmitter::like(x),
                  "grad_tri");
}

/// at::linalg_solve_triangular(a, b, upper, left, unitriangular), left and unitriangular passed
/// only where they are not their defaults.
Value *solveTriangular(GradCall &c, Value *a, Value *b, bool upper, bool left = true, bool unitriangular = false) {
  llvm::SmallVector<NamedArgument, 4> args{A("self", a), A("B", b), K("upper", upper)};
  if (!left)
    args.push_back(K("left", false));
  if (unitriangular)
    args.push_back(K("unitriangular", true));
  return c.e.emit("aten::linalg_solve_triangular.default", std::move(args), GradEmitter::like(b), "grad_solve");
}

/// at::linalg_lu_solve(LU, pivots, b, left, adjoint), the flags passed where they are not their defaults.
Value *luSolve(GradCall &c, const Value *lu, const Value *pivots, Value *b, bool left, bool adjoint) {
  llvm::SmallVector<NamedArgument, 4> args{A("LU", mut(lu)), A("pivots", mut(pivots)), A("B", b)};
  if (!left)
    args.push_back(K("left", false));
  if (adjoint)
    args.push_back(K("adjoint", true));
  return c.e.emit("aten::linalg_lu_solve.default", std::move(args), GradEmitter::like(b), "grad_lu_solve");
}

/// linalg_inv_ex: -inverse.mH() @ (grad @ inverse.mH()), the inner product first.
llvm::Error linalgInvBackward(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  Value *inner = c.e.mm(c.g(), mH(c, c.result(0)));
  c.set("A", negOf(c, c.e.mm(mH(c, c.result(0)), inner)));
  return llvm::Error::success();
}

/// cholesky_backward(grad, upper, L) (linalg_cholesky_ex, cholesky): with L_ = upper ? L.mH() : L
/// and gL_ likewise, gA = (L_.mH() @ gL_).tril(); gA = 0.5 * (gA + gA.tril(-1).mH()); then
/// solve_triangular(L_.mH(), gA, upper) and solve_triangular(L_, ., lower, right).
llvm::Error choleskyBackward(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  bool upper = c.boolArg("upper");
  Value *L = mut(c.result(0)), *gL = c.g();
  if (upper) {
    L = mH(c, L);
    gL = mH(c, gL);
  }
  Value *gA = triangle(c, false, c.e.mm(mH(c, L), gL), 0);
  Value *sym = binary(c, "aten::add.Tensor", gA, mH(c, triangle(c, false, gA, -1)), "grad_add");
  gA = c.e.emit("aten::mul.Scalar", {A("self", sym), A("other", 0.5)}, GradEmitter::like(sym), "grad_scale");
  gA = solveTriangular(c, mH(c, L), gA, /*upper=*/true);
  gA = solveTriangular(c, L, gA, /*upper=*/false, /*left=*/false);
  c.set("self", gA);
  return llvm::Error::success();
}

/// The triangular factor's gradient both triangular solves share: -product restricted to A's
/// triangle (the diagonal left out for a unit triangle).
Value *triangularFactorGrad(GradCall &c, Value *product, bool upper, bool unitriangular) {
  return triangle(c, upper, negOf(c, product), upper ? int64_t(unitriangular) : -int64_t(unitriangular));
}

/// linalg_solve_triangular_backward: gB = solve_triangular(A.mH(), grad, !upper, left,
/// unitriangular); A's gradient (when it needs one) -(left ? gB @ X.mH() : X.mH() @ gB), triu'd
/// (upper) or tril'd, off the diagonal for a unit triangle.
llvm::Error solveTriangularBackward(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  bool upper = c.boolArg("upper"), left = c.boolArg("left", true), unit = c.boolArg("unitriangular");
  Value *gB = solveTriangular(c, mH(c, c.self()), c.g(), !upper, left, unit);
  if (c.want("self")) {
    Value *p = left ? c.e.mm(gB, mH(c, c.result(0))) : c.e.mm(mH(c, c.result(0)), gB);
    c.set("self", triangularFactorGrad(c, p, upper, unit));
  }
  c.set("B", gB);
  return llvm::Error::success();
}

/// triangular_solve_backward (self = B, A; results solution X and cloned_coefficient): grad_b =
/// triangular_solve(grad_x, A, upper, !transpose, unitriangular)[0]; A's gradient -(transpose ?
/// X @ grad_b.mT() : grad_b @ X.mH()) in A's triangle, plus the cloned coefficient's gradient. A
/// gradient of the cloned coefficient alone gets plain zeros for the solution's part (refused).
llvm::Error triangularSolveBackward(GradCall &c) {
  Value *gx = c.g(0), *gm = c.g(1);
  if (!gx && !gm)
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  if (!gx)
    return makeError("autodiff: {}: a gradient of the cloned coefficient alone (torch fills the solution's with a "
                     "plain at::zeros) is not modelled",
                     c.n.where());
  bool upper = c.boolArg("upper", true), transpose = c.boolArg("transpose"), unit = c.boolArg("unitriangular");
  Value *a = c.operand("A");
  Value *gb = c.e.newValue("grad_triangular_solve", GradEmitter::like(gx));
  Value *clone = c.e.newValue("grad_triangular_solve_coefficient", GradEmitter::like(a));
  c.e.emitNode(gb->name(), "aten::triangular_solve.default",
               {A("self", gx), A("A", a), A("upper", upper), A("transpose", !transpose), A("unitriangular", unit)},
               {Argument(gb), Argument(clone)});
  if (c.want("A")) {
    Value *ga = transpose ? c.e.mm(mut(c.result(0)), mH(c, gb)) : c.e.mm(gb, mH(c, c.result(0)));
    ga = triangularFactorGrad(c, ga, upper, unit);
    if (gm)
      ga = binary(c, "aten::add.Tensor", ga, gm, "grad_add");
    c.set("A", ga);
  } else { // grad_a = at::zeros({1}).expand_as(A): plain tensors, discarded
    auto as = sizesOf(*a->meta());
    Value *z = c.e.emit("aten::zeros.default", {A("size", IntList{1}), K("dtype", a->meta()->dtype)},
                        GradEmitter::withSizes(a, {1}), "grad_zeros");
    c.e.emit("aten::expand.default", {A("self", z), A("size", IntList(as.begin(), as.end()))},
             metaOf(a->meta()->dtype, as, a->meta()->device, llvm::SmallVector<int64_t, 2>(as.size(), 0)),
             "grad_expand");
  }
  c.set("self", gb);
  return llvm::Error::success();
}

/// cholesky_solve_backward (self = B, input2 = the factor L; result X): grad_self =
/// grad.cholesky_solve(L, upper); common = grad_self @ X.mH(), symmetrised (+ its mH); L's
/// gradient -(upper ? L @ common : common @ L).
llvm::Error choleskySolveBackward(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  bool upper = c.boolArg("upper");
  Value *L = c.operand("input2");
  llvm::SmallVector<NamedArgument, 4> args{A("self", c.g()), A("input2", L)};
  if (upper)
    args.push_back(A("upper", true));
  Value *gs = c.e.emit("aten::cholesky_solve.default", std::move(args), GradEmitter::like(c.g()), "grad_cholesky_solve");
  if (c.want("input2")) {
    Value *common = c.e.mm(gs, mH(c, c.result(0)));
    common = binary(c, "aten::add.Tensor", common, mH(c, common), "grad_add");
    c.set("input2", negOf(c, upper ? c.e.mm(L, common) : c.e.mm(common, L)));
  }
  c.set("self", gs);
  return llvm::Error::success();
}

/// cholesky_inverse_backward(grad, L, upper, inverse): common = inverse @ ((grad + grad.mH()) @
/// inverse); L's gradient -(upper ? L @ common : common @ L).
llvm::Error choleskyInverseBackward(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  Value *inv = mut(c.result(0)), *L = c.self();
  Value *common = binary(c, "aten::add.Tensor", c.g(), mH(c, c.g()), "grad_add");
  common = c.e.mm(inv, c.e.mm(common, inv));
  c.set("self", negOf(c, c.boolArg("upper") ? c.e.mm(L, common) : c.e.mm(common, L)));
  return llvm::Error::success();
}

/// linalg_solve_backward (_linalg_solve_ex; results X, LU, pivots, info): gB_ =
/// linalg_lu_solve(LU, pivots, gX, left, adjoint) (a vector right-hand side unsqueezed to a
/// column first); A's gradient -(left ? gB_ @ X.mH() : X.mH() @ gB_), B's gB_ (squeezed back). For
/// a real A the backward solves with adjoint=True whatever A's layout (as torch 2.13 runs it).
llvm::Error linalgSolveBackward(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  bool left = c.boolArg("left", true);
  bool vector = c.result(0)->meta()->rank() == 1;
  Value *gX = vector ? unsqueezeLast(c, c.g()) : c.g();
  Value *gB = luSolve(c, c.result(1), c.result(2), gX, left, /*adjoint=*/true);
  if (c.want("A")) {
    Value *X = vector ? unsqueezeLast(c, c.result(0)) : mut(c.result(0));
    c.set("A", negOf(c, left ? c.e.mm(gB, mH(c, X)) : c.e.mm(mH(c, X), gB)));
  }
  if (c.want("B"))
    c.set("B", vector ? c.e.emit("aten::squeeze.dim", {A("self", gB), A("dim", int64_t(-1))},
                                 GradEmitter::like(c.operand("B")), "grad_squeeze")
                      : gB);
  return llvm::Error::success();
}

/// The matrix torch's det and slogdet backwards solve against: diag_embed(g.unsqueeze(-1)
/// .expand_as(pivots)).mT().
Value *detRhs(GradCall &c, Value *g, const Value *pivots) {
  Value *u = unsqueezeLast(c, g);
  int64_t n = sizesOf(*pivots->meta())[0];
  Value *e = c.e.emit("aten::expand.default", {A("self", u), A("size", IntList{n})},
                      metaOf(g->meta()->dtype, {n}, g->meta()->device, llvm::ArrayRef<int64_t>{0}), "grad_expand");
  Value *d = c.e.emit("aten::diag_embed.default", {A("self", e)}, GradEmitter::withSizes(g, {n, n}), "grad_diag_embed");
  return mH(c, d);
}

/// linalg_det_backward (results det, LU, pivots): d = diag_embed((grad * det) expanded).mT();
/// the LU's zero pivots moved to eps (where(LU.diagonal() == 0, eps, 0), diag_embedded and added);
/// then linalg_lu_solve(LU_, pivots, d, adjoint = !A.is_contiguous()).
llvm::Error linalgDetBackward(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  const Value *lu = c.result(1), *pivots = c.result(2);
  Value *dd = binary(c, "aten::mul.Tensor", c.g(), mut(c.result(0)), "grad_mul");
  Value *d = detRhs(c, dd, pivots);
  int64_t n = sizesOf(*pivots->meta())[0];
  Value *diag = c.e.emit("aten::diagonal.default",
                         {A("self", mut(lu)), A("offset", int64_t(0)), A("dim1", int64_t(-2)), A("dim2", int64_t(-1))},
                         metaOf(lu->meta()->dtype, {n}, lu->meta()->device, llvm::ArrayRef<int64_t>{n + 1}), "grad_diagonal");
  Value *zero = c.e.emit("aten::eq.Scalar", {A("self", diag), A("other", 0.0)}, boolLike(diag), "grad_zero_pivot");
  double eps = lu->meta()->dtype == ScalarType::Double ? std::numeric_limits<double>::epsilon()
                                                       : double(std::numeric_limits<float>::epsilon());
  Value *z = scalarTensor(c, 0.0, lu); // the right operand first, as the compiler evaluates them
  Value *e = scalarTensor(c, eps, lu);
  Value *w = c.e.emit("aten::where.self", {A("condition", zero), A("self", e), A("other", z)}, GradEmitter::like(diag),
                      "grad_where");
  Value *shift = c.e.emit("aten::diag_embed.default", {A("self", w)}, GradEmitter::like(lu), "grad_diag_embed");
  Value *lu2 = binary(c, "aten::add.Tensor", mut(lu), shift, "grad_add");
  c.set("A", luSolve(c, lu2, pivots, d, true, !isContiguous(*c.operand("A")->meta())));
  return llvm::Error::success();
}

/// slogdet_backward of a real A (results sign, logabsdet, LU, pivots): the sign's gradient is zero;
/// linalg_lu_solve(LU, pivots, diag_embed(grad_logabsdet expanded).mT(), adjoint = !A.is_contiguous()).
llvm::Error linalgSlogdetBackward(GradCall &c) {
  Value *g = c.g(1);
  if (!g)
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  Value *d = detRhs(c, g, c.result(3));
  c.set("A", luSolve(c, c.result(2), c.result(3), d, true, !isContiguous(*c.operand("A")->meta())));
  return llvm::Error::success();
}

/// linalg_eig_backward for _linalg_eigh (is_hermitian; results L, V): with eigenvalues alone,
/// (V * gL.unsqueeze(-2)) @ V.mH(). Otherwise VhgV = V.mH() @ gV (its diagonal read), projected to
/// 0.5 * (VhgV - VhgV.mH()), divided in place by E = L.unsqueeze(-2) - L.unsqueeze(-1) with a
/// diagonal of ones, gL scattered onto its diagonal (diagonal_scatter: DTensor is subclass-like),
/// and conjugated: V @ (gA @ V.mH()).
llvm::Error linalgEighBackward(GradCall &c) {
  Value *gL = c.g(0), *gV = c.g(1);
  if (!gL && !gV)
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  if (!c.boolArg("compute_v", true))
    return makeError("autodiff: {}: the derivative without compute_v is not modelled (torch needs the eigenvectors)",
                     c.n.where());
  Value *L = mut(c.result(0)), *V = mut(c.result(1));
  int64_t n = sizesOf(*L->meta())[0];
  auto unsqueezeAt = [&](Value *x, int64_t d) { // x.unsqueeze(d) of a vector, d = -1 or -2
    llvm::SmallVector<int64_t, 2> s = d == -1 ? llvm::SmallVector<int64_t, 2>{n, 1} : llvm::SmallVector<int64_t, 2>{1, n};
    return c.e.emit("aten::unsqueeze.default", {A("self", x), A("dim", d)}, GradEmitter::withSizes(x, s),
                    "grad_unsqueeze");
  };
  auto diagonalOf = [&](Value *x) {
    return c.e.emit("aten::diagonal.default",
                    {A("self", x), A("offset", int64_t(0)), A("dim1", int64_t(-2)), A("dim2", int64_t(-1))},
                    metaOf(x->meta()->dtype, {n}, x->meta()->device, llvm::ArrayRef<int64_t>{n + 1}), "grad_diagonal");
  };
  if (!gV) {
    Value *VH = mH(c, V); // at::matmul's operands right to left
    Value *scaled = binary(c, "aten::mul.Tensor", V, unsqueezeAt(gL, -2), "grad_mul");
    c.set("A", c.e.mm(scaled, VH));
    return llvm::Error::success();
  }
  Value *VhgV = c.e.mm(mH(c, V), gV);
  diagonalOf(VhgV); // diag_VhgV, read for the complex check
  Value *skew = binary(c, "aten::sub.Tensor", VhgV, mH(c, VhgV), "grad_sub");
  skew = c.e.emit("aten::mul.Scalar", {A("self", skew), A("other", 0.5)}, GradEmitter::like(skew), "grad_scale");
  Value *col = unsqueezeAt(L, -1);
  Value *E = c.e.emit("aten::sub.Tensor", {A("self", unsqueezeAt(L, -2)), A("other", col)},
                      GradEmitter::withSizes(L, {n, n}), "grad_sub");
  c.e.emit("aten::fill_.Scalar", {A("self", diagonalOf(E)), A("value", 1.0)}, GradEmitter::withSizes(L, {n}),
           "grad_fill");
  Value *gA = c.e.emit("aten::div_.Tensor", {A("self", skew), A("other", E)}, GradEmitter::like(skew), "grad_div");
  if (gL)
    gA = c.e.emit("aten::diagonal_scatter.default",
                  {A("self", gA), A("src", gL), A("offset", int64_t(0)), A("dim1", int64_t(-2)), A("dim2", int64_t(-1))},
                  GradEmitter::like(gA), "grad_diagonal_scatter");
  Value *inner = c.e.mm(gA, mH(c, V));
  c.set("A", c.e.mm(V, inner));
  return llvm::Error::success();
}

/// svd_backward for _linalg_svd (results U, S, Vh; m = U's rows, n = Vh's columns, k = S's size).
/// With full_matrices, U and Vh (and the gradients of U and Vh, where defined) are narrowed to k
/// first, the arguments right to left. Singular values alone: U @ (gS.unsqueeze(-1) * Vh) (m >= n)
/// or (U * gS.unsqueeze(-2)) @ Vh. Otherwise the skew parts UhgU = skew(U.mH() @ gU) and VhgV =
/// skew(Vh @ gVh.mH()) over E = S2.unsqueeze(-2) - S2.unsqueeze(-1) (diagonal filled with 1),
/// scaled by S, plus diag_embed(gS); then, for m > n with gU, the component of gU outside U's
/// span, for m < n with gVh, that of gVh outside Vh's; else U @ gA @ Vh.
llvm::Error linalgSvdBackward(GradCall &c) {
  Value *gU = c.g(0), *gS = c.g(1), *gVh = c.g(2);
  if (!gU && !gS && !gVh)
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  if (!c.boolArg("compute_uv", true))
    return makeError("autodiff: {}: the derivative without compute_uv is not modelled (torch needs U and Vh)",
                     c.n.where());
  Value *U = mut(c.result(0)), *S = mut(c.result(1)), *Vh = mut(c.result(2));
  int64_t k = sizesOf(*S->meta())[0];
  if (c.boolArg("full_matrices")) {
    auto narrow = [&](Value *x, int64_t dim) { return narrowMatrix(c, x, dim, 0, k); };
    Vh = narrow(Vh, -2);
    U = narrow(U, -1);
    if (gVh)
      gVh = narrow(gVh, -2);
    if (gU)
      gU = narrow(gU, -1);
  }
  int64_t m = sizesOf(*U->meta())[0], n = sizesOf(*Vh->meta())[1];
  auto unsqueezeAt = [&](Value *x, int64_t d) { // a vector's unsqueeze(-1) or unsqueeze(-2)
    auto sz = d == -1 ? llvm::SmallVector<int64_t, 2>{k, 1} : llvm::SmallVector<int64_t, 2>{1, k};
    return c.e.emit("aten::unsqueeze.default", {A("self", x), A("dim", d)}, GradEmitter::withSizes(x, sz),
                    "grad_unsqueeze");
  };
  auto op = [&](llvm::StringRef name, Value *x, Value *y, Value *shape) {
    return c.e.emit(name, {A("self", x), A("other", y)}, GradEmitter::like(shape), "grad_svd");
  };
  if (!gU && !gVh) {
    if (m >= n)
      c.set("A", c.e.mm(U, op("aten::mul.Tensor", unsqueezeAt(gS, -1), Vh, Vh)));
    else
      c.set("A", c.e.mm(op("aten::mul.Tensor", U, unsqueezeAt(gS, -2), U), Vh));
    return llvm::Error::success();
  }
  auto skew = [&](Value *x) { return op("aten::sub.Tensor", x, mH(c, x), x); };
  Value *UhgU = gU ? skew(c.e.mm(mH(c, U), gU)) : nullptr;
  Value *VhgV = gVh ? skew(c.e.mm(Vh, mH(c, gVh))) : nullptr;
  Value *S2 = op("aten::mul.Tensor", S, S, S);
  Value *col = unsqueezeAt(S2, -1);
  Value *row = unsqueezeAt(S2, -2);
  Value *square = UhgU ? UhgU : VhgV;
  Value *E = op("aten::sub.Tensor", row, col, square);
  Value *diag = c.e.emit("aten::diagonal.default",
                         {A("self", E), A("offset", int64_t(0)), A("dim1", int64_t(-2)), A("dim2", int64_t(-1))},
                         metaOf(E->meta()->dtype, {k}, E->meta()->device, llvm::ArrayRef<int64_t>{k + 1}),
                         "grad_diagonal");
  c.e.emit("aten::fill_.Scalar", {A("self", diag), A("value", int64_t(1))}, GradEmitter::like(diag), "grad_fill");
  Value *gA;
  if (gU && gVh) {
    Value *right = op("aten::mul.Tensor", unsqueezeAt(S, -1), VhgV, VhgV);
    Value *left = op("aten::mul.Tensor", UhgU, unsqueezeAt(S, -2), UhgU);
    gA = op("aten::div.Tensor", op("aten::add.Tensor", left, right, UhgU), E, UhgU);
  } else if (gU) {
    Value *srow = unsqueezeAt(S, -2);
    gA = op("aten::mul.Tensor", op("aten::div.Tensor", UhgU, E, UhgU), srow, UhgU);
  } else {
    Value *q = op("aten::div.Tensor", VhgV, E, VhgV);
    gA = op("aten::mul.Tensor", unsqueezeAt(S, -1), q, VhgV);
  }
  if (gS) {
    Value *d = c.e.emit("aten::diag_embed.default", {A("self", gS)}, GradEmitter::like(gA), "grad_diag_embed");
    gA = op("aten::add.Tensor", gA, d, gA);
  }
  if (m > n && gU) {
    gA = c.e.mm(U, gA);
    Value *gUSinv = op("aten::div.Tensor", gU, unsqueezeAt(S, -2), gU);
    Value *proj = c.e.mm(U, c.e.mm(mH(c, U), gUSinv));
    gA = op("aten::sub.Tensor", op("aten::add.Tensor", gA, gUSinv, gA), proj, gA);
    gA = c.e.mm(gA, Vh);
  } else if (m < n && gVh) {
    gA = c.e.mm(gA, Vh);
    Value *SinvgVh = op("aten::div.Tensor", gVh, unsqueezeAt(S, -1), gVh);
    Value *proj = c.e.mm(c.e.mm(SinvgVh, mH(c, Vh)), Vh);
    gA = op("aten::sub.Tensor", op("aten::add.Tensor", gA, SinvgVh, gA), proj, gA);
    gA = c.e.mm(U, gA);
  } else {
    gA = m >= n ? c.e.mm(U, c.e.mm(gA, Vh)) : c.e.mm(c.e.mm(U, gA), Vh);
  }
  c.set("A", gA);
  return llvm::Error::success();
}

/// linalg_matrix_exp_differential(self, grad, adjoint=true): the exponential of the block matrix
/// [[A^H, grad], [0, A^H]] (cat of cats, zeros_like(A^H) for the zero block), narrowed to its
/// top-right n x n block.
llvm::Error linalgMatrixExpBackward(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  Value *AH = mH(c, c.self());
  int64_t n = sizesOf(*AH->meta())[0];
  auto cat = [&](Value *x, Value *y, int64_t dim, llvm::ArrayRef<int64_t> sizes) {
    return c.e.emit("aten::cat.default", {A("tensors", TensorList{x, y}), A("dim", dim)},
                    GradEmitter::withSizes(c.g(), sizes), "grad_cat");
  };
  Value *top = cat(AH, c.g(), -1, {n, 2 * n});
  Value *zeros = c.e.emit("aten::zeros_like.default", {A("self", AH)}, GradEmitter::like(AH), "grad_zeros");
  Value *bottom = cat(zeros, AH, -1, {n, 2 * n});
  Value *big = cat(top, bottom, -2, {2 * n, 2 * n});
  Value *e = unary(c, "aten::linalg_matrix_exp.default", big, "grad_matrix_exp");
  c.set("self", narrowMatrix(c, narrowMatrix(c, e, -2, 0, n), -1, n, n));
  return llvm::Error::success();
}

/// linalg_qr_backward (results Q, R; m = Q's rows, n = R's columns): gA = gR @ R.mH() - Q.mH() @
/// gQ (either term alone where only one gradient is defined). For m >= n: Q @ syminvadj(gA.triu())
/// (X + X.mH(), its diagonal halved in place), plus gQ, then solve_triangular(R.mH(), ., lower,
/// right). For m < n: Q @ (X - X.mH()).tril() of X = -gA (the real case: a zero diagonal),
/// solved against the leading m x m block of R, padded with new_zeros to n columns by cat, plus
/// Q @ gR. mode='r' (no Q) and 'complete' with m > n: torch raises; refused.
llvm::Error linalgQrBackward(GradCall &c) {
  Value *gQ = c.g(0), *gR = c.g(1);
  if (!gQ && !gR)
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  std::string mode = "reduced";
  if (const Argument *a = c.n.input("mode"); a && a->is<std::string>())
    mode = a->get<std::string>();
  Value *Q = mut(c.result(0)), *R = mut(c.result(1));
  int64_t m = sizesOf(*Q->meta())[0], n = sizesOf(*R->meta())[1];
  if (mode == "r" || (mode == "complete" && m > n))
    return makeError("autodiff: {}: torch raises for the derivative of linalg_qr with mode='{}'{}", c.n.where(), mode,
                     mode == "r" ? " (Q is not computed)" : " and more rows than columns");
  int64_t k = std::min(m, n);
  auto op = [&](llvm::StringRef name, Value *x, Value *y, Value *shape) {
    return c.e.emit(name, {A("self", x), A("other", y)}, GradEmitter::like(shape), "grad_qr");
  };
  Value *gA;
  if (gQ && gR) {
    Value *qg = c.e.mm(mH(c, Q), gQ);
    gA = op("aten::sub.Tensor", c.e.mm(gR, mH(c, R)), qg, qg);
  } else if (gQ) {
    gA = negOf(c, c.e.mm(mH(c, Q), gQ));
  } else {
    gA = c.e.mm(gR, mH(c, R));
  }
  if (m >= n) {
    Value *X = triangle(c, true, gA, 0);
    Value *sym = op("aten::add.Tensor", X, mH(c, X), X);
    Value *diag = c.e.emit("aten::diagonal.default",
                           {A("self", sym), A("offset", int64_t(0)), A("dim1", int64_t(-2)), A("dim2", int64_t(-1))},
                           metaOf(sym->meta()->dtype, {k}, sym->meta()->device, llvm::ArrayRef<int64_t>{k + 1}),
                           "grad_diagonal");
    c.e.emit("aten::mul_.Scalar", {A("self", diag), A("other", 0.5)}, GradEmitter::like(diag), "grad_half");
    gA = c.e.mm(Q, sym);
    if (gQ)
      gA = op("aten::add.Tensor", gA, gQ, gA);
    c.set("A", solveTriangular(c, mH(c, R), gA, /*upper=*/false, /*left=*/false));
    return llvm::Error::success();
  }
  Value *X = negOf(c, gA);
  Value *skew = op("aten::sub.Tensor", X, mH(c, X), X);
  gA = c.e.mm(Q, triangle(c, false, skew, 0));
  gA = solveTriangular(c, mH(c, narrowMatrix(c, R, -1, 0, m)), gA, /*upper=*/false, /*left=*/false);
  Value *pad = c.e.emit("aten::new_zeros.default", {A("self", gA), A("size", IntList{m, n - m})},
                        GradEmitter::withSizes(gA, {m, n - m}), "grad_zeros");
  gA = c.e.emit("aten::cat.default", {A("tensors", TensorList{gA, pad}), A("dim", int64_t(-1))},
                GradEmitter::withSizes(gA, {m, n}), "grad_cat");
  if (gR)
    gA = op("aten::add.Tensor", gA, c.e.mm(Q, gR), gA);
  c.set("A", gA);
  return llvm::Error::success();
}

/// pinv_backward(grad, pinvA, A) (m x n A), the ops in the order GCC evaluates its one-expression
/// sums (an operator's right operand first, a member call's object first). m <= n: K = grad^H @
/// pinvA, KpinvAh = K @ pinvA^H; -(pinvA @ K)^H + KpinvAh - (A @ pinvA) @ KpinvAh + (pinvA^H @
/// pinvA) @ (grad^H - K @ A). m > n: K = pinvA @ grad^H, pinvAhK = pinvA^H @ K; -(K @ pinvA)^H +
/// (grad^H - A @ K) @ pinvA @ pinvA^H + pinvAhK - pinvAhK @ pinvA @ A.
llvm::Error linalgPinvBackward(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  Value *a = c.self(), *pinvA = mut(c.result(0));
  int64_t m = sizesOf(*a->meta())[0], n = sizesOf(*a->meta())[1];
  auto op = [&](llvm::StringRef name, Value *x, Value *y) {
    return c.e.emit(name, {A("self", x), A("other", y)}, GradEmitter::like(x), "grad_pinv");
  };
  Value *pinvAh = mH(c, pinvA), *gradh = mH(c, c.g());
  Value *gA;
  if (m <= n) {
    Value *K = c.e.mm(gradh, pinvA);
    Value *KpinvAh = c.e.mm(K, pinvAh);
    Value *gram = c.e.mm(pinvAh, pinvA);
    Value *last = c.e.mm(gram, op("aten::sub.Tensor", gradh, c.e.mm(K, a)));
    Value *third = c.e.mm(c.e.mm(a, pinvA), KpinvAh);
    Value *first = negOf(c, mH(c, c.e.mm(pinvA, K)));
    gA = op("aten::add.Tensor", op("aten::sub.Tensor", op("aten::add.Tensor", first, KpinvAh), third), last);
  } else {
    Value *K = c.e.mm(pinvA, gradh);
    Value *pinvAhK = c.e.mm(pinvAh, K);
    Value *last = c.e.mm(c.e.mm(pinvAhK, pinvA), a);
    Value *second = c.e.mm(c.e.mm(op("aten::sub.Tensor", gradh, c.e.mm(a, K)), pinvA), pinvAh);
    Value *first = negOf(c, mH(c, c.e.mm(K, pinvA)));
    gA = op("aten::sub.Tensor", op("aten::add.Tensor", op("aten::add.Tensor", first, second), pinvAhK), last);
  }
  c.set("self", gA);
  return llvm::Error::success();
}

/// linalg_lu_backward(L_grad, U_grad, P, L, U, pivot) (L m x k, U k x n), either gradient
/// possibly undefined. Square: P @ solve(L^H, solve(U^H, (L^H @ gL).tril(-1) + (gU @ U^H).triu(),
/// lower, right), upper, unit). Wide: L^H @ gL - gU.triu() @ U^H, tril(-1), solved against U1^H
/// from the right, cat with [gU1.triu() added, gU2], solved against L^H (unit), zeros_like(U2)
/// cat'ed when gU is undefined. Tall: the transposed roles (gU @ U^H - L^H @ gL.tril(-1), triu,
/// L1^H unit solve, cat along rows, U^H right solve). P @ the result when pivoting.
Value *luBackward(GradCall &c, Value *gL, Value *gU, Value *P, Value *L, Value *U, bool pivot) {
  int64_t m = sizesOf(*L->meta())[0], n = sizesOf(*U->meta())[1], k = std::min(m, n);
  auto op = [&](llvm::StringRef name, Value *x, Value *y) {
    return c.e.emit(name, {A("self", x), A("other", y)}, GradEmitter::like(x), "grad_lu");
  };
  auto cat = [&](Value *x, Value *y, int64_t dim) {
    auto sz = sizesOf(*x->meta());
    sz[dim + 2] += sizesOf(*y->meta())[dim + 2];
    return c.e.emit("aten::cat.default", {A("tensors", TensorList{x, y}), A("dim", dim)}, GradEmitter::withSizes(x, sz),
                    "grad_cat");
  };
  Value *gA = nullptr;
  if (m == n) {
    if (gL)
      gA = triangle(c, false, c.e.mm(mH(c, L), gL), -1);
    if (gU) {
      Value *u = triangle(c, true, c.e.mm(gU, mH(c, U)), 0);
      gA = gA ? op("aten::add.Tensor", gA, u) : u;
    }
    gA = solveTriangular(c, mH(c, U), gA, /*upper=*/false, /*left=*/false);
    gA = solveTriangular(c, mH(c, L), gA, /*upper=*/true, /*left=*/true, /*unitriangular=*/true);
  } else if (m < n) {
    auto U1 = [&](Value *x) { return n == k ? x : narrowMatrix(c, x, -1, 0, k); };
    auto U2 = [&](Value *x) { return narrowMatrix(c, x, -1, k, n - k); };
    if (gL)
      gA = c.e.mm(mH(c, L), gL);
    if (gU) {
      Value *t = triangle(c, true, gU, 0);
      Value *u = c.e.mm(t, mH(c, U));
      gA = gA ? op("aten::sub.Tensor", gA, u) : negOf(c, u);
    }
    Value *low = triangle(c, false, gA, -1);
    gA = solveTriangular(c, mH(c, U1(U)), low, /*upper=*/false, /*left=*/false);
    if (gU) {
      Value *head = op("aten::add.Tensor", gA, triangle(c, true, U1(gU), 0));
      gA = cat(head, U2(gU), -1);
    }
    gA = solveTriangular(c, mH(c, L), gA, /*upper=*/true, /*left=*/true, /*unitriangular=*/true);
    if (!gU) {
      Value *u2 = U2(U);
      gA = cat(gA, c.e.emit("aten::zeros_like.default", {A("self", u2)}, GradEmitter::like(u2), "grad_zeros"), -1);
    }
  } else {
    auto L1 = [&](Value *x) { return m == k ? x : narrowMatrix(c, x, -2, 0, k); };
    auto L2 = [&](Value *x) { return narrowMatrix(c, x, -2, k, m - k); };
    if (gU)
      gA = c.e.mm(gU, mH(c, U));
    if (gL) {
      Value *LH = mH(c, L);
      Value *l = c.e.mm(LH, triangle(c, false, gL, -1));
      gA = gA ? op("aten::sub.Tensor", gA, l) : negOf(c, l);
    }
    Value *up = triangle(c, true, gA, 0);
    gA = solveTriangular(c, mH(c, L1(L)), up, /*upper=*/true, /*left=*/true, /*unitriangular=*/true);
    if (gL) {
      Value *head = op("aten::add.Tensor", gA, triangle(c, false, L1(gL), -1));
      gA = cat(head, L2(gL), -2);
    }
    gA = solveTriangular(c, mH(c, U), gA, /*upper=*/false, /*left=*/false);
    if (!gL) {
      Value *l2 = L2(L);
      gA = cat(gA, c.e.emit("aten::zeros_like.default", {A("self", l2)}, GradEmitter::like(l2), "grad_zeros"), -2);
    }
  }
  return pivot ? c.e.mm(P, gA) : gA;
}

/// linalg_lu (results P, L, U; P has no gradient): linalg_lu_backward(grad_L, grad_U, P, L, U, pivot).
llvm::Error linalgLuBackward(GradCall &c) {
  Value *gL = c.g(1), *gU = c.g(2);
  if (!gL && !gU)
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  c.set("A", luBackward(c, gL, gU, mut(c.result(0)), mut(c.result(1)), mut(c.result(2)), c.boolArg("pivot", true)));
  return llvm::Error::success();
}

/// at::lu_unpack(LU, pivots, unpack_data=true, unpack_pivots) in a backward: its P (m x m; an
/// empty tensor without unpack_pivots), L (m x k) and U (k x n).
struct LuFactors {
  Value *P, *L, *U;
};
LuFactors luUnpack(GradCall &c, const Value *lu, const Value *pivots, bool unpackPivots) {
  int64_t m = sizesOf(*lu->meta())[0], n = sizesOf(*lu->meta())[1], k = std::min(m, n);
  Value *P = c.e.newValue("grad_lu_P", unpackPivots ? GradEmitter::withSizes(lu, {m, m}) : GradEmitter::withSizes(lu, {0}));
  Value *L = c.e.newValue("grad_lu_L", GradEmitter::withSizes(lu, {m, k}));
  Value *U = c.e.newValue("grad_lu_U", GradEmitter::withSizes(lu, {k, n}));
  llvm::SmallVector<NamedArgument, 4> args{A("LU_data", mut(lu)), A("LU_pivots", mut(pivots))};
  if (!unpackPivots) {
    args.push_back(A("unpack_data", true));
    args.push_back(A("unpack_pivots", false));
  }
  c.e.emitNode(P->name(), "aten::lu_unpack.default", std::move(args), {Argument(P), Argument(L), Argument(U)});
  return {P, L, U};
}

/// lu_factor_ex_backward (results LU, pivots, info): P, L, U = lu_unpack(LU, pivots, true, pivot);
/// grad_L = grad.narrow(-1, 0, k), grad_U = grad.narrow(-2, 0, k); linalg_lu_backward.
llvm::Error linalgLuFactorExBackward(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  bool pivot = c.boolArg("pivot", true);
  const Value *lu = c.result(0);
  int64_t m = sizesOf(*lu->meta())[0], n = sizesOf(*lu->meta())[1], k = std::min(m, n);
  LuFactors f = luUnpack(c, lu, c.result(1), pivot);
  Value *gL = narrowMatrix(c, c.g(), -1, 0, k);
  Value *gU = narrowMatrix(c, c.g(), -2, 0, k);
  c.set("A", luBackward(c, gL, gU, f.P, f.L, f.U, pivot));
  return llvm::Error::success();
}

/// lu_unpack_backward(grad_L, grad_U, m, n) (results P, L, U; P has no gradient): grad_L.tril(-1)
/// + grad_U.triu() (the U part first), the wide/tall remainder of the longer factor's gradient
/// cat'ed on. Where that remainder's gradient is undefined torch cats a plain at::zeros with the
/// DTensor gradient, which DTensor refuses (it raises): refused by name.
llvm::Error luUnpackBackward(GradCall &c) {
  Value *gL = c.g(1), *gU = c.g(2);
  if (!gL && !gU)
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  Value *lu = c.operand("LU_data");
  int64_t m = sizesOf(*lu->meta())[0], n = sizesOf(*lu->meta())[1], k = std::min(m, n);
  if ((m < n && !gU) || (m > n && !gL))
    return makeError("autodiff: {}: without a gradient of {} torch cats a plain at::zeros with the DTensor gradient "
                     "(DTensor raises)",
                     c.n.where(), m < n ? "U" : "L");
  auto add = [&](Value *x, Value *y) {
    return c.e.emit("aten::add.Tensor", {A("self", x), A("other", y)}, GradEmitter::like(x), "grad_add");
  };
  auto cat = [&](Value *x, Value *y, int64_t dim) {
    return c.e.emit("aten::cat.default", {A("tensors", TensorList{x, y}), A("dim", dim)}, GradEmitter::like(lu),
                    "grad_cat");
  };
  Value *g;
  if (m == n || (m < n && !gL) || (m > n && !gU)) {
    Value *u = gU ? triangle(c, true, gU, 0) : nullptr;
    Value *l = gL ? triangle(c, false, gL, -1) : nullptr;
    g = u && l ? add(l, u) : (u ? u : l);
  } else if (m < n) {
    Value *u = triangle(c, true, narrowMatrix(c, gU, -1, 0, k), 0);
    Value *head = add(triangle(c, false, gL, -1), u);
    g = cat(head, narrowMatrix(c, gU, -1, k, n - k), -1);
  } else {
    Value *u = triangle(c, true, gU, 0);
    Value *head = add(triangle(c, false, narrowMatrix(c, gL, -2, 0, k), -1), u);
    g = cat(head, narrowMatrix(c, gL, -2, k, m - k), -2);
  }
  c.set("LU_data", g);
  return llvm::Error::success();
}

/// linalg_lu_solve (LU, pivots, B; result X): B's gradient linalg_lu_solve(LU, pivots, grad, left,
/// !adjoint), computed first; LU's linalg_lu_solve_LU: P, L, U = lu_unpack(LU, pivots, true,
/// left == adjoint); for left != adjoint gR = solve_triangular(U^H, -op(gX) @ op(X)^H, lower),
/// gL + gR.triu() with gL = solve_triangular(L^H, gR @ U^H, upper, unit).tril(-1); else gR =
/// -P^T @ op(X) @ op(gX) @ P solved against L^H from the right (unit), gU =
/// solve_triangular(U^H, L^H @ gR, lower, right).triu(), gR.tril(-1) + gU.
llvm::Error linalgLuSolveBackward(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  if (llvm::Error err = linalgOutOfScope(c))
    return err;
  bool left = c.boolArg("left", true), adjoint = c.boolArg("adjoint");
  const Value *lu = c.operand("LU"), *pivots = c.operand("pivots");
  if (c.want("B"))
    c.set("B", luSolve(c, lu, pivots, c.g(), left, !adjoint));
  if (!c.want("LU"))
    return llvm::Error::success();
  LuFactors f = luUnpack(c, lu, pivots, left == adjoint);
  Value *gX = c.g(), *X = mut(c.result(0));
  auto add = [&](Value *x, Value *y) {
    return c.e.emit("aten::add.Tensor", {A("self", x), A("other", y)}, GradEmitter::like(x), "grad_add");
  };
  if (left != adjoint) {
    Value *p = left ? c.e.mm(gX, mH(c, X)) : c.e.mm(mH(c, gX), X);
    Value *gR = solveTriangular(c, mH(c, f.U), negOf(c, p), /*upper=*/false);
    Value *gRU = c.e.mm(gR, mH(c, f.U));
    Value *gL = triangle(c, false, solveTriangular(c, mH(c, f.L), gRU, true, true, true), -1);
    c.set("LU", add(gL, triangle(c, true, gR, 0)));
  } else {
    Value *PT = mH(c, f.P);
    Value *lhs = c.e.mm(PT, left ? X : mH(c, X));
    Value *gR = negOf(c, c.e.mm(c.e.mm(lhs, left ? mH(c, gX) : gX), f.P));
    gR = solveTriangular(c, mH(c, f.L), gR, /*upper=*/true, /*left=*/false, /*unitriangular=*/true);
    Value *LgR = c.e.mm(mH(c, f.L), gR);
    Value *gU = triangle(c, true, solveTriangular(c, mH(c, f.U), LgR, /*upper=*/false, /*left=*/false), 0);
    c.set("LU", add(triangle(c, false, gR, -1), gU));
  }
  return llvm::Error::success();
}

} // namespace derivatives
} // namespace commlens
