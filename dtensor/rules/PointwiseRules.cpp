// Pointwise ops (torch 2.13 `_ops/_pointwise_ops.py`, `_random_ops.py`, `_tensor_ops.py`
// `_to_copy`): single-dim strategies. Per mesh dim, for a call whose tensor operands broadcast
// to `common_shape`:
//   for each dim i of common_shape: [S(i) | per operand: S(i mapped through broadcasting) or R
//   when that operand is broadcast along i]            (sharding placeholders)
//   + the op family's extra Partial rules, kept only when their length equals
//     outputs + tensor operands (Python scalars are not operands).
// Rule 0 is the implicit all-Replicate rule. Pointwise ops accept uneven sharding when the
// operand already has that placement (allow_uneven_sharding=True).
// Every functional op DTensor registers as pointwise has an entry in families() (one line per op,
// the family picks the Partial rules); multi-output ops (frexp) shard every output alike.
// Foreach list ops run this strategy per list element (perElement) as the element op DTensor
// resolves from the schema (_foreach_add.List -> add.Tensor), whose family gives the Partial rules.
// The functional fused Adam/AdamW ops are refused, as DTensor refuses them.
#include "dtensor/rules/RuleEngine.h"

#include <algorithm>

namespace commlens::rules {

namespace {

using RP = RulePlacement;
using Rules = std::vector<SingleDimRule>;

enum class Family : uint8_t {
  Plain,          ///< no Partial rule
  Additive,       ///< add/sub
  Mul,            ///< mul.Tensor
  Div,            ///< div.Tensor
  ScalarLinear,   ///< mul.Scalar / div.Scalar
  NonDecreasing,  ///< relu, exp, tanh, sigmoid, ...
  Neg,            ///< neg
  AllPartial,     ///< to.dtype, positive
  AllPartialBinary, ///< copy_: every Partial kept when self and src share it
  MaxPreserving,  ///< maximum, clamp_min.Tensor
  MinPreserving,  ///< minimum, clamp_max.Tensor
  NonIncreasing,  ///< erfc, special_erfcx: P(max) <-> P(min)
  PosDomainNonIncreasing, ///< modified Bessel K: only P(min) -> P(max) (inputs stay positive)
  MonotoneBinary, ///< logaddexp(2): increasing in both, no Partial preserved by both operands
  Xlog1py,        ///< special_xlog1py: linear in x with y replicated
};

Rules extraRules(Family f) {
  auto P = [](ReduceOp op) { return RP::P(op); };
  const ReduceOp S = ReduceOp::Sum, A = ReduceOp::Avg, MX = ReduceOp::Max, MN = ReduceOp::Min;
  Rules unaryLinear = {{P(S), P(S)}, {P(A), P(A)}};
  Rules monotoneBinary = {{P(MX), P(MX), RP::R()}, {P(MX), RP::R(), P(MX)}, {P(MN), P(MN), RP::R()}, {P(MN), RP::R(), P(MN)}};
  Rules r;
  switch (f) {
  case Family::Plain: break;
  case Family::Additive:
    r = {{P(S), P(S), P(S)}, {P(A), P(A), P(A)}, {P(A), P(A), RP::R()}, {P(MX), P(MX), RP::R()},
         {P(MN), P(MN), RP::R()}, {P(A), RP::R(), P(A)}};
    break;
  case Family::Mul:
    r = unaryLinear;
    r.insert(r.end(), {{P(S), P(S), RP::R()}, {P(A), P(A), RP::R()}, {P(S), RP::R(), P(S)}, {P(A), RP::R(), P(A)}});
    break;
  case Family::Div:
    r = unaryLinear;
    r.insert(r.end(), {{P(S), P(S), RP::R()}, {P(A), P(A), RP::R()}});
    break;
  case Family::ScalarLinear: r = unaryLinear; break;
  case Family::NonDecreasing: r = {{P(MX), P(MX)}, {P(MN), P(MN)}}; break;
  case Family::Neg:
    r = unaryLinear;
    r.insert(r.end(), {{P(MN), P(MX)}, {P(MX), P(MN)}});
    break;
  case Family::AllPartial: r = {{P(S), P(S)}, {P(A), P(A)}, {P(MX), P(MX)}, {P(MN), P(MN)}}; break;
  case Family::AllPartialBinary:
    r = {{P(S), P(S), P(S)}, {P(A), P(A), P(A)}, {P(MX), P(MX), P(MX)}, {P(MN), P(MN), P(MN)}};
    break;
  case Family::MaxPreserving:
    r = monotoneBinary;
    r.push_back({P(MX), P(MX), P(MX)});
    break;
  case Family::MinPreserving:
    r = monotoneBinary;
    r.push_back({P(MN), P(MN), P(MN)});
    break;
  case Family::NonIncreasing: r = {{P(MN), P(MX)}, {P(MX), P(MN)}}; break;
  case Family::PosDomainNonIncreasing: r = {{P(MX), P(MN)}}; break;
  case Family::MonotoneBinary: r = monotoneBinary; break;
  case Family::Xlog1py: r = {{P(S), P(S), RP::R()}, {P(A), P(A), RP::R()}}; break;
  }
  return r;
}

const llvm::StringMap<Family> &families() {
  static const llvm::StringMap<Family> m = [] {
    llvm::StringMap<Family> m;
    auto both = [&](std::initializer_list<const char *> names, Family f) {
      for (const char *n : names)
        m[n] = f;
    };
    both({"aten::add.Tensor", "aten::add_.Tensor", "aten::sub.Tensor", "aten::sub_.Tensor"}, Family::Additive);
    both({"aten::mul.Tensor", "aten::mul_.Tensor"}, Family::Mul);
    both({"aten::div.Tensor", "aten::div_.Tensor"}, Family::Div);
    both({"aten::mul.Scalar", "aten::mul_.Scalar", "aten::div.Scalar", "aten::div_.Scalar"}, Family::ScalarLinear);
    both({"aten::relu.default", "aten::relu_.default", "aten::exp.default", "aten::exp_.default",
          "aten::tanh.default", "aten::tanh_.default", "aten::sigmoid.default", "aten::sigmoid_.default",
          "aten::erf.default", "aten::erf_.default", "aten::floor.default", "aten::ceil.default",
          "aten::round.default", "aten::round.decimals", "aten::trunc.default", "aten::sign.default",
          "aten::sgn.default", "aten::expm1.default", "aten::exp2.default", "aten::atan.default",
          "aten::asinh.default", "aten::sinh.default", "aten::deg2rad.default", "aten::rad2deg.default",
          "aten::nan_to_num.default", "aten::hardshrink.default", "aten::special_modified_bessel_i1.default",
          "aten::threshold.default"},
         Family::NonDecreasing);
    both({"aten::erfc.default", "aten::special_erfcx.default"}, Family::NonIncreasing);
    both({"aten::special_modified_bessel_k0.default", "aten::special_modified_bessel_k1.default",
          "aten::special_scaled_modified_bessel_k0.default", "aten::special_scaled_modified_bessel_k1.default"},
         Family::PosDomainNonIncreasing);
    both({"aten::neg.default", "aten::neg_.default"}, Family::Neg);
    both({"aten::to.dtype", "aten::positive.default"}, Family::AllPartial);
    both({"aten::copy_.default"}, Family::AllPartialBinary);
    both({"aten::maximum.default", "aten::clamp_min.Tensor", "aten::fmax.default"}, Family::MaxPreserving);
    both({"aten::minimum.default", "aten::clamp_max.Tensor", "aten::fmin.default"}, Family::MinPreserving);
    both({"aten::logaddexp.default", "aten::logaddexp2.default"}, Family::MonotoneBinary);
    both({"aten::special_xlog1py.default", "aten::special_xlog1py.other_scalar"}, Family::Xlog1py);
    // The remaining functional ops DTensor 2.13 treats as pointwise (torch.Tag.pointwise plus its
    // list of untagged ones), without Partial rules; clone too: its single-dim pointwise strategy
    // takes precedence over propagate_single_input_strategy in 2.13. The foreach / fused-optimizer
    // list ops run as their element ops (foreachElement). In-place variants the frontends
    // produce follow.
    both({
    "aten::__lshift__.Scalar", "aten::__lshift__.Tensor", "aten::__rshift__.Scalar", "aten::__rshift__.Tensor",
    "aten::__xor__.Scalar", "aten::__xor__.Tensor", "aten::_conj.default", "aten::abs.default", "aten::acos.default",
    "aten::acosh.default", "aten::add.Scalar", "aten::addcdiv.default", "aten::addcmul.default",
    "aten::angle.default", "aten::asin.default", "aten::atan2.default", "aten::atanh.default",
    "aten::bitwise_and.Scalar", "aten::bitwise_and.Scalar_Tensor", "aten::bitwise_and.Tensor",
    "aten::bitwise_left_shift.Scalar_Tensor", "aten::bitwise_left_shift.Tensor",
    "aten::bitwise_left_shift.Tensor_Scalar", "aten::bitwise_not.default", "aten::bitwise_or.Scalar",
    "aten::bitwise_or.Scalar_Tensor", "aten::bitwise_or.Tensor", "aten::bitwise_right_shift.Scalar_Tensor",
    "aten::bitwise_right_shift.Tensor", "aten::bitwise_right_shift.Tensor_Scalar", "aten::bitwise_xor.Scalar",
    "aten::bitwise_xor.Scalar_Tensor", "aten::bitwise_xor.Tensor", "aten::celu.default", "aten::clamp.Tensor",
    "aten::clamp.default", "aten::clamp_max.default", "aten::clamp_min.default", "aten::clip.Tensor",
    "aten::clip.default", "aten::clone.default", "aten::conj_physical.default", "aten::copysign.Scalar",
    "aten::copysign.Tensor", "aten::cos.default", "aten::cosh.default", "aten::digamma.default",
    "aten::div.Scalar_mode", "aten::div.Tensor_mode", "aten::elu.default", "aten::eq.Scalar", "aten::eq.Tensor",
    "aten::erfinv.default", "aten::float_power.Scalar", "aten::float_power.Tensor_Scalar",
    "aten::float_power.Tensor_Tensor", "aten::fmod.Scalar", "aten::fmod.Tensor", "aten::frac.default",
    "aten::frexp.Tensor", "aten::gcd.default", "aten::ge.Scalar", "aten::ge.Tensor", "aten::gelu.default",
    "aten::gelu_backward.default", "aten::gt.Scalar", "aten::gt.Tensor", "aten::hardsigmoid.default",
    "aten::hardtanh.default", "aten::heaviside.default", "aten::hypot.default", "aten::i0.default",
    "aten::igamma.default", "aten::igammac.default", "aten::isfinite.default", "aten::isinf.default",
    "aten::isnan.default", "aten::isneginf.default", "aten::isposinf.default", "aten::lcm.default",
    "aten::ldexp.Tensor", "aten::le.Scalar", "aten::le.Tensor", "aten::leaky_relu.default", "aten::lerp.Scalar",
    "aten::lerp.Tensor", "aten::lgamma.default", "aten::log.default", "aten::log10.default", "aten::log1p.default",
    "aten::log2.default", "aten::logical_and.default", "aten::logical_not.default", "aten::logical_or.default",
    "aten::logical_xor.default", "aten::logit.default", "aten::logit_backward.default", "aten::lt.Scalar",
    "aten::lt.Tensor", "aten::masked_fill.Scalar", "aten::max.other", "aten::min.other", "aten::mish.default",
    "aten::mvlgamma.default", "aten::native_dropout_backward.default", "aten::ne.Scalar", "aten::ne.Tensor",
    "aten::nextafter.default", "aten::polygamma.default", "aten::pow.Scalar", "aten::pow.Tensor_Scalar",
    "aten::pow.Tensor_Tensor", "aten::reciprocal.default", "aten::relu6.default", "aten::remainder.Scalar",
    "aten::remainder.Scalar_Tensor", "aten::remainder.Tensor", "aten::rsqrt.default", "aten::rsub.Scalar",
    "aten::selu.default", "aten::sigmoid_backward.default", "aten::signbit.default", "aten::silu.default",
    "aten::silu_backward.default", "aten::sin.default", "aten::sinc.default", "aten::softplus.default",
    "aten::softshrink.default", "aten::special_airy_ai.default", "aten::special_bessel_j0.default",
    "aten::special_bessel_j1.default", "aten::special_bessel_y0.default", "aten::special_bessel_y1.default",
    "aten::special_chebyshev_polynomial_t.default", "aten::special_chebyshev_polynomial_t.n_scalar",
    "aten::special_chebyshev_polynomial_t.x_scalar", "aten::special_chebyshev_polynomial_u.default",
    "aten::special_chebyshev_polynomial_u.n_scalar", "aten::special_chebyshev_polynomial_u.x_scalar",
    "aten::special_chebyshev_polynomial_v.default", "aten::special_chebyshev_polynomial_v.n_scalar",
    "aten::special_chebyshev_polynomial_v.x_scalar", "aten::special_chebyshev_polynomial_w.default",
    "aten::special_chebyshev_polynomial_w.n_scalar", "aten::special_chebyshev_polynomial_w.x_scalar",
    "aten::special_entr.default", "aten::special_hermite_polynomial_h.default",
    "aten::special_hermite_polynomial_h.n_scalar", "aten::special_hermite_polynomial_h.x_scalar",
    "aten::special_hermite_polynomial_he.default", "aten::special_hermite_polynomial_he.n_scalar",
    "aten::special_hermite_polynomial_he.x_scalar", "aten::special_i0e.default", "aten::special_i1.default",
    "aten::special_i1e.default", "aten::special_laguerre_polynomial_l.default",
    "aten::special_laguerre_polynomial_l.n_scalar", "aten::special_laguerre_polynomial_l.x_scalar",
    "aten::special_legendre_polynomial_p.default", "aten::special_legendre_polynomial_p.n_scalar",
    "aten::special_legendre_polynomial_p.x_scalar", "aten::special_log_ndtr.default",
    "aten::special_modified_bessel_i0.default", "aten::special_ndtri.default",
    "aten::special_shifted_chebyshev_polynomial_t.default", "aten::special_shifted_chebyshev_polynomial_t.n_scalar",
    "aten::special_shifted_chebyshev_polynomial_t.x_scalar", "aten::special_shifted_chebyshev_polynomial_u.default",
    "aten::special_shifted_chebyshev_polynomial_u.n_scalar", "aten::special_shifted_chebyshev_polynomial_u.x_scalar",
    "aten::special_shifted_chebyshev_polynomial_v.default", "aten::special_shifted_chebyshev_polynomial_v.n_scalar",
    "aten::special_shifted_chebyshev_polynomial_v.x_scalar", "aten::special_shifted_chebyshev_polynomial_w.default",
    "aten::special_shifted_chebyshev_polynomial_w.n_scalar", "aten::special_shifted_chebyshev_polynomial_w.x_scalar",
    "aten::special_spherical_bessel_j0.default", "aten::special_xlog1py.self_scalar", "aten::special_zeta.default",
    "aten::special_zeta.other_scalar", "aten::special_zeta.self_scalar", "aten::sqrt.default", "aten::square.default",
    "aten::sub.Scalar", "aten::tan.default", "aten::tanh_backward.default", "aten::threshold_backward.default",
    "aten::true_divide.Tensor", "aten::where.self", "aten::xlogy.Scalar_Other", "aten::xlogy.Scalar_Self",
    "aten::xlogy.Tensor",
         },
         Family::Plain);
    both({"aten::silu_.default", "aten::rsqrt_.default", "aten::sqrt_.default", "aten::pow_.Scalar",
          "aten::masked_fill_.Scalar", "aten::add_.Scalar", "aten::sub_.Scalar", "aten::logical_and_.default",
          "aten::logical_or_.default", "aten::logical_not_.default", "aten::digamma_.default",
          "aten::clamp_.default", "aten::clamp_.Tensor", "aten::clamp_min_.default", "aten::clamp_min_.Tensor",
          "aten::clamp_max_.default", "aten::clamp_max_.Tensor", "aten::bitwise_and_.Tensor", "aten::bitwise_or_.Tensor"},
         Family::Plain);
    // _extra_pointwise_ops: rrelu's kernel (its noise written in place in training) is pointwise for
    // DTensor, and not one of its random ops
    both({"aten::rrelu_with_noise.default"}, Family::Plain);
    return m;
  }();
  return m;
}

/// torch.broadcast_shapes over the call's tensor operands.
llvm::Expected<llvm::SmallVector<int64_t, 4>> broadcastShape(const OpCall &call) {
  llvm::SmallVector<int64_t, 4> common;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    auto s = call.shape(i);
    if (s.size() > common.size())
      common.insert(common.begin(), s.size() - common.size(), 1);
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t &c = common[common.size() - s.size() + k];
      if (c == 1)
        c = s[k];
      else if (s[k] != 1 && s[k] != c)
        return call.error("operand shapes do not broadcast");
    }
  }
  return common;
}

/// infer_broadcast_dims_map: common dim -> operand dim, -1 where the operand is broadcast.
llvm::SmallVector<int64_t, 4> broadcastMap(llvm::ArrayRef<int64_t> common, llvm::ArrayRef<int64_t> shape) {
  int64_t cn = static_cast<int64_t>(common.size()), in = static_cast<int64_t>(shape.size());
  llvm::SmallVector<int64_t, 4> m(cn, -1);
  for (int64_t idx = -1; idx >= -in; --idx)
    if (shape[in + idx] == common[cn + idx])
      m[cn + idx] = in + idx;
  return m;
}

llvm::Expected<llvm::SmallVector<Candidate, 8>> pointwiseRule(const OpCall &call) {
  auto it = families().find(call.op);
  Family fam = it == families().end() ? Family::Plain : it->second;
  auto common = broadcastShape(call);
  if (!common)
    return common.takeError();
  unsigned nOut = std::max<unsigned>(1, static_cast<unsigned>(call.results.size())); // frexp: two outputs
  Rules rules;
  for (size_t i = 0; i < common->size(); ++i) {
    SingleDimRule r(nOut, RP::ph(static_cast<int64_t>(i)));
    for (size_t k = 0; k < call.inputs.size(); ++k) {
      auto m = broadcastMap(*common, call.shape(k));
      r.push_back(m[i] >= 0 ? RP::ph(m[i]) : RP::R());
    }
    rules.push_back(std::move(r));
  }
  for (SingleDimRule &r : extraRules(fam))
    if (r.size() == nOut + call.inputs.size())
      rules.push_back(std::move(r));
  ExpandOptions opts;
  opts.numOutputs = nOut;
  opts.allowUneven = true;
  opts.inplace = isInplaceName(call.op);
  return expandSingleDim(call, std::move(rules), opts);
}

/// The pointwise op one element of a functional foreach op runs as. Unary ops map by name
/// (_foreach_exp.default -> exp.default); the others are listed. _foreach_addcmul.Scalar has no
/// element overload in DTensor (addcmul's value is keyword-only) and keeps the plain rules, which
/// addcmul.default has too.
const llvm::StringMap<std::string> &foreachElements() {
  static const llvm::StringMap<std::string> m = [] {
    llvm::StringMap<std::string> m;
    for (const char *n : {"abs", "acos", "asin", "atan", "ceil", "clone", "cos", "cosh", "erf", "erfc", "exp",
                          "expm1", "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal",
                          "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc"})
      m[fmt::format("aten::_foreach_{}.default", n)] = fmt::format("aten::{}.default", n);
    for (const char *n : {"add", "sub", "mul", "div"}) {
      m[fmt::format("aten::_foreach_{}.List", n)] = fmt::format("aten::{}.Tensor", n);
      m[fmt::format("aten::_foreach_{}.Scalar", n)] = fmt::format("aten::{}.Scalar", n);
      m[fmt::format("aten::_foreach_{}.ScalarList", n)] = fmt::format("aten::{}.Scalar", n);
    }
    for (const char *n : {"add", "mul", "div"})
      m[fmt::format("aten::_foreach_{}.Tensor", n)] = fmt::format("aten::{}.Tensor", n);
    for (const char *n : {"clamp_max", "clamp_min"}) {
      m[fmt::format("aten::_foreach_{}.List", n)] = fmt::format("aten::{}.Tensor", n);
      m[fmt::format("aten::_foreach_{}.Scalar", n)] = fmt::format("aten::{}.default", n);
      m[fmt::format("aten::_foreach_{}.ScalarList", n)] = fmt::format("aten::{}.default", n);
    }
    m["aten::_foreach_maximum.List"] = "aten::maximum.default";
    m["aten::_foreach_minimum.List"] = "aten::minimum.default";
    m["aten::_foreach_lerp.List"] = "aten::lerp.Tensor";
    m["aten::_foreach_lerp.Scalar"] = "aten::lerp.Scalar";
    m["aten::_foreach_lerp.ScalarList"] = "aten::lerp.Scalar";
    m["aten::_foreach_pow.List"] = "aten::pow.Tensor_Tensor";
    m["aten::_foreach_pow.Scalar"] = "aten::pow.Tensor_Scalar";
    m["aten::_foreach_pow.ScalarList"] = "aten::pow.Tensor_Scalar";
    m["aten::_foreach_pow.ScalarAndTensor"] = "aten::pow.Scalar";
    m["aten::_foreach_addcmul.Scalar"] = "aten::addcmul.default";
    return m;
  }();
  return m;
}

llvm::Expected<Cands> foreachRule(const OpCall &call) {
  return perElement(call, foreachElements().lookup(call.op), pointwiseRule);
}

/// The functional fused Adam / AdamW ops return five tensor lists; DTensor 2.13's output-meta
/// check refuses that tuple for every placement, so they never run on DTensors (optimizers call
/// the in-place _fused_adam_, whose outputs alias its inputs).
llvm::Expected<Cands> fusedAdamRule(const OpCall &call) {
  return call.error("DTensor 2.13 raises for the functional fused Adam/AdamW (AssertionError: its tuple of "
                    "tensor-list results is not a list[TensorMeta])");
}

/// _to_copy: [S(i) | S(i)] per dim, then [P(op) | P(op)] for every reduce op that commutes with
/// the dtype cast (sum, avg, min, max, product order).
llvm::Expected<llvm::SmallVector<Candidate, 8>> toCopyRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand");
  Rules rules;
  for (int64_t i = 0; i < call.rank(0); ++i)
    rules.push_back({RP::ph(i), RP::ph(i)});
  ScalarType src = call.inputs[0].meta.dtype;
  std::optional<ScalarType> dst;
  if (const Argument *a = call.arg("dtype", 1); a && a->is<ScalarType>())
    dst = a->get<ScalarType>();
  auto isFloat = [](ScalarType t) {
    switch (t) {
    case ScalarType::Half: case ScalarType::Float: case ScalarType::Double: case ScalarType::BFloat16:
    case ScalarType::Float8_e4m3fn: case ScalarType::Float8_e5m2: case ScalarType::Float8_e4m3fnuz:
    case ScalarType::Float8_e5m2fnuz: case ScalarType::Float8_e8m0fnu:
      return true;
    default: return false;
    }
  };
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
    bool needsReduce = false;
    if (dst && *dst != src) {
      if (*dst == ScalarType::Bool)
        needsReduce = true;
      else if (op == ReduceOp::Max || op == ReduceOp::Min)
        needsReduce = false;
      else
        needsReduce = isFloat(src) && !isFloat(*dst);
    }
    if (!needsReduce)
      rules.push_back({RP::P(op), RP::P(op)});
  }
  ExpandOptions opts;
  opts.allowUneven = true;
  return expandSingleDim(call, std::move(rules), opts);
}

/// Random ops and native_dropout: [S(i) x (outputs + 1)] per dim; no Partial rule. An in-place
/// one keeps self's placements or has no strategy.
llvm::Expected<llvm::SmallVector<Candidate, 8>> randomRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand");
  unsigned nOut = static_cast<unsigned>(call.results.size());
  Rules rules;
  for (int64_t i = 0; i < call.rank(0); ++i)
    rules.push_back(SingleDimRule(nOut + 1, RP::ph(i)));
  ExpandOptions opts;
  opts.numOutputs = nOut;
  opts.allowUneven = true;
  opts.inplace = isInplaceName(call.op); // bernoulli_: DTensor refuses to change self's placements
  return expandSingleDim(call, std::move(rules), opts);
}

/// multinomial: batch dims (all but the last, consumed by the sampling) shard with the output.
llvm::Expected<llvm::SmallVector<Candidate, 8>> multinomialRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand");
  Rules rules;
  for (int64_t i = 0; i + 1 < call.rank(0); ++i)
    rules.push_back({RP::ph(i), RP::ph(i)});
  return expandSingleDim(call, std::move(rules), ExpandOptions());
}

} // namespace

bool isPointwiseOp(llvm::StringRef op) { return families().count(op) != 0; }

void registerPointwiseRules(RuleTable &t) {
  for (const auto &e : families())
    t[e.getKey()] = pointwiseRule;
  for (const auto &e : foreachElements())
    t[e.getKey()] = foreachRule;
  for (const char *op : {"aten::_fused_adam.default", "aten::_fused_adam.tensor_lr", "aten::_fused_adamw.default",
                         "aten::_fused_adamw.tensor_lr"})
    t[op] = fusedAdamRule;
  t["aten::_to_copy.default"] = toCopyRule;
  t["aten::native_dropout.default"] = randomRule;
  t["aten::bernoulli.default"] = randomRule;
  t["aten::bernoulli_.float"] = randomRule; // dropout's CPU kernel draws its mask with it (aten/Decomposer)
  for (const char *op : {"aten::normal_.default", "aten::uniform_.default", "aten::log_normal_.default",
                         "aten::exponential_.default", "aten::geometric_.default"})
    t[op] = randomRule;
  t["aten::multinomial.default"] = multinomialRule;
}

} // namespace commlens::rules
