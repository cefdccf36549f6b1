// Ops DTensor has no strategy for but torch._decomp decomposes (torch 2.13
// `distributed/tensor/_decompositions.py`, DecompShardingStrategy). DTensor derives their strategy by
// tracing the decomposition: for every combination of candidate input placements on a one-device
// mesh (Replicate, every placement an input has, each Shard widened to every dim of each input) it
// runs the decomposition's ops through their own strategies, drops the combinations where any op
// would redistribute, and reads the output placements. The surviving [outputs | inputs] lists are
// expanded to the real mesh (expand_to_full_mesh_op_strategy) and the cheapest is selected; the op
// then runs whole on the local shards, so its only collectives are its inputs' redistributions.
//
// Each decomposition below is written as torch 2.13's decomposition function calls its ops (the
// dtype casts of `pw_cast_for_opmath` are identities for float32/float64 and refused otherwise).
// DTensor traces on fresh contiguous meta tensors of the operands' global shapes, so strides and
// memory formats never matter here.
// The rules oracle (tests/rules/test_rules_oracle.py) checks each against live DTensor.
#include "dtensor/ShardingRules.h"
#include "dtensor/rules/RuleEngine.h"
#include "ir/TensorMetaUtils.h"

#include "llvm/ADT/DenseMap.h"

#include <cmath>

#include <fmt/ranges.h>

namespace commlens::rules {

namespace {

/// A decomposition as a scratch graph: the op's tensor operands as inputs, the decomposition's
/// ops as nodes, and which values the op returns.
class Decomposition {
public:
  explicit Decomposition(const OpCall &call) : call_(call) {
    for (size_t i = 0; i < call.inputs.size(); ++i) {
      Value *v = graph_.createValue(fmt::format("in{}", i), ValueKind::Tensor);
      v->setMeta(call.inputs[i].meta);
      inputs_.push_back(v);
    }
  }

  const OpCall &call() const { return call_; }
  Value *in(unsigned i) const { return inputs_[i]; }
  const TensorMeta &meta(const Value *v) const { return *v->meta(); }
  /// A meta like `like` with other sizes (contiguous) and optionally another dtype.
  static TensorMeta shaped(const TensorMeta &like, llvm::ArrayRef<int64_t> sizes,
                           std::optional<ScalarType> dtype = std::nullopt) {
    return metaOf(dtype.value_or(like.dtype), sizes, like.device);
  }

  /// Appends `target` with `args`, one result per meta.
  llvm::SmallVector<Value *, 2> ops(llvm::StringRef target, llvm::SmallVector<NamedArgument, 4> args,
                                    llvm::ArrayRef<TensorMeta> metas) {
    llvm::SmallVector<Argument, 1> outs;
    llvm::SmallVector<Value *, 2> results;
    for (const TensorMeta &m : metas) {
      Value *r = graph_.createUniqueValue("t", ValueKind::Tensor);
      r->setMeta(m);
      results.push_back(r);
      outs.push_back(Argument(r));
    }
    graph_.appendNode(fmt::format("n{}", graph_.numNodes()), target, std::move(args), std::move(outs));
    return results;
  }
  Value *op(llvm::StringRef target, llvm::SmallVector<NamedArgument, 4> args, const TensorMeta &meta) {
    return ops(target, std::move(args), {meta})[0];
  }
  /// The original call's argument `name` (else positional `pos`), for passing on unchanged.
  std::optional<NamedArgument> forward(llvm::StringRef name, unsigned pos, llvm::StringRef as = "") const {
    const Argument *a = call_.arg(name, pos);
    if (!a)
      return std::nullopt;
    return NamedArgument{(as.empty() ? name : as).str(), *a, false};
  }

  void returns(llvm::ArrayRef<Value *> outs) { outputs_.assign(outs.begin(), outs.end()); }
  llvm::ArrayRef<Value *> outputs() const { return outputs_; }
  const Graph &graph() const { return graph_; }

private:
  const OpCall &call_;
  Graph graph_;
  llvm::SmallVector<Value *, 4> inputs_;
  llvm::SmallVector<Value *, 2> outputs_;
};

using DecomposeFn = llvm::Error (*)(Decomposition &);
/// Whether the op, run whole on each rank's shards of the selected candidate, succeeds.
using LocalCheckFn = llvm::Error (*)(const OpCall &, const Candidate &);


NamedArgument na(llvm::StringRef name, Argument v) { return {name.str(), std::move(v), false}; }

llvm::Error needFloat(Decomposition &d) {
  for (const OpInput &in : d.call().inputs)
    if (in.meta.dtype != ScalarType::Float && in.meta.dtype != ScalarType::Double)
      return d.call().error("its decomposition upcasts {} inputs (pw_cast_for_opmath), which is not modelled",
                            torchName(in.meta.dtype));
  return llvm::Error::success();
}

/// `target` on the call's own arguments (its self the decomposition's input 0), one result per
/// result of the call, with the call's result metas.
llvm::SmallVector<Value *, 2> sameCallAs(Decomposition &d, llvm::StringRef target) {
  llvm::SmallVector<NamedArgument, 4> args{na("self", d.in(0))};
  for (const NamedArgument &a : d.call().node->inputs().drop_front())
    args.push_back(a);
  llvm::SmallVector<TensorMeta, 2> metas;
  for (Value *r : d.call().results)
    metas.push_back(*r->meta());
  return d.ops(target, std::move(args), metas);
}

/// `<view>_copy`: the view, then clone(memory_format=contiguous_format) of each result.
template <const char *View> llvm::Error viewCopy(Decomposition &d) {
  llvm::SmallVector<Value *, 2> outs;
  for (Value *v : sameCallAs(d, View))
    outs.push_back(d.op("aten::clone.default",
                        {na("self", v), {"memory_format", Argument(MemoryFormat::Contiguous), true}}, d.meta(v)));
  d.returns(outs);
  return llvm::Error::success();
}
constexpr char kAlias[] = "aten::alias.default", kT[] = "aten::t.default", kTranspose[] = "aten::transpose.int",
               kPermute[] = "aten::permute.default", kUnsqueeze[] = "aten::unsqueeze.default",
               kSqueeze[] = "aten::squeeze.default", kSqueezeDim[] = "aten::squeeze.dim",
               kSqueezeDims[] = "aten::squeeze.dims", kUnbind[] = "aten::unbind.int";

/// narrow_copy(self, dim, start, length): narrow (slice.Tensor start..start+length), then clone.
llvm::Error narrowCopy(Decomposition &d) {
  auto dim = d.call().intArg("dim", 1), start = d.call().intArg("start", 2), length = d.call().intArg("length", 3);
  if (!dim || !start || !length)
    return d.call().error("missing dim, start or length");
  const TensorMeta &out = *d.call().results[0]->meta();
  int64_t size = d.call().shape(0)[normDim(*dim, d.call().rank(0))];
  int64_t s = *start < 0 ? *start + size : *start;
  Value *slice = d.op("aten::slice.Tensor",
                      {na("self", d.in(0)), na("dim", *dim), na("start", s), na("end", s + *length)}, out);
  d.returns({d.op("aten::clone.default", {na("self", slice), {"memory_format", Argument(MemoryFormat::Contiguous), true}},
                  out)});
  return llvm::Error::success();
}

/// diagonal_backward(grad, input_sizes, offset, dim1, dim2) (torch._decomp): grad.new_zeros(input_sizes),
/// then diagonal_scatter of grad into it.
llvm::Error diagonalBackward(Decomposition &d) {
  auto sizes = d.call().intListArg("input_sizes", 1);
  auto offset = d.call().intArg("offset", 2), dim1 = d.call().intArg("dim1", 3), dim2 = d.call().intArg("dim2", 4);
  if (!sizes || !offset || !dim1 || !dim2)
    return d.call().error("missing input_sizes, offset, dim1 or dim2");
  const TensorMeta &out = *d.call().results[0]->meta();
  Value *zeros = d.op("aten::new_zeros.default", {na("self", d.in(0)), na("size", *sizes)}, out);
  d.returns({d.op("aten::diagonal_scatter.default",
                  {na("self", zeros), na("src", d.in(0)), na("offset", *offset), na("dim1", *dim1), na("dim2", *dim2)},
                  out)});
  return llvm::Error::success();
}

/// pixel_shuffle / pixel_unshuffle (torch._refs): view to (*batch, C, r, r, H, W) or
/// (*batch, C, H/r, r, W/r, r), permute the factors next to H and W (or to C), reshape, clone.
llvm::Error pixelShuffle(Decomposition &d) {
  bool down = d.call().op == "aten::pixel_unshuffle.default";
  auto factor = d.call().intArg(down ? "downscale_factor" : "upscale_factor", 1);
  int64_t rank = d.call().rank(0);
  if (!factor || *factor <= 0 || rank < 3)
    return d.call().error("expected a positive factor and an input of at least 3 dims");
  auto x = d.call().shape(0);
  int64_t r = *factor, n = rank - 3, c = x[n], h = x[n + 1], w = x[n + 2];
  IntList sizes(x.begin(), x.begin() + n), perm;
  for (int64_t i = 0; i < n; ++i)
    perm.push_back(i);
  if (down) {
    sizes.append({c, h / r, r, w / r, r});
    perm.append({n, n + 2, n + 4, n + 1, n + 3});
  } else {
    sizes.append({c / (r * r), r, r, h, w});
    perm.append({n, n + 3, n + 1, n + 4, n + 2});
  }
  const TensorMeta &in = d.call().inputs[0].meta, &out = *d.call().results[0]->meta();
  Value *v = d.op("aten::view.default", {na("self", d.in(0)), na("size", sizes)}, Decomposition::shaped(in, sizes));
  IntList permuted;
  for (int64_t p : perm)
    permuted.push_back(sizes[p]);
  Value *p = d.op("aten::permute.default", {na("self", v), na("dims", perm)}, Decomposition::shaped(in, permuted));
  Value *shuffled = d.op("aten::reshape.default", {na("self", p), na("shape", IntList(sizesOf(out)))}, out);
  d.returns({d.op("aten::clone.default",
                  {na("self", shuffled), {"memory_format", Argument(MemoryFormat::Contiguous), true}}, out)});
  return llvm::Error::success();
}

/// channel_shuffle(input, groups) (torch._decomp): input.reshape(n, groups, c / groups, *dhw)
/// .transpose(1, 2).reshape(input.shape).contiguous(): a view, a transpose, a contiguous clone and
/// _unsafe_view (the last reshape copies, so contiguous() runs nothing).
llvm::Error channelShuffle(Decomposition &d) {
  auto groups = d.call().intArg("groups", 1);
  if (!groups || *groups <= 0 || d.call().rank(0) < 3)
    return d.call().error("expected positive groups and an input of at least 3 dims");
  auto x = d.call().shape(0);
  if (x[1] % *groups != 0)
    return d.call().error("{} channels do not divide into {} groups", x[1], *groups);
  const TensorMeta &in = d.call().inputs[0].meta, &out = *d.call().results[0]->meta();
  IntList sizes{x[0], *groups, x[1] / *groups};
  sizes.append(x.begin() + 2, x.end());
  Value *v = d.op("aten::view.default", {na("self", d.in(0)), na("size", sizes)}, Decomposition::shaped(in, sizes));
  IntList swapped = sizes;
  std::swap(swapped[1], swapped[2]);
  Value *t = d.op("aten::transpose.int", {na("self", v), na("dim0", int64_t(1)), na("dim1", int64_t(2))},
                  Decomposition::shaped(in, swapped));
  // The transposed view is not viewable as the input's shape: reshape copies (clone to contiguous,
  // which DTensor's strategy does not run on a Partial) and views the copy.
  Value *copy = d.op("aten::clone.default", {na("self", t), {"memory_format", Argument(MemoryFormat::Contiguous), true}},
                     Decomposition::shaped(in, swapped));
  d.returns({d.op("aten::_unsafe_view.default", {na("self", copy), na("size", IntList(sizesOf(out)))}, out)});
  return llvm::Error::success();
}

/// DTensor then runs channel_shuffle whole on each rank's shard: the local channels must divide
/// into the groups.
llvm::Error channelShuffleRunsLocally(const OpCall &call, const Candidate &c) {
  // A Partial input: the strategy replicates it, but torch 2.13 runs channel_shuffle on the partial
  // local values without the all-reduce (the rules oracle counts none).
  if (llvm::any_of(call.inputs[0].placements, [](const Placement &p) { return p.isPartial(); }))
    return call.error("a Partial input, which DTensor's strategy replicates but torch 2.13 shuffles unreduced (no "
                      "all-reduce runs): not modelled");
  int64_t groups = *call.intArg("groups", 1);
  return forEachMeshCoordinate(*call.mesh, [&](llvm::ArrayRef<int64_t> coord) -> llvm::Error {
    auto x = localShape(call.shape(0), c.inputs[0], *call.mesh, coord);
    if (x[1] % groups == 0)
      return llvm::Error::success();
    return call.error("the local channel_shuffle fails on the rank at mesh coordinate [{}]: its shard [{}] has "
                      "channels that do not divide into {} groups (DTensor raises at runtime)",
                      fmt::join(coord, ", "), fmt::join(x, ", "), groups);
  });
}

/// DTensor then runs pixel_shuffle / pixel_unshuffle whole on each rank's shard: the local
/// channels must divide by r*r (shuffle), the local height and width by r (unshuffle), which
/// the one-device trace cannot see.
llvm::Error pixelShuffleRunsLocally(const OpCall &call, const Candidate &c) {
  bool down = call.op == "aten::pixel_unshuffle.default";
  int64_t r = *call.intArg(down ? "downscale_factor" : "upscale_factor", 1), n = call.rank(0) - 3;
  auto global = call.shape(0);
  return forEachMeshCoordinate(*call.mesh, [&](llvm::ArrayRef<int64_t> coord) -> llvm::Error {
    auto x = localShape(global, c.inputs[0], *call.mesh, coord);
    bool ok = down ? x[n + 1] % r == 0 && x[n + 2] % r == 0 : x[n] % (r * r) == 0;
    if (!ok)
      return call.error("the local {} fails on the rank at mesh coordinate [{}]: its shard [{}] does not divide by "
                        "the factor {} (DTensor raises at runtime)",
                        call.op, fmt::join(coord, ", "), fmt::join(x, ", "), r);
    return llvm::Error::success();
  });
}

/// addmv runs its own kernel on the local shards of the strategy its decomposition gave, and that
/// kernel checks the shards' sizes (addmv's meta function: mat's columns equal vec's length, self
/// has mat's rows or one element); DTensor raises where a strategy splits them apart.
llvm::Error addmvRunsLocally(const OpCall &call, const Candidate &c) {
  return forEachMeshCoordinate(*call.mesh, [&](llvm::ArrayRef<int64_t> coord) -> llvm::Error {
    auto self = localShape(call.shape(0), c.inputs[0], *call.mesh, coord);
    auto mat = localShape(call.shape(1), c.inputs[1], *call.mesh, coord);
    auto vec = localShape(call.shape(2), c.inputs[2], *call.mesh, coord);
    int64_t selfNumel = numelOf(self);
    if (mat[1] == vec[0] && (mat[0] == selfNumel || selfNumel == 1))
      return llvm::Error::success();
    return call.error("the local addmv fails on the rank at mesh coordinate [{}]: its shards self [{}], mat [{}], vec "
                      "[{}] do not fit (DTensor raises at runtime: size mismatch)",
                      fmt::join(coord, ", "), fmt::join(self, ", "), fmt::join(mat, ", "), fmt::join(vec, ", "));
  });
}

/// An elementwise op of the decomposition: the result has `like`'s sizes (and `dtype`).
Value *pointwise(Decomposition &d, llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> args, Value *like,
                 std::optional<ScalarType> dtype = std::nullopt) {
  return d.op(op, std::move(args), Decomposition::shaped(d.meta(like), sizesOf(d.meta(like)), dtype));
}

std::optional<double> scalarArg(const OpCall &call, llvm::StringRef name, unsigned pos, double dflt) {
  const Argument *a = call.arg(name, pos);
  if (!a)
    return dflt;
  if (auto i = a->asInt())
    return static_cast<double>(*i);
  if (a->is<double>())
    return a->get<double>();
  return std::nullopt;
}

/// elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result) (torch._decomp):
/// where(x <= 0, grad * input_scale * (y + alpha * scale), grad * scale) of the result y, or
/// where(x <= 0, grad * input_scale * alpha * scale * exp(x * input_scale), grad * scale).
llvm::Error eluBackward(Decomposition &d) {
  const OpCall &c = d.call();
  auto alpha = scalarArg(c, "alpha", 1, 1), scale = scalarArg(c, "scale", 2, 1), inScale = scalarArg(c, "input_scale", 3, 1);
  const Argument *isResult = c.arg("is_result", 4);
  if (!alpha || !scale || !inScale || !isResult || !isResult->is<bool>())
    return c.error("alpha, scale, input_scale and is_result must be numbers");
  Value *grad = d.in(0), *x = d.in(1);
  Value *mask = pointwise(d, "aten::le.Scalar", {na("self", x), na("other", int64_t{0})}, x, ScalarType::Bool);
  Value *neg = pointwise(d, "aten::mul.Tensor", {na("self", grad), na("other", *inScale)}, grad);
  if (isResult->get<bool>()) {
    Value *shifted = pointwise(d, "aten::add.Tensor", {na("self", x), na("other", *alpha * *scale)}, x);
    neg = pointwise(d, "aten::mul.Tensor", {na("self", neg), na("other", shifted)}, grad);
  } else {
    neg = pointwise(d, "aten::mul.Tensor", {na("self", neg), na("other", *alpha * *scale)}, grad);
    Value *scaled = pointwise(d, "aten::mul.Tensor", {na("self", x), na("other", *inScale)}, x);
    Value *e = pointwise(d, "aten::exp.default", {na("self", scaled)}, x);
    neg = pointwise(d, "aten::mul.Tensor", {na("self", neg), na("other", e)}, grad);
  }
  Value *pos = pointwise(d, "aten::mul.Tensor", {na("self", grad), na("other", *scale)}, grad);
  d.returns({pointwise(d, "aten::where.self", {na("condition", mask), na("self", neg), na("other", pos)}, grad)});
  return llvm::Error::success();
}

/// leaky_relu_backward(grad, self, negative_slope, self_is_result): where(self > 0, grad,
/// grad * negative_slope).
llvm::Error leakyReluBackward(Decomposition &d) {
  Value *grad = d.in(0), *x = d.in(1);
  auto slope = d.forward("negative_slope", 2, "other");
  if (!slope)
    return d.call().error("missing negative_slope");
  Value *mask = pointwise(d, "aten::gt.Scalar", {na("self", x), na("other", int64_t{0})}, x, ScalarType::Bool);
  Value *neg = pointwise(d, "aten::mul.Tensor", {na("self", grad), *slope}, grad);
  d.returns({pointwise(d, "aten::where.self", {na("condition", mask), na("self", grad), na("other", neg)}, grad)});
  return llvm::Error::success();
}

/// rrelu_with_noise_backward(grad, self, noise, lower, upper, training, self_is_result)
/// (torch._decomp): grad * noise in training, else leaky_relu_backward's where(self > 0, grad,
/// grad * (lower + upper) / 2).
llvm::Error rreluWithNoiseBackward(Decomposition &d) {
  Value *grad = d.in(0), *x = d.in(1), *noise = d.in(2);
  std::optional<double> lower = scalarArg(d.call(), "lower", 3, 1.0 / 8), upper = scalarArg(d.call(), "upper", 4, 1.0 / 3);
  const Argument *training = d.call().arg("training", 5);
  if (!lower || !upper || !training || !training->is<bool>())
    return d.call().error("expected lower, upper and training arguments");
  if (training->get<bool>()) {
    d.returns({pointwise(d, "aten::mul.Tensor", {na("self", grad), na("other", noise)}, grad)});
    return llvm::Error::success();
  }
  double slope = (*lower + *upper) / 2;
  Value *mask = pointwise(d, "aten::gt.Scalar", {na("self", x), na("other", int64_t{0})}, x, ScalarType::Bool);
  Value *neg = pointwise(d, "aten::mul.Tensor", {na("self", grad), na("other", slope)}, grad);
  d.returns({pointwise(d, "aten::where.self", {na("condition", mask), na("self", grad), na("other", neg)}, grad)});
  return llvm::Error::success();
}

/// cauchy_(self, median, sigma) (torch._refs' cauchy, made in place): median + sigma * tan(pi *
/// (rand_like(self) - 0.5)), copied into self.
llvm::Error cauchyInplace(Decomposition &d) {
  Value *x = d.in(0);
  std::optional<double> median = scalarArg(d.call(), "median", 1, 0.0), sigma = scalarArg(d.call(), "sigma", 2, 1.0);
  if (!median || !sigma)
    return d.call().error("expected number median and sigma arguments");
  Value *u = d.op("aten::rand_like.default", {na("self", x)}, d.meta(x));
  Value *centred = pointwise(d, "aten::sub.Tensor", {na("self", u), na("other", 0.5)}, x);
  Value *angle = pointwise(d, "aten::mul.Tensor", {na("self", centred), na("other", M_PI)}, x);
  Value *t = pointwise(d, "aten::tan.default", {na("self", angle)}, x);
  Value *scaled = pointwise(d, "aten::mul.Tensor", {na("self", t), na("other", *sigma)}, x);
  Value *drawn = pointwise(d, "aten::add.Tensor", {na("self", scaled), na("other", *median)}, x);
  d.returns({d.op("aten::copy_.default", {na("self", x), na("src", drawn)}, d.meta(x))});
  return llvm::Error::success();
}

/// mish_backward(grad, input): t = tanh(softplus(x)); grad * (t + x * sigmoid(x) * (1 - t * t)).
llvm::Error mishBackward(Decomposition &d) {
  Value *grad = d.in(0), *x = d.in(1);
  Value *sp = pointwise(d, "aten::softplus.default", {na("self", x)}, x);
  Value *t = pointwise(d, "aten::tanh.default", {na("self", sp)}, x);
  Value *sig = pointwise(d, "aten::sigmoid.default", {na("self", x)}, x);
  Value *xs = pointwise(d, "aten::mul.Tensor", {na("self", x), na("other", sig)}, x);
  Value *tt = pointwise(d, "aten::mul.Tensor", {na("self", t), na("other", t)}, x);
  Value *one = pointwise(d, "aten::rsub.Scalar", {na("self", tt), na("other", int64_t{1})}, x);
  Value *out = pointwise(d, "aten::mul.Tensor", {na("self", xs), na("other", one)}, x);
  Value *sum = pointwise(d, "aten::add.Tensor", {na("self", t), na("other", out)}, x);
  d.returns({pointwise(d, "aten::mul.Tensor", {na("self", grad), na("other", sum)}, grad)});
  return llvm::Error::success();
}

/// softplus_backward(grad, self, beta, threshold): z = exp(x * beta);
/// where(x * beta > threshold, grad, grad * z / (z + 1)).
llvm::Error softplusBackward(Decomposition &d) {
  Value *grad = d.in(0), *x = d.in(1);
  auto beta = d.forward("beta", 2, "other"), threshold = d.forward("threshold", 3, "other");
  if (!beta || !threshold)
    return d.call().error("missing beta or threshold");
  Value *z = pointwise(d, "aten::exp.default",
                       {na("self", pointwise(d, "aten::mul.Tensor", {na("self", x), *beta}, x))}, x);
  Value *scaled = pointwise(d, "aten::mul.Tensor", {na("self", x), *beta}, x);
  Value *mask = pointwise(d, "aten::gt.Scalar", {na("self", scaled), *threshold}, x, ScalarType::Bool);
  Value *gz = pointwise(d, "aten::mul.Tensor", {na("self", grad), na("other", z)}, grad);
  Value *z1 = pointwise(d, "aten::add.Tensor", {na("self", z), na("other", 1.0)}, x);
  Value *ratio = pointwise(d, "aten::div.Tensor", {na("self", gz), na("other", z1)}, grad);
  d.returns({pointwise(d, "aten::where.self", {na("condition", mask), na("self", grad), na("other", ratio)}, grad)});
  return llvm::Error::success();
}

/// fill.Scalar(self, value): full_like(self, value).
llvm::Error fill(Decomposition &d) {
  auto value = d.forward("value", 1, "fill_value");
  if (!value)
    return d.call().error("missing value");
  d.returns({d.op("aten::full_like.default", {na("self", d.in(0)), *value}, *d.call().results[0]->meta())});
  return llvm::Error::success();
}

/// rot90(self, k, dims) (torch._refs): by k mod 4, transpose(flip(dims[1])), flip(dims),
/// transpose(flip(dims[0])) or a contiguous clone.
llvm::Error rot90(Decomposition &d) {
  const OpCall &c = d.call();
  int64_t rank = c.rank(0);
  IntList dims = c.intListArg("dims", 2).value_or(IntList{0, 1});
  if (dims.size() != 2 || rank < 2)
    return c.error("expected two rotation dims of a tensor of at least 2 dims");
  int64_t d0 = normDim(dims[0], rank), d1 = normDim(dims[1], rank), k = ((c.intArg("k", 1).value_or(1) % 4) + 4) % 4;
  if (d0 == d1)
    return c.error("expected two different rotation dims");
  const TensorMeta &out = *c.results[0]->meta();
  auto flip = [&](IntList flipDims) {
    return pointwise(d, "aten::flip.default", {na("self", d.in(0)), na("dims", flipDims)}, d.in(0));
  };
  auto transpose = [&](Value *v) {
    return d.op("aten::transpose.int", {na("self", v), na("dim0", d0), na("dim1", d1)}, out);
  };
  if (k == 1)
    d.returns({transpose(flip({d1}))});
  else if (k == 2)
    d.returns({d.op("aten::flip.default", {na("self", d.in(0)), na("dims", IntList{d0, d1})}, out)});
  else if (k == 3)
    d.returns({transpose(flip({d0}))});
  else
    d.returns({d.op("aten::clone.default",
                    {na("self", d.in(0)), {"memory_format", Argument(MemoryFormat::Contiguous), true}}, out)});
  return llvm::Error::success();
}

/// isin.Tensor_Tensor (torch._refs isin_default, taken when test_elements.numel() < 10 *
/// elements.numel() ** 0.145): elements viewed with a 1 per test dim, eq, any over the test
/// dims, bitwise_not when inverted. The sorting path (DTensor finds no strategy through it) is
/// refused.
llvm::Error isin(Decomposition &d) {
  const OpCall &c = d.call();
  auto elems = c.shape(0), test = c.shape(1);
  double n = static_cast<double>(numelOf(elems)), m = static_cast<double>(numelOf(test));
  if (!(m < 10.0 * std::pow(n, 0.145)))
    return c.error("its sorting path (test_elements.numel() >= 10 * elements.numel() ** 0.145) has no DTensor "
                   "strategy (DTensor raises)");
  if (n == 0)
    return c.error("empty elements (empty_like) are not modelled");
  IntList viewSizes(elems.begin(), elems.end()), dims, eqSizes(elems.begin(), elems.end());
  viewSizes.append(test.size(), 1);
  eqSizes.append(test.begin(), test.end());
  for (int64_t i = -1; i >= -static_cast<int64_t>(test.size()); --i)
    dims.push_back(i);
  const TensorMeta &out = *c.results[0]->meta();
  Value *x = d.op("aten::view.default", {na("self", d.in(0)), na("size", viewSizes)},
                  Decomposition::shaped(c.inputs[0].meta, viewSizes));
  Value *eq = d.op("aten::eq.Tensor", {na("self", x), na("other", d.in(1))},
                   Decomposition::shaped(c.inputs[0].meta, eqSizes, ScalarType::Bool));
  Value *any = d.op("aten::any.dims", {na("self", eq), na("dim", dims)}, out);
  const Argument *invert = c.arg("invert", 3);
  bool inverted = invert && invert->is<bool>() && invert->get<bool>();
  d.returns({inverted ? d.op("aten::bitwise_not.default", {na("self", any)}, out) : any});
  return llvm::Error::success();
}

/// An elementwise op of the decomposition on operands that broadcast together.
Value *broadcasting(Decomposition &d, llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> args, Value *a, Value *b,
                    std::optional<ScalarType> dtype = std::nullopt) {
  auto out = broadcastSizes(sizesOf(d.meta(a)), sizesOf(d.meta(b)));
  return d.op(op, std::move(args), Decomposition::shaped(d.meta(a), out, dtype));
}

/// mean (1), sum (2) or nothing (0) of a pointwise loss (apply_loss_reduction).
llvm::Error reduceLoss(Decomposition &d, Value *loss, unsigned reductionPos = 2) {
  int64_t reduction = d.call().intArg("reduction", reductionPos).value_or(1);
  const TensorMeta &out = *d.call().results[0]->meta();
  if (reduction == 1)
    loss = d.op("aten::mean.default", {na("self", loss)}, out);
  else if (reduction == 2)
    loss = d.op("aten::sum.default", {na("self", loss)}, out);
  else if (reduction != 0)
    return d.call().error("reduction {} is not 0, 1 or 2", reduction);
  d.returns({loss});
  return llvm::Error::success();
}

/// A pointwise loss's operands: float, of one shape (broadcast inside the op is refused).
llvm::Error needLossOperands(Decomposition &d, unsigned self, unsigned target) {
  if (llvm::Error e = needFloat(d))
    return e;
  if (d.call().shape(self) != d.call().shape(target))
    return d.call().error("operands of different shapes (broadcast inside the loss) are not modelled");
  return llvm::Error::success();
}

/// mse_loss(self, target, reduction) (torch._decomp): pow(self - target, 2), then the reduction.
llvm::Error mseLoss(Decomposition &d) {
  if (llvm::Error e = needLossOperands(d, 0, 1))
    return e;
  Value *diff = pointwise(d, "aten::sub.Tensor", {na("self", d.in(0)), na("other", d.in(1))}, d.in(0));
  return reduceLoss(d, pointwise(d, "aten::pow.Tensor_Scalar", {na("self", diff), na("exponent", int64_t{2})}, d.in(0)));
}

/// A pointwise loss's backward operands (grad, self, target: float, self and target of one shape)
/// and its `reduction`, at schema position `pos`.
llvm::Expected<int64_t> lossBackwardReduction(Decomposition &d, unsigned pos = 3) {
  if (llvm::Error e = needLossOperands(d, 1, 2))
    return e;
  auto reduction = d.call().intArg("reduction", pos);
  if (!reduction)
    return d.call().error("missing reduction");
  return *reduction;
}

/// mse_loss_backward(grad, self, target, reduction) (torch._decomp): (self - target) * norm * grad,
/// norm 2 / numel for a mean, else 2.
llvm::Error mseLossBackward(Decomposition &d) {
  auto reduction = lossBackwardReduction(d);
  if (!reduction)
    return reduction.takeError();
  const OpCall &c = d.call();
  double norm = *reduction == 1 ? 2.0 / static_cast<double>(numelOf(c.shape(1))) : 2.0;
  Value *diff = pointwise(d, "aten::sub.Tensor", {na("self", d.in(1)), na("other", d.in(2))}, d.in(1));
  Value *scaled = pointwise(d, "aten::mul.Tensor", {na("self", diff), na("other", norm)}, d.in(1));
  d.returns({d.op("aten::mul.Tensor", {na("self", scaled), na("other", d.in(0))}, *c.results[0]->meta())});
  return llvm::Error::success();
}

/// smooth_l1_loss(self, target, reduction, beta) / huber_loss(self, target, reduction, delta)
/// (torch._decomp): z = |self - target|; where(z < beta, 0.5 * z ** 2 / beta, z - 0.5 * beta),
/// huber where(z < delta, 0.5 * z * z, delta * (z - 0.5 * delta)); then the reduction.
llvm::Error smoothL1OrHuberLoss(Decomposition &d) {
  if (llvm::Error e = needLossOperands(d, 0, 1))
    return e;
  bool huber = d.call().op == "aten::huber_loss.default";
  auto beta = scalarArg(d.call(), huber ? "delta" : "beta", 3, 1.0);
  if (!beta)
    return d.call().error("{} is not a number", huber ? "delta" : "beta");
  Value *x = d.in(0);
  Value *z = pointwise(d, "aten::abs.default",
                       {na("self", pointwise(d, "aten::sub.Tensor", {na("self", x), na("other", d.in(1))}, x))}, x);
  Value *mask = pointwise(d, "aten::lt.Scalar", {na("self", z), na("other", *beta)}, x, ScalarType::Bool);
  Value *small, *large;
  if (huber) {
    small = pointwise(d, "aten::mul.Tensor", {na("self", z), na("other", 0.5)}, x);
    small = pointwise(d, "aten::mul.Tensor", {na("self", small), na("other", z)}, x);
    large = pointwise(d, "aten::sub.Tensor", {na("self", z), na("other", 0.5 * *beta)}, x);
    large = pointwise(d, "aten::mul.Tensor", {na("self", large), na("other", *beta)}, x);
  } else {
    small = pointwise(d, "aten::pow.Tensor_Scalar", {na("self", z), na("exponent", int64_t{2})}, x);
    small = pointwise(d, "aten::mul.Tensor", {na("self", small), na("other", 0.5)}, x);
    small = pointwise(d, "aten::div.Tensor", {na("self", small), na("other", *beta)}, x);
    large = pointwise(d, "aten::sub.Tensor", {na("self", z), na("other", 0.5 * *beta)}, x);
  }
  return reduceLoss(
      d, pointwise(d, "aten::where.self", {na("condition", mask), na("self", small), na("other", large)}, x));
}

/// A smooth-L1 / Huber backward's (norm, knob): norm 1 / numel for a mean reduction, else 1;
/// the knob (beta, delta) defaults to 1.
llvm::Expected<std::pair<double, double>> lossBackwardScalars(Decomposition &d, llvm::StringRef knob) {
  auto reduction = lossBackwardReduction(d);
  if (!reduction)
    return reduction.takeError();
  const OpCall &c = d.call();
  auto value = scalarArg(c, knob, 4, 1.0);
  if (!value)
    return c.error("{} is not a number", knob);
  return std::pair{*reduction == 1 ? 1.0 / static_cast<double>(numelOf(c.shape(1))) : 1.0, *value};
}

/// smooth_l1_loss_backward(grad, self, target, reduction, beta) (torch._decomp): x = self - target,
/// g = grad * norm (1 / numel for a mean); where(|x| < beta, g * x / beta, g * sign(x)).
llvm::Error smoothL1LossBackward(Decomposition &d) {
  auto knobs = lossBackwardScalars(d, "beta");
  if (!knobs)
    return knobs.takeError();
  const OpCall &c = d.call();
  auto [norm, beta] = *knobs;
  Value *grad = d.in(0), *self = d.in(1);
  Value *x = pointwise(d, "aten::sub.Tensor", {na("self", self), na("other", d.in(2))}, self);
  Value *ax = pointwise(d, "aten::abs.default", {na("self", x)}, self);
  Value *g = pointwise(d, "aten::mul.Tensor", {na("self", grad), na("other", norm)}, grad);
  Value *mask = pointwise(d, "aten::lt.Scalar", {na("self", ax), na("other", beta)}, self, ScalarType::Bool);
  Value *small = broadcasting(d, "aten::mul.Tensor", {na("self", g), na("other", x)}, g, x);
  small = pointwise(d, "aten::div.Tensor", {na("self", small), na("other", beta)}, small);
  Value *sign = pointwise(d, "aten::sign.default", {na("self", x)}, self);
  Value *large = broadcasting(d, "aten::mul.Tensor", {na("self", g), na("other", sign)}, g, sign);
  d.returns({d.op("aten::where.self", {na("condition", mask), na("self", small), na("other", large)},
                  *c.results[0]->meta())});
  return llvm::Error::success();
}

/// A loss's optional tensor operands (weight, pos_weight) by schema name and position: each given
/// one is the next tensor input from `first` on (after self and target, or grad, self and target).
llvm::SmallVector<Value *, 2> optionalLossOperands(Decomposition &d, unsigned first,
                                                  llvm::ArrayRef<std::pair<llvm::StringRef, unsigned>> names) {
  llvm::SmallVector<Value *, 2> out;
  unsigned next = first;
  for (auto [name, pos] : names) {
    const Argument *a = d.call().arg(name, pos);
    out.push_back(a && a->isTensor() ? d.in(next++) : nullptr);
  }
  return out;
}

/// A loss (or its gradient) times its `weight`, broadcast, when one is given.
Value *weighted(Decomposition &d, Value *loss, Value *weight) {
  return weight ? broadcasting(d, "aten::mul.Tensor", {na("self", loss), na("other", weight)}, loss, weight) : loss;
}

/// A loss times its `weight` when given, then its reduction.
llvm::Error reduceWeightedLoss(Decomposition &d, Value *loss, Value *weight, unsigned reductionPos) {
  return reduceLoss(d, weighted(d, loss, weight), reductionPos);
}

/// log_sigmoid_forward(self) (torch._decomp): min(0, self) - log1p(exp(-|self|)); the buffer is
/// exp(-|self|) on the CPU, an empty tensor on CUDA (as the program's recorded buffer shows).
llvm::Error logSigmoidForward(Decomposition &d) {
  if (llvm::Error e = needFloat(d))
    return e;
  if (d.call().results.size() != 2)
    return d.call().error("expected the output and the buffer");
  Value *x = d.in(0);
  Value *zero = d.op("aten::new_zeros.default", {na("self", x), na("size", IntList{})}, Decomposition::shaped(d.meta(x), {}));
  Value *low = broadcasting(d, "aten::minimum.default", {na("self", zero), na("other", x)}, zero, x);
  Value *z = pointwise(d, "aten::abs.default", {na("self", x)}, x);
  z = pointwise(d, "aten::neg.default", {na("self", z)}, x);
  z = pointwise(d, "aten::exp.default", {na("self", z)}, x);
  Value *out = pointwise(d, "aten::sub.Tensor",
                         {na("self", low), na("other", pointwise(d, "aten::log1p.default", {na("self", z)}, x))}, x);
  Value *buffer = z;
  if (numelOf(sizesOf(*d.call().results[1]->meta())) == 0)
    buffer = d.op("aten::new_zeros.default", {na("self", x), na("size", IntList{0})}, *d.call().results[1]->meta());
  d.returns({out, buffer});
  return llvm::Error::success();
}

/// binary_cross_entropy_with_logits(self, target, weight, pos_weight, reduction) (torch._decomp):
/// (1 - target) * self - logsigmoid(self), the logsigmoid scaled by (pos_weight - 1) * target + 1
/// when given; times weight when given; then the reduction.
llvm::Error binaryCrossEntropyWithLogits(Decomposition &d) {
  if (llvm::Error e = needLossOperands(d, 0, 1))
    return e;
  auto weights = optionalLossOperands(d, 2, {{"weight", 2}, {"pos_weight", 3}});
  Value *weight = weights[0], *posWeight = weights[1];
  Value *self = d.in(0), *target = d.in(1);
  Value *logWeight = nullptr;
  if (posWeight) {
    Value *w = pointwise(d, "aten::sub.Tensor", {na("self", posWeight), na("other", int64_t{1})}, posWeight);
    w = broadcasting(d, "aten::mul.Tensor", {na("self", w), na("other", target)}, w, target);
    logWeight = pointwise(d, "aten::add.Tensor", {na("self", w), na("other", int64_t{1})}, w);
  }
  Value *keep = pointwise(d, "aten::rsub.Scalar", {na("self", target), na("other", int64_t{1})}, target);
  keep = pointwise(d, "aten::mul.Tensor", {na("self", keep), na("other", self)}, self);
  const TensorMeta &m = d.meta(self);
  Value *logSigmoid = d.ops("aten::log_sigmoid_forward.default", {na("self", self)}, {m, m})[0];
  if (logWeight)
    logSigmoid = broadcasting(d, "aten::mul.Tensor", {na("self", logWeight), na("other", logSigmoid)}, logWeight,
                              logSigmoid);
  Value *loss = broadcasting(d, "aten::sub.Tensor", {na("self", keep), na("other", logSigmoid)}, keep, logSigmoid);
  return reduceWeightedLoss(d, loss, weight, 4);
}

/// binary_cross_entropy(self, target, weight, reduction) (torch._decomp): (target - 1) *
/// max(log1p(-self), -100) - target * max(log(self), -100), times weight when given, then the
/// reduction (the -100 floors are self.new_full((), -100)).
llvm::Error binaryCrossEntropy(Decomposition &d) {
  if (llvm::Error e = needLossOperands(d, 0, 1))
    return e;
  Value *weight = optionalLossOperands(d, 2, {{"weight", 2}})[0];
  Value *self = d.in(0), *target = d.in(1);
  auto floored = [&](Value *x) {
    Value *floor = d.op("aten::new_full.default", {na("self", self), na("size", IntList{}), na("fill_value", int64_t{-100})},
                        Decomposition::shaped(d.meta(self), {}));
    return broadcasting(d, "aten::maximum.default", {na("self", x), na("other", floor)}, x, floor);
  };
  Value *a = pointwise(d, "aten::sub.Tensor", {na("self", target), na("other", int64_t{1})}, target);
  Value *neg = pointwise(d, "aten::neg.default", {na("self", self)}, self);
  a = pointwise(d, "aten::mul.Tensor",
                {na("self", a), na("other", floored(pointwise(d, "aten::log1p.default", {na("self", neg)}, self)))}, self);
  Value *b = floored(pointwise(d, "aten::log.default", {na("self", self)}, self));
  b = pointwise(d, "aten::mul.Tensor", {na("self", target), na("other", b)}, self);
  Value *loss = pointwise(d, "aten::sub.Tensor", {na("self", a), na("other", b)}, self);
  return reduceWeightedLoss(d, loss, weight, 3);
}

/// binary_cross_entropy_backward(grad, self, target, weight, reduction) (torch._decomp):
/// grad * (self - target) / clamp(self * (1 - self), min=1e-12), times weight when given, divided
/// by numel for a mean.
llvm::Error binaryCrossEntropyBackward(Decomposition &d) {
  auto reduction = lossBackwardReduction(d, 4);
  if (!reduction)
    return reduction.takeError();
  const OpCall &c = d.call();
  Value *grad = d.in(0), *self = d.in(1), *target = d.in(2);
  Value *weight = optionalLossOperands(d, 3, {{"weight", 3}})[0];
  Value *diff = pointwise(d, "aten::sub.Tensor", {na("self", self), na("other", target)}, self);
  Value *r = broadcasting(d, "aten::mul.Tensor", {na("self", grad), na("other", diff)}, grad, diff);
  Value *var = pointwise(d, "aten::rsub.Scalar", {na("self", self), na("other", int64_t{1})}, self);
  var = pointwise(d, "aten::mul.Tensor", {na("self", self), na("other", var)}, self);
  var = pointwise(d, "aten::clamp.default", {na("self", var), na("min", 1e-12)}, self);
  r = weighted(d, pointwise(d, "aten::div.Tensor", {na("self", r), na("other", var)}, r), weight);
  if (*reduction == 1)
    r = pointwise(d, "aten::div.Tensor", {na("self", r), na("other", numelOf(c.shape(1)))}, r);
  d.returns({r});
  return llvm::Error::success();
}

/// soft_margin_loss(self, target, reduction) (torch._decomp): log1p(exp(-self * target)), then the
/// reduction.
llvm::Error softMarginLoss(Decomposition &d) {
  if (llvm::Error e = needLossOperands(d, 0, 1))
    return e;
  Value *x = d.in(0);
  Value *neg = pointwise(d, "aten::neg.default", {na("self", x)}, x);
  Value *prod = pointwise(d, "aten::mul.Tensor", {na("self", neg), na("other", d.in(1))}, x);
  Value *e = pointwise(d, "aten::exp.default", {na("self", prod)}, x);
  return reduceLoss(d, pointwise(d, "aten::log1p.default", {na("self", e)}, x));
}

/// soft_margin_loss_backward(grad, self, target, reduction) (torch._decomp):
/// target * grad * (sigmoid(target * self) - 1), divided by numel for a mean.
llvm::Error softMarginLossBackward(Decomposition &d) {
  auto reduction = lossBackwardReduction(d);
  if (!reduction)
    return reduction.takeError();
  const OpCall &c = d.call();
  Value *grad = d.in(0), *self = d.in(1), *target = d.in(2);
  Value *g = broadcasting(d, "aten::mul.Tensor", {na("self", target), na("other", grad)}, target, grad);
  Value *z = pointwise(d, "aten::mul.Tensor", {na("self", target), na("other", self)}, self);
  Value *s = pointwise(d, "aten::sigmoid.default", {na("self", z)}, self);
  s = pointwise(d, "aten::sub.Tensor", {na("self", s), na("other", int64_t{1})}, self);
  Value *r = broadcasting(d, "aten::mul.Tensor", {na("self", g), na("other", s)}, g, s);
  if (*reduction == 1)
    r = pointwise(d, "aten::div.Tensor", {na("self", r), na("other", numelOf(c.shape(1)))}, r);
  d.returns({r});
  return llvm::Error::success();
}

/// huber_loss_backward(grad, self, target, reduction, delta) (torch._decomp): x = self - target;
/// where(x < -delta, -norm * grad * delta, where(x > delta, norm * grad * delta, norm * x * grad)).
llvm::Error huberLossBackward(Decomposition &d) {
  auto knobs = lossBackwardScalars(d, "delta");
  if (!knobs)
    return knobs.takeError();
  const OpCall &c = d.call();
  auto [norm, delta] = *knobs;
  Value *grad = d.in(0), *self = d.in(1);
  const TensorMeta &out = *c.results[0]->meta();
  Value *x = pointwise(d, "aten::sub.Tensor", {na("self", self), na("other", d.in(2))}, self);
  Value *below = pointwise(d, "aten::lt.Scalar", {na("self", x), na("other", -delta)}, self, ScalarType::Bool);
  Value *neg = pointwise(d, "aten::mul.Tensor", {na("self", grad), na("other", -norm)}, grad);
  neg = pointwise(d, "aten::mul.Tensor", {na("self", neg), na("other", delta)}, grad);
  Value *above = pointwise(d, "aten::gt.Scalar", {na("self", x), na("other", delta)}, self, ScalarType::Bool);
  Value *pos = pointwise(d, "aten::mul.Tensor", {na("self", grad), na("other", norm)}, grad);
  pos = pointwise(d, "aten::mul.Tensor", {na("self", pos), na("other", delta)}, grad);
  Value *mid = pointwise(d, "aten::mul.Tensor", {na("self", x), na("other", norm)}, self);
  mid = broadcasting(d, "aten::mul.Tensor", {na("self", mid), na("other", grad)}, mid, grad);
  Value *inner = d.op("aten::where.self", {na("condition", above), na("self", pos), na("other", mid)}, out);
  d.returns({d.op("aten::where.self", {na("condition", below), na("self", neg), na("other", inner)}, out)});
  return llvm::Error::success();
}

/// rsub.Tensor(self, other, alpha): sub(other, self, alpha).
llvm::Error rsub(Decomposition &d) {
  llvm::SmallVector<NamedArgument, 4> args{na("self", d.in(1)), na("other", d.in(0))};
  if (auto alpha = d.forward("alpha", 2))
    args.push_back({"alpha", alpha->value, true});
  d.returns({d.op("aten::sub.Tensor", std::move(args), *d.call().results[0]->meta())});
  return llvm::Error::success();
}

/// vdot (real): dot.
llvm::Error vdot(Decomposition &d) {
  if (isComplex(d.call().inputs[0].meta.dtype))
    return d.call().error("complex vdot (conj then dot) is not modelled");
  d.returns({d.op("aten::dot.default", {na("self", d.in(0)), na("tensor", d.in(1))}, *d.call().results[0]->meta())});
  return llvm::Error::success();
}

/// dist(self, other, p) (torch._decomp's dist): norm.Scalar of self - other, broadcast, over every
/// element (a shard kept into the norm gives a _NormPartial).
llvm::Error dist(Decomposition &d) {
  const Argument *p = d.call().arg("p", 2);
  Value *diff = broadcasting(d, "aten::sub.Tensor", {na("self", d.in(0)), na("other", d.in(1))}, d.in(0), d.in(1));
  d.returns({d.op("aten::norm.Scalar", {na("self", diff), na("p", p && !p->isNone() ? *p : Argument(2.0))},
                  *d.call().results[0]->meta())});
  return llvm::Error::success();
}

/// norm.ScalarOpt_dim(self, p, dim, keepdim) (torch._refs.norm with a numeric p): linalg_vector_norm.
llvm::Error normScalarOptDim(Decomposition &d) {
  const Argument *p = d.call().arg("p", 1);
  if (p && !p->isNone() && !p->is<double>() && !p->asInt())
    return d.call().error("a string p (matrix norms) is not modelled");
  llvm::SmallVector<NamedArgument, 4> args{na("self", d.in(0)), na("ord", p && !p->isNone() ? *p : Argument(2.0))};
  if (auto dim = d.forward("dim", 2))
    args.push_back(*dim);
  if (auto keepdim = d.forward("keepdim", 3))
    args.push_back(*keepdim);
  d.returns({d.op("aten::linalg_vector_norm.default", std::move(args), *d.call().results[0]->meta())});
  return llvm::Error::success();
}

/// index_add / index_copy (torch._refs._index_add / _index_copy): index_put of source into self
/// at (None,) * dim + (index,), accumulating for index_add (source scaled by alpha first when it is
/// not 1); a 0-d self (unsqueezed) is not modelled.
llvm::Error indexAddOrCopy(Decomposition &d) {
  bool add = d.call().op == "aten::index_add.default";
  auto dim = d.call().intArg("dim", 1);
  if (!dim || d.call().inputs.size() != 3 || d.call().rank(1) > 1)
    return d.call().error("expected self, a dim, an index of at most one dim and a source");
  int64_t rank = d.call().rank(0);
  int64_t wrapped = rank == 0 ? 0 : normDim(*dim, rank);
  Value *index = d.in(1);
  if (d.call().rank(1) == 0) {
    if (add) // _index_add indexes with the 0-d index as it is
      return d.call().error("a 0-d index is not modelled");
    index = d.op("aten::unsqueeze.default", {na("self", index), na("dim", int64_t{0})},
                 Decomposition::shaped(d.meta(index), {1}));
  }
  Value *source = d.in(2);
  if (std::optional<double> alpha = scalarArg(d.call(), "alpha", 4, 1.0); add && alpha != 1.0)
    source = d.op("aten::mul.Scalar", {na("self", source), na("other", *d.call().arg("alpha", 4))}, d.meta(source));
  // a 0-d self is treated as an element of R^1: unsqueezed, indexed, squeezed back
  Value *self = d.in(0);
  if (rank == 0)
    self = d.op("aten::unsqueeze.default", {na("self", self), na("dim", int64_t{0})},
                Decomposition::shaped(d.meta(self), {1}));
  OptionalTensorList indices;
  indices.items.assign(static_cast<size_t>(wrapped), nullptr);
  indices.items.push_back(index);
  llvm::SmallVector<NamedArgument, 4> args{na("self", self), na("indices", Argument(indices)), na("values", source)};
  if (add)
    args.push_back(na("accumulate", true));
  const TensorMeta &out = *d.call().results[0]->meta();
  Value *put = d.op("aten::index_put.default", std::move(args), rank == 0 ? Decomposition::shaped(out, {1}) : out);
  if (rank == 0)
    put = d.op("aten::squeeze.dim", {na("self", put), na("dim", int64_t{0})}, out);
  d.returns({put});
  return llvm::Error::success();
}

/// The two halves of input `i` along `dim` (glu's a and b: tensor_split / narrow run slice).
std::optional<std::pair<Value *, Value *>> halves(Decomposition &d, unsigned i, int64_t dim) {
  auto sizes = d.call().shape(i);
  if (sizes[dim] % 2 != 0)
    return std::nullopt;
  int64_t half = sizes[dim] / 2;
  auto halfSizes = sizes;
  halfSizes[dim] = half;
  TensorMeta m = Decomposition::shaped(d.meta(d.in(i)), halfSizes);
  Value *first = d.op("aten::slice.Tensor", {na("self", d.in(i)), na("dim", dim), na("start", int64_t{0}), na("end", half)}, m);
  Value *second =
      d.op("aten::slice.Tensor", {na("self", d.in(i)), na("dim", dim), na("start", half), na("end", 2 * half)}, m);
  return std::make_pair(first, second);
}

/// glu(self, dim) (torch._refs): a, b = tensor_split(self, 2, dim); a * sigmoid(b).
llvm::Error glu(Decomposition &d) {
  if (d.call().rank(0) == 0)
    return d.call().error("a 0-d input (DTensor raises)");
  int64_t dim = normDim(d.call().intArg("dim", 1).value_or(-1), d.call().rank(0));
  auto ab = halves(d, 0, dim);
  if (!ab)
    return d.call().error("halving dimension {} must be even", dim);
  Value *gate = pointwise(d, "aten::sigmoid.default", {na("self", ab->second)}, ab->second);
  d.returns({pointwise(d, "aten::mul.Tensor", {na("self", ab->first), na("other", gate)}, ab->first)});
  return llvm::Error::success();
}

/// glu_backward(grad_output, self, dim) (torch._decomp): s = sigmoid(second half); the first half's
/// gradient s * grad_output, the second's (1 - s) * s * first half * grad_output; cat along dim.
llvm::Error gluBackward(Decomposition &d) {
  if (d.call().inputs.size() != 2 || d.call().rank(1) == 0)
    return d.call().error("expected grad_output and a self of at least one dim");
  int64_t dim = normDim(d.call().intArg("dim", 2).value_or(-1), d.call().rank(1));
  auto ab = halves(d, 1, dim);
  if (!ab)
    return d.call().error("halving dimension {} must be even", dim);
  Value *grad = d.in(0);
  Value *s = pointwise(d, "aten::sigmoid.default", {na("self", ab->second)}, ab->second);
  Value *t = pointwise(d, "aten::rsub.Scalar", {na("self", s), na("other", 1.0)}, s);
  t = pointwise(d, "aten::mul.Tensor", {na("self", t), na("other", s)}, s);
  t = pointwise(d, "aten::mul.Tensor", {na("self", t), na("other", ab->first)}, s);
  Value *second = pointwise(d, "aten::mul.Tensor", {na("self", t), na("other", grad)}, s);
  Value *first = pointwise(d, "aten::mul.Tensor", {na("self", s), na("other", grad)}, s);
  d.returns({d.op("aten::cat.default", {na("tensors", Argument(TensorList{first, second})), na("dim", dim)},
                  *d.call().results[0]->meta())});
  return llvm::Error::success();
}

/// floor_divide: div(rounding_mode='floor').
llvm::Error floorDivide(Decomposition &d) {
  d.returns({d.op("aten::div.Tensor_mode",
                  {na("self", d.in(0)), na("other", d.in(1)), {"rounding_mode", Argument(std::string("floor")), true}},
                  *d.call().results[0]->meta())});
  return llvm::Error::success();
}

/// aminmax(self, dim=None, keepdim): amin, then amax, over the same dims.
llvm::Error aminmax(Decomposition &d) {
  if (d.call().results.size() != 2)
    return d.call().error("expected two results");
  llvm::SmallVector<NamedArgument, 4> args{na("self", d.in(0))};
  auto dim = d.call().intArg("dim", 1);
  if (dim)
    args.push_back(na("dim", IntList{*dim}));
  if (auto keepdim = d.forward("keepdim", 2))
    args.push_back(*keepdim);
  const TensorMeta &m = *d.call().results[0]->meta();
  Value *lo = d.op("aten::amin.default", args, m);
  Value *hi = d.op("aten::amax.default", args, *d.call().results[1]->meta());
  d.returns({lo, hi});
  return llvm::Error::success();
}

/// count_nonzero(self, dim=None): ne(self, 0), then sum over dim (all dims when None).
llvm::Error countNonzero(Decomposition &d) {
  Value *mask = pointwise(d, "aten::ne.Scalar", {na("self", d.in(0)), na("other", int64_t{0})}, d.in(0),
                          ScalarType::Bool);
  const Argument *dim = d.call().arg("dim", 1);
  d.returns({d.op("aten::sum.dim_IntList", {na("self", mask), na("dim", dim ? *dim : Argument())},
                  *d.call().results[0]->meta())});
  return llvm::Error::success();
}

/// mv(self, vec): (self * vec).sum(dim=1). addr's backward runs it (grad.mv(vec)).
llvm::Error mv(Decomposition &d) {
  if (llvm::Error e = needFloat(d))
    return e;
  if (d.call().rank(0) != 2 || d.call().rank(1) != 1)
    return d.call().error("expected a matrix and a vector");
  Value *prod = pointwise(d, "aten::mul.Tensor", {na("self", d.in(0)), na("other", d.in(1))}, d.in(0));
  d.returns({d.op("aten::sum.dim_IntList", {na("self", prod), na("dim", IntList{1})}, *d.call().results[0]->meta())});
  return llvm::Error::success();
}


/// addr's and addmv's beta (args_schema[3]) or alpha ([4]) as passed, 1 when absent.
Argument scaleArg(const OpCall &c, llvm::StringRef name) {
  const Argument *a = c.arg(name, name == "beta" ? 3 : 4);
  return a ? *a : Argument(int64_t{1});
}

/// addr(self, vec1, vec2, beta, alpha) (torch._refs.addr, non-bool): self expanded to the outer
/// shape; alpha * outer when beta == 0, else beta * self + alpha * outer.
llvm::Error addr(Decomposition &d) {
  const OpCall &c = d.call();
  if (c.rank(1) != 1 || c.rank(2) != 1)
    return c.error("expected 1-D vec1 and vec2");
  if (c.inputs[0].meta.dtype == ScalarType::Bool)
    return c.error("boolean addr (logical_or of the outer product) is not modelled");
  auto beta = scalarArg(c, "beta", 3, 1);
  if (!beta)
    return c.error("beta is not a number");
  const TensorMeta &out = *c.results[0]->meta();
  int64_t n = c.shape(1)[0], m = c.shape(2)[0];
  Value *self = d.op("aten::expand.default", {na("self", d.in(0)), na("size", IntList{n, m})},
                     Decomposition::shaped(c.inputs[0].meta, {n, m}));
  Argument alphaArg = scaleArg(c, "alpha"), betaArg = scaleArg(c, "beta");
  if (*beta == 0) {
    Value *outer = d.op("aten::outer.default", {na("self", d.in(1)), na("vec2", d.in(2))}, out);
    d.returns({d.op("aten::mul.Tensor", {na("self", outer), na("other", alphaArg)}, out)});
    return llvm::Error::success();
  }
  Value *bias = d.op("aten::mul.Tensor", {na("self", self), na("other", betaArg)}, out);
  Value *outer = d.op("aten::outer.default", {na("self", d.in(1)), na("vec2", d.in(2))}, out);
  Value *scaled = d.op("aten::mul.Tensor", {na("self", outer), na("other", alphaArg)}, out);
  d.returns({d.op("aten::add.Tensor", {na("self", bias), na("other", scaled)}, out)});
  return llvm::Error::success();
}
/// addmv(self, mat, vec, beta, alpha) (torch._decomp _addmv_impl, floating): alpha * mv(mat, vec),
/// and when beta != 0 that plus beta * self.
llvm::Error addmv(Decomposition &d) {
  if (llvm::Error e = needFloat(d))
    return e;
  const OpCall &c = d.call();
  if (c.rank(1) != 2 || c.rank(2) != 1)
    return c.error("expected a matrix and a vector");
  auto beta = scalarArg(c, "beta", 3, 1);
  if (!beta)
    return c.error("beta is not a number");
  const TensorMeta &out = *c.results[0]->meta();
  if (numelOf(sizesOf(out)) == 0)
    return c.error("an empty product (beta * self alone) is not modelled");
  Argument alphaArg = scaleArg(c, "alpha"), betaArg = scaleArg(c, "beta");
  Value *prod = d.op("aten::mv.default", {na("self", d.in(1)), na("vec", d.in(2))}, out);
  Value *scaled = d.op("aten::mul.Tensor", {na("self", prod), na("other", alphaArg)}, out);
  if (*beta == 0) {
    d.returns({scaled});
    return llvm::Error::success();
  }
  Value *bias = d.op("aten::mul.Tensor", {na("self", d.in(0)), na("other", betaArg)}, c.inputs[0].meta);
  d.returns({d.op("aten::add.Tensor", {na("self", scaled), na("other", bias)}, out)});
  return llvm::Error::success();
}

/// outer(vec1, vec2): vec1.reshape(-1, 1) * vec2. Top-level outer is decomposed before DTensor
/// sees it (aten/Decomposer); this rule serves the outer inside addr's decomposition.
llvm::Error outer(Decomposition &d) {
  if (d.call().rank(0) != 1 || d.call().rank(1) != 1)
    return d.call().error("expected two 1-D tensors");
  int64_t n = d.call().shape(0)[0];
  Value *col = d.op("aten::reshape.default", {na("self", d.in(0)), na("shape", IntList{n, 1})},
                    Decomposition::shaped(d.call().inputs[0].meta, {n, 1}));
  d.returns({d.op("aten::mul.Tensor", {na("self", col), na("other", d.in(1))}, *d.call().results[0]->meta())});
  return llvm::Error::success();
}

/// std_mean.correction: var_mean.correction with the same arguments, then sqrt of the variance.
llvm::Error stdMean(Decomposition &d) {
  if (d.call().results.size() != 2)
    return d.call().error("expected two results");
  llvm::SmallVector<Value *, 2> vm = sameCallAs(d, "aten::var_mean.correction");
  d.returns({d.op("aten::sqrt.default", {na("self", vm[0])}, d.meta(vm[0])), vm[1]});
  return llvm::Error::success();
}
/// unsafe_split.Tensor: split.Tensor with the same arguments.
llvm::Error unsafeSplit(Decomposition &d) {
  d.returns(sameCallAs(d, "aten::split.Tensor"));
  return llvm::Error::success();
}
const llvm::StringMap<DecomposeFn> &decompositions() {
  static const llvm::StringMap<DecomposeFn> m = {
      {"aten::alias_copy.default", viewCopy<kAlias>},
      {"aten::t_copy.default", viewCopy<kT>},
      {"aten::transpose_copy.int", viewCopy<kTranspose>},
      {"aten::permute_copy.default", viewCopy<kPermute>},
      {"aten::unsqueeze_copy.default", viewCopy<kUnsqueeze>},
      {"aten::squeeze_copy.default", viewCopy<kSqueeze>},
      {"aten::squeeze_copy.dim", viewCopy<kSqueezeDim>},
      {"aten::squeeze_copy.dims", viewCopy<kSqueezeDims>},
      {"aten::unbind_copy.int", viewCopy<kUnbind>},
      {"aten::narrow_copy.default", narrowCopy},
      {"aten::diagonal_backward.default", diagonalBackward},
      {"aten::rsub.Tensor", rsub},
      {"aten::vdot.default", vdot},
      {"aten::dist.default", dist},
      {"aten::glu.default", glu},
      {"aten::glu_backward.default", gluBackward},
      {"aten::index_add.default", indexAddOrCopy},
      {"aten::index_copy.default", indexAddOrCopy},
      {"aten::norm.ScalarOpt_dim", normScalarOptDim},
      {"aten::floor_divide.default", floorDivide},
      {"aten::aminmax.default", aminmax},
      {"aten::count_nonzero.default", countNonzero},
      {"aten::mv.default", mv},
      {"aten::addmv.default", addmv},
      {"aten::outer.default", outer},
      {"aten::addr.default", addr},
      {"aten::std_mean.correction", stdMean},
      {"aten::unsafe_split.Tensor", unsafeSplit},
      {"aten::pixel_shuffle.default", pixelShuffle},
      {"aten::channel_shuffle.default", channelShuffle},
      {"aten::pixel_unshuffle.default", pixelShuffle},
      {"aten::elu_backward.default", eluBackward},
      {"aten::leaky_relu_backward.default", leakyReluBackward},
      {"aten::rrelu_with_noise_backward.default", rreluWithNoiseBackward},
      {"aten::cauchy_.default", cauchyInplace},
      {"aten::mish_backward.default", mishBackward},
      {"aten::softplus_backward.default", softplusBackward},
      {"aten::fill.Scalar", fill},
      {"aten::rot90.default", rot90},
      {"aten::isin.Tensor_Tensor", isin},
      {"aten::mse_loss.default", mseLoss},
      {"aten::mse_loss_backward.default", mseLossBackward},
      {"aten::smooth_l1_loss.default", smoothL1OrHuberLoss},
      {"aten::huber_loss.default", smoothL1OrHuberLoss},
      {"aten::smooth_l1_loss_backward.default", smoothL1LossBackward},
      {"aten::huber_loss_backward.default", huberLossBackward},
      {"aten::soft_margin_loss.default", softMarginLoss},
      {"aten::log_sigmoid_forward.default", logSigmoidForward},
      {"aten::binary_cross_entropy.default", binaryCrossEntropy},
      {"aten::binary_cross_entropy_backward.default", binaryCrossEntropyBackward},
      {"aten::binary_cross_entropy_with_logits.default", binaryCrossEntropyWithLogits},
      {"aten::soft_margin_loss_backward.default", softMarginLossBackward},
  };
  return m;
}

const llvm::StringMap<LocalCheckFn> &localChecks() {
  static const llvm::StringMap<LocalCheckFn> m = {{"aten::pixel_shuffle.default", pixelShuffleRunsLocally},
                                                  {"aten::pixel_unshuffle.default", pixelShuffleRunsLocally},
                                                  {"aten::addmv.default", addmvRunsLocally},
                                                  {"aten::channel_shuffle.default", channelShuffleRunsLocally}};
  return m;
}

/// CPython 3.11's set (Objects/setobject.c), for the order DTensor iterates its sets of candidate
/// placements: that order decides ties between equally cheap strategies. Insertion probes
/// linearly (9 slots) then by perturbation; a table 3/5 full grows to 4x its entries.
class PythonSet {
public:
  /// A placement's Python hash: Replicate -1 (stored as -2), Shard(d) d, Partial 1 + hash of its
  /// reduce op's string. String hashes are salted per process (PYTHONHASHSEED): DTensor's own
  /// choice between tied strategies with Partial inputs varies from run to run. commlens uses the
  /// salt of PYTHONHASHSEED=0 (the rules oracle runs DTensor with it).
  static int64_t hash(const Placement &p) {
    switch (p.kind) {
    case Placement::Kind::Replicate: return -2;
    case Placement::Kind::Shard: return p.dim;
    case Placement::Kind::Partial: {
      static constexpr int64_t kSeed0[] = {-8474663593505626638, -8735798916851054570, -8547758369677143136,
                                           -7571550297259199965, -2607318637830267426}; // sum avg max min product
      return kSeed0[static_cast<int>(p.reduceOp)];
    }
    case Placement::Kind::NormPartial: { // _NormPartial.__hash__: 1 + hash(norm_type)
      int64_t h = 1 + pythonFloatHash(p.normType);
      return h == -1 ? -2 : h;
    }
    default: return 0; // _StridedShard / MaskPartial never reach a decomposition (refused before)
    }
  }

  /// CPython's hash of a float (_Py_HashDouble): the value modulo 2^61 - 1, so an integral float
  /// hashes as its int; inf and -inf as +-314159 (NaN never is a norm type).
  static int64_t pythonFloatHash(double v) {
    constexpr int kBits = 61;
    constexpr uint64_t kModulus = (uint64_t{1} << kBits) - 1;
    if (std::isinf(v))
      return v > 0 ? 314159 : -314159;
    int e;
    double m = std::frexp(v, &e);
    int sign = 1;
    if (m < 0) {
      sign = -1;
      m = -m;
    }
    uint64_t x = 0;
    while (m != 0) {
      x = ((x << 28) & kModulus) | x >> (kBits - 28);
      m *= 268435456.0;
      e -= 28;
      auto y = static_cast<uint64_t>(m);
      m -= static_cast<double>(y);
      x += y;
      if (x >= kModulus)
        x -= kModulus;
    }
    e = e >= 0 ? e % kBits : kBits - 1 - ((-1 - e) % kBits);
    x = ((x << e) & kModulus) | x >> (kBits - e);
    auto h = static_cast<int64_t>(x) * sign;
    return h == -1 ? -2 : h;
  }

  void add(const Placement &p) {
    if (insert(table_, p, /*clean=*/false)) {
      ++used_;
      if (used_ * 5 >= (table_.size() - 1) * 3)
        resize(used_ * 4);
    }
  }
  /// set(other) / set |= other (set_merge): one resize up front; an empty set of the same size
  /// copies the table, an empty one of another size reinserts other's entries in its table order,
  /// a non-empty one adds them one by one.
  void merge(const PythonSet &other) {
    if (other.used_ == 0)
      return;
    if ((used_ + other.used_) * 5 >= (table_.size() - 1) * 3)
      resize((used_ + other.used_) * 2);
    if (used_ == 0) {
      if (table_.size() == other.table_.size()) {
        table_ = other.table_;
      } else {
        for (const std::optional<Placement> &e : other.table_)
          if (e)
            insert(table_, *e, /*clean=*/true);
      }
      used_ = other.used_;
      return;
    }
    for (const std::optional<Placement> &e : other.table_)
      if (e)
        add(*e);
  }
  /// Iteration order.
  llvm::SmallVector<Placement, 8> list() const {
    llvm::SmallVector<Placement, 8> out;
    for (const std::optional<Placement> &e : table_)
      if (e)
        out.push_back(*e);
    return out;
  }

private:
  static bool insert(std::vector<std::optional<Placement>> &table, const Placement &p, bool clean) {
    size_t mask = table.size() - 1, perturb = static_cast<size_t>(hash(p)), i = perturb & mask;
    while (true) {
      size_t probes = i + 9 <= mask ? 9 : 0;
      for (size_t j = 0; j <= probes; ++j) {
        std::optional<Placement> &e = table[i + j];
        if (!e) {
          e = p;
          return true;
        }
        if (!clean && *e == p)
          return false;
      }
      perturb >>= 5;
      i = (i * 5 + 1 + perturb) & mask;
    }
  }
  void resize(size_t minUsed) {
    size_t size = 8;
    while (size <= minUsed)
      size <<= 1;
    std::vector<std::optional<Placement>> table(size);
    for (const std::optional<Placement> &e : table_)
      if (e)
        insert(table, *e, /*clean=*/true);
    table_ = std::move(table);
  }

  std::vector<std::optional<Placement>> table_ = std::vector<std::optional<Placement>>(8);
  size_t used_ = 0;
};

/// The candidate placements of each input (DecompShardingStrategy._get_candidate_placements), in
/// DTensor's order: the set of Replicate and every placement of every input, each Shard widened
/// to every dim of the input (a Shard of a dim the input lacks is left out: its trace fails).
std::vector<llvm::SmallVector<Placement, 8>> candidatePlacements(const OpCall &call) {
  PythonSet all;
  all.add(Placement::replicate());
  for (const OpInput &in : call.inputs)
    if (in.isDTensor)
      for (const Placement &p : in.placements)
        all.add(p);
  std::vector<llvm::SmallVector<Placement, 8>> out;
  for (const OpInput &in : call.inputs) {
    if (!in.isDTensor) {
      out.push_back({Placement::replicate()});
      continue;
    }
    PythonSet options;
    options.merge(all);
    for (const Placement &p : all.list())
      if (p.isShard()) {
        PythonSet dims;
        for (int64_t d = 0; d < in.meta.rank(); ++d)
          dims.add(Placement::shard(d));
        options.merge(dims);
      }
    llvm::SmallVector<Placement, 8> valid;
    for (const Placement &p : options.list())
      if (!p.isShard() || p.dim < in.meta.rank())
        valid.push_back(p);
    out.push_back(std::move(valid));
  }
  return out;
}

/// A combination whose trace meets what commlens does not model (a _StridedShard):
/// DTensor keeps it as a strategy, commlens cannot say what it gives.
class UnmodelledCombination : public llvm::ErrorInfo<UnmodelledCombination> {
public:
  static char ID;
  explicit UnmodelledCombination(std::string why) : why_(std::move(why)) {}
  void log(llvm::raw_ostream &os) const override { os << why_; }
  std::error_code convertToErrorCode() const override { return llvm::inconvertibleErrorCode(); }
  const std::string &why() const { return why_; }

private:
  std::string why_;
};
char UnmodelledCombination::ID = 0;

/// Runs the decomposition with one placement per input on a one-device mesh; the output
/// placements, or nullopt when some op of it would redistribute (or raises).
llvm::Expected<std::optional<llvm::SmallVector<std::optional<Placement>, 2>>>
trace(const Decomposition &d, llvm::ArrayRef<Placement> inputs, const DeviceMesh &oneDevice) {
  llvm::DenseMap<const Value *, Placement> placed;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (d.call().inputs[i].isDTensor)
      placed[d.in(static_cast<unsigned>(i))] = inputs[i];
  const ShardingRules &rules = ShardingRules::get();
  for (const auto &node : d.graph().nodes()) {
    llvm::SmallVector<std::optional<DTensorSpec>, 4> specs;
    bool any = false;
    for (Value *v : node->tensorOperands()) {
      auto it = placed.find(v);
      if (it == placed.end()) {
        specs.push_back(std::nullopt);
        continue;
      }
      Placements ps;
      ps.push_back(it->second);
      specs.push_back(DTensorSpec{std::move(ps), *v->meta()});
      any = true;
    }
    if (!any)
      return d.call().error("its decomposition's {} has no DTensor operand (DTensor has no strategy for it)",
                            node->opString());
    if (!rules.supports(node->opString()))
      return d.call().error("its decomposition runs {}, which has no sharding rule", node->opString());
    llvm::Expected<ShardingDecision> dec = rules.decide(*node, specs, oneDevice);
    if (!dec) {
      std::string why = llvm::toString(dec.takeError());
      // DTensor traces on where a sub-op makes what commlens does not model (a _StridedShard, a
      // form a rule refuses as not modelled): the combination is a strategy DTensor
      // keeps, so it is reported, not dropped (decompositionRule refuses the op if it is selected).
      llvm::StringRef w(why);
      if (w.contains("_StridedShard") || w.contains("not modelled"))
        return llvm::make_error<UnmodelledCombination>(
            fmt::format("its decomposition's {} does what commlens does not model ({})", node->opString(), why));
      return std::nullopt; // DTensor: this combination raises and is skipped
    }
    for (size_t i = 0; i < specs.size(); ++i)
      if (specs[i] && dec->operandPlacements[i] && *dec->operandPlacements[i] != specs[i]->placements)
        return std::nullopt; // the decomposition would redistribute
    llvm::SmallVector<Value *, 4> results;
    for (Value *r : node->results())
      if (r->kind() == ValueKind::Tensor)
        results.push_back(r);
    for (size_t i = 0; i < results.size() && i < dec->resultPlacements.size(); ++i)
      if (dec->resultPlacements[i])
        placed[results[i]] = (*dec->resultPlacements[i])[0];
  }
  llvm::SmallVector<std::optional<Placement>, 2> outs;
  for (Value *o : d.outputs()) {
    auto it = placed.find(o);
    outs.push_back(it == placed.end() ? std::nullopt : std::optional<Placement>(it->second));
  }
  return outs;
}

llvm::Expected<Cands> decompositionRule(const OpCall &call) {
  auto fn = decompositions().find(call.op);
  if (fn == decompositions().end())
    return call.error("no decomposition");
  if (call.results.empty())
    return call.error("no tensor result");
  for (Value *r : call.results)
    if (!r->meta())
      return call.error("result '{}' has no tensor meta", r->name());
  Decomposition d(call);
  if (llvm::Error e = fn->second(d))
    return e;
  // A Tensor[] op whose decomposition returns one tensor: DTensor reads the one placement as a
  // single output spec and raises on the list the op returns.
  if (call.node->outputs().size() == 1 && call.node->outputs()[0].is<TensorList>() && d.outputs().size() == 1)
    return call.error("a Tensor[] result of one tensor: DTensor raises ('output_specs' has 1 output which does not "
                      "equal the number of op outputs)");
  if (d.outputs().size() != call.results.size())
    return call.error("its decomposition returns {} values for {} results", d.outputs().size(), call.results.size());
  DeviceMesh oneDevice{{1}, {}, call.mesh->deviceType};

  std::vector<llvm::SmallVector<Placement, 8>> options = candidatePlacements(call);
  // Every combination that traces, in DTensor's order; `unmodelled` marks those whose trace meets
  // what commlens does not model.
  std::vector<SingleDimRule> rules, everyRule;
  std::string unmodelledWhy;
  std::vector<size_t> pick(options.size(), 0);
  while (true) {
    llvm::SmallVector<Placement, 4> combo;
    for (size_t i = 0; i < options.size(); ++i)
      combo.push_back(options[i][pick[i]]);
    auto outs = trace(d, combo, oneDevice);
    if (!outs) {
      llvm::Error other = llvm::handleErrors(outs.takeError(), [&](const UnmodelledCombination &u) {
        SingleDimRule r(call.results.size(), RulePlacement::none());
        for (const Placement &p : combo)
          r.push_back(RulePlacement::of(p));
        everyRule.push_back(std::move(r));
        if (unmodelledWhy.empty())
          unmodelledWhy = u.why();
      });
      if (other)
        return other;
    } else if (*outs) {
      SingleDimRule r;
      for (const std::optional<Placement> &o : **outs)
        r.push_back(o ? RulePlacement::of(*o) : RulePlacement::none());
      for (const Placement &p : combo)
        r.push_back(RulePlacement::of(p));
      everyRule.push_back(r);
      rules.push_back(std::move(r));
    }
    size_t i = options.size();
    while (i > 0 && ++pick[i - 1] == options[i - 1].size())
      pick[--i] = 0;
    if (i == 0)
      break;
  }
  if (rules.empty())
    return unmodelledWhy.empty() ? call.error("no placement runs its decomposition without redistribution")
                                 : call.error("{}", unmodelledWhy);
  ExpandOptions opts;
  opts.numOutputs = static_cast<unsigned>(call.results.size());
  opts.insertReplicate = false;
  opts.fillPlaceholders = false;
  bool someUnmodelled = everyRule.size() != rules.size();
  Cands cands = expandSingleDim(call, std::move(rules), opts);
  // DTensor selects among every strategy, the unmodelled ones included: refuse when it would
  // select one of those; otherwise the same one is selected among the modelled strategies.
  if (someUnmodelled && !cands.empty()) {
    Cands all = expandSingleDim(call, std::move(everyRule), opts);
    const Candidate &selected = all[selectMinCost(call, all)];
    if (!llvm::any_of(cands, [&](const Candidate &m) { return m.inputs == selected.inputs; }))
      return call.error("{}", unmodelledWhy);
  }
  if (auto check = localChecks().find(call.op); check != localChecks().end() && !cands.empty())
    if (llvm::Error e = check->second(call, cands[selectMinCost(call, cands)]))
      return e;
  return cands;
}

} // namespace

bool hasDecompositionRule(llvm::StringRef op) { return decompositions().count(op) != 0; }

void registerDecompositionRules(RuleTable &t) {
  for (const auto &e : decompositions())
    t[e.getKey()] = decompositionRule;
}

} // namespace commlens::rules
