#include "autograd/Derivatives.h"

#include "autograd/DerivativeHelpers.h"

#include "ir/Error.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace commlens {

// The procedures autograd/derivatives.yaml names with `code:` (the linear-algebra ones in
// autograd/LinalgDerivatives.cpp), and the helpers they share (autograd/DerivativeHelpers.h).
namespace derivatives {

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
TensorMeta boolLike(const Value *v) { return withDtype(GradEmitter::like(v), ScalarType::Bool); }

/// A 0-dim zero of the gradient's dtype (the `zeros` operand of the where()s formulas run).
Value *zeroScalar(GradCall &c) { return scalarTensor(c, 0.0, c.g()); }

/// The tensor, or None where it is null (an optional operand or result).
Argument orNone(Value *v) { return v ? Argument(v) : Argument(NoneArg{}); }

/// Gives each named operand its gradient, where there is one.
void setGrads(GradCall &c, std::initializer_list<std::pair<const char *, Value *>> grads) {
  for (const auto &[operand, grad] : grads)
    if (grad)
      c.set(operand, grad);
}

/// Whether a gradient carries the conjugate bit (an aten::_conj view made it).
bool hasConjBit(const Value *g) { return g->producer() && g->producer()->opString() == "aten::_conj.default"; }

/// at::real(g) of a complex gradient, as the dispatcher decomposes it: view_as_real, then the real
/// half selected (a strided view). real() of a tensor with the conjugate bit undoes the bit first.
Value *realPart(GradCall &c, Value *g) {
  if (hasConjBit(g))
    g = c.e.emit("aten::_conj.default", {A("self", g)}, GradEmitter::like(g), "grad_unconj");
  ScalarType real = g->meta()->dtype == ScalarType::ComplexDouble ? ScalarType::Double
                    : g->meta()->dtype == ScalarType::ComplexHalf ? ScalarType::Half
                                                                  : ScalarType::Float;
  auto sizes = sizesOf(*g->meta());
  auto pairs = sizes;
  pairs.push_back(2);
  llvm::SmallVector<int64_t, 4> strides;
  for (int64_t st : stridesOf(*g->meta()))
    strides.push_back(2 * st);
  Value *r = c.e.emit("aten::view_as_real.default", {A("self", g)}, metaOf(real, pairs, g->meta()->device),
                      "grad_view_as_real");
  return c.e.emit("aten::select.int", {A("self", r), A("dim", int64_t(sizes.size())), A("index", int64_t(0))},
                  metaOf(real, sizes, g->meta()->device, strides), "grad_real");
}

/// A gradient with the conjugate bit as an operand of a kernel that does not take the bit: the
/// conjugate fallback materialises it (a clone) first.
Value *resolvedConj(GradCall &c, Value *g) {
  if (hasConjBit(g))
    return c.e.emit("aten::clone.default", {A("self", g)}, GradEmitter::like(g), "grad_resolve_conj");
  return g;
}

// ---- formulas ---------------------------------------------------------------------------------

llvm::Error layerNorm(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  Value *input = c.operand("input"), *weight = c.operand("weight"), *bias = c.operand("bias");
  Value *gi = c.e.newValue("grad_layer_norm_input", GradEmitter::like(input));
  Value *gw = weight ? c.e.newValue("grad_layer_norm_weight", GradEmitter::like(weight)) : nullptr;
  Value *gb = bias ? c.e.newValue("grad_layer_norm_bias", GradEmitter::like(bias)) : nullptr;
  BoolList mask{c.want("input"), weight && c.want("weight"), bias && c.want("bias")};
  c.e.emitNode(gi->name(), "aten::native_layer_norm_backward.default",
               {A("grad_out", c.g()), A("input", input), A("normalized_shape", *c.n.input("normalized_shape")),
                A("mean", mut(c.result(1))), A("rstd", mut(c.result(2))), A("weight", orNone(weight)),
                A("bias", orNone(bias)), A("output_mask", mask)},
               {Argument(gi), orNone(gw), orNone(gb)});
  setGrads(c, {{"input", gi}, {"weight", gw}, {"bias", gb}});
  return llvm::Error::success();
}

/// native_group_norm: one native_group_norm_backward of the contiguous gradient (derivatives.yaml;
/// the gradient of a sum is an expand, so torch clones it first), the mask from the operands that
/// want a gradient. A gradient of mean or rstd takes torch's double-backward formula instead
/// (in-place unsqueeze_ ops DTensor has no strategy for): refused.
llvm::Error groupNorm(GradCall &c) {
  if (c.g(1) || c.g(2)) // torch then takes infinitely_differentiable_native_group_norm_backward
    return makeError("autodiff: {}: a gradient of the mean or rstd (torch's double-backward formula, whose in-place "
                     "unsqueeze_ DTensor has no strategy for) is not modelled",
                     c.n.where());
  if (!c.g())
    return llvm::Error::success();
  Value *input = c.operand("input"), *weight = c.operand("weight"), *bias = c.operand("bias");
  Value *gi = c.want("input") ? c.e.newValue("grad_group_norm_input", GradEmitter::like(input)) : nullptr;
  Value *gw = weight && c.want("weight") ? c.e.newValue("grad_group_norm_weight", GradEmitter::like(weight)) : nullptr;
  Value *gb = bias && c.want("bias") ? c.e.newValue("grad_group_norm_bias", GradEmitter::like(bias)) : nullptr;
  if (!gi && !gw && !gb)
    return llvm::Error::success();
  c.e.emitNode((gi ? gi : gw ? gw : gb)->name(), "aten::native_group_norm_backward.default",
               {A("grad_out", contiguous(c, c.g())), A("input", contiguous(c, input)),
                A("mean", mut(c.result(1))), A("rstd", mut(c.result(2))), A("weight", orNone(weight)),
                A("N", *c.n.input("N")), A("C", *c.n.input("C")), A("HxW", *c.n.input("HxW")),
                A("group", *c.n.input("group")), A("output_mask", BoolList{gi != nullptr, gw != nullptr, gb != nullptr})},
               {orNone(gi), orNone(gw), orNone(gb)});
  setGrads(c, {{"input", gi}, {"weight", gw}, {"bias", gb}});
  return llvm::Error::success();
}

/// convolution: one convolution_backward for the three operands (derivatives.yaml), bias_sizes
/// [0] without a bias, as torch passes it.
llvm::Error convolution(GradCall &c) {
  if (!c.g())
    return llvm::Error::success();
  Value *input = c.operand("input"), *weight = c.operand("weight"), *bias = c.operand("bias");
  Value *gi = c.want("input") ? c.e.newValue("grad_convolution_input", GradEmitter::like(input)) : nullptr;
  Value *gw = c.want("weight") ? c.e.newValue("grad_convolution_weight", GradEmitter::like(weight)) : nullptr;
  Value *gb = bias && c.want("bias") ? c.e.newValue("grad_convolution_bias", GradEmitter::like(bias)) : nullptr;
  IntList biasSizes = bias ? IntList(sizesOf(*bias->meta())) : IntList{0};
  c.e.emitNode((gi ? gi : gw ? gw : gb)->name(), "aten::convolution_backward.default",
               {A("grad_output", c.g()), A("input", input), A("weight", weight), A("bias_sizes", biasSizes),
                A("stride", *c.n.input("stride")), A("padding", *c.n.input("padding")),
                A("dilation", *c.n.input("dilation")), A("transposed", *c.n.input("transposed")),
                A("output_padding", *c.n.input("output_padding")), A("groups", *c.n.input("groups")),
                A("output_mask", BoolList{gi != nullptr, gw != nullptr, gb != nullptr})},
               {orNone(gi), orNone(gw), orNone(gb)});
  setGrads(c, {{"input", gi}, {"weight", gw}, {"bias", gb}});
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
                A("rstd", mut(c.result(1))), A("weight", orNone(weight)), A("output_mask", mask)},
               {Argument(gi), orNone(gw)});
  setGrads(c, {{"input", gi}, {"weight", gw}});
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
      A("value", c.operand("value")), A("attn_bias", orNone(bias)),
      A("out", mut(c.result(0))), A("logsumexp", mut(c.result(1))), A("philox_seed", mut(c.result(2))),
      A("philox_offset", mut(c.result(3))), A("dropout_p", c.floatArg("dropout_p").value_or(0.0)),
      A("grad_input_mask", BoolList{c.want("query"), c.want("key"), c.want("value"), biasGrad}),
      A("is_causal", c.boolArg("is_causal"))};
  if (const Argument *scale = c.n.input("scale"))
    args.push_back(K("scale", *scale));
  c.e.emitNode(g.q->name(), "aten::_scaled_dot_product_efficient_attention_backward.default", std::move(args),
               {Argument(g.q), Argument(g.k), Argument(g.v), orNone(gb)});
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
      A("attn_bias", orNone(bias)), A("cum_seq_q", NoneArg{}),
      A("cum_seq_k", NoneArg{}), A("max_q", outputArg(c.n, 4)), A("max_k", outputArg(c.n, 5)),
      A("dropout_p", c.floatArg("dropout_p").value_or(0.0)), A("is_causal", c.boolArg("is_causal"))};
  if (const Argument *scale = c.n.input("scale"))
    args.push_back(K("scale", *scale));
  c.e.emitNode(g.q->name(), "aten::_scaled_dot_product_cudnn_attention_backward.default", std::move(args),
               {Argument(g.q), Argument(g.k), Argument(g.v)});
  setSdpaGrads(c, g);
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

llvm::Error toCopy(GradCall &c) {
  Value *g = c.g(), *self = c.self();
  if (isComplex(g->meta()->dtype) && !isComplex(self->meta()->dtype))
    g = realPart(c, g); // _to_copy_backward takes at::real(grad) first
  c.set("self", g->meta()->dtype == self->meta()->dtype
                    ? g
                    : c.e.emit("aten::_to_copy.default", {A("self", g), K("dtype", self->meta()->dtype)},
                               GradEmitter::like(self), "grad_to_copy"));
  return llvm::Error::success();
}

/// _fft_c2r (FunctionsManual fft_c2r_backward): the one-sided _fft_r2c of the gradient, then the
/// bins whose reflection lies outside the one-sided half (1 .. n - onesided) doubled in place
/// (`gI.narrow(dim[-1], 1, n - onesided).mul_(2)`, narrow dispatching slice).
llvm::Error fftC2rBackward(GradCall &c) {
  Value *self = c.self();
  IntList dims = *c.n.input("dim")->asIntList();
  auto outSizes = sizesOf(*c.result()->meta());
  auto inSizes = sizesOf(*self->meta());
  int64_t last = dims.back() < 0 ? dims.back() + int64_t(outSizes.size()) : dims.back();
  Value *gi = c.e.emit("aten::_fft_r2c.default",
                       {A("self", c.g()), A("dim", dims), A("normalization", *c.n.input("normalization")),
                        A("onesided", true)},
                       GradEmitter::like(self), "grad_fft_c2r");
  int64_t doubled = outSizes[last] - inSizes[last];
  if (doubled > 0) {
    auto sliceSizes = inSizes;
    sliceSizes[last] = doubled;
    Value *bins = c.e.emit("aten::slice.Tensor",
                           {A("self", gi), A("dim", last), A("start", int64_t(1)), A("end", 1 + doubled)},
                           GradEmitter::withSizes(gi, sliceSizes), "grad_fft_c2r_bins");
    c.e.emit("aten::mul_.Scalar", {A("self", bins), A("other", 2.0)}, GradEmitter::like(bins), "grad_fft_c2r_bins");
  }
  c.set("self", gi);
  return llvm::Error::success();
}

/// _fft_c2c: the transform of the gradient in the other direction (derivatives.yaml), the
/// gradient's conjugate bit resolved first.
llvm::Error fftC2cBackward(GradCall &c) {
  c.set("self", c.e.emit("aten::_fft_c2c.default",
                         {A("self", resolvedConj(c, c.g())), A("dim", *c.n.input("dim")),
                          A("normalization", *c.n.input("normalization")), A("forward", !c.boolArg("forward"))},
                         GradEmitter::like(c.self()), "grad_fft_c2c"));
  return llvm::Error::success();
}

/// channel_shuffle: the gradient shuffled back, into channels / groups groups (derivatives.yaml).
llvm::Error channelShuffleBackward(GradCall &c) {
  int64_t channels = sizesOf(*c.g()->meta())[1];
  c.set("self", c.e.emit("aten::channel_shuffle.default", {A("self", c.g()), A("groups", channels / *c.intArg("groups"))},
                         GradEmitter::like(c.self()), "grad_channel_shuffle"));
  return llvm::Error::success();
}

/// index_add / index_copy (derivatives.yaml): self grad (index_add) or grad.index_fill(dim, index, 0)
/// (index_copy); source the gradient's rows at the index, expanded as the source, or for a 0-d
/// source selected at index.squeeze(0); index_add's scaled by alpha.
llvm::Error indexAddCopyBackward(GradCall &c) {
  bool add = c.n.opString() == "aten::index_add.default";
  Value *g = c.g(), *index = c.operand("index"), *source = c.operand("source");
  const Argument &dim = *c.n.input("dim");
  if (c.want("self"))
    c.set("self", add ? g
                      : c.e.emit("aten::index_fill.int_Scalar",
                                 {A("self", g), A("dim", dim), A("index", index), A("value", int64_t{0})},
                                 GradEmitter::like(c.self()), "grad_index_fill"));
  if (!c.want("source"))
    return llvm::Error::success();
  Value *gs;
  if (source->meta()->rank() > 0) {
    Value *rows = c.e.emit("aten::index_select.default", {A("self", g), A("dim", dim), A("index", index)},
                           GradEmitter::like(source), "grad_index_select");
    gs = c.e.emit("aten::expand.default", {A("self", rows), A("size", sizesList(source))}, GradEmitter::like(source),
                  "grad_expand");
  } else {
    Value *at = c.e.emit("aten::squeeze.dim", {A("self", index), A("dim", int64_t{0})},
                         GradEmitter::withSizes(index, {}), "grad_index_squeeze");
    gs = c.e.emit("aten::index_select.default", {A("self", g), A("dim", dim), A("index", at)},
                  GradEmitter::like(source), "grad_index_select");
  }
  c.set("source", add ? maybeMultiply(c, gs, c.n.input("alpha")) : gs);
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

/// mul_tensor_backward (torch 2.13 FunctionsManual.cpp): grad * other.conj(), and the real part
/// where a real operand met a complex one (handle_r_to_c: at::real, which the dispatcher
/// decomposes to view_as_real(g).select(-1, 0)).
Value *mulBackward(GradCall &c, const Argument &other, const Value *operand) {
  Value *g = mul(c, c.g(), conj(c, other));
  if (isComplex(g->meta()->dtype) && !isComplex(operand->meta()->dtype))
    g = realPart(c, g);
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

/// _grouped_mm(self, mat2, offs?) for a 2-D self and 3-D mat2 (grouped by offs, an MoE's routed
/// tokens) or both 3-D (batched by expert): mat2's gradient grouped_mm(self.mT, grad, offs) first,
/// then self's grouped_mm(grad, mat2.mT, offs), as torch 2.13 runs them (traced on DTensors); the
/// 3-D x 2-D and 2-D x 2-D forms are refused by name.
llvm::Error groupedMmBackward(GradCall &c) {
  Value *g = c.g(), *self = c.self(), *mat2 = c.operand("mat2");
  int64_t r1 = self->meta()->rank(), r2 = mat2->meta()->rank();
  if (r2 != 3 || (r1 != 2 && r1 != 3))
    return makeError("autodiff: aten::_grouped_mm's derivative is modelled for a 2-D or 3-D input and 3-D weights, "
                     "not {}-D and {}-D", r1, r2);
  const Argument *offs = c.n.input("offs");
  bool grouped = offs && !offs->isNone();
  if (r1 == 2 && !grouped)
    return makeError("autodiff: aten::_grouped_mm of a 2-D input without offs is not modelled");
  auto groupedMm = [&](Value *a, Value *b, const Value *like) {
    llvm::SmallVector<NamedArgument, 4> args{A("self", a), A("mat2", b)};
    if (grouped)
      args.push_back(A("offs", *offs));
    return c.e.emit("aten::_grouped_mm.default", std::move(args), GradEmitter::like(like), "grad_grouped_mm");
  };
  if (c.want("mat2"))
    c.set("mat2", groupedMm(c.e.transpose(self, -2, -1), g, mat2));
  if (c.want("self"))
    c.set("self", groupedMm(g, c.e.transpose(mat2, -2, -1), self));
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

/// repeat_backward (FunctionsManual.cpp): sum away the leading dims repeat added, view each
/// repeated dim as (repeat, size), sum the repeat dims. Zero repeats give a plain zeros tensor.
llvm::Error repeatBackward(GradCall &c) {
  const Argument *r = c.n.input("repeats");
  std::optional<IntList> repeats = r ? r->asIntList() : std::nullopt;
  auto input = sizesOf(*c.self()->meta());
  if (!repeats || repeats->size() < input.size())
    return makeError("node '{}' ({}): expected a repeats list of at least {} ints", c.n.name(), c.n.opString(),
                     input.size());
  if (llvm::is_contained(*repeats, 0)) { // repeat_backward: a plain at::zeros of the input's sizes
    c.set("self", c.e.emit("aten::zeros.default",
                           {A("size", IntList(input.begin(), input.end())), K("dtype", c.self()->meta()->dtype)},
                           GradEmitter::like(c.self()), "grad_zeros"));
    return llvm::Error::success();
  }
  Value *g = c.g();
  size_t unsqueezed = repeats->size() - input.size();
  for (size_t i = 0; i < unsqueezed; ++i) {
    auto gs = sizesOf(*g->meta());
    g = c.e.emit("aten::sum.dim_IntList", {A("self", g), A("dim", IntList{0})},
                 GradEmitter::withSizes(g, llvm::ArrayRef<int64_t>(gs).drop_front()), "grad_sum");
  }
  IntList viewSizes, sumDims;
  for (size_t d = 0; d < input.size(); ++d) {
    int64_t times = (*repeats)[d + unsqueezed];
    if (times != 1) {
      viewSizes.push_back(times);
      sumDims.push_back(static_cast<int64_t>(viewSizes.size()) - 1);
    }
    viewSizes.push_back(input[d]);
  }
  if (llvm::ArrayRef<int64_t>(sizesOf(*g->meta())) != llvm::ArrayRef<int64_t>(viewSizes))
    g = c.e.reshape(g, viewSizes);
  if (!sumDims.empty())
    g = c.e.emit("aten::sum.dim_IntList", {A("self", g), A("dim", sumDims)},
                 GradEmitter::withSizes(g, input), "grad_sum");
  c.set("self", g);
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

/// narrow_copy: slice_backward(grad, self's sizes, dim, start, start + length, 1).
llvm::Error narrowCopyBackward(GradCall &c) {
  auto s0 = sizesOf(*c.self()->meta());
  int64_t start = *c.intArg("start"), length = *c.intArg("length");
  c.set("self", c.e.emit("aten::slice_backward.default",
                         {A("grad_output", c.g()), A("input_sizes", IntList(s0.begin(), s0.end())),
                          A("dim", *c.intArg("dim")), A("start", start), A("end", start + length), A("step", int64_t(1))},
                         GradEmitter::like(c.self()), "grad_slice"));
  return llvm::Error::success();
}

/// mv's gradients (derivatives.yaml): self grad.ger(vec), which the dispatcher runs as outer:
/// grad.reshape(n, 1) * vec; vec self.t().mv(grad). addmv scales them by alpha and gives self
/// grad * beta.
Value *mvSelfGrad(GradCall &c, Value *mat, Value *vec) {
  Value *col = c.e.reshape(c.g(), {sizesOf(*c.g()->meta())[0], 1});
  return c.e.emit("aten::mul.Tensor", {A("self", col), A("other", vec)}, GradEmitter::like(mat), "grad_mul");
}
Value *mvVecGrad(GradCall &c, Value *mat, Value *vec) {
  return c.e.emit("aten::mv.default", {A("self", c.e.t(mat)), A("vec", c.g())}, GradEmitter::like(vec), "grad_mv");
}

llvm::Error mvBackward(GradCall &c) {
  Value *self = c.self(), *vec = c.operand("vec");
  if (c.want("self"))
    c.set("self", mvSelfGrad(c, self, vec));
  if (c.want("vec"))
    c.set("vec", mvVecGrad(c, self, vec));
  return llvm::Error::success();
}

llvm::Error addmvBackward(GradCall &c) {
  Value *mat = c.operand("mat"), *vec = c.operand("vec");
  if (isComplex(mat->meta()->dtype)) // the formulas' conj() of a complex operand is not modelled
    return makeError("autodiff: {} of a complex tensor has no formula here (node '{}')", c.n.opString(), c.n.name());
  const Argument *alpha = c.n.input("alpha");
  if (c.want("self"))
    c.set("self", maybeMultiply(c, c.g(), c.n.input("beta")));
  if (c.want("mat"))
    c.set("mat", maybeMultiply(c, mvSelfGrad(c, mat, vec), alpha));
  if (c.want("vec"))
    c.set("vec", maybeMultiply(c, mvVecGrad(c, mat, vec), alpha));
  return llvm::Error::success();
}


/// mvlgamma_backward: grad * (arange(-p/2 + 0.5, 0.5, 0.5) + self.unsqueeze(-1)).digamma_().sum(-1).
/// The arange is a plain tensor: added to a DTensor of more than one element, DTensor raises, and so
/// does the dispatch pass.
llvm::Error mvlgammaBackward(GradCall &c) {
  Value *self = c.self();
  int64_t p = *c.intArg("p");
  auto sizes = sizesOf(*self->meta());
  TensorMeta am = GradEmitter::withSizes(self, {p});
  Value *args = c.e.emit("aten::arange.start_step",
                         {A("start", -static_cast<double>(p) / 2.0 + 0.5), A("end", 0.5), A("step", 0.5),
                          K("dtype", self->meta()->dtype)},
                         am, "grad_arange");
  Value *col = c.e.unsqueeze(self, static_cast<int64_t>(sizes.size()));
  llvm::SmallVector<int64_t, 4> wide(sizes.begin(), sizes.end());
  wide.push_back(p);
  Value *sum = c.e.emit("aten::add.Tensor", {A("self", args), A("other", col)}, GradEmitter::withSizes(self, wide),
                        "grad_add");
  Value *dg = c.e.emit("aten::digamma_.default", {A("self", sum)}, GradEmitter::like(sum), "grad_digamma");
  Value *red = c.e.emit("aten::sum.dim_IntList", {A("self", dg), A("dim", IntList{-1})}, GradEmitter::like(self),
                        "grad_sum");
  c.set("self", mul(c, c.g(), red));
  return llvm::Error::success();
}

/// stack: grad.select(dim, i) per input; cat: grad.slice(dim, offset, offset + size) per input
/// (as DTensor receives cat's and stack's backward). Every input's, whether it needs a gradient or
/// not: FunctionsManual's stack_tensors_backward and cat_tensors_backward take them all (a slice
/// of a gradient sharded on the cat dim redistributes it, once per input). A legacy 1-D empty cat
/// input gets a plain at::zeros({0}), which DTensor does not see.
llvm::Error stackCat(GradCall &c) {
  bool stack = c.n.opString() == "aten::stack.default";
  llvm::SmallVector<Value *, 4> parts = c.n.input("tensors")->tensors();
  Value *g = c.g();
  int64_t dim = c.intArg("dim", 0).value_or(0);
  int64_t rank = g->meta()->rank();
  dim = dim < 0 ? dim + rank : dim;
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size() && i < c.out.size(); ++i) {
    auto sizes = sizesOf(*parts[i]->meta());
    if (!stack && sizes.size() == 1 && sizes[0] == 0)
      continue;
    int64_t size = stack ? 1 : sizes[dim];
    Value *grad = stack ? c.e.emit("aten::select.int", {A("self", g), A("dim", dim), A("index", static_cast<int64_t>(i))},
                                   GradEmitter::like(parts[i]), "grad_select")
                        : c.e.emit("aten::slice.Tensor",
                                   {A("self", g), A("dim", dim), A("start", offset), A("end", offset + size)},
                                   GradEmitter::like(parts[i]), "grad_slice");
    if (c.needed[i])
      c.out[i] = grad;
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

/// How FunctionsManual finishes a binary cross entropy's gradient `x`: times grad, times weight
/// when given, divided in place by `like`'s numel for a mean.
Value *finishLossGrad(GradCall &c, Value *x, Value *weight, bool mean, const Value *like) {
  x = mul(c, x, c.g());
  if (weight)
    x = mul(c, x, weight);
  if (mean)
    x = binary(c, "aten::div_.Scalar", x, numelOf(sizesOf(*like->meta())), "grad_div");
  return x;
}

/// binary_cross_entropy: self binary_cross_entropy_backward(grad, self, target, weight, reduction);
/// target (FunctionsManual's binary_cross_entropy_target_backward) -logit(self) * grad, times
/// weight when given, divided in place by numel for a mean. weight is not differentiable.
llvm::Error bceBackward(GradCall &c) {
  if (c.want("weight"))
    return c.notDifferentiable("weight");
  Value *self = c.self(), *target = c.operand("target"), *weight = c.operand("weight");
  std::optional<int64_t> reduction = c.intArg("reduction", 1);
  if (c.want("self"))
    c.set("self", c.e.emit("aten::binary_cross_entropy_backward.default",
                           {A("grad_output", c.g()), A("self", self), A("target", target),
                            A("weight", weight ? Argument(weight) : Argument()), A("reduction", *reduction)},
                           GradEmitter::like(self), "grad_binary_cross_entropy"));
  if (c.want("target"))
    c.set("target", finishLossGrad(c, unary(c, "aten::neg_.default", unary(c, "aten::logit.default", self, "grad_logit"),
                                            "grad_neg"),
                                   weight, reduction == 1, target));
  return llvm::Error::success();
}

/// binary_cross_entropy_with_logits (FunctionsManual's binary_cross_entropy_with_logits_backward and
/// _target_backward, the ops a DTensor runs): self sigmoid(self) - target, with pos_weight
/// (pos_weight * target + 1 - target) * sigmoid(self) - pos_weight * target; target -self; each
/// times grad, times weight when given, divided in place by numel for a mean. weight and pos_weight
/// are not differentiable (torch raises when they require grad).
llvm::Error bceWithLogitsBackward(GradCall &c) {
  for (llvm::StringRef name : {"weight", "pos_weight"})
    if (c.want(name))
      return c.notDifferentiable(name);
  Value *self = c.self(), *target = c.operand("target"), *weight = c.operand("weight");
  Value *posWeight = c.operand("pos_weight");
  bool mean = c.intArg("reduction", 1) == 1;
  if (c.want("self")) {
    Value *g;
    if (posWeight) {
      Value *t = c.e.emit("aten::mul.Tensor", {A("self", posWeight), A("other", target)}, GradEmitter::like(target),
                          "grad_mul");
      g = binary(c, "aten::add.Scalar", t, int64_t(1), "grad_add");
      g = binary(c, "aten::sub.Tensor", g, target, "grad_sub");
      g = mul(c, g, unary(c, "aten::sigmoid.default", self, "grad_sigmoid"));
      g = binary(c, "aten::sub.Tensor", g, t, "grad_sub");
    } else {
      g = binary(c, "aten::sub.Tensor", unary(c, "aten::sigmoid.default", self, "grad_sigmoid"), target, "grad_sub");
    }
    c.set("self", finishLossGrad(c, g, weight, mean, self));
  }
  if (c.want("target")) {
    if (posWeight)
      return makeError("autodiff: {}: the target's gradient with a pos_weight (log_sigmoid of both signs) is not "
                       "modelled",
                       c.n.where());
    c.set("target", finishLossGrad(c, unary(c, "aten::neg.default", self, "grad_neg"), weight, mean, target));
  }
  return llvm::Error::success();
}

// ---- pointwise math ---------------------------------------------------------------------------

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

/// cumprod_backward (FunctionsManual.cpp): the gradient itself where the product runs over one
/// element (numel <= 1, or a dim of size 1); otherwise torch branches on whether the input holds a
/// zero (data the program does not carry), and DTensor raises in the branch it takes (its where
/// mixes plain tensors and DTensors): not modelled.
llvm::Error cumprodBackward(GradCall &c) {
  Value *self = c.self();
  auto sizes = hints(self->meta()->sizes);
  int64_t rank = static_cast<int64_t>(sizes.size()), dim = *c.n.input("dim")->asInt();
  dim = dim < 0 ? dim + std::max<int64_t>(rank, 1) : dim;
  if (self->meta()->numel() > 1 && !(dim < rank && sizes[dim] == 1))
    return makeError("autodiff: the derivative of {} over {} elements is not modelled (torch's cumprod_backward "
                     "branches on whether the input holds a zero; DTensor raises in the branch it takes) (node '{}' "
                     "in {})",
                     c.n.opString(), sizes.empty() ? 1 : sizes[dim], c.n.name(), c.n.moduleName());
  c.set("self", c.g());
  return llvm::Error::success();
}

/// index_reduce_backward (FunctionsManual.cpp), both gradients from one call (derivatives.yaml's
/// `self, source:`), in the order torch 2.13 runs its ops (traced on CPU):
///   prod: self's zeros masked to 1 and reduced again, grad * that / the masked self; the source's
///     zeros counted per destination row (index_add of the mask into zeros, index_select back); a
///     lone zero's gradient from the reduction with it masked to 1, every other one
///     (grad * result)[index] / source with its zeros masked to 1 (where);
///   mean: the count per row (ones, or zeros without self, index_add of ones_like(source)), zero
///     counts masked to 1; grad / count, grad[index] / count[index];
///   amax, amin: the entries equal to the result (self == result, source == result[index], as
///     floats) share the row's gradient: grad / (their index_add), times each mask.
/// Without include_self, self's gradient is zero in the reduced rows (index_fill).
llvm::Error indexReduceBackward(GradCall &c) {
  Value *g = c.g(), *self = c.self(), *index = c.operand("index"), *source = c.operand("source");
  Value *r = mut(c.result());
  const Argument &dim = *c.n.input("dim");
  std::string reduce = c.n.input("reduce")->get<std::string>();
  bool includeSelf = c.boolArg("include_self", true);
  ScalarType dtype = self->meta()->dtype;
  auto select = [&](Value *x) {
    return c.e.emit("aten::index_select.default", {A("self", x), A("dim", dim), A("index", index)},
                    GradEmitter::like(source), "grad_index_select");
  };
  auto indexAdd = [&](Value *x, Value *rows) {
    return c.e.emit("aten::index_add.default", {A("self", x), A("dim", dim), A("index", index), A("source", rows)},
                    GradEmitter::like(x), "grad_index_add");
  };
  auto div = [&](Value *x, Value *y) { return binary(c, "aten::div.Tensor", x, y, "grad_div"); };
  auto eqScalar = [&](Value *x, int64_t v) {
    return c.e.emit("aten::eq.Scalar", {A("self", x), A("other", v)}, boolLike(x), "grad_eq");
  };
  auto maskedFill = [&](llvm::StringRef op, Value *x, Value *mask) {
    return c.e.emit(op, {A("self", x), A("mask", mask), A("value", int64_t(1))}, GradEmitter::like(x), "grad_masked");
  };
  auto asFloat = [&](Value *mask) {
    return c.e.emit("aten::_to_copy.default", {A("self", mask), K("dtype", dtype)},
                    withDtype(GradEmitter::like(mask), dtype), "grad_to_copy");
  };
  auto reduceAgain = [&](Value *x, Value *src) {
    llvm::SmallVector<NamedArgument, 4> args{A("self", x), A("dim", dim), A("index", index), A("source", src),
                                             A("reduce", reduce)};
    if (!includeSelf)
      args.push_back(K("include_self", false));
    return c.e.emit("aten::index_reduce.default", std::move(args), GradEmitter::like(x), "grad_index_reduce");
  };
  Value *gradSelf, *gradSource;
  if (reduce == "prod") {
    Value *maskedSelf = maskedFill("aten::masked_fill.Scalar", self, eqScalar(self, 0));
    gradSelf = div(mul(c, g, reduceAgain(maskedSelf, source)), maskedSelf);
    Value *srcZero = eqScalar(source, 0);
    Value *zeros = c.e.emit("aten::zeros_like.default", {A("self", self)}, GradEmitter::like(self), "grad_zeros");
    Value *srcNumZeros = select(indexAdd(zeros, asFloat(srcZero)));
    Value *singleZero = c.e.emit("aten::bitwise_and.Tensor", {A("self", srcZero), A("other", eqScalar(srcNumZeros, 1))},
                                 boolLike(source), "grad_single_zero");
    Value *maskedSrcResult = reduceAgain(self, maskedFill("aten::masked_fill.Scalar", source, singleZero));
    Value *nonZeroSource = maskedFill("aten::masked_fill.Scalar", source, srcZero);
    Value *others = div(select(mul(c, g, r)), nonZeroSource);
    Value *lone = select(mul(c, g, maskedSrcResult));
    gradSource = c.e.emit("aten::where.self", {A("condition", singleZero), A("self", lone), A("other", others)},
                          GradEmitter::like(source), "grad_where");
  } else if (reduce == "mean") {
    Value *n = c.e.emit(includeSelf ? "aten::ones_like.default" : "aten::zeros_like.default", {A("self", g)},
                        GradEmitter::like(g), "grad_count");
    n = indexAdd(n, c.e.emit("aten::ones_like.default", {A("self", source)}, GradEmitter::like(source), "grad_ones"));
    n = maskedFill("aten::masked_fill_.Scalar", n, eqScalar(n, 0));
    gradSelf = div(g, n);
    Value *nSource = select(n);
    gradSource = div(select(g), nSource);
  } else if (reduce == "amax" || reduce == "amin") {
    Value *value = select(r);
    Value *selfIsResult = asFloat(c.e.emit("aten::eq.Tensor", {A("self", self), A("other", r)}, boolLike(self),
                                           "grad_eq"));
    Value *sourceIsResult = asFloat(c.e.emit("aten::eq.Tensor", {A("self", source), A("other", value)},
                                             boolLike(source), "grad_eq"));
    Value *distributed = div(g, indexAdd(selfIsResult, sourceIsResult));
    gradSelf = mul(c, selfIsResult, distributed);
    gradSource = mul(c, sourceIsResult, select(distributed));
  } else {
    return makeError("autodiff: node '{}' ({}): reduce '{}' (torch's index_reduce takes prod, mean, amax or amin)",
                     c.n.name(), c.n.opString(), reduce);
  }
  if (!includeSelf)
    gradSelf = c.e.emit("aten::index_fill.int_Scalar",
                        {A("self", gradSelf), A("dim", dim), A("index", index), A("value", int64_t{0})},
                        GradEmitter::like(gradSelf), "grad_index_fill");
  setGrads(c, {{"self", c.want("self") ? gradSelf : nullptr}, {"source", c.want("source") ? gradSource : nullptr}});
  return llvm::Error::success();
}

/// logcumsumexp_backward (FunctionsManual.cpp, real case): log|grad| split by grad's sign (the other
/// entries the dtype's lowest value), each minus the result, reverse-logcumsumexp'd (flip, logcumsumexp,
/// flip), plus self, exponentiated; the positive part minus the negative part.
llvm::Error logcumsumexpBackward(GradCall &c) {
  Value *g = c.g(), *self = c.self(), *r = mut(c.result());
  if (isComplex(g->meta()->dtype))
    return makeError("autodiff: node '{}' ({}): the complex case is not modelled", c.n.name(), c.n.opString());
  const Argument &dim = *c.n.input("dim");
  IntList dims{*dim.asInt()};
  Value *lowest = scalarTensor(c, -std::numeric_limits<double>::max(), g);
  Value *logAbs = unary(c, "aten::log.default", unary(c, "aten::abs.default", g, "grad_abs"), "grad_log");
  auto signPart = [&](llvm::StringRef cmp) {
    Value *m = c.e.emit(cmp, {A("self", g), A("other", int64_t(0))}, boolLike(g), "grad_mask");
    return c.e.emit("aten::where.self", {A("condition", m), A("self", logAbs), A("other", lowest)},
                    GradEmitter::like(g), "grad_where");
  };
  Value *pos = signPart("aten::gt.Scalar"), *neg = signPart("aten::lt.Scalar");
  auto flip = [&](Value *x) {
    return c.e.emit("aten::flip.default", {A("self", x), A("dims", dims)}, GradEmitter::like(x), "grad_flip");
  };
  auto part = [&](Value *logGrad) {
    Value *d = binary(c, "aten::sub.Tensor", logGrad, r, "grad_sub");
    Value *l = c.e.emit("aten::logcumsumexp.default", {A("self", flip(d)), A("dim", dim)}, GradEmitter::like(d),
                        "grad_logcumsumexp");
    return unary(c, "aten::exp.default", binary(c, "aten::add.Tensor", flip(l), self, "grad_add"), "grad_exp");
  };
  Value *p = part(pos), *n = part(neg);
  c.set("self", binary(c, "aten::sub.Tensor", p, n, "grad_logcumsumexp"));
  return llvm::Error::success();
}

/// aminmax_backward (FunctionsManual.cpp): for min, then max, scale_grad_by_count of the gradient
/// and the result restored to self's rank (reshape) against the mask self == result: (grad /
/// mask.sum(dims, keepdim)) * mask; the two parts added.
llvm::Error aminmaxPairBackward(GradCall &c) {
  Value *self = c.self();
  auto sizes = sizesOf(*self->meta());
  bool keepdim = c.boolArg("keepdim");
  IntList dims;
  if (auto d = c.intArg("dim"))
    dims.push_back(*d < 0 ? *d + static_cast<int64_t>(sizes.size()) : *d);
  // The mask is counted over the reduced dim, or over every dim listed (torch's aminmax backward
  // passes the full list: an empty one would reduce no dim in DTensor's strategy).
  IntList counts = dims;
  if (dims.empty())
    for (int64_t d = 0; d < int64_t(sizes.size()); ++d)
      counts.push_back(d);
  // The count's (keepdim) shape; without keepdim the gradient and the result are reshaped to it, or
  // to a 0-d tensor when every dim is reduced (restore_reduced_dims with no dims).
  llvm::SmallVector<int64_t, 4> counted(sizes.size(), 1);
  if (!dims.empty()) {
    counted.assign(sizes.begin(), sizes.end());
    counted[dims[0]] = 1;
  }
  llvm::SmallVector<int64_t, 4> restored;
  if (!dims.empty())
    restored = counted;
  auto part = [&](unsigned i) -> Value * {
    Value *g = c.g(i);
    if (!g)
      return nullptr;
    Value *gr = keepdim ? g : c.e.reshape(g, restored);
    Value *rr = keepdim ? mut(c.result(i)) : c.e.reshape(mut(c.result(i)), restored);
    Value *mask = c.e.emit("aten::eq.Tensor", {A("self", self), A("other", rr)}, boolLike(self), "grad_mask");
    Value *count = c.e.emit("aten::sum.dim_IntList", {A("self", mask), A("dim", counts), A("keepdim", true)},
                            withDtype(GradEmitter::withSizes(self, counted), ScalarType::Long), "grad_count");
    Value *q = c.e.emit("aten::div.Tensor", {A("self", gr), A("other", count)}, GradEmitter::withSizes(self, counted),
                        "grad_div");
    return c.e.emit("aten::mul.Tensor", {A("self", q), A("other", mask)}, GradEmitter::like(self), "grad_mul");
  };
  Value *lo = part(0), *hi = part(1);
  c.set("self", lo && hi ? binary(c, "aten::add.Tensor", lo, hi, "grad_aminmax") : lo ? lo : hi);
  return llvm::Error::success();
}

/// pow.Scalar(base, exponent tensor): grad * (result * ln(base)).
llvm::Error powScalarBackward(GradCall &c) {
  double base = numberOf(c.n.input("self")).value_or(1.0);
  Value *r = binary(c, "aten::mul.Scalar", mut(c.result()), std::log(base), "grad_scale");
  c.set("exponent", mul(c, c.g(), r));
  return llvm::Error::success();
}

/// prod.default (FunctionsManual prod_backward): a DTensor is tensor-subclass-like, so torch takes
/// prod_safe_zeros_backward over the flattened input: ones then the input without its last
/// element, cumulated; the same from the other end (flipped); grad times their product, viewed
/// back. A 0-dim input passes grad on. A plain tensor's formula depends on where its zeros are
/// (counted at run time), refused by name, as is an empty input or a dtype conversion.
llvm::Error prodBackward(GradCall &c) {
  Value *self = c.self(), *g = c.g();
  auto sizes = sizesOf(*self->meta());
  if (sizes.empty()) {
    c.set("self", g);
    return llvm::Error::success();
  }
  int64_t n = numelOf(sizes);
  if (!c.e.isDTensor(self) || n == 0 || g->meta()->dtype != self->meta()->dtype)
    return makeError("autodiff: '{}' (aten::prod.default): the gradient of {} is not modelled (torch's formula for a "
                     "plain tensor depends on where its zeros are)",
                     c.n.name(), n == 0 ? "an empty input" : !c.e.isDTensor(self) ? "a plain tensor" : "a dtype conversion");
  TensorMeta flatMeta = GradEmitter::withSizes(self, {n});
  Value *flat = c.e.emit("aten::view.default", {A("self", self), A("size", IntList{-1})}, flatMeta, "grad_flat");
  Value *ones = c.e.emit("aten::ones.default", {A("size", IntList{1}), K("dtype", g->meta()->dtype)},
                         metaOf(g->meta()->dtype, {1}, g->meta()->device), "grad_ones");
  auto slice = [&](int64_t start, int64_t end) {
    return c.e.emit("aten::slice.Tensor", {A("self", flat), A("dim", int64_t{0}), A("start", start), A("end", end)},
                    GradEmitter::withSizes(self, {n - 1}), "grad_slice");
  };
  auto exclusiveCumprod = [&](Value *rest) {
    Value *joined = c.e.emit("aten::cat.default", {A("tensors", TensorList{ones, rest}), A("dim", int64_t{0})}, flatMeta,
                             "grad_cat");
    return c.e.emit("aten::cumprod.default", {A("self", joined), A("dim", int64_t{0})}, flatMeta, "grad_cumprod");
  };
  auto flip = [&](Value *x) {
    return c.e.emit("aten::flip.default", {A("self", x), A("dims", IntList{0})}, GradEmitter::like(x), "grad_flip");
  };
  Value *before = exclusiveCumprod(slice(0, n - 1));
  Value *after = flip(exclusiveCumprod(flip(slice(1, n))));
  Value *others = c.e.emit("aten::mul.Tensor", {A("self", before), A("other", after)}, flatMeta, "grad_mul");
  Value *gi = c.e.emit("aten::mul.Tensor", {A("self", g), A("other", others)}, flatMeta, "grad_prod");
  c.set("self", c.e.emit("aten::view.default", {A("self", gi), A("size", IntList(sizes.begin(), sizes.end()))},
                         GradEmitter::like(self), "grad_view"));
  return llvm::Error::success();
}

/// copy_(self, src) into a tensor that is not a view (a view's write is CopySlices, autograd/
/// Engine.cpp): self's gradient zeros_like(grad) (contiguous), src's grad summed to src's shape. A
/// src of another dtype gets a converted gradient in torch (validate_outputs): refused by name.
llvm::Error copyBackward(GradCall &c) {
  if (Value *src = c.operand("src"); c.want("src") && src->meta()->dtype != c.g()->meta()->dtype)
    return makeError("autodiff: '{}' (aten::copy_.default): the gradient of a source of another dtype ({} into {}) is "
                     "not modelled",
                     c.n.name(), shortName(src->meta()->dtype), shortName(c.g()->meta()->dtype));
  if (c.want("self"))
    c.set("self", c.e.emit("aten::zeros_like.default", {A("self", c.g()), K("memory_format", MemoryFormat::Contiguous)},
                           GradEmitter::like(c.g()), "grad_zeros"));
  if (c.want("src"))
    c.set("src", c.e.sumTo(c.g(), *c.operand("src")->meta()));
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

/// mean_backward of the mean result's gradient (var_mean's and std_mean's second result).
Value *meanGrad(GradCall &c, Value *g) {
  auto sizes = sizesOf(*c.self()->meta());
  IntList ds = c.reducedDims();
  bool all = !c.n.input("dim") || c.n.input("dim")->isNone();
  int64_t n = 1;
  for (int64_t d : ds)
    n *= sizes[d];
  return binary(c, "aten::div.Scalar", c.e.sumBackward(g, sizes, ds, all || c.boolArg("keepdim")), n, "grad_mean");
}

/// var_mean: var_backward of the var gradient plus mean_backward of the mean gradient.
llvm::Error varMeanCorrection(GradCall &c) {
  Value *v = c.g() ? varBackward(c, c.g()) : nullptr;
  Value *m = c.g(1) ? meanGrad(c, c.g(1)) : nullptr;
  c.set("self", v && m ? binary(c, "aten::add.Tensor", v, m, "grad_var_mean") : (v ? v : m));
  return llvm::Error::success();
}

/// std_backward: var_backward of grad / (2 * std), zero where std is zero.
Value *stdGrad(GradCall &c, Value *g) {
  Value *r = mut(c.result());
  Value *two = binary(c, "aten::mul.Scalar", r, int64_t(2), "grad_scale");
  Value *q = binary(c, "aten::div.Tensor", g, two, "grad_div");
  TensorMeta bm = boolLike(r);
  Value *z = c.e.emit("aten::eq.Scalar", {A("self", r), A("other", int64_t(0))}, bm, "grad_zero_mask");
  q = c.e.emit("aten::masked_fill_.Scalar", {A("self", q), A("mask", z), A("value", int64_t(0))}, GradEmitter::like(q),
               "grad_masked");
  return varBackward(c, q);
}

llvm::Error stdCorrection(GradCall &c) {
  c.set("self", stdGrad(c, c.g()));
  return llvm::Error::success();
}

/// std_mean_backward: std_backward of the std gradient plus mean_backward of the mean gradient.
llvm::Error stdMeanCorrection(GradCall &c) {
  Value *v = c.g() ? stdGrad(c, c.g()) : nullptr;
  Value *m = c.g(1) ? meanGrad(c, c.g(1)) : nullptr;
  c.set("self", v && m ? binary(c, "aten::add.Tensor", v, m, "grad_std_mean") : (v ? v : m));
  return llvm::Error::success();
}

/// norm.Scalar / norm.ScalarOpt_dim / linalg_vector_norm (FunctionsManual norm_backward), by p:
/// 0 no gradient; 1 sgn(self) * grad; 2 grad * (self / norm), zero where norm is; +-inf the
/// gradient split over the entries equal to the norm (or NaN); p < 1, 1 < p < 2 and p > 2 their
/// scaled powers of |self|. torch's compiler evaluates an operator*'s right operand first, so the
/// ops of `a * b` are emitted b's first, as they run.
/// The gradient of norm `p` of `self` (the node's operand, or dist's self - other) for the node's
/// dims and result; null for p = 0.
Value *normGrad(GradCall &c, Value *self, double p) {
  if (p == 0.0)
    return nullptr;
  IntList ds = c.reducedDims();
  // norm_backward unsqueezes only for a reduced input of at least one dim, as sum_backward does
  bool keepdim = c.boolArg("keepdim") || !c.n.input("dim") || c.n.input("dim")->isNone() || self->meta()->rank() == 0;
  Value *g = c.e.unsqueezeMultiple(c.g(), ds, keepdim);
  Value *r = c.e.unsqueezeMultiple(mut(c.result()), ds, keepdim);
  auto mulOf = [&](Value *x, Value *y, llvm::StringRef hint) {
    return c.e.emit("aten::mul.Tensor", {A("self", x), A("other", y)}, GradEmitter::like(self), hint);
  };
  auto zeroWhere = [&](Value *x, Value *of) { // x.masked_fill_(of == 0, 0)
    Value *z = c.e.emit("aten::eq.Scalar", {A("self", of), A("other", int64_t(0))}, boolLike(of), "grad_zero_mask");
    return c.e.emit("aten::masked_fill_.Scalar", {A("self", x), A("mask", z), A("value", int64_t(0))},
                    GradEmitter::like(x), "grad_masked");
  };
  auto absPow = [&](double e) { // self.abs().pow_(e)
    Value *a = unary(c, "aten::abs.default", self, "grad_abs");
    return c.e.emit("aten::pow_.Scalar", {A("self", a), A("exponent", e)}, GradEmitter::like(a), "grad_pow");
  };
  Value *gi;
  if (p == 1.0) {
    gi = mulOf(unary(c, "aten::sgn.default", self, "grad_sgn"), g, "grad_norm");
  } else if (p == 2.0) {
    gi = mulOf(g, zeroWhere(binary(c, "aten::div.Tensor", self, r, "grad_div"), r), "grad_norm");
  } else if (std::isinf(p)) {
    Value *a = unary(c, "aten::abs.default", self, "grad_abs");
    Value *eq = c.e.emit("aten::eq.Tensor", {A("self", a), A("other", r)}, boolLike(self), "grad_norm_mask");
    Value *nan = c.e.emit("aten::isnan.default", {A("self", a)}, boolLike(self), "grad_norm_nan");
    Value *mask = c.e.emit("aten::logical_or.default", {A("self", eq), A("other", nan)}, boolLike(self),
                           "grad_norm_mask");
    // mask.sum(dim, true) with the node's own dim list: [] when it has none (all dims to torch's
    // sum, while DTensor's strategy reads [] as no reduced dim).
    IntList rawDims = c.dimsAsPassed();
    auto rs = sizesOf(*self->meta());
    for (int64_t d : ds)
      rs[d] = 1;
    Value *n = c.e.emit("aten::sum.dim_IntList", {A("self", mask), A("dim", rawDims), A("keepdim", true)},
                        metaOf(ScalarType::Long, rs, self->meta()->device), "grad_norm_count");
    Value *share = c.e.emit("aten::div.Tensor", {A("self", g), A("other", n)}, GradEmitter::withSizes(g, rs),
                            "grad_div");
    Value *spread = mulOf(share, mask, "grad_mul");
    gi = mulOf(unary(c, "aten::sgn.default", self, "grad_sgn"), spread, "grad_norm");
  } else if (p < 1.0) {
    Value *pw = zeroWhere(absPow(p - 1), self);
    Value *scaled = mulOf(unary(c, "aten::sgn.default", self, "grad_sgn"), pw, "grad_mul");
    Value *rp = powScalar(c, r, 1 - p);
    gi = mulOf(mulOf(scaled, g, "grad_mul"), rp, "grad_norm");
  } else {
    Value *pw = absPow(p < 2.0 ? p - 1 : p - 2);
    Value *scaled = p < 2.0 ? mulOf(unary(c, "aten::sgn.default", self, "grad_sgn"), pw, "grad_mul")
                            : mulOf(self, pw, "grad_mul");
    Value *scale = zeroWhere(binary(c, "aten::div.Tensor", g, powScalar(c, r, p - 1), "grad_div"), r);
    gi = mulOf(scaled, scale, "grad_norm");
  }
  return gi;
}

llvm::Error normBackward(GradCall &c) {
  const Argument *p = c.n.input(llvm::StringRef(c.n.opString()).startswith("aten::norm.") ? "p" : "ord");
  if (Value *gi = normGrad(c, c.self(), numberOf(p).value_or(2.0)))
    c.set("self", gi);
  return llvm::Error::success();
}

/// dist(self, other, p): norm_backward(grad, self - other, p, result) for self, its negation for
/// other, each operand's from its own self - other (other's first, as torch runs them), of the
/// operands' broadcast shape (the engine sums each back to its operand's).
llvm::Error distBackward(GradCall &c) {
  double p = numberOf(c.n.input("p")).value_or(2.0);
  auto grad = [&]() {
    Value *self = c.self(), *other = c.operand("other");
    Value *diff = c.e.emit("aten::sub.Tensor", {A("self", self), A("other", other)},
                           GradEmitter::withSizes(self, broadcastSizes(sizesOf(*self->meta()), sizesOf(*other->meta()))),
                           "grad_sub");
    return normGrad(c, diff, p);
  };
  if (c.want("other"))
    if (Value *gi = grad())
      c.set("other", unary(c, "aten::neg.default", gi, "grad_neg"));
  if (c.want("self"))
    if (Value *gi = grad())
      c.set("self", gi);
  return llvm::Error::success();
}

/// split / split_with_sizes / unbind: cat (stack) of the pieces' gradients, a piece without one
/// filled by a plain zeros tensor. On DTensors that mix makes DTensor's cat raise in torch 2.13,
/// so the formula errors too.
llvm::Error splitUnbindBackward(GradCall &c) {
  bool unbind = c.n.opString() == "aten::unbind.int" || c.n.opString() == "aten::unbind_copy.int";
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

/// max_pool2d_with_indices_backward: grad_output's gradient is max_pool_double_backward (grad,
/// contiguous, viewed with the spatial dims flattened, gathered at the flattened indices, viewed as
/// the indices); self's is zeros_like(self), built from its saved sizes (a plain tensor).
llvm::Error maxPoolDoubleBackward(GradCall &c) {
  Value *indices = c.operand("indices");
  if (c.want("grad_output")) {
    auto is = sizesOf(*indices->meta());
    if (is.size() < 2)
      return makeError("autodiff: node '{}' ({}): indices of fewer than 2 dims", c.n.name(), c.n.opString());
    auto gs = sizesOf(*c.g()->meta());
    llvm::SmallVector<int64_t, 4> flatIdx(is.begin(), is.end() - 2), flatGrad(gs.begin(), gs.end() - 2);
    flatIdx.push_back(is[is.size() - 2] * is.back());
    flatGrad.push_back(gs[gs.size() - 2] * gs.back());
    Value *iv = c.e.reshape(indices, flatIdx);
    Value *gv = c.e.reshape(contiguous(c, c.g()), flatGrad);
    Value *picked = c.e.emit("aten::gather.default", {A("self", gv), A("dim", int64_t(-1)), A("index", iv)},
                             GradEmitter::withSizes(c.g(), flatIdx), "grad_gather");
    c.set("grad_output", c.e.reshape(picked, is));
  }
  if (c.want("self")) {
    auto ss = sizesOf(*c.self()->meta());
    c.set("self", c.e.emit("aten::zeros.default", {A("size", IntList(ss.begin(), ss.end()))}, GradEmitter::like(c.self()),
                           "grad_zeros"));
  }
  return llvm::Error::success();
}

/// _softmax_backward_data: grad_output's gradient is _softmax_backward_data(grad, output, dim,
/// input_dtype); output's is softmax_double_backward, grad_output * grad - (output * grad_output)
/// .sum(dim, true) * grad - grad_output * (output * grad).sum(dim, true), its last term first.
llvm::Error softmaxDoubleBackward(GradCall &c) {
  Value *go = c.operand("grad_output"), *out = c.operand("output"), *g = c.g();
  int64_t dim = *c.intArg("dim");
  if (c.want("grad_output"))
    c.set("grad_output", c.e.emit("aten::_softmax_backward_data.default",
                                  {A("grad_output", g), A("output", out), A("dim", dim),
                                   A("input_dtype", *c.n.input("input_dtype"))},
                                  GradEmitter::like(go), "grad_softmax"));
  if (c.want("output")) {
    auto ss = sizesOf(*out->meta());
    int64_t d = dim < 0 ? dim + static_cast<int64_t>(ss.size()) : dim;
    llvm::SmallVector<int64_t, 4> kept(ss.begin(), ss.end());
    kept[d] = 1;
    auto rowSum = [&](Value *x) {
      return c.e.emit("aten::sum.dim_IntList", {A("self", x), A("dim", IntList{dim}), A("keepdim", true)},
                      GradEmitter::withSizes(x, kept), "grad_sum");
    };
    Value *third = mul(c, go, rowSum(mul(c, out, g)));
    Value *second = c.e.emit("aten::mul.Tensor", {A("self", rowSum(mul(c, out, go))), A("other", g)},
                             GradEmitter::like(g), "grad_mul");
    Value *first = mul(c, go, g);
    c.set("output", binary(c, "aten::sub.Tensor", binary(c, "aten::sub.Tensor", first, second, "grad_sub"), third,
                           "grad_softmax_double"));
  }
  return llvm::Error::success();
}

/// native_dropout_backward: grad_output's gradient is native_dropout_double_backward, grad *
/// (mask.type_as(grad) * scale); the mask gets none.
llvm::Error nativeDropoutDoubleBackward(GradCall &c) {
  Value *mask = c.operand("mask"), *g = c.g();
  Value *m = mask->meta()->dtype == g->meta()->dtype
                 ? mask
                 : c.e.emit("aten::_to_copy.default", {A("self", mask), K("dtype", g->meta()->dtype)},
                            withDtype(GradEmitter::like(mask), g->meta()->dtype), "grad_mask");
  Value *scaled = binary(c, "aten::mul.Scalar", m, *c.n.input("scale"), "grad_scale");
  c.set("grad_output", mul(c, g, scaled));
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

/// max_unpool2d / 3d: max_pool_double_backward(grad, indices, 2 or 3): the indices and the
/// contiguous gradient viewed as [leading dims, -1], the gradient gathered at the indices, viewed
/// back to the indices' sizes.
llvm::Error maxUnpoolBackward(GradCall &c) {
  Value *idx = c.operand("indices"), *g = c.g();
  size_t pooled = c.n.opString() == "aten::max_unpool3d.default" ? 3 : 2;
  auto is = sizesOf(*idx->meta());
  if (is.size() < pooled)
    return makeError("autodiff: {} with indices of rank {} (node '{}')", c.n.opString(), is.size(), c.n.name());
  IntList flat(is.begin(), is.end() - pooled), shown = flat;
  int64_t rest = 1;
  for (size_t i = is.size() - pooled; i < is.size(); ++i)
    rest *= is[i];
  flat.push_back(rest);
  shown.push_back(-1);
  Value *iv = c.e.emit("aten::view.default", {A("self", idx), A("size", shown)}, GradEmitter::withSizes(idx, flat),
                       "grad_indices_view");
  Value *gc = contiguous(c, g);
  auto gs = sizesOf(*gc->meta());
  IntList gflat(gs.begin(), gs.end() - pooled);
  int64_t grest = 1;
  for (size_t i = gs.size() - pooled; i < gs.size(); ++i)
    grest *= gs[i];
  gflat.push_back(grest);
  Value *gv = c.e.emit("aten::view.default", {A("self", gc), A("size", shown)}, GradEmitter::withSizes(gc, gflat),
                       "grad_view");
  Value *picked = c.e.emit("aten::gather.default", {A("self", gv), A("dim", int64_t(-1)), A("index", iv)},
                           GradEmitter::withSizes(gv, flat), "grad_gather");
  c.set("self", c.e.emit("aten::view.default", {A("self", picked), A("size", IntList(is.begin(), is.end()))},
                         GradEmitter::like(c.self()), "grad_view"));
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

/// native_batch_norm and the _native_batch_norm_legit variants: native_batch_norm_backward with
/// the running stats given (or None), the saved mean / invstd results, and training as run.
llvm::Error batchNormBackward(GradCall &c) {
  Value *input = c.operand("input"), *weight = c.operand("weight"), *bias = c.operand("bias");
  bool training = c.n.opString() != "aten::_native_batch_norm_legit_no_training.default" && c.boolArg("training");
  Value *gi = c.e.newValue("grad_batch_norm_input", GradEmitter::like(input));
  Value *gw = weight ? c.e.newValue("grad_batch_norm_weight", GradEmitter::like(weight)) : nullptr;
  Value *gb = bias ? c.e.newValue("grad_batch_norm_bias", GradEmitter::like(bias)) : nullptr;
  BoolList mask{c.want("input"), weight && c.want("weight"), bias && c.want("bias")};
  // _batch_norm_with_update's batchnorm_backward calls at::batch_norm_backward with the reserve
  // workspace (update = training); DTensor runs it through torch._decomp's
  // native_batch_norm_backward decomposition (pointwise and reduction ops), which commlens does not
  // model: refused at dispatch by name.
  bool withUpdate = c.n.opString() == "aten::_batch_norm_with_update.default";
  if (withUpdate && !weight)
    return makeError("autodiff: '{}' (aten::_batch_norm_with_update.default) without a weight is not modelled",
                     c.n.name());
  llvm::SmallVector<NamedArgument, 4> args{
      A("grad_out", c.g()), A("input", input), A("weight", orNone(weight)),
      A("running_mean", orNone(c.operand("running_mean"))), A("running_var", orNone(c.operand("running_var"))),
      A("save_mean", mut(c.result(1))), A(withUpdate ? "save_var" : "save_invstd", mut(c.result(2))),
      A(withUpdate ? "update" : "train", withUpdate || training), A("eps", *c.n.input("eps")), A("output_mask", mask)};
  if (withUpdate)
    args.push_back(A("reserve", mut(c.result(3))));
  c.e.emitNode(gi->name(), withUpdate ? "aten::batch_norm_backward.default" : "aten::native_batch_norm_backward.default",
               std::move(args), {Argument(gi), orNone(gw), orNone(gb)});
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
  // scale_grad_by_count(restore_reduced_dims(grad, dim, keepdim), restore_reduced_dims(result, dim,
  // keepdim) == self, dim) with the node's own dim list: amax() passes [] (every dim to torch's sum,
  // none to DTensor's strategy, which keeps the mask's shards on the count), and the gradient and
  // result are then viewed as 0-dim tensors.
  IntList rawDims = c.dimsAsPassed();
  IntList ds = c.reducedDims();
  bool keepdim = c.boolArg("keepdim");
  auto ks = sizesOf(*c.self()->meta());
  for (int64_t d : ds)
    ks[d] = 1;
  llvm::SmallVector<int64_t, 4> restored = rawDims.empty() ? llvm::SmallVector<int64_t, 4>{} : ks;
  Value *g = keepdim ? c.g() : c.e.reshape(c.g(), restored);
  Value *r = keepdim ? mut(c.result()) : c.e.reshape(mut(c.result()), restored);
  TensorMeta bm = boolLike(c.self());
  Value *mask = c.e.emit("aten::eq.Tensor", {A("self", r), A("other", c.self())}, bm, "grad_mask");
  TensorMeta cm = GradEmitter::withSizes(c.self(), ks);
  cm.dtype = ScalarType::Long;
  Value *count = c.e.emit("aten::sum.dim_IntList", {A("self", mask), A("dim", rawDims), A("keepdim", true)}, cm,
                          "grad_count");
  Value *q = c.e.emit("aten::div.Tensor", {A("self", g), A("other", count)}, GradEmitter::withSizes(g, ks),
                      "grad_div");
  c.set("self", c.e.emit("aten::mul.Tensor", {A("self", q), A("other", mask)}, GradEmitter::like(c.self()), "grad_mul"));
  return llvm::Error::success();
}

} // namespace derivatives

// ---- registry ---------------------------------------------------------------------------------

namespace {

const llvm::StringMap<DerivativeFormula> &table() {
  static const llvm::StringMap<DerivativeFormula> t = [] {
    llvm::StringMap<DerivativeFormula> m;
    for (const derivatives::DerivativeEntry &e : derivatives::derivativeTable())
      m[e.op] = e.formula;
    return m;
  }();
  return t;
}

const llvm::StringSet<> &nonDifferentiable() {
  static const llvm::StringSet<> s = [] {
    llvm::StringSet<> m;
    for (const char *op : derivatives::nonDifferentiableTable())
      m.insert(op);
    return m;
  }();
  return s;
}

} // namespace

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
