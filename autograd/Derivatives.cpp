#include "autograd/Derivatives.h"

#include "ir/Error.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace commlens {

namespace {

int operandIndex(const Node &n, llvm::StringRef name) {
  int i = 0;
  for (const NamedArgument &a : n.inputs())
    for (Value *v : a.value.tensors()) {
      if (v->kind() != ValueKind::Tensor)
        continue;
      if (a.name == name)
        return i;
      ++i;
    }
  return -1;
}

bool columnMajor(const Value *v) {
  if (!v->meta() || v->meta()->rank() != 2)
    return false;
  auto s = sizesOf(*v->meta());
  auto st = stridesOf(*v->meta());
  if (v->producer() &&
      (v->producer()->opString() == "aten::t.default" || v->producer()->opString() == "aten::transpose.int"))
    return true;
  return st[0] == 1 && st[1] == s[0];
}

NamedArgument A(llvm::StringRef name, Argument v) { return {name.str(), std::move(v), false}; }
NamedArgument K(llvm::StringRef name, Argument v) { return {name.str(), std::move(v), true}; }
Value *mut(const Value *v) { return const_cast<Value *>(v); }

/// A Scalar argument (alpha, beta, value) as a double, when it is a number.
std::optional<double> numberOf(const Argument *a) {
  if (!a || a->isNone())
    return std::nullopt;
  if (a->is<double>())
    return a->get<double>();
  if (a->is<bool>())
    return a->get<bool>() ? 1.0 : 0.0;
  if (auto i = a->asInt())
    return static_cast<double>(*i);
  return std::nullopt;
}

/// maybe_multiply(x, s): x * s unless s is the number 1.
Value *maybeMultiply(GradCall &c, Value *x, const Argument *s) {
  if (!s || s->isNone())
    return x;
  if (auto v = numberOf(s); v && *v == 1.0)
    return x;
  return c.e.emit("aten::mul.Scalar", {A("self", x), A("other", *s)}, GradEmitter::like(x), "grad_scale");
}

Value *unary(GradCall &c, llvm::StringRef op, Value *x, llvm::StringRef hint) {
  return c.e.emit(op, {A("self", x)}, GradEmitter::like(x), hint);
}
Value *binary(GradCall &c, llvm::StringRef op, Value *x, Argument y, llvm::StringRef hint) {
  return c.e.emit(op, {A("self", x), A("other", std::move(y))}, GradEmitter::like(x), hint);
}
Value *mul(GradCall &c, Value *x, Argument y) { return binary(c, "aten::mul.Tensor", x, std::move(y), "grad_mul"); }
/// x.pow(exponent), pow.Tensor_Scalar.
Value *powScalar(GradCall &c, Value *x, Argument exponent) {
  return c.e.emit("aten::pow.Tensor_Scalar", {A("self", x), A("exponent", std::move(exponent))}, GradEmitter::like(x),
                  "grad_pow");
}

/// A Bool meta of v's sizes (masks).
TensorMeta boolLike(const Value *v) {
  TensorMeta m = GradEmitter::like(v);
  m.dtype = ScalarType::Bool;
  return m;
}

/// A 0-dim zero of the gradient's dtype (the `zeros` operand of the where()s formulas run).
Value *zeroScalar(GradCall &c) {
  return c.e.emit("aten::scalar_tensor.default", {A("s", 0.0)}, metaOf(c.g()->meta()->dtype, {}, c.g()->meta()->device),
                  "grad_zero");
}

using Table = llvm::StringMap<DerivativeFormula>;

// ---- formulas ---------------------------------------------------------------------------------

llvm::Error layerNorm(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  Value *input = c.operand("input"), *weight = c.operand("weight"), *bias = c.operand("bias");
  llvm::SmallVector<Argument, 1> results;
  Value *gi = c.e.newValue("grad_layer_norm_input", GradEmitter::like(input));
  results.push_back(gi);
  Value *gw = weight ? c.e.newValue("grad_layer_norm_weight", GradEmitter::like(weight)) : nullptr;
  results.push_back(gw ? Argument(gw) : Argument(NoneArg{}));
  Value *gb = bias ? c.e.newValue("grad_layer_norm_bias", GradEmitter::like(bias)) : nullptr;
  results.push_back(gb ? Argument(gb) : Argument(NoneArg{}));
  BoolList mask{c.want("input"), weight && c.want("weight"), bias && c.want("bias")};
  c.e.emitNode(gi->name(), "aten::native_layer_norm_backward.default",
               {A("grad_out", c.g()), A("input", input), A("normalized_shape", *c.n.input("normalized_shape")),
                A("mean", mut(c.result(1))), A("rstd", mut(c.result(2))),
                A("weight", weight ? Argument(weight) : Argument(NoneArg{})),
                A("bias", bias ? Argument(bias) : Argument(NoneArg{})), A("output_mask", mask)},
               std::move(results));
  c.set("input", gi);
  if (gw)
    c.set("weight", gw);
  if (gb)
    c.set("bias", gb);
  return llvm::Error::success();
}

llvm::Error rmsNorm(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  Value *input = c.operand("input"), *weight = c.operand("weight");
  Value *gi = c.e.newValue("grad_rms_norm_input", GradEmitter::like(input));
  Value *gw = weight ? c.e.newValue("grad_rms_norm_weight", GradEmitter::like(weight)) : nullptr;
  BoolList mask{c.want("input"), weight && c.want("weight")};
  c.e.emitNode(gi->name(), "aten::_fused_rms_norm_backward.default",
               {A("grad_out", c.g()), A("input", input), A("normalized_shape", *c.n.input("normalized_shape")),
                A("rstd", mut(c.result(1))), A("weight", weight ? Argument(weight) : Argument(NoneArg{})),
                A("output_mask", mask)},
               {Argument(gi), gw ? Argument(gw) : Argument(NoneArg{})});
  c.set("input", gi);
  if (gw)
    c.set("weight", gw);
  return llvm::Error::success();
}

llvm::Error sdpaFlashCpu(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  Value *q = c.operand("query"), *k = c.operand("key"), *v = c.operand("value");
  Value *gq = c.e.newValue("grad_sdpa_q", GradEmitter::like(q));
  Value *gk = c.e.newValue("grad_sdpa_k", GradEmitter::like(k));
  Value *gv = c.e.newValue("grad_sdpa_v", GradEmitter::like(v));
  llvm::SmallVector<NamedArgument, 4> args{A("grad_out", c.g()), A("query", q), A("key", k), A("value", v),
                                           A("out", mut(c.result(0))), A("logsumexp", mut(c.result(1)))};
  for (llvm::StringRef name : {"dropout_p", "is_causal", "attn_mask", "scale"})
    if (const Argument *x = c.n.input(name))
      args.push_back(K(name, *x));
  c.e.emitNode(gq->name(), "aten::_scaled_dot_product_flash_attention_for_cpu_backward.default", std::move(args),
               {Argument(gq), Argument(gk), Argument(gv)});
  c.set("query", gq);
  c.set("key", gk);
  c.set("value", gv);
  return llvm::Error::success();
}

/// The CUDA attention kernels' formulas (derivatives.yaml): one backward kernel taking the
/// forward's saved outputs and philox state; grads of q, k, v (and, for efficient attention, of a
/// bias that requires grad).
struct SdpaGrads {
  Value *q, *k, *v;
};
SdpaGrads sdpaGradValues(GradCall &c) {
  Value *q = c.operand("query"), *k = c.operand("key"), *v = c.operand("value");
  return {c.e.newValue("grad_sdpa_q", GradEmitter::like(q)), c.e.newValue("grad_sdpa_k", GradEmitter::like(k)),
          c.e.newValue("grad_sdpa_v", GradEmitter::like(v))};
}
void setSdpaGrads(GradCall &c, const SdpaGrads &g) {
  c.set("query", g.q);
  c.set("key", g.k);
  c.set("value", g.v);
}
Argument outputArg(const Node &n, unsigned i) { return i < n.outputs().size() ? n.outputs()[i] : Argument(NoneArg{}); }

llvm::Error sdpaFlash(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  SdpaGrads g = sdpaGradValues(c);
  llvm::SmallVector<NamedArgument, 4> args{
      A("grad_out", c.g()),       A("query", c.operand("query")), A("key", c.operand("key")),
      A("value", c.operand("value")), A("out", mut(c.result(0))), A("logsumexp", mut(c.result(1))),
      A("cum_seq_q", NoneArg{}),  A("cum_seq_k", NoneArg{}),      A("max_q", outputArg(c.n, 4)),
      A("max_k", outputArg(c.n, 5)), A("dropout_p", c.floatArg("dropout_p").value_or(0.0)),
      A("is_causal", c.boolArg("is_causal")), A("philox_seed", mut(c.result(2))),
      A("philox_offset", mut(c.result(3)))};
  if (const Argument *scale = c.n.input("scale"))
    args.push_back(K("scale", *scale));
  c.e.emitNode(g.q->name(), "aten::_scaled_dot_product_flash_attention_backward.default", std::move(args),
               {Argument(g.q), Argument(g.k), Argument(g.v)});
  setSdpaGrads(c, g);
  return llvm::Error::success();
}

llvm::Error sdpaEfficient(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  SdpaGrads g = sdpaGradValues(c);
  Value *bias = c.operand("attn_bias");
  bool biasGrad = bias && c.want("attn_bias");
  Value *gb = biasGrad ? c.e.newValue("grad_sdpa_bias", GradEmitter::like(bias)) : nullptr;
  llvm::SmallVector<NamedArgument, 4> args{
      A("grad_out_", c.g()), A("query", c.operand("query")), A("key", c.operand("key")),
      A("value", c.operand("value")), A("attn_bias", bias ? Argument(bias) : Argument(NoneArg{})),
      A("out", mut(c.result(0))), A("logsumexp", mut(c.result(1))), A("philox_seed", mut(c.result(2))),
      A("philox_offset", mut(c.result(3))), A("dropout_p", c.floatArg("dropout_p").value_or(0.0)),
      A("grad_input_mask", BoolList{c.want("query"), c.want("key"), c.want("value"), biasGrad}),
      A("is_causal", c.boolArg("is_causal"))};
  if (const Argument *scale = c.n.input("scale"))
    args.push_back(K("scale", *scale));
  c.e.emitNode(g.q->name(), "aten::_scaled_dot_product_efficient_attention_backward.default", std::move(args),
               {Argument(g.q), Argument(g.k), Argument(g.v), gb ? Argument(gb) : Argument(NoneArg{})});
  setSdpaGrads(c, g);
  if (gb)
    c.set("attn_bias", gb);
  return llvm::Error::success();
}

llvm::Error sdpaCudnn(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  SdpaGrads g = sdpaGradValues(c);
  Value *bias = c.operand("attn_bias");
  llvm::SmallVector<NamedArgument, 4> args{
      A("grad_out", c.g()), A("query", c.operand("query")), A("key", c.operand("key")),
      A("value", c.operand("value")), A("out", mut(c.result(0))), A("logsumexp", mut(c.result(1))),
      A("philox_seed", mut(c.result(2))), A("philox_offset", mut(c.result(3))),
      A("attn_bias", bias ? Argument(bias) : Argument(NoneArg{})), A("cum_seq_q", NoneArg{}),
      A("cum_seq_k", NoneArg{}), A("max_q", outputArg(c.n, 4)), A("max_k", outputArg(c.n, 5)),
      A("dropout_p", c.floatArg("dropout_p").value_or(0.0)), A("is_causal", c.boolArg("is_causal"))};
  if (const Argument *scale = c.n.input("scale"))
    args.push_back(K("scale", *scale));
  c.e.emitNode(g.q->name(), "aten::_scaled_dot_product_cudnn_attention_backward.default", std::move(args),
               {Argument(g.q), Argument(g.k), Argument(g.v)});
  setSdpaGrads(c, g);
  return llvm::Error::success();
}

llvm::Error identity(GradCall &c) {
  c.set("self", c.g());
  return llvm::Error::success();
}

llvm::Error viewLike(GradCall &c) {
  c.set("self", c.e.reshape(c.g(), sizesOf(*c.self()->meta())));
  return llvm::Error::success();
}

llvm::Error permute(GradCall &c) {
  IntList dims = *c.n.input("dims")->asIntList();
  int64_t rank = static_cast<int64_t>(dims.size());
  IntList inverse(dims.size());
  for (int64_t i = 0; i < rank; ++i)
    inverse[dims[i] < 0 ? dims[i] + rank : dims[i]] = i;
  Value *g = c.g();
  auto gs = sizesOf(*g->meta());
  auto gst = stridesOf(*g->meta());
  llvm::SmallVector<int64_t, 4> sz, st;
  for (int64_t d : inverse) {
    sz.push_back(gs[d]);
    st.push_back(gst[d]);
  }
  c.set("self", c.e.emit("aten::permute.default", {A("self", g), A("dims", inverse)},
                         metaOf(g->meta()->dtype, sz, g->meta()->device, st), "grad_permute"));
  return llvm::Error::success();
}

/// squeeze.dim / squeeze.dims / squeeze.default: unsqueeze_to (each squeezed size-1 dim, ascending).
llvm::Error squeeze(GradCall &c) {
  auto s0 = sizesOf(*c.self()->meta());
  int64_t rank = static_cast<int64_t>(s0.size());
  IntList dims;
  if (c.n.input("dim")) {
    if (auto one = c.intArg("dim"))
      dims.push_back(*one);
    else if (auto many = c.n.input("dim")->asIntList())
      dims = *many;
  } else {
    for (int64_t d = 0; d < rank; ++d)
      dims.push_back(d);
  }
  for (int64_t &d : dims)
    d = d < 0 ? d + rank : d;
  std::sort(dims.begin(), dims.end());
  Value *x = c.g();
  for (int64_t d : dims)
    if (s0[d] == 1)
      x = c.e.unsqueeze(x, d);
  c.set("self", x);
  return llvm::Error::success();
}

llvm::Error unsqueezeBackward(GradCall &c) {
  c.set("self", c.e.emit("aten::squeeze.dim", {A("self", c.g()), A("dim", *c.intArg("dim"))},
                         GradEmitter::like(c.self()), "grad_squeeze"));
  return llvm::Error::success();
}

llvm::Error tBackward(GradCall &c) {
  c.set("self", c.e.t(c.g()));
  return llvm::Error::success();
}

llvm::Error transposeBackward(GradCall &c) {
  c.set("self", c.e.transpose(c.g(), *c.intArg("dim0"), *c.intArg("dim1")));
  return llvm::Error::success();
}

llvm::Error expandBackward(GradCall &c) {
  c.set("self", c.e.sumTo(c.g(), *c.self()->meta()));
  return llvm::Error::success();
}

llvm::Error toCopy(GradCall &c) {
  Value *g = c.g(), *self = c.self();
  c.set("self", g->meta()->dtype == self->meta()->dtype
                    ? g
                    : c.e.emit("aten::_to_copy.default", {A("self", g), K("dtype", self->meta()->dtype)},
                               GradEmitter::like(self), "grad_to_copy"));
  return llvm::Error::success();
}

llvm::Error nativeDropout(GradCall &c) {
  std::optional<double> p = c.floatArg("p");
  double scale = p ? (*p == 1.0 ? 0.0 : 1.0 / (1.0 - *p)) : 1.0;
  c.set("input", c.e.emit("aten::native_dropout_backward.default",
                          {A("grad_output", c.g()), A("mask", mut(c.result(1))), A("scale", scale)},
                          GradEmitter::like(c.g()), "grad_dropout"));
  return llvm::Error::success();
}

llvm::Error addmm(GradCall &c) {
  Value *g = c.g();
  c.set("self", maybeMultiply(c, g, c.n.input("beta")));
  if (c.want("mat1"))
    c.set("mat1", maybeMultiply(c, c.e.mmMat1Backward(g, c.operand("mat2"), c.operand("mat1")), c.n.input("alpha")));
  if (c.want("mat2"))
    c.set("mat2", maybeMultiply(c, c.e.mmMat2Backward(g, c.operand("mat1"), c.operand("mat2")), c.n.input("alpha")));
  return llvm::Error::success();
}

llvm::Error mmBackward(GradCall &c) {
  Value *g = c.g(), *self = c.self(), *mat2 = c.operand("mat2");
  if (c.want("self"))
    c.set("self", c.e.mmMat1Backward(g, mat2, self));
  if (c.want("mat2"))
    c.set("mat2", c.e.mmMat2Backward(g, self, mat2));
  return llvm::Error::success();
}

llvm::Error bmmBackward(GradCall &c) {
  Value *g = c.g(), *self = c.self(), *mat2 = c.operand("mat2");
  if (c.want("self"))
    c.set("self", c.e.bmm(g, c.e.transpose(mat2, 1, 2)));
  if (c.want("mat2"))
    c.set("mat2", c.e.bmm(c.e.transpose(self, 1, 2), g));
  return llvm::Error::success();
}

llvm::Error baddbmm(GradCall &c) {
  Value *g = c.g();
  Value *b1 = c.operand("batch1"), *b2 = c.operand("batch2");
  c.set("self", maybeMultiply(c, g, c.n.input("beta")));
  if (c.want("batch1"))
    c.set("batch1", maybeMultiply(c, c.e.bmm(g, c.e.transpose(b2, 1, 2)), c.n.input("alpha")));
  if (c.want("batch2"))
    c.set("batch2", maybeMultiply(c, c.e.bmm(c.e.transpose(b1, 1, 2), g), c.n.input("alpha")));
  return llvm::Error::success();
}

llvm::Error relu(GradCall &c) {
  c.set("self", c.e.emit("aten::threshold_backward.default",
                         {A("grad_output", c.g()), A("self", mut(c.result())), A("threshold", int64_t(0))},
                         GradEmitter::like(c.g()), "grad_relu"));
  return llvm::Error::success();
}

llvm::Error gelu(GradCall &c) {
  llvm::SmallVector<NamedArgument, 4> args{A("grad_output", c.g()), A("self", c.self())};
  if (const Argument *x = c.n.input("approximate"))
    args.push_back(K("approximate", *x));
  c.set("self", c.e.emit("aten::gelu_backward.default", std::move(args), GradEmitter::like(c.g()), "grad_gelu"));
  return llvm::Error::success();
}

/// softplus: softplus_backward(grad, self, beta, threshold), the defaults 1 and 20 where the node
/// leaves them out (derivatives.yaml).
llvm::Error softplus(GradCall &c) {
  const Argument *beta = c.n.input("beta"), *threshold = c.n.input("threshold");
  c.set("self", c.e.emit("aten::softplus_backward.default",
                         {A("grad_output", c.g()), A("self", c.self()), K("beta", beta ? *beta : Argument(int64_t(1))),
                          K("threshold", threshold ? *threshold : Argument(int64_t(20)))},
                         GradEmitter::like(c.g()), "grad_softplus"));
  return llvm::Error::success();
}

llvm::Error silu(GradCall &c) {
  c.set("self", c.e.emit("aten::silu_backward.default", {A("grad_output", c.g()), A("self", c.self())},
                         GradEmitter::like(c.g()), "grad_silu"));
  return llvm::Error::success();
}

/// tanh / sigmoid: OP_backward(grad, result).
template <const char *Op>
llvm::Error outputBackward(GradCall &c) {
  c.set("self", c.e.emit(Op, {A("grad_output", c.g()), A("output", mut(c.result()))}, GradEmitter::like(c.g()),
                         "grad_act"));
  return llvm::Error::success();
}
constexpr char kTanhBackward[] = "aten::tanh_backward.default";
constexpr char kSigmoidBackward[] = "aten::sigmoid_backward.default";

llvm::Error softmax(GradCall &c) {
  bool log = c.n.opString() == "aten::_log_softmax.default";
  Value *g = c.g(), *self = c.self();
  Value *gi = c.e.emit(log ? "aten::_log_softmax_backward_data.default" : "aten::_softmax_backward_data.default",
                       {A("grad_output", g), A("output", mut(c.result())), A("dim", *c.intArg("dim")),
                        A("input_dtype", self->meta()->dtype)},
                       GradEmitter::like(self), log ? "grad_log_softmax" : "grad_softmax");
  if (log && c.e.lossParallel() && c.e.isDTensor(self)) {
    // loss_parallel's handler returns grad_output.to(input_dtype) (nll_loss_backward already
    // computed the fused gradient): DTensor dispatches to.dtype and, the dtype unchanged, a
    // detach of the same tensor.
    Value *x = c.e.emit("aten::to.dtype", {A("self", g), A("dtype", self->meta()->dtype)}, GradEmitter::like(g),
                        "grad_log_softmax_to");
    gi = c.e.emit("aten::detach.default", {A("self", x)}, GradEmitter::like(g), "grad_log_softmax");
  }
  c.set("self", gi);
  return llvm::Error::success();
}

llvm::Error add(GradCall &c) {
  c.set("self", c.g());
  if (c.want("other"))
    c.set("other", maybeMultiply(c, c.g(), c.n.input("alpha")));
  return llvm::Error::success();
}

llvm::Error sub(GradCall &c) {
  c.set("self", c.g());
  if (c.want("other"))
    c.set("other", maybeMultiply(c, unary(c, "aten::neg.default", c.g(), "grad_neg"), c.n.input("alpha")));
  return llvm::Error::success();
}

/// rsub(self, other, alpha) = other - alpha * self.
llvm::Error rsub(GradCall &c) {
  if (c.want("self"))
    c.set("self", maybeMultiply(c, unary(c, "aten::neg.default", c.g(), "grad_neg"), c.n.input("alpha")));
  if (c.want("other"))
    c.set("other", c.g());
  return llvm::Error::success();
}

bool isComplex(ScalarType t) {
  return t == ScalarType::ComplexHalf || t == ScalarType::ComplexFloat || t == ScalarType::ComplexDouble;
}

/// Tensor.conj() as an operand of mul: for a complex tensor a view with the conjugate bit
/// (aten::_conj), which the conjugate fallback materialises (a clone) before the kernel runs; the
/// tensor itself otherwise.
Argument conj(GradCall &c, const Argument &x) {
  if (!x.isTensor() || !isComplex(x.tensor()->meta()->dtype))
    return x;
  Value *v = const_cast<Value *>(x.tensor());
  Value *view = c.e.emit("aten::_conj.default", {A("self", v)},
                         metaOf(v->meta()->dtype, sizesOf(*v->meta()), v->meta()->device, stridesOf(*v->meta())),
                         "grad_conj");
  return Argument(c.e.emit("aten::clone.default", {A("self", view)}, GradEmitter::like(view), "grad_resolve_conj"));
}

/// Tensor.contiguous(): the tensor itself when it already is, else a contiguous clone.
Value *contiguous(GradCall &c, Value *x) {
  if (isContiguous(*x->meta()))
    return x;
  return c.e.emit("aten::clone.default", {A("self", x), K("memory_format", MemoryFormat::Contiguous)},
                  GradEmitter::like(x), "grad_contiguous");
}

/// mul_tensor_backward (torch 2.13 FunctionsManual.cpp): grad * other.conj(), and the real part
/// where a real operand met a complex one (handle_r_to_c: at::real, which the dispatcher
/// decomposes to view_as_real(g).select(-1, 0)).
Value *mulBackward(GradCall &c, const Argument &other, const Value *operand) {
  Value *g = mul(c, c.g(), conj(c, other));
  if (isComplex(g->meta()->dtype) && !isComplex(operand->meta()->dtype)) {
    auto sizes = sizesOf(*g->meta());
    auto pairs = sizes;
    pairs.push_back(2);
    llvm::SmallVector<int64_t, 4> strides;
    for (int64_t st : stridesOf(*g->meta()))
      strides.push_back(2 * st);
    Value *r = c.e.emit("aten::view_as_real.default", {A("self", g)},
                        metaOf(operand->meta()->dtype, pairs, g->meta()->device), "grad_view_as_real");
    g = c.e.emit("aten::select.int", {A("self", r), A("dim", int64_t(-1)), A("index", int64_t(0))},
                 metaOf(operand->meta()->dtype, sizes, g->meta()->device, strides), "grad_real");
  }
  return g;
}

llvm::Error mulTensor(GradCall &c) {
  const Argument &other = *c.n.input("other"); // a tensor or a wrapped number
  if (c.want("self"))
    c.set("self", mulBackward(c, other, c.self()));
  if (c.want("other"))
    c.set("other", mulBackward(c, Argument(c.self()), c.n.input("other")->tensor()));
  return llvm::Error::success();
}

/// view_as_real: self's gradient is at::view_as_complex(grad.contiguous()).
llvm::Error viewAsRealBackward(GradCall &c) {
  Value *g = contiguous(c, c.g());
  c.set("self", c.e.emit("aten::view_as_complex.default", {A("self", g)}, GradEmitter::like(c.self()),
                         "grad_view_as_complex"));
  return llvm::Error::success();
}

/// view_as_complex: self's gradient is at::view_as_real(grad.contiguous().resolve_conj()) (the
/// gradient carries no conjugate bit here: resolve_conj returns it unchanged).
llvm::Error viewAsComplexBackward(GradCall &c) {
  Value *g = contiguous(c, c.g());
  c.set("self", c.e.emit("aten::view_as_real.default", {A("self", g)}, GradEmitter::like(c.self()),
                         "grad_view_as_real"));
  return llvm::Error::success();
}

llvm::Error scaleByScalar(GradCall &c) {
  c.set("self", binary(c, c.n.opString(), c.g(), *c.n.input("other"), "grad_scale"));
  return llvm::Error::success();
}

llvm::Error divTensor(GradCall &c) {
  const Argument &other = *c.n.input("other");
  Value *g = c.g(), *self = c.self();
  if (c.want("self"))
    c.set("self", binary(c, "aten::div.Tensor", g, other, "grad_div"));
  if (c.want("other") && other.isTensor()) {
    // -grad * ((self / other) / other)
    Value *ng = unary(c, "aten::neg.default", g, "grad_neg");
    Value *q = binary(c, "aten::div.Tensor", self, other, "grad_div");
    Value *q2 = binary(c, "aten::div.Tensor", q, other, "grad_div");
    c.set("other", mul(c, ng, q2));
  }
  return llvm::Error::success();
}

llvm::Error negBackward(GradCall &c) {
  c.set("self", unary(c, "aten::neg.default", c.g(), "grad_neg"));
  return llvm::Error::success();
}

llvm::Error expBackward(GradCall &c) {
  c.set("self", mul(c, c.g(), mut(c.result())));
  return llvm::Error::success();
}

llvm::Error sqrtBackward(GradCall &c) {
  // grad / (2 * result)
  Value *two = binary(c, "aten::mul.Scalar", mut(c.result()), int64_t(2), "grad_sqrt_scale");
  c.set("self", binary(c, "aten::div.Tensor", c.g(), two, "grad_sqrt"));
  return llvm::Error::success();
}

llvm::Error logBackward(GradCall &c) {
  c.set("self", binary(c, "aten::div.Tensor", c.g(), c.self(), "grad_log"));
  return llvm::Error::success();
}

llvm::Error rsqrtBackward(GradCall &c) {
  // -0.5 * grad * result.pow(3); the saved result is unpacked as a detached alias (a detach
  // DTensor dispatches, as CommDebugMode's backward op lists show).
  Value *saved = unary(c, "aten::detach.default", mut(c.result()), "grad_rsqrt_result");
  Value *p = c.e.emit("aten::pow.Tensor_Scalar", {A("self", saved), A("exponent", 3.0)}, GradEmitter::like(saved),
                      "grad_rsqrt_pow");
  Value *a0 = binary(c, "aten::mul.Scalar", c.g(), -0.5, "grad_rsqrt_scale");
  c.set("self", mul(c, a0, p));
  return llvm::Error::success();
}

llvm::Error powTensorScalar(GradCall &c) {
  // pow_backward: grad * (exponent * self.pow(exponent - 1))
  const Argument &e = *c.n.input("exponent");
  double ex = numberOf(&e).value_or(1.0);
  Value *self = c.self();
  Value *p = powScalar(c, self, ex - 1);
  Value *m = binary(c, "aten::mul.Scalar", p, e, "grad_pow_scale");
  c.set("self", mul(c, c.g(), m));
  return llvm::Error::success();
}

llvm::Error maskedFill(GradCall &c) {
  c.set("self", c.e.emit("aten::masked_fill.Scalar", {A("self", c.g()), A("mask", c.operand("mask")), A("value", int64_t(0))},
                         GradEmitter::like(c.g()), "grad_masked_fill"));
  return llvm::Error::success();
}

/// index.Tensor (index_backward): grad accumulated into new zeros of self's shape at the indices
/// (index_put with accumulate=True; several index tensors broadcast as in the forward).
llvm::Error indexBackward(GradCall &c) {
  Value *zeros = c.e.newZerosLike(c.g(), c.self());
  c.set("self", c.e.emit("aten::index_put.default",
                         {A("self", zeros), A("indices", *c.n.input("indices")), A("values", c.g()), A("accumulate", true)},
                         GradEmitter::like(c.self()), "grad_index_put"));
  return llvm::Error::success();
}

/// index_put / index_put_: self's grad is grad with zeros put at the indices (unless accumulate,
/// then grad as it is); values' grad is grad indexed there, summed to values' shape.
llvm::Error indexPutBackward(GradCall &c) {
  Value *g = c.g(), *values = c.operand("values");
  const Argument &indices = *c.n.input("indices");
  if (c.want("self")) {
    if (c.boolArg("accumulate")) {
      c.set("self", g);
    } else {
      auto vs = sizesOf(*values->meta());
      Value *zeros = c.e.emit("aten::zeros.default", {A("size", IntList(vs.begin(), vs.end()))},
                              GradEmitter::like(values), "grad_zeros");
      c.set("self", c.e.emit("aten::index_put.default",
                             {A("self", g), A("indices", indices), A("values", zeros), A("accumulate", false)},
                             GradEmitter::like(g), "grad_index_put"));
    }
  }
  if (c.want("values")) {
    Value *picked = c.e.emit("aten::index.Tensor", {A("self", g), A("indices", indices)},
                             GradEmitter::withSizes(g, sizesOf(*values->meta())), "grad_index");
    c.set("values", c.e.sumTo(picked, *values->meta()));
  }
  return llvm::Error::success();
}

/// _grouped_mm(self [M, K], mat2 [G, K, N], offs): self's grad is grouped_mm(grad, mat2^T) and
/// mat2's grad grouped_mm(grad^T, self)^T, both grouped by the same offsets (torch 2.13 runs
/// exactly these two calls for the 2-D x 3-D case; other operand ranks are refused).
llvm::Error groupedMmBackward(GradCall &c) {
  Value *g = c.g(), *self = c.self(), *mat2 = c.operand("mat2");
  if (self->meta()->rank() != 2 || mat2->meta()->rank() != 3)
    return makeError("autodiff: aten::_grouped_mm's derivative is modelled for a 2-D input and 3-D weights, not {}-D "
                     "and {}-D", self->meta()->rank(), mat2->meta()->rank());
  const Argument *offs = c.n.input("offs");
  if (!offs)
    return makeError("autodiff: aten::_grouped_mm without offs is not modelled");
  if (c.want("self"))
    c.set("self", c.e.emit("aten::_grouped_mm.default",
                           {A("self", g), A("mat2", c.e.transpose(mat2, -2, -1)), A("offs", *offs)},
                           GradEmitter::like(self), "grad_grouped_mm"));
  if (c.want("mat2")) {
    auto ms = sizesOf(*mat2->meta());
    Value *gt = c.e.emit("aten::_grouped_mm.default",
                         {A("self", c.e.transpose(g, -2, -1)), A("mat2", self), A("offs", *offs)},
                         GradEmitter::withSizes(mat2, {ms[0], ms[2], ms[1]}), "grad_grouped_mm");
    c.set("mat2", c.e.transpose(gt, -2, -1));
  }
  return llvm::Error::success();
}

llvm::Error embedding(GradCall &c) {
  Value *weight = c.operand("weight"), *indices = c.operand("indices");
  c.set("weight", c.e.emit("aten::embedding_dense_backward.default",
                           {A("grad_output", c.g()), A("indices", indices), A("num_weights", sizesOf(*weight->meta())[0]),
                            A("padding_idx", c.intArg("padding_idx", -1).value_or(-1)),
                            A("scale_grad_by_freq", c.boolArg("scale_grad_by_freq"))},
                           GradEmitter::like(weight), "grad_embedding"));
  return llvm::Error::success();
}

llvm::Error sumDefault(GradCall &c) {
  auto s = sizesOf(*c.self()->meta());
  Value *g = c.g();
  c.set("self", c.e.emit("aten::expand.default", {A("self", g), A("size", IntList(s.begin(), s.end()))},
                         metaOf(g->meta()->dtype, s, g->meta()->device, llvm::SmallVector<int64_t, 4>(s.size(), 0)),
                         "grad_expand"));
  return llvm::Error::success();
}

/// sum.dim_IntList / mean.dim / mean.default: sum_backward, then / count for the means.
llvm::Error sumMeanDim(GradCall &c) {
  auto sizes = sizesOf(*c.self()->meta());
  IntList ds = c.reducedDims();
  // all-reduce (no dim argument): the 0-dim gradient is expanded as it is
  bool keepdim = c.boolArg("keepdim") || !c.n.input("dim");
  Value *x = c.e.sumBackward(c.g(), sizes, ds, keepdim);
  if (llvm::StringRef(c.n.opString()).startswith("aten::mean.")) {
    int64_t count = 1;
    for (int64_t d : ds)
      count *= sizes[d];
    x = binary(c, "aten::div.Scalar", x, static_cast<double>(count), "grad_mean");
  }
  c.set("self", x);
  return llvm::Error::success();
}

llvm::Error selectBackward(GradCall &c) {
  auto s0 = sizesOf(*c.self()->meta());
  c.set("self", c.e.emit("aten::select_backward.default",
                         {A("grad_output", c.g()), A("input_sizes", IntList(s0.begin(), s0.end())),
                          A("dim", *c.intArg("dim")), A("index", *c.intArg("index"))},
                         GradEmitter::like(c.self()), "grad_select"));
  return llvm::Error::success();
}

llvm::Error sliceBackward(GradCall &c) {
  auto s0 = sizesOf(*c.self()->meta());
  c.set("self", c.e.emit("aten::slice_backward.default",
                         {A("grad_output", c.g()), A("input_sizes", IntList(s0.begin(), s0.end())),
                          A("dim", c.intArg("dim", 0).value_or(0)), A("start", c.intArg("start", 0).value_or(0)),
                          A("end", c.intArg("end", INT64_MAX).value_or(INT64_MAX)),
                          A("step", c.intArg("step", 1).value_or(1))},
                         GradEmitter::like(c.self()), "grad_slice"));
  return llvm::Error::success();
}

/// stack: grad.select(dim, i) per input; cat: grad.slice(dim, offset, offset + size) per input
/// (as DTensor receives cat's and stack's backward).
llvm::Error stackCat(GradCall &c) {
  bool stack = c.n.opString() == "aten::stack.default";
  llvm::SmallVector<Value *, 4> parts = c.n.input("tensors")->tensors();
  Value *g = c.g();
  int64_t dim = c.intArg("dim", 0).value_or(0);
  int64_t rank = g->meta()->rank();
  dim = dim < 0 ? dim + rank : dim;
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size() && i < c.out.size(); ++i) {
    int64_t size = stack ? 1 : sizesOf(*parts[i]->meta())[dim];
    if (c.needed[i])
      c.out[i] = stack ? c.e.emit("aten::select.int", {A("self", g), A("dim", dim), A("index", static_cast<int64_t>(i))},
                                  GradEmitter::like(parts[i]), "grad_select")
                       : c.e.emit("aten::slice.Tensor",
                                  {A("self", g), A("dim", dim), A("start", offset), A("end", offset + size)},
                                  GradEmitter::like(parts[i]), "grad_slice");
    offset += size;
  }
  return llvm::Error::success();
}

llvm::Error nllLoss(GradCall &c) {
  llvm::SmallVector<NamedArgument, 4> args{A("grad_output", c.g()),
                                           A("self", c.self()),
                                           A("target", c.operand("target")),
                                           A("weight", *c.n.input("weight")),
                                           A("reduction", *c.n.input("reduction")),
                                           A("ignore_index", *c.n.input("ignore_index")),
                                           A("total_weight", mut(c.result(1)))};
  bool twoD = c.n.opString() == "aten::nll_loss2d_forward.default";
  c.set("self", c.e.emit(twoD ? "aten::nll_loss2d_backward.default" : "aten::nll_loss_backward.default", std::move(args),
                         GradEmitter::like(c.self()), "grad_nll_loss"));
  return llvm::Error::success();
}

// ---- pointwise math ---------------------------------------------------------------------------

llvm::Error absBackward(GradCall &c) { // grad * self.sgn()
  c.set("self", mul(c, c.g(), unary(c, "aten::sgn.default", c.self(), "grad_sgn")));
  return llvm::Error::success();
}

llvm::Error sinBackward(GradCall &c) { // grad * self.cos()
  c.set("self", mul(c, c.g(), unary(c, "aten::cos.default", c.self(), "grad_cos")));
  return llvm::Error::success();
}

llvm::Error cosBackward(GradCall &c) { // grad * -self.sin()
  Value *s = unary(c, "aten::sin.default", c.self(), "grad_sin");
  c.set("self", mul(c, c.g(), unary(c, "aten::neg.default", s, "grad_neg")));
  return llvm::Error::success();
}

llvm::Error reciprocalBackward(GradCall &c) { // -grad * (result * result)
  Value *ng = unary(c, "aten::neg.default", c.g(), "grad_neg");
  Value *sq = mul(c, mut(c.result()), mut(c.result()));
  c.set("self", mul(c, ng, sq));
  return llvm::Error::success();
}

llvm::Error log1pBackward(GradCall &c) { // grad / (self + 1)
  Value *s1 = binary(c, "aten::add.Scalar", c.self(), int64_t(1), "grad_add");
  c.set("self", binary(c, "aten::div.Tensor", c.g(), s1, "grad_log1p"));
  return llvm::Error::success();
}

llvm::Error expm1Backward(GradCall &c) { // grad * (result + 1)
  Value *r1 = binary(c, "aten::add.Scalar", mut(c.result()), int64_t(1), "grad_add");
  c.set("self", mul(c, c.g(), r1));
  return llvm::Error::success();
}

llvm::Error erfBackward(GradCall &c) { // 2/sqrt(pi) * exp(-(self.pow(2))) * grad
  Value *p = powScalar(c, c.self(), int64_t(2));
  Value *e = unary(c, "aten::exp.default", unary(c, "aten::neg.default", p, "grad_neg"), "grad_exp");
  Value *s = binary(c, "aten::mul.Scalar", e, 1.1283791670955126, "grad_scale");
  c.set("self", mul(c, s, c.g()));
  return llvm::Error::success();
}

llvm::Error tanBackward(GradCall &c) { // grad * (result.pow(2) + 1)
  Value *p = powScalar(c, mut(c.result()), int64_t(2));
  c.set("self", mul(c, c.g(), binary(c, "aten::add.Scalar", p, int64_t(1), "grad_add")));
  return llvm::Error::success();
}

/// sinh / cosh / lgamma / i0: grad * OP'(self), the derivative one unary op of self.
template <const char *Op>
llvm::Error unaryDerivative(GradCall &c) {
  c.set("self", mul(c, c.g(), unary(c, Op, c.self(), "grad_deriv")));
  return llvm::Error::success();
}
constexpr char kCosh[] = "aten::cosh.default";
constexpr char kSinh[] = "aten::sinh.default";
constexpr char kDigamma[] = "aten::digamma.default";
constexpr char kSpecialI1[] = "aten::special_i1.default";

llvm::Error digammaBackward(GradCall &c) { // grad * polygamma(1, self)
  Value *p = c.e.emit("aten::polygamma.default", {A("n", int64_t(1)), A("self", c.self())}, GradEmitter::like(c.self()),
                      "grad_polygamma");
  c.set("self", mul(c, c.g(), p));
  return llvm::Error::success();
}

/// asin: grad * (-self * self + 1).rsqrt(); acos: the same, negated.
llvm::Error asinAcosBackward(GradCall &c) {
  Value *self = c.self();
  Value *sq = mul(c, unary(c, "aten::neg.default", self, "grad_neg"), self);
  Value *r = unary(c, "aten::rsqrt.default", binary(c, "aten::add.Scalar", sq, int64_t(1), "grad_add"), "grad_rsqrt");
  if (c.n.opString() == "aten::acos.default")
    r = unary(c, "aten::neg.default", r, "grad_neg");
  c.set("self", mul(c, c.g(), r));
  return llvm::Error::success();
}

llvm::Error atanBackward(GradCall &c) { // grad / (self * self + 1)
  Value *sq = mul(c, c.self(), c.self());
  c.set("self", binary(c, "aten::div.Tensor", c.g(), binary(c, "aten::add.Scalar", sq, int64_t(1), "grad_add"),
                       "grad_atan"));
  return llvm::Error::success();
}

llvm::Error asinhBackward(GradCall &c) { // grad * (self.pow(2) + 1).rsqrt()
  Value *p = powScalar(c, c.self(), int64_t(2));
  Value *r = unary(c, "aten::rsqrt.default", binary(c, "aten::add.Scalar", p, int64_t(1), "grad_add"), "grad_rsqrt");
  c.set("self", mul(c, c.g(), r));
  return llvm::Error::success();
}

llvm::Error acoshBackward(GradCall &c) { // grad * (self * self - 1).rsqrt()
  Value *sq = mul(c, c.self(), c.self());
  Value *r = unary(c, "aten::rsqrt.default", binary(c, "aten::sub.Scalar", sq, int64_t(1), "grad_sub"), "grad_rsqrt");
  c.set("self", mul(c, c.g(), r));
  return llvm::Error::success();
}

llvm::Error erfcBackward(GradCall &c) { // -2/sqrt(pi) * exp(-(self.pow(2))) * grad
  Value *p = powScalar(c, c.self(), int64_t(2));
  Value *e = unary(c, "aten::exp.default", unary(c, "aten::neg.default", p, "grad_neg"), "grad_exp");
  c.set("self", mul(c, binary(c, "aten::mul.Scalar", e, -1.1283791670955126, "grad_scale"), c.g()));
  return llvm::Error::success();
}

llvm::Error erfinvBackward(GradCall &c) { // sqrt(pi)/2 * exp(self.erfinv().pow(2)) * grad
  Value *p = powScalar(c, unary(c, "aten::erfinv.default", c.self(), "grad_erfinv"), int64_t(2));
  Value *e = unary(c, "aten::exp.default", p, "grad_exp");
  c.set("self", mul(c, binary(c, "aten::mul.Scalar", e, 0.88622692545275801, "grad_scale"), c.g()));
  return llvm::Error::success();
}

llvm::Error exp2Backward(GradCall &c) { // grad * result * ln 2
  c.set("self", binary(c, "aten::mul.Scalar", mul(c, c.g(), mut(c.result())), 0.69314718055994531, "grad_scale"));
  return llvm::Error::success();
}

/// log2 / log10: grad / (self * ln(base)).
llvm::Error logBaseBackward(GradCall &c) {
  double lnBase = c.n.opString() == "aten::log2.default" ? 0.69314718055994531 : 2.3025850929940459;
  Value *d = binary(c, "aten::mul.Scalar", c.self(), lnBase, "grad_scale");
  c.set("self", binary(c, "aten::div.Tensor", c.g(), d, "grad_log"));
  return llvm::Error::success();
}

/// deg2rad / rad2deg: grad times the constant factor.
llvm::Error angleScaleBackward(GradCall &c) {
  double k = c.n.opString() == "aten::deg2rad.default" ? 0.017453292519943295 : 57.295779513082323;
  c.set("self", binary(c, "aten::mul.Scalar", c.g(), k, "grad_scale"));
  return llvm::Error::success();
}

llvm::Error logitBackward(GradCall &c) {
  llvm::SmallVector<NamedArgument, 4> args{A("grad_output", c.g()), A("self", c.self())};
  if (const Argument *eps = c.n.input("eps"); eps && !eps->isNone())
    args.push_back(A("eps", *eps));
  c.set("self", c.e.emit("aten::logit_backward.default", std::move(args), GradEmitter::like(c.g()), "grad_logit"));
  return llvm::Error::success();
}

/// clamp / clamp_min / clamp_max with Scalar bounds: where(self >= min & self <= max, grad, 0).
llvm::Error clampBackward(GradCall &c) {
  const Argument *lo = c.n.input("min"), *hi = c.n.input("max"); // clamp_min / clamp_max have one
  lo = lo && !lo->isNone() ? lo : nullptr;
  hi = hi && !hi->isNone() ? hi : nullptr;
  Value *zero = zeroScalar(c);
  TensorMeta bm = boolLike(c.self());
  Value *mask = nullptr;
  if (lo)
    mask = c.e.emit("aten::ge.Scalar", {A("self", c.self()), A("other", *lo)}, bm, "grad_mask");
  if (hi) {
    Value *m = c.e.emit("aten::le.Scalar", {A("self", c.self()), A("other", *hi)}, bm, "grad_mask");
    mask = mask ? c.e.emit("aten::logical_and_.default", {A("self", mask), A("other", m)}, bm, "grad_mask") : m;
  }
  if (!mask)
    return makeError("autodiff: {} without a bound (torch raises)", c.n.opString());
  c.set("self", c.e.emit("aten::where.self", {A("condition", mask), A("self", c.g()), A("other", zero)},
                         GradEmitter::like(c.g()), "grad_clamp"));
  return llvm::Error::success();
}

/// clamp.Tensor / clip.Tensor / clamp_min.Tensor / clamp_max.Tensor. One bound: the bound's
/// gradient where(cmp(self, bound), grad, 0), then self's, each with its own zero. Both bounds:
/// min where self < min & min < max, max where self > max | max < min (one zero for the two),
/// then self where min <= self <= max.
llvm::Error clampTensorBackward(GradCall &c) {
  Value *self = c.self(), *lo = c.operand("min"), *hi = c.operand("max");
  TensorMeta bm = boolLike(c.g());
  auto mask = [&](llvm::StringRef op, Value *a, Value *b) {
    return c.e.emit(op, {A("self", a), A("other", b)}, bm, "grad_mask");
  };
  auto where = [&](Value *m, Value *z) {
    return c.e.emit("aten::where.self", {A("condition", m), A("self", c.g()), A("other", z)}, GradEmitter::like(c.g()),
                    "grad_clamp");
  };
  if (lo && hi) {
    if (c.want("min") || c.want("max")) {
      Value *z = zeroScalar(c);
      if (c.want("min"))
        c.set("min", where(mask("aten::logical_and.default", mask("aten::lt.Tensor", self, lo),
                                mask("aten::lt.Tensor", lo, hi)),
                           z));
      if (c.want("max"))
        c.set("max", where(mask("aten::logical_or.default", mask("aten::gt.Tensor", self, hi),
                                mask("aten::lt.Tensor", hi, lo)),
                           z));
    }
    if (c.want("self")) {
      Value *z = zeroScalar(c);
      c.set("self", where(mask("aten::logical_and.default", mask("aten::ge.Tensor", self, lo),
                                mask("aten::le.Tensor", self, hi)),
                           z));
    }
    return llvm::Error::success();
  }
  if (!lo && !hi)
    return makeError("autodiff: {} without a bound (torch raises)", c.n.opString());
  llvm::StringRef name = lo ? "min" : "max";
  Value *bound = lo ? lo : hi;
  if (c.want(name)) {
    Value *z = zeroScalar(c);
    c.set(name, where(mask(lo ? "aten::lt.Tensor" : "aten::gt.Tensor", self, bound), z));
  }
  if (c.want("self")) {
    Value *z = zeroScalar(c);
    c.set("self", where(mask(lo ? "aten::ge.Tensor" : "aten::le.Tensor", self, bound), z));
  }
  return llvm::Error::success();
}

/// square: pow_backward with the exponent 2.0 (square runs as pow(self, 2)).
llvm::Error squareBackward(GradCall &c) {
  Value *p = powScalar(c, c.self(), 1.0);
  c.set("self", mul(c, c.g(), binary(c, "aten::mul.Scalar", p, 2.0, "grad_pow_scale")));
  return llvm::Error::success();
}

/// maximum / minimum: each side gets where(self == other, grad / 2, grad) with the loser's
/// entries zeroed in place; other's gradient first, as autograd computes it.
llvm::Error maxMinBackward(GradCall &c) {
  bool isMax = llvm::StringRef(c.n.opString()).startswith("aten::max"); // maximum, max.other
  Value *self = c.self(), *other = c.operand("other");
  TensorMeta bm = boolLike(c.g());
  auto side = [&](llvm::StringRef loses) {
    Value *half = binary(c, "aten::div.Scalar", c.g(), int64_t(2), "grad_half");
    Value *eq = c.e.emit("aten::eq.Tensor", {A("self", self), A("other", other)}, bm, "grad_eq");
    Value *w = c.e.emit("aten::where.self", {A("condition", eq), A("self", half), A("other", c.g())},
                        GradEmitter::like(c.g()), "grad_where");
    Value *m = c.e.emit(loses, {A("self", self), A("other", other)}, bm, "grad_mask");
    return c.e.emit("aten::masked_fill_.Scalar", {A("self", w), A("mask", m), A("value", int64_t(0))},
                    GradEmitter::like(c.g()), "grad_masked");
  };
  if (c.want("other"))
    c.set("other", side(isMax ? "aten::gt.Tensor" : "aten::lt.Tensor"));
  if (c.want("self"))
    c.set("self", side(isMax ? "aten::lt.Tensor" : "aten::gt.Tensor"));
  return llvm::Error::success();
}

llvm::Error flipBackward(GradCall &c) {
  c.set("self", c.e.emit("aten::flip.default", {A("self", c.g()), A("dims", *c.n.input("dims"))},
                         GradEmitter::like(c.g()), "grad_flip"));
  return llvm::Error::success();
}

/// roll: roll back by the negated shifts, shifts and dims in reverse order.
llvm::Error rollBackward(GradCall &c) {
  IntList shifts = *c.n.input("shifts")->asIntList();
  std::reverse(shifts.begin(), shifts.end());
  for (int64_t &s : shifts)
    s = -s;
  llvm::SmallVector<NamedArgument, 4> args{A("self", c.g()), A("shifts", shifts)};
  if (const Argument *d = c.n.input("dims"); d && d->asIntList() && !d->asIntList()->empty()) {
    IntList dims = *d->asIntList();
    std::reverse(dims.begin(), dims.end());
    args.push_back(A("dims", dims));
  }
  c.set("self", c.e.emit("aten::roll.default", std::move(args), GradEmitter::like(c.g()), "grad_roll"));
  return llvm::Error::success();
}

llvm::Error constantPadBackward(GradCall &c) { // constant_pad_nd(grad, -pad)
  IntList pad = *c.n.input("pad")->asIntList();
  for (int64_t &p : pad)
    p = -p;
  c.set("self", c.e.emit("aten::constant_pad_nd.default", {A("self", c.g()), A("pad", pad)},
                         GradEmitter::like(c.self()), "grad_pad"));
  return llvm::Error::success();
}

/// cumsum: the reversed cumulative sum of grad (cast back to self's dtype first).
llvm::Error cumsumBackward(GradCall &c) {
  Value *g = c.g(), *self = c.self();
  if (g->meta()->dtype != self->meta()->dtype)
    g = c.e.emit("aten::_to_copy.default", {A("self", g), K("dtype", self->meta()->dtype)}, GradEmitter::like(self),
                 "grad_to_copy");
  const Argument &dim = *c.n.input("dim");
  IntList dims{*dim.asInt()};
  auto flip = [&](Value *x) {
    return c.e.emit("aten::flip.default", {A("self", x), A("dims", dims)}, GradEmitter::like(x), "grad_flip");
  };
  Value *s = c.e.emit("aten::cumsum.default", {A("self", flip(g)), A("dim", dim)}, GradEmitter::like(g), "grad_cumsum");
  c.set("self", flip(s));
  return llvm::Error::success();
}

/// addcmul(self, t1, t2, value): self gets grad; t1 grad * (t2 * value), t2 grad * (t1 * value).
llvm::Error addcmulBackward(GradCall &c) {
  const Argument &value = c.n.input("value") ? *c.n.input("value") : Argument(int64_t(1));
  Value *t1 = c.operand("tensor1"), *t2 = c.operand("tensor2");
  if (c.want("self"))
    c.set("self", c.g());
  if (c.want("tensor1"))
    c.set("tensor1", mul(c, c.g(), binary(c, "aten::mul.Scalar", t2, value, "grad_scale")));
  if (c.want("tensor2"))
    c.set("tensor2", mul(c, c.g(), binary(c, "aten::mul.Scalar", t1, value, "grad_scale")));
  return llvm::Error::success();
}

/// lerp.Scalar(self, end, w): self grad * (1 - w), end grad * w (end's first).
llvm::Error lerpScalarBackward(GradCall &c) {
  double w = numberOf(c.n.input("weight")).value_or(0.0);
  if (c.want("end"))
    c.set("end", binary(c, "aten::mul.Scalar", c.g(), w, "grad_scale"));
  if (c.want("self"))
    c.set("self", binary(c, "aten::mul.Scalar", c.g(), 1.0 - w, "grad_scale"));
  return llvm::Error::success();
}

/// hypot: grad * self / result, grad * other / result.
llvm::Error hypotBackward(GradCall &c) {
  for (llvm::StringRef name : {"self", "other"})
    if (c.want(name))
      c.set(name, binary(c, "aten::div.Tensor", mul(c, c.g(), c.operand(name)), mut(c.result()), "grad_hypot"));
  return llvm::Error::success();
}

/// logaddexp: grad / (1 + exp(other - self)) and grad / (1 + exp(self - other)); logaddexp2 the
/// same with 2 ** (other - self).
llvm::Error logaddexpBackward(GradCall &c) {
  Value *self = c.self(), *other = c.operand("other");
  bool base2 = c.n.opString() == "aten::logaddexp2.default";
  auto side = [&](Value *a, Value *b) {
    Value *d = binary(c, "aten::sub.Tensor", a, b, "grad_sub");
    Value *e = base2 ? c.e.emit("aten::pow.Scalar", {A("self", int64_t(2)), A("exponent", d)}, GradEmitter::like(d),
                                "grad_pow")
                     : unary(c, "aten::exp.default", d, "grad_exp");
    return binary(c, "aten::div.Tensor", c.g(), binary(c, "aten::add.Scalar", e, int64_t(1), "grad_add"),
                  "grad_logaddexp");
  };
  if (c.want("self"))
    c.set("self", side(other, self));
  if (c.want("other"))
    c.set("other", side(self, other));
  return llvm::Error::success();
}

/// pow.Scalar(base, exponent tensor): grad * (result * ln(base)).
llvm::Error powScalarBackward(GradCall &c) {
  double base = numberOf(c.n.input("self")).value_or(1.0);
  Value *r = binary(c, "aten::mul.Scalar", mut(c.result()), std::log(base), "grad_scale");
  c.set("exponent", mul(c, c.g(), r));
  return llvm::Error::success();
}

/// nansum: grad restored to self's shape, times self's non-NaN mask.
llvm::Error nansumBackward(GradCall &c) {
  TensorMeta bm = boolLike(c.self());
  Value *ok = c.e.emit("aten::logical_not.default",
                       {A("self", c.e.emit("aten::isnan.default", {A("self", c.self())}, bm, "grad_isnan"))}, bm,
                       "grad_notnan");
  bool keepdim = c.boolArg("keepdim") || !c.n.input("dim");
  Value *g = c.e.sumBackward(c.g(), sizesOf(*c.self()->meta()), c.reducedDims(), keepdim);
  c.set("self", c.e.emit("aten::mul.Tensor", {A("self", g), A("other", ok)}, GradEmitter::like(c.self()), "grad_mul"));
  return llvm::Error::success();
}

/// var_backward: (2 / (N - correction)) * grad * (self - self.mean(dims, keepdim=True)).
Value *varBackward(GradCall &c, Value *g) {
  Value *self = c.self();
  auto sizes = sizesOf(*self->meta());
  bool all = !c.n.input("dim") || c.n.input("dim")->isNone();
  IntList ds = c.reducedDims();
  int64_t n = 1;
  for (int64_t d : ds)
    n *= sizes[d];
  double correction = c.floatArg("correction").value_or(1.0);
  Value *mean;
  if (all) {
    mean = c.e.emit("aten::mean.default", {A("self", self)}, metaOf(self->meta()->dtype, {}, self->meta()->device),
                    "grad_mean");
  } else {
    g = c.e.unsqueezeMultiple(g, ds, c.boolArg("keepdim"));
    auto ks = sizes;
    for (int64_t d : ds)
      ks[d] = 1;
    mean = c.e.emit("aten::mean.dim", {A("self", self), A("dim", ds), A("keepdim", true)},
                    GradEmitter::withSizes(self, ks), "grad_mean");
  }
  Value *centered = binary(c, "aten::sub.Tensor", self, mean, "grad_centered");
  Value *scaled = binary(c, "aten::mul.Scalar", g, 2.0 / (static_cast<double>(n) - correction), "grad_scale");
  return c.e.emit("aten::mul.Tensor", {A("self", scaled), A("other", centered)}, GradEmitter::like(self), "grad_var");
}

llvm::Error varCorrection(GradCall &c) {
  c.set("self", varBackward(c, c.g()));
  return llvm::Error::success();
}

/// var_mean: var_backward of the var gradient plus mean_backward of the mean gradient.
llvm::Error varMeanCorrection(GradCall &c) {
  Value *v = c.grads[0] ? varBackward(c, c.grads[0]) : nullptr;
  Value *m = nullptr;
  if (c.grads.size() > 1 && c.grads[1]) {
    auto sizes = sizesOf(*c.self()->meta());
    IntList ds = c.reducedDims();
    bool all = !c.n.input("dim") || c.n.input("dim")->isNone();
    int64_t n = 1;
    for (int64_t d : ds)
      n *= sizes[d];
    m = c.e.sumBackward(c.grads[1], sizes, ds, all || c.boolArg("keepdim"));
    m = binary(c, "aten::div.Scalar", m, n, "grad_mean");
  }
  c.set("self", v && m ? binary(c, "aten::add.Tensor", v, m, "grad_var_mean") : (v ? v : m));
  return llvm::Error::success();
}

/// std: var_backward of grad / (2 * result), zero where the result is zero.
llvm::Error stdCorrection(GradCall &c) {
  Value *r = mut(c.result());
  Value *two = binary(c, "aten::mul.Scalar", r, int64_t(2), "grad_scale");
  Value *q = binary(c, "aten::div.Tensor", c.g(), two, "grad_div");
  TensorMeta bm = boolLike(r);
  Value *z = c.e.emit("aten::eq.Scalar", {A("self", r), A("other", int64_t(0))}, bm, "grad_zero_mask");
  q = c.e.emit("aten::masked_fill_.Scalar", {A("self", q), A("mask", z), A("value", int64_t(0))}, GradEmitter::like(q),
               "grad_masked");
  c.set("self", varBackward(c, q));
  return llvm::Error::success();
}

/// norm.Scalar / linalg_vector_norm with p = 2: grad * self / result, zero where the result is.
llvm::Error normBackward(GradCall &c) {
  const Argument *p = c.n.input(c.n.opString() == "aten::norm.Scalar" ? "p" : "ord");
  if (numberOf(p).value_or(2.0) != 2.0)
    return makeError("autodiff: {} with p != 2 has no formula yet (node '{}')", c.n.opString(), c.n.name());
  IntList ds = c.reducedDims();
  bool keepdim = c.boolArg("keepdim") || !c.n.input("dim") || c.n.input("dim")->isNone();
  Value *g = c.e.unsqueezeMultiple(c.g(), ds, keepdim);
  Value *r = c.e.unsqueezeMultiple(mut(c.result()), ds, keepdim);
  Value *q = binary(c, "aten::div.Tensor", c.self(), r, "grad_div");
  TensorMeta bm = boolLike(r);
  Value *z = c.e.emit("aten::eq.Scalar", {A("self", r), A("other", int64_t(0))}, bm, "grad_zero_mask");
  q = c.e.emit("aten::masked_fill_.Scalar", {A("self", q), A("mask", z), A("value", int64_t(0))}, GradEmitter::like(q),
               "grad_masked");
  c.set("self", c.e.emit("aten::mul.Tensor", {A("self", g), A("other", q)}, GradEmitter::like(c.self()), "grad_norm"));
  return llvm::Error::success();
}

/// split / split_with_sizes / unbind: cat (stack) of the pieces' gradients, a piece without one
/// filled by a plain zeros tensor. On DTensors that mix makes DTensor's cat raise in torch 2.13,
/// so the formula errors too.
llvm::Error splitUnbindBackward(GradCall &c) {
  bool unbind = c.n.opString() == "aten::unbind.int";
  TensorList parts;
  for (size_t i = 0; i < c.grads.size(); ++i) {
    Value *g = c.grads[i];
    if (!g && c.e.isDTensor(c.self()))
      return makeError("autodiff: '{}' ({}): an output without a gradient gets a plain zeros tensor in backward, "
                       "which torch 2.13's DTensor cannot {} with the others (it raises)",
                       c.n.name(), c.n.opString(), unbind ? "stack" : "cat");
    if (!g) {
      auto sizes = sizesOf(*c.result(i)->meta());
      g = c.e.emit("aten::zeros.default",
                   {A("size", IntList(sizes.begin(), sizes.end())), K("dtype", c.self()->meta()->dtype)},
                   GradEmitter::like(c.result(i)), "grad_zeros");
    }
    parts.push_back(g);
  }
  c.set("self", c.e.emit(unbind ? "aten::stack.default" : "aten::cat.default",
                         {A("tensors", parts), A("dim", c.intArg("dim", 0).value_or(0))}, GradEmitter::like(c.self()),
                         unbind ? "grad_stack" : "grad_cat"));
  return llvm::Error::success();
}

/// value_selecting_reduction_backward (max.dim, min.dim, topk, sort, median.dim, kthvalue, mode):
/// grad scattered into new zeros at the selected indices (both unsqueezed unless keepdim).
llvm::Error valueSelectingBackward(GradCall &c) {
  llvm::StringRef op = c.n.opString();
  bool keepsDims = op.startswith("aten::topk.") || op.startswith("aten::sort.");
  int64_t dim = c.intArg("dim", keepsDims ? -1 : 0).value_or(-1);
  Value *g = c.g(), *idx = mut(c.result(1));
  if (!keepsDims && !c.boolArg("keepdim")) {
    int64_t d = dim < 0 ? dim + c.self()->meta()->rank() : dim;
    g = c.e.unsqueeze(g, d);
    idx = c.e.unsqueeze(idx, d);
  }
  Value *zeros = c.e.newZerosLike(g, c.self());
  c.set("self", c.e.emit("aten::scatter.src", {A("self", zeros), A("dim", dim), A("index", idx), A("src", g)},
                         GradEmitter::like(c.self()), "grad_scatter"));
  return llvm::Error::success();
}

/// gather: grad scatter-added into new zeros of self's shape.
llvm::Error gatherBackward(GradCall &c) {
  Value *zeros = c.e.newZerosLike(c.g(), c.self());
  c.set("self", c.e.emit("aten::scatter_add.default",
                         {A("self", zeros), A("dim", *c.intArg("dim")), A("index", c.operand("index")), A("src", c.g())},
                         GradEmitter::like(c.self()), "grad_scatter_add"));
  return llvm::Error::success();
}

/// `scalar - x` as autograd computes it for a Scalar on the left: empty_like(x).fill_(scalar),
/// then an in-place OP_(x) (sub_ for 1 - w, div_ for value / t2).
Value *scalarLeft(GradCall &c, llvm::StringRef inplaceOp, const Argument &scalar, Value *x) {
  Value *e = c.e.emit("aten::empty_like.default", {A("self", x), K("memory_format", MemoryFormat::Preserve)},
                      GradEmitter::like(x), "grad_empty");
  Value *f = c.e.emit("aten::fill_.Scalar", {A("self", e), A("value", scalar)}, GradEmitter::like(x), "grad_fill");
  return binary(c, inplaceOp, f, x, "grad_inplace");
}

llvm::Error atanhBackward(GradCall &c) { // grad * 1 / (1 - self.pow(2))
  Value *p = powScalar(c, c.self(), int64_t(2));
  Value *d = scalarLeft(c, "aten::sub_.Tensor", int64_t(1), p);
  Value *g = binary(c, "aten::mul.Scalar", c.g(), int64_t(1), "grad_scale");
  c.set("self", binary(c, "aten::div.Tensor", g, d, "grad_atanh"));
  return llvm::Error::success();
}

/// lerp.Tensor: end grad * weight, self grad * (1 - weight), weight grad * (end - self).
llvm::Error lerpTensorBackward(GradCall &c) {
  Value *self = c.self(), *end = c.operand("end"), *w = c.operand("weight");
  if (c.want("end"))
    c.set("end", mul(c, c.g(), w));
  if (c.want("self"))
    c.set("self", mul(c, c.g(), scalarLeft(c, "aten::sub_.Tensor", int64_t(1), w)));
  if (c.want("weight"))
    c.set("weight", mul(c, c.g(), binary(c, "aten::sub.Tensor", end, self, "grad_sub")));
  return llvm::Error::success();
}

/// addcdiv(self, t1, t2, value): t1 grad * (value / t2); t2 -grad * (t1 * value) / (t2 * t2).
llvm::Error addcdivBackward(GradCall &c) {
  const Argument &value = c.n.input("value") ? *c.n.input("value") : Argument(int64_t(1));
  Value *t1 = c.operand("tensor1"), *t2 = c.operand("tensor2");
  if (c.want("self"))
    c.set("self", c.g());
  if (c.want("tensor1"))
    c.set("tensor1", mul(c, c.g(), scalarLeft(c, "aten::div_.Tensor", value, t2)));
  if (c.want("tensor2")) {
    Value *sq = mul(c, t2, t2);
    Value *q = binary(c, "aten::div.Tensor", binary(c, "aten::mul.Scalar", t1, value, "grad_scale"), sq, "grad_div");
    c.set("tensor2", mul(c, unary(c, "aten::neg.default", c.g(), "grad_neg"), q));
  }
  return llvm::Error::success();
}

/// atan2: with r = 1 / (self^2 + other^2) (0 where that is 0): grad * other * r, grad * -self * r.
llvm::Error atan2Backward(GradCall &c) {
  Value *self = c.self(), *other = c.operand("other");
  Value *den = binary(c, "aten::add.Tensor", mul(c, self, self), mul(c, other, other), "grad_den");
  Value *r = unary(c, "aten::reciprocal.default", den, "grad_recip");
  TensorMeta bm = boolLike(den);
  Value *z = c.e.emit("aten::eq.Scalar", {A("self", den), A("other", int64_t(0))}, bm, "grad_zero_mask");
  r = c.e.emit("aten::masked_fill.Scalar", {A("self", r), A("mask", z), A("value", int64_t(0))}, GradEmitter::like(r),
               "grad_recip");
  if (c.want("self"))
    c.set("self", mul(c, mul(c, c.g(), other), r));
  if (c.want("other"))
    c.set("other", mul(c, mul(c, c.g(), unary(c, "aten::neg.default", self, "grad_neg")), r));
  return llvm::Error::success();
}

llvm::Error thresholdBackward(GradCall &c) {
  c.set("self", c.e.emit("aten::threshold_backward.default",
                         {A("grad_output", c.g()), A("self", c.self()), A("threshold", *c.n.input("threshold"))},
                         GradEmitter::like(c.g()), "grad_threshold"));
  return llvm::Error::success();
}

/// xlogy.Tensor: other grad * self / other first; self xlogy(grad, other), zeroed where
/// self == 0 and other <= 0.
llvm::Error xlogyBackward(GradCall &c) {
  Value *self = c.self(), *other = c.operand("other");
  if (c.want("other"))
    c.set("other", binary(c, "aten::div.Tensor", mul(c, c.g(), self), other, "grad_xlogy_other"));
  if (c.want("self")) {
    Value *x = binary(c, "aten::xlogy.Tensor", c.g(), other, "grad_xlogy");
    Value *le = c.e.emit("aten::le.Scalar", {A("self", other), A("other", 0.0)}, boolLike(other), "grad_mask");
    Value *eq = c.e.emit("aten::eq.Scalar", {A("self", self), A("other", 0.0)}, boolLike(self), "grad_mask");
    Value *m = c.e.emit("aten::bitwise_and.Tensor", {A("self", eq), A("other", le)}, boolLike(x), "grad_mask");
    c.set("self", c.e.emit("aten::masked_fill.Scalar", {A("self", x), A("mask", m), A("value", 0.0)},
                           GradEmitter::like(x), "grad_xlogy_self"));
  }
  return llvm::Error::success();
}

/// pow.Tensor_Tensor: exponent grad * where(self == 0 & exponent >= 0, 0, result * log(self))
/// first; self where(exponent == 0, 0, grad * (exponent * self.pow(exponent - 1))).
llvm::Error powTensorTensorBackward(GradCall &c) {
  Value *self = c.self(), *ex = c.operand("exponent");
  auto where = [&](Value *cond, Value *z, Value *x) {
    return c.e.emit("aten::where.self", {A("condition", cond), A("self", z), A("other", x)}, GradEmitter::like(x),
                    "grad_where");
  };
  if (c.want("exponent")) {
    Value *ge = c.e.emit("aten::ge.Scalar", {A("self", ex), A("other", int64_t(0))}, boolLike(ex), "grad_mask");
    Value *eq = c.e.emit("aten::eq.Scalar", {A("self", self), A("other", int64_t(0))}, boolLike(self), "grad_mask");
    Value *cond = c.e.emit("aten::logical_and.default", {A("self", eq), A("other", ge)}, boolLike(c.g()), "grad_mask");
    Value *x = mul(c, mut(c.result()), unary(c, "aten::log.default", self, "grad_log"));
    c.set("exponent", mul(c, c.g(), where(cond, zeroScalar(c), x)));
  }
  if (c.want("self")) {
    Value *p = binary(c, "aten::pow.Tensor_Tensor", self, binary(c, "aten::sub.Scalar", ex, int64_t(1), "grad_sub"),
                      "grad_pow");
    Value *x = mul(c, c.g(), mul(c, ex, p));
    Value *z = zeroScalar(c);
    Value *eq = c.e.emit("aten::eq.Scalar", {A("self", ex), A("other", 0.0)}, boolLike(ex), "grad_mask");
    c.set("self", where(eq, z, x));
  }
  return llvm::Error::success();
}

/// max.default / min.default (evenly_distribute_backward): grad / count spread over the entries
/// equal to the result (NaN matching NaN).
llvm::Error evenlyDistributeBackward(GradCall &c) {
  Value *self = c.self(), *r = mut(c.result());
  Value *nanSelf = c.e.emit("aten::isnan.default", {A("self", self)}, boolLike(self), "grad_isnan");
  Value *nanR = c.e.emit("aten::isnan.default", {A("self", r)}, boolLike(r), "grad_isnan");
  Value *both = c.e.emit("aten::logical_and.default", {A("self", nanSelf), A("other", nanR)}, boolLike(self), "grad_mask");
  Value *eq = c.e.emit("aten::eq.Tensor", {A("self", self), A("other", r)}, boolLike(self), "grad_mask");
  Value *mask = c.e.emit("aten::logical_or_.default", {A("self", eq), A("other", both)}, boolLike(self), "grad_mask");
  TensorMeta cm = GradEmitter::withSizes(self, {});
  cm.dtype = ScalarType::Long;
  Value *count = c.e.emit("aten::sum.default", {A("self", mask)}, cm, "grad_count");
  Value *q = binary(c, "aten::div.Tensor", c.g(), count, "grad_div");
  c.set("self", c.e.emit("aten::mul.Tensor", {A("self", mask), A("other", q)}, GradEmitter::like(self), "grad_mul"));
  return llvm::Error::success();
}

/// upsample_*: OP_backward(grad, output_size, input_size, [align_corners,] the scales given).
llvm::Error upsampleBackward(GradCall &c) {
  llvm::StringRef op = c.n.opString();
  std::string backward = (op.split('.').first + "_backward.default").str();
  auto sizes = sizesOf(*c.self()->meta());
  llvm::SmallVector<NamedArgument, 4> args{A("grad_output", c.g()), A("output_size", *c.n.input("output_size")),
                                           A("input_size", IntList(sizes.begin(), sizes.end()))};
  for (const NamedArgument &a : c.n.inputs())
    if ((a.name == "align_corners" || llvm::StringRef(a.name).startswith("scales")) && !a.value.isNone())
      args.push_back(A(a.name, a.value));
  c.set("self", c.e.emit(backward, std::move(args), GradEmitter::like(c.self()), "grad_upsample"));
  return llvm::Error::success();
}

llvm::Error adaptiveAvgPool2dBackward(GradCall &c) {
  c.set("self", c.e.emit("aten::_adaptive_avg_pool2d_backward.default", {A("grad_output", c.g()), A("self", c.self())},
                         GradEmitter::like(c.self()), "grad_pool"));
  return llvm::Error::success();
}

/// max_pool2d_with_indices_backward(grad, self, kernel, stride, padding, dilation, ceil_mode, indices).
llvm::Error maxPool2dBackward(GradCall &c) {
  auto listArg = [&](llvm::StringRef name, IntList dflt) {
    const Argument *a = c.n.input(name);
    return a && a->asIntList() ? *a->asIntList() : dflt;
  };
  c.set("self", c.e.emit("aten::max_pool2d_with_indices_backward.default",
                         {A("grad_output", c.g()), A("self", c.self()), A("kernel_size", listArg("kernel_size", {})),
                          A("stride", listArg("stride", {})), A("padding", listArg("padding", {0, 0})),
                          A("dilation", listArg("dilation", {1, 1})), A("ceil_mode", c.boolArg("ceil_mode")),
                          A("indices", mut(c.result(1)))},
                         GradEmitter::like(c.self()), "grad_pool"));
  return llvm::Error::success();
}

/// nan_to_num: grad where self is finite ((|self| != inf) * (self == self)).
llvm::Error nanToNumBackward(GradCall &c) {
  Value *self = c.self();
  Value *a = unary(c, "aten::abs.default", self, "grad_abs");
  Value *fin = c.e.emit("aten::ne.Scalar", {A("self", a), A("other", std::numeric_limits<double>::infinity())},
                        boolLike(self), "grad_mask");
  Value *notNan = c.e.emit("aten::eq.Tensor", {A("self", self), A("other", self)}, boolLike(self), "grad_mask");
  Value *m = c.e.emit("aten::mul.Tensor", {A("self", fin), A("other", notNan)}, boolLike(self), "grad_mask");
  c.set("self", mul(c, c.g(), m));
  return llvm::Error::success();
}

llvm::Error polygammaBackward(GradCall &c) { // grad * polygamma(n + 1, self)
  Value *p = c.e.emit("aten::polygamma.default", {A("n", *c.intArg("n") + 1), A("self", c.self())},
                      GradEmitter::like(c.self()), "grad_polygamma");
  c.set("self", mul(c, c.g(), p));
  return llvm::Error::success();
}

/// native_batch_norm and the _native_batch_norm_legit variants: native_batch_norm_backward with
/// the running stats given (or None), the saved mean / invstd results, and training as run.
llvm::Error batchNormBackward(GradCall &c) {
  Value *input = c.operand("input"), *weight = c.operand("weight"), *bias = c.operand("bias");
  auto tensorOrNone = [](Value *v) { return v ? Argument(v) : Argument(NoneArg{}); };
  bool training = c.n.opString() != "aten::_native_batch_norm_legit_no_training.default" && c.boolArg("training");
  Value *gi = c.e.newValue("grad_batch_norm_input", GradEmitter::like(input));
  Value *gw = weight ? c.e.newValue("grad_batch_norm_weight", GradEmitter::like(weight)) : nullptr;
  Value *gb = bias ? c.e.newValue("grad_batch_norm_bias", GradEmitter::like(bias)) : nullptr;
  BoolList mask{c.want("input"), weight && c.want("weight"), bias && c.want("bias")};
  c.e.emitNode(gi->name(), "aten::native_batch_norm_backward.default",
               {A("grad_out", c.g()), A("input", input), A("weight", tensorOrNone(weight)),
                A("running_mean", tensorOrNone(c.operand("running_mean"))),
                A("running_var", tensorOrNone(c.operand("running_var"))), A("save_mean", mut(c.result(1))),
                A("save_invstd", mut(c.result(2))), A("train", training), A("eps", *c.n.input("eps")),
                A("output_mask", mask)},
               {Argument(gi), tensorOrNone(gw), tensorOrNone(gb)});
  c.set("input", gi);
  if (gw)
    c.set("weight", gw);
  if (gb)
    c.set("bias", gb);
  return llvm::Error::success();
}

/// grid_sampler_2d / 3d: OP_backward(grad, input, grid, modes, align_corners, output_mask).
llvm::Error gridSamplerBackward(GradCall &c) {
  Value *input = c.operand("input"), *grid = c.operand("grid");
  bool threeD = c.n.opString() == "aten::grid_sampler_3d.default";
  Value *gi = c.e.newValue("grad_grid_sampler_input", GradEmitter::like(input));
  Value *gg = c.e.newValue("grad_grid_sampler_grid", GradEmitter::like(grid));
  c.e.emitNode(gi->name(), threeD ? "aten::grid_sampler_3d_backward.default" : "aten::grid_sampler_2d_backward.default",
               {A("grad_output", c.g()), A("input", input), A("grid", grid),
                A("interpolation_mode", *c.n.input("interpolation_mode")), A("padding_mode", *c.n.input("padding_mode")),
                A("align_corners", *c.n.input("align_corners")), A("output_mask", BoolList{c.want("input"), c.want("grid")})},
               {Argument(gi), Argument(gg)});
  c.set("input", gi);
  c.set("grid", gg);
  return llvm::Error::success();
}

llvm::Error entrBackward(GradCall &c) { // grad * -(1 + log(self))
  Value *l = binary(c, "aten::add.Scalar", unary(c, "aten::log.default", c.self(), "grad_log"), int64_t(1), "grad_add");
  c.set("self", mul(c, c.g(), unary(c, "aten::neg.default", l, "grad_neg")));
  return llvm::Error::success();
}

llvm::Error erfcxBackward(GradCall &c) { // (2 * self * result - 2/sqrt(pi)) * grad
  Value *x = mul(c, binary(c, "aten::mul.Scalar", c.self(), 2.0, "grad_scale"), mut(c.result()));
  c.set("self", mul(c, binary(c, "aten::sub.Scalar", x, 1.1283791670955126, "grad_sub"), c.g()));
  return llvm::Error::success();
}

llvm::Error logNdtrBackward(GradCall &c) { // grad / sqrt(2 pi) * exp(-(result + self^2 / 2))
  Value *p = powScalar(c, c.self(), int64_t(2));
  Value *s = binary(c, "aten::add.Tensor", mut(c.result()), binary(c, "aten::div.Scalar", p, int64_t(2), "grad_half"),
                    "grad_add");
  Value *e = unary(c, "aten::exp.default", unary(c, "aten::neg.default", s, "grad_neg"), "grad_exp");
  c.set("self", mul(c, binary(c, "aten::div.Scalar", c.g(), 2.5066282746310002, "grad_scale"), e));
  return llvm::Error::success();
}

llvm::Error ndtriBackward(GradCall &c) { // grad * sqrt(2 pi) * exp(result^2 / 2)
  Value *p = powScalar(c, mut(c.result()), int64_t(2));
  Value *e = unary(c, "aten::exp.default", binary(c, "aten::div.Scalar", p, int64_t(2), "grad_half"), "grad_exp");
  c.set("self", mul(c, binary(c, "aten::mul.Scalar", c.g(), 2.5066282746310002, "grad_scale"), e));
  return llvm::Error::success();
}

/// fmax / fmin: other's gradient masked where self wins (self >= other, or other is NaN; <= for
/// fmin) first, then self's masked where it does not.
llvm::Error fmaxFminBackward(GradCall &c) {
  Value *self = c.self(), *other = c.operand("other");
  bool isMax = c.n.opString() == "aten::fmax.default";
  auto selfWins = [&] {
    Value *cmp = c.e.emit(isMax ? "aten::ge.Tensor" : "aten::le.Tensor", {A("self", self), A("other", other)},
                          boolLike(c.g()), "grad_mask");
    Value *nan = c.e.emit("aten::isnan.default", {A("self", other)}, boolLike(other), "grad_isnan");
    return c.e.emit("aten::logical_or_.default", {A("self", cmp), A("other", nan)}, boolLike(c.g()), "grad_mask");
  };
  auto masked = [&](Value *m) {
    return c.e.emit("aten::masked_fill.Scalar", {A("self", c.g()), A("mask", m), A("value", int64_t(0))},
                    GradEmitter::like(c.g()), "grad_masked");
  };
  if (c.want("other"))
    c.set("other", masked(selfWins()));
  if (c.want("self"))
    c.set("self", masked(c.e.emit("aten::logical_not_.default", {A("self", selfWins())}, boolLike(c.g()), "grad_mask")));
  return llvm::Error::success();
}

/// Ops whose derivative is zero: zeros_like(grad) for each tensor operand that wants one.
llvm::Error zeroGrad(GradCall &c) {
  for (llvm::StringRef name : {"self", "other"})
    if (c.want(name))
      c.set(name, unary(c, "aten::zeros_like.default", c.g(), "grad_zeros"));
  return llvm::Error::success();
}

llvm::Error whereBackward(GradCall &c) { // self: where(cond, grad, 0); other: where(cond, 0, grad)
  Value *cond = c.operand("condition");
  Value *zero = zeroScalar(c);
  if (c.want("self"))
    c.set("self", c.e.emit("aten::where.self", {A("condition", cond), A("self", c.g()), A("other", zero)},
                           GradEmitter::like(c.g()), "grad_where"));
  if (c.want("other"))
    c.set("other", c.e.emit("aten::where.self", {A("condition", cond), A("self", zero), A("other", c.g())},
                            GradEmitter::like(c.g()), "grad_where"));
  return llvm::Error::success();
}

/// logsumexp: grad * (self - result).exp(), the reduced dims restored unless keepdim.
llvm::Error logsumexpBackward(GradCall &c) {
  IntList ds = c.reducedDims();
  bool keepdim = c.boolArg("keepdim");
  Value *g = c.e.unsqueezeMultiple(c.g(), ds, keepdim);
  Value *r = c.e.unsqueezeMultiple(mut(c.result()), ds, keepdim);
  Value *d = binary(c, "aten::sub.Tensor", c.self(), r, "grad_sub");
  c.set("self", mul(c, g, unary(c, "aten::exp.default", d, "grad_exp")));
  return llvm::Error::success();
}

/// amax / amin: (grad / mask.sum(dims, keepdim=True)) * mask, mask = (result == self), the
/// reduced dims restored unless keepdim.
llvm::Error aminmaxBackward(GradCall &c) {
  IntList ds = c.reducedDims();
  bool keepdim = c.boolArg("keepdim");
  auto ks = sizesOf(*c.self()->meta());
  for (int64_t d : ds)
    ks[d] = 1;
  Value *g = keepdim ? c.g() : c.e.reshape(c.g(), ks);
  Value *r = keepdim ? mut(c.result()) : c.e.reshape(mut(c.result()), ks);
  TensorMeta bm = boolLike(c.self());
  Value *mask = c.e.emit("aten::eq.Tensor", {A("self", r), A("other", c.self())}, bm, "grad_mask");
  TensorMeta cm = GradEmitter::withSizes(c.self(), ks);
  cm.dtype = ScalarType::Long;
  Value *count = c.e.emit("aten::sum.dim_IntList", {A("self", mask), A("dim", ds), A("keepdim", true)}, cm,
                          "grad_count");
  Value *q = binary(c, "aten::div.Tensor", g, count, "grad_div");
  c.set("self", c.e.emit("aten::mul.Tensor", {A("self", q), A("other", mask)}, GradEmitter::like(c.self()), "grad_mul"));
  return llvm::Error::success();
}

llvm::Error trilTriu(GradCall &c) {
  llvm::SmallVector<NamedArgument, 4> args{A("self", c.g())};
  if (const Argument *d = c.n.input("diagonal"))
    args.push_back(A("diagonal", *d));
  c.set("self", c.e.emit(c.n.opString(), std::move(args), GradEmitter::like(c.g()), "grad_tri"));
  return llvm::Error::success();
}

const Table &table() {
  static const Table t = [] {
    Table m;
    auto reg = [&](std::initializer_list<llvm::StringRef> ops, DerivativeFormula f) {
      for (llvm::StringRef op : ops)
        m[op] = f;
    };
    reg({"aten::native_layer_norm.default"}, layerNorm);
    reg({"aten::_fused_rms_norm.default"}, rmsNorm);
    reg({"aten::_scaled_dot_product_flash_attention_for_cpu.default"}, sdpaFlashCpu);
    reg({"aten::_scaled_dot_product_flash_attention.default"}, sdpaFlash);
    reg({"aten::_scaled_dot_product_efficient_attention.default"}, sdpaEfficient);
    reg({"aten::_scaled_dot_product_cudnn_attention.default"}, sdpaCudnn);
    reg({"aten::view.default", "aten::_unsafe_view.default", "aten::reshape.default", "aten::view_copy.default"},
        viewLike);
    reg({"aten::t.default"}, tBackward);
    reg({"aten::transpose.int"}, transposeBackward);
    reg({"aten::permute.default"}, permute);
    reg({"aten::expand.default", "aten::expand_copy.default"}, expandBackward);
    reg({"aten::squeeze.dim", "aten::squeeze.dims", "aten::squeeze.default"}, squeeze);
    reg({"aten::unsqueeze.default"}, unsqueezeBackward);
    reg({"aten::select.int"}, selectBackward);
    reg({"aten::slice.Tensor"}, sliceBackward);
    reg({"aten::stack.default", "aten::cat.default"}, stackCat);
    reg({"aten::_to_copy.default"}, toCopy);
    reg({"aten::clone.default", "aten::alias.default", "aten::contiguous.default", "aten::add.Scalar", "aten::frac.default",
         "aten::add_.Scalar", "aten::sub.Scalar", "aten::positive.default", "aten::lift_fresh_copy.default"},
        identity);
    reg({"aten::native_dropout.default"}, nativeDropout);
    reg({"aten::addmm.default"}, addmm);
    reg({"aten::mm.default"}, mmBackward);
    reg({"aten::bmm.default"}, bmmBackward);
    reg({"aten::baddbmm.default"}, baddbmm);
    reg({"aten::relu.default"}, relu);
    reg({"aten::gelu.default"}, gelu);
    reg({"aten::silu.default"}, silu);
    reg({"aten::softplus.default"}, softplus);
    reg({"aten::tanh.default"}, outputBackward<kTanhBackward>);
    reg({"aten::sigmoid.default"}, outputBackward<kSigmoidBackward>);
    reg({"aten::_softmax.default", "aten::_log_softmax.default", "aten::_safe_softmax.default"}, softmax);
    reg({"aten::add.Tensor", "aten::add_.Tensor"}, add);
    reg({"aten::sub.Tensor"}, sub);
    reg({"aten::rsub.Tensor", "aten::rsub.Scalar"}, rsub);
    reg({"aten::mul.Tensor", "aten::mul_.Tensor"}, mulTensor);
    reg({"aten::view_as_real.default"}, viewAsRealBackward);
    reg({"aten::view_as_complex.default"}, viewAsComplexBackward);
    reg({"aten::mul.Scalar", "aten::div.Scalar"}, scaleByScalar);
    reg({"aten::div.Tensor", "aten::div_.Tensor", "aten::true_divide.Tensor"}, divTensor);
    reg({"aten::neg.default"}, negBackward);
    reg({"aten::exp.default"}, expBackward);
    reg({"aten::sqrt.default"}, sqrtBackward);
    reg({"aten::log.default"}, logBackward);
    reg({"aten::rsqrt.default"}, rsqrtBackward);
    reg({"aten::pow.Tensor_Scalar"}, powTensorScalar);
    reg({"aten::abs.default"}, absBackward);
    reg({"aten::sin.default"}, sinBackward);
    reg({"aten::cos.default"}, cosBackward);
    reg({"aten::reciprocal.default"}, reciprocalBackward);
    reg({"aten::log1p.default"}, log1pBackward);
    reg({"aten::expm1.default"}, expm1Backward);
    reg({"aten::erf.default"}, erfBackward);
    reg({"aten::floor.default", "aten::ceil.default", "aten::round.default", "aten::trunc.default",
         "aten::sign.default", "aten::round.decimals", "aten::div.Tensor_mode", "aten::div.Scalar_mode"},
        zeroGrad);
    reg({"aten::where.self"}, whereBackward);
    reg({"aten::fmax.default", "aten::fmin.default"}, fmaxFminBackward);
    reg({"aten::special_entr.default"}, entrBackward);
    reg({"aten::special_erfcx.default"}, erfcxBackward);
    reg({"aten::special_log_ndtr.default"}, logNdtrBackward);
    reg({"aten::special_ndtri.default"}, ndtriBackward);
    reg({"aten::polygamma.default"}, polygammaBackward);
    reg({"aten::native_batch_norm.default", "aten::_native_batch_norm_legit_functional.default",
         "aten::_native_batch_norm_legit.no_stats", "aten::_native_batch_norm_legit_no_training.default"},
        batchNormBackward);
    reg({"aten::grid_sampler_2d.default", "aten::grid_sampler_3d.default"}, gridSamplerBackward);
    reg({"aten::square.default"}, squareBackward);
    reg({"aten::upsample_nearest1d.default", "aten::upsample_nearest2d.default", "aten::upsample_nearest3d.default",
         "aten::_upsample_nearest_exact1d.default", "aten::_upsample_nearest_exact2d.default",
         "aten::_upsample_nearest_exact3d.default", "aten::upsample_linear1d.default",
         "aten::upsample_bilinear2d.default", "aten::upsample_bicubic2d.default", "aten::upsample_trilinear3d.default",
         "aten::_upsample_bilinear2d_aa.default", "aten::_upsample_bicubic2d_aa.default",
         "aten::_upsample_lanczos2d_aa.default"},
        upsampleBackward);
    reg({"aten::_adaptive_avg_pool2d.default"}, adaptiveAvgPool2dBackward);
    reg({"aten::max_pool2d_with_indices.default"}, maxPool2dBackward);
    reg({"aten::nan_to_num.default"}, nanToNumBackward);
    reg({"aten::xlogy.Tensor"}, xlogyBackward);
    reg({"aten::pow.Tensor_Tensor"}, powTensorTensorBackward);
    reg({"aten::max.default", "aten::min.default"}, evenlyDistributeBackward);
    reg({"aten::threshold.default"}, thresholdBackward);
    reg({"aten::atanh.default"}, atanhBackward);
    reg({"aten::lerp.Tensor"}, lerpTensorBackward);
    reg({"aten::addcdiv.default"}, addcdivBackward);
    reg({"aten::atan2.default"}, atan2Backward);
    reg({"aten::var_mean.correction"}, varMeanCorrection);
    reg({"aten::max.dim", "aten::min.dim", "aten::topk.default", "aten::sort.default", "aten::sort.stable",
         "aten::median.dim", "aten::nanmedian.dim", "aten::kthvalue.default", "aten::mode.default"},
        valueSelectingBackward);
    reg({"aten::gather.default"}, gatherBackward);
    reg({"aten::index.Tensor"}, indexBackward);
    reg({"aten::index_put.default", "aten::index_put_.default"}, indexPutBackward);
    reg({"aten::_grouped_mm.default"}, groupedMmBackward);
    reg({"aten::tan.default"}, tanBackward);
    reg({"aten::sinh.default"}, unaryDerivative<kCosh>);
    reg({"aten::cosh.default"}, unaryDerivative<kSinh>);
    reg({"aten::lgamma.default"}, unaryDerivative<kDigamma>);
    reg({"aten::i0.default"}, unaryDerivative<kSpecialI1>);
    reg({"aten::digamma.default"}, digammaBackward);
    reg({"aten::asin.default", "aten::acos.default"}, asinAcosBackward);
    reg({"aten::atan.default"}, atanBackward);
    reg({"aten::asinh.default"}, asinhBackward);
    reg({"aten::acosh.default"}, acoshBackward);
    reg({"aten::erfc.default"}, erfcBackward);
    reg({"aten::erfinv.default"}, erfinvBackward);
    reg({"aten::exp2.default"}, exp2Backward);
    reg({"aten::log2.default", "aten::log10.default"}, logBaseBackward);
    reg({"aten::deg2rad.default", "aten::rad2deg.default"}, angleScaleBackward);
    reg({"aten::logit.default"}, logitBackward);
    reg({"aten::clamp.default", "aten::clip.default", "aten::clamp_min.default", "aten::clamp_max.default"},
        clampBackward);
    reg({"aten::clamp.Tensor", "aten::clip.Tensor", "aten::clamp_min.Tensor", "aten::clamp_max.Tensor"},
        clampTensorBackward);
    reg({"aten::maximum.default", "aten::minimum.default", "aten::max.other", "aten::min.other"}, maxMinBackward);
    reg({"aten::flip.default"}, flipBackward);
    reg({"aten::roll.default"}, rollBackward);
    reg({"aten::constant_pad_nd.default"}, constantPadBackward);
    reg({"aten::cumsum.default"}, cumsumBackward);
    reg({"aten::addcmul.default"}, addcmulBackward);
    reg({"aten::lerp.Scalar"}, lerpScalarBackward);
    reg({"aten::hypot.default"}, hypotBackward);
    reg({"aten::logaddexp.default", "aten::logaddexp2.default"}, logaddexpBackward);
    reg({"aten::pow.Scalar"}, powScalarBackward);
    reg({"aten::nansum.default"}, nansumBackward);
    reg({"aten::var.correction"}, varCorrection);
    reg({"aten::std.correction"}, stdCorrection);
    reg({"aten::norm.Scalar", "aten::linalg_vector_norm.default"}, normBackward);
    reg({"aten::split.Tensor", "aten::split_with_sizes.default", "aten::split_with_sizes_copy.default",
         "aten::unbind.int"},
        splitUnbindBackward);
    reg({"aten::masked_fill.Scalar"}, maskedFill);
    reg({"aten::sum.default"}, sumDefault);
    reg({"aten::sum.dim_IntList", "aten::mean.dim", "aten::mean.default"}, sumMeanDim);
    reg({"aten::logsumexp.default"}, logsumexpBackward);
    reg({"aten::amax.default", "aten::amin.default"}, aminmaxBackward);
    reg({"aten::tril.default", "aten::triu.default"}, trilTriu);
    reg({"aten::embedding.default"}, embedding);
    reg({"aten::nll_loss_forward.default", "aten::nll_loss2d_forward.default"}, nllLoss);
    return m;
  }();
  return t;
}

const llvm::StringSet<> &nonDifferentiable() {
  static const llvm::StringSet<> s = {
      "aten::arange.default", "aten::arange.start", "aten::arange.start_step", "aten::ones.default",
      "aten::zeros.default", "aten::full.default", "aten::empty.memory_format", "aten::randint.default",
      "aten::eq.Scalar", "aten::eq.Tensor", "aten::ne.Scalar", "aten::ne.Tensor", "aten::lt.Scalar",
      "aten::lt.Tensor", "aten::gt.Scalar", "aten::gt.Tensor", "aten::le.Scalar", "aten::le.Tensor",
      "aten::ge.Scalar", "aten::ge.Tensor", "aten::logical_not.default", "aten::argmax.default",
      "aten::argmin.default", "aten::sym_size.int", "aten::detach.default", "aten::zeros_like.default",
      "aten::ones_like.default", "aten::full_like.default", "aten::empty_like.default", "aten::new_zeros.default",
      "aten::new_ones.default", "aten::new_full.default", "aten::new_empty.default", "aten::new_empty_strided.default",
      "aten::rand_like.default", "aten::randn_like.default", "aten::scalar_tensor.default",
      // The orthogonal polynomials and Bessel functions: torch 2.13's autograd gives their results
      // no grad_fn (checked for every overload: the result does not require grad).
      "aten::special_chebyshev_polynomial_t.default", "aten::special_chebyshev_polynomial_t.n_scalar",
      "aten::special_chebyshev_polynomial_t.x_scalar", "aten::special_chebyshev_polynomial_u.default",
      "aten::special_chebyshev_polynomial_u.n_scalar", "aten::special_chebyshev_polynomial_u.x_scalar",
      "aten::special_chebyshev_polynomial_v.default", "aten::special_chebyshev_polynomial_v.n_scalar",
      "aten::special_chebyshev_polynomial_v.x_scalar", "aten::special_chebyshev_polynomial_w.default",
      "aten::special_chebyshev_polynomial_w.n_scalar", "aten::special_chebyshev_polynomial_w.x_scalar",
      "aten::special_shifted_chebyshev_polynomial_t.default", "aten::special_shifted_chebyshev_polynomial_t.n_scalar",
      "aten::special_shifted_chebyshev_polynomial_t.x_scalar", "aten::special_shifted_chebyshev_polynomial_u.default",
      "aten::special_shifted_chebyshev_polynomial_u.n_scalar",
      "aten::special_shifted_chebyshev_polynomial_u.x_scalar", "aten::special_shifted_chebyshev_polynomial_v.default",
      "aten::special_shifted_chebyshev_polynomial_v.n_scalar",
      "aten::special_shifted_chebyshev_polynomial_v.x_scalar", "aten::special_shifted_chebyshev_polynomial_w.default",
      "aten::special_shifted_chebyshev_polynomial_w.n_scalar",
      "aten::special_shifted_chebyshev_polynomial_w.x_scalar", "aten::special_hermite_polynomial_h.default",
      "aten::special_hermite_polynomial_h.n_scalar", "aten::special_hermite_polynomial_h.x_scalar",
      "aten::special_hermite_polynomial_he.default", "aten::special_hermite_polynomial_he.n_scalar",
      "aten::special_hermite_polynomial_he.x_scalar", "aten::special_laguerre_polynomial_l.default",
      "aten::special_laguerre_polynomial_l.n_scalar", "aten::special_laguerre_polynomial_l.x_scalar",
      "aten::special_legendre_polynomial_p.default", "aten::special_legendre_polynomial_p.n_scalar",
      "aten::special_legendre_polynomial_p.x_scalar", "aten::special_airy_ai.default",
      "aten::special_bessel_j0.default", "aten::special_bessel_j1.default", "aten::special_bessel_y0.default",
      "aten::special_bessel_y1.default", "aten::special_modified_bessel_i0.default",
      "aten::special_modified_bessel_i1.default", "aten::special_modified_bessel_k0.default",
      "aten::special_modified_bessel_k1.default", "aten::special_scaled_modified_bessel_k0.default",
      "aten::special_scaled_modified_bessel_k1.default", "aten::special_spherical_bessel_j0.default"};
  return s;
}

} // namespace

// ---- GradEmitter helpers ----------------------------------------------------------------------

Value *GradEmitter::emit(llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> &&args, TensorMeta meta,
                         llvm::StringRef hint) {
  Value *v = newValue(hint, std::move(meta));
  emitNode(v->name(), op, std::move(args), {Argument(v)});
  return v;
}

TensorMeta GradEmitter::like(const Value *v) {
  return metaOf(v->meta()->dtype, sizesOf(*v->meta()), v->meta()->device);
}

TensorMeta GradEmitter::withSizes(const Value *v, llvm::ArrayRef<int64_t> sizes) {
  return metaOf(v->meta()->dtype, sizes, v->meta()->device);
}

Value *GradEmitter::t(Value *x) {
  auto s = sizesOf(*x->meta());
  auto st = stridesOf(*x->meta());
  std::swap(s[0], s[1]);
  std::swap(st[0], st[1]);
  return emit("aten::t.default", {A("self", x)}, metaOf(x->meta()->dtype, s, x->meta()->device, st), "grad_t");
}

Value *GradEmitter::transpose(Value *x, int64_t d0, int64_t d1) {
  auto s = sizesOf(*x->meta());
  auto st = stridesOf(*x->meta());
  int64_t r = static_cast<int64_t>(s.size());
  d0 = d0 < 0 ? d0 + r : d0;
  d1 = d1 < 0 ? d1 + r : d1;
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return emit("aten::transpose.int", {A("self", x), A("dim0", d0), A("dim1", d1)},
              metaOf(x->meta()->dtype, s, x->meta()->device, st), "grad_transpose");
}

Value *GradEmitter::mm(Value *a, Value *b) {
  auto sa = sizesOf(*a->meta()), sb = sizesOf(*b->meta());
  return emit("aten::mm.default", {A("self", a), A("mat2", b)}, metaOf(a->meta()->dtype, {sa[0], sb[1]}, a->meta()->device),
              "grad_mm");
}

Value *GradEmitter::bmm(Value *a, Value *b) {
  auto sa = sizesOf(*a->meta()), sb = sizesOf(*b->meta());
  return emit("aten::bmm.default", {A("self", a), A("mat2", b)},
              metaOf(a->meta()->dtype, {sa[0], sa[1], sb[2]}, a->meta()->device), "grad_bmm");
}

Value *GradEmitter::unsqueeze(Value *x, int64_t d) {
  auto xs = sizesOf(*x->meta());
  xs.insert(xs.begin() + d, 1);
  return emit("aten::unsqueeze.default", {A("self", x), A("dim", d)}, metaOf(x->meta()->dtype, xs, x->meta()->device),
              "grad_unsqueeze");
}

Value *GradEmitter::newZerosLike(Value *g, const Value *target) {
  auto sizes = sizesOf(*target->meta());
  return emit("aten::new_zeros.default", {A("self", g), A("size", IntList(sizes.begin(), sizes.end()))}, like(target),
              "grad_zeros");
}

Value *GradEmitter::reshape(Value *x, llvm::ArrayRef<int64_t> sizes) {
  IntList size(sizes.begin(), sizes.end());
  if (sizesOf(*x->meta()) == llvm::SmallVector<int64_t, 4>(sizes.begin(), sizes.end()))
    return emit("aten::view.default", {A("self", x), A("size", size)},
                metaOf(x->meta()->dtype, sizes, x->meta()->device, stridesOf(*x->meta())), "grad_view");
  if (auto st = viewStrides(*x->meta(), sizes))
    return emit("aten::view.default", {A("self", x), A("size", size)},
                metaOf(x->meta()->dtype, sizes, x->meta()->device, *st), "grad_view");
  Value *c = emit("aten::clone.default", {A("self", x), K("memory_format", MemoryFormat::Contiguous)}, like(x),
                  "grad_clone");
  return emit("aten::_unsafe_view.default", {A("self", c), A("size", size)},
              metaOf(x->meta()->dtype, sizes, x->meta()->device), "grad_view");
}

Value *GradEmitter::sumTo(Value *g, const TensorMeta &target) {
  auto gs = sizesOf(*g->meta());
  auto ts = sizesOf(target);
  if (gs == ts || gs.size() < ts.size())
    return g;
  size_t leading = gs.size() - ts.size();
  IntList dims;
  for (size_t i = 0; i < leading; ++i)
    dims.push_back(static_cast<int64_t>(i));
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i] == 1 && gs[leading + i] != 1)
      dims.push_back(static_cast<int64_t>(leading + i));
  if (dims.empty())
    return g;
  llvm::SmallVector<int64_t, 4> kept = gs;
  for (int64_t d : dims)
    kept[d] = 1;
  Value *r = emit("aten::sum.dim_IntList", {A("self", g), A("dim", dims), A("keepdim", true)},
                  metaOf(g->meta()->dtype, kept, g->meta()->device), "grad_sum");
  if (leading > 0)
    r = emit("aten::view.default", {A("self", r), A("size", IntList(ts.begin(), ts.end()))},
             metaOf(g->meta()->dtype, ts, g->meta()->device), "grad_view");
  return r;
}

Value *GradEmitter::mmMat1Backward(Value *g, Value *mat2, const Value *mat1) {
  if (columnMajor(mat1))
    return t(mm(mat2, t(g)));
  return mm(g, t(mat2));
}

Value *GradEmitter::mmMat2Backward(Value *g, Value *mat1, const Value *mat2) {
  if (columnMajor(mat2))
    return t(mm(t(g), mat1));
  return mm(t(mat1), g);
}

Value *GradEmitter::unsqueezeMultiple(Value *g, llvm::ArrayRef<int64_t> dims, bool keepdim) {
  if (keepdim)
    return g;
  IntList ds(dims.begin(), dims.end());
  std::sort(ds.begin(), ds.end());
  for (int64_t d : ds)
    g = unsqueeze(g, d);
  return g;
}

Value *GradEmitter::sumBackward(Value *g, llvm::ArrayRef<int64_t> sizes, llvm::ArrayRef<int64_t> dims, bool keepdim) {
  Value *x = unsqueezeMultiple(g, dims, keepdim);
  // Tensor.expand's strides: 0 on every broadcast dim (later contiguous() calls copy such a grad).
  auto xs = sizesOf(*x->meta());
  auto xst = stridesOf(*x->meta());
  llvm::SmallVector<int64_t, 4> strides(sizes.size(), 0);
  size_t lead = sizes.size() - xs.size();
  for (size_t i = lead; i < sizes.size(); ++i)
    strides[i] = xs[i - lead] == sizes[i] ? xst[i - lead] : 0;
  return emit("aten::expand.default", {A("self", x), A("size", IntList(sizes.begin(), sizes.end()))},
              metaOf(x->meta()->dtype, sizes, x->meta()->device, strides), "grad_expand");
}

// ---- GradCall ---------------------------------------------------------------------------------

const Value *GradCall::result(unsigned i) const {
  auto r = n.results();
  return i < r.size() ? r[i] : nullptr;
}

Value *GradCall::operand(llvm::StringRef name) const {
  const Argument *a = n.input(name);
  return a && a->isTensor() ? a->tensor() : nullptr;
}

bool GradCall::want(llvm::StringRef name) const {
  int i = operandIndex(n, name);
  return i >= 0 && i < static_cast<int>(needed.size()) && needed[i];
}

void GradCall::set(llvm::StringRef name, Value *v) {
  if (int i = operandIndex(n, name); i >= 0 && i < static_cast<int>(out.size()))
    out[i] = v;
}

std::optional<int64_t> GradCall::intArg(llvm::StringRef name, std::optional<int64_t> dflt) const {
  const Argument *a = n.input(name);
  if (!a || a->isNone())
    return dflt;
  return a->asInt();
}

std::optional<double> GradCall::floatArg(llvm::StringRef name) const { return numberOf(n.input(name)); }

bool GradCall::boolArg(llvm::StringRef name, bool dflt) const {
  const Argument *a = n.input(name);
  return a && a->is<bool>() ? a->get<bool>() : dflt;
}

IntList GradCall::reducedDims(llvm::StringRef name) const {
  Value *x = self();
  int64_t rank = x ? x->meta()->rank() : 0;
  std::optional<IntList> dims;
  if (const Argument *a = n.input(name); a && !a->isNone()) {
    if (auto one = a->asInt())
      dims = IntList{*one};
    else
      dims = a->asIntList();
  }
  IntList ds;
  if (dims && !dims->empty())
    for (int64_t d : *dims)
      ds.push_back(d < 0 ? d + rank : d);
  else
    for (int64_t d = 0; d < rank; ++d)
      ds.push_back(d);
  std::sort(ds.begin(), ds.end());
  return ds;
}

// ---- registry ---------------------------------------------------------------------------------

DerivativeFormula findDerivative(llvm::StringRef op) {
  auto it = table().find(op);
  return it == table().end() ? nullptr : it->second;
}

bool isNonDifferentiable(llvm::StringRef op) { return nonDifferentiable().count(op); }

std::vector<std::string> derivativeOps() {
  std::vector<std::string> out;
  for (const auto &e : table())
    out.push_back(e.getKey().str());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> nonDifferentiableOps() {
  std::vector<std::string> out;
  for (const auto &e : nonDifferentiable())
    out.push_back(e.getKey().str());
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace commlens
