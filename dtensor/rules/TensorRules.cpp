// Tensor-manipulation ops (torch 2.13 `_ops/_tensor_ops.py`):
//   contiguous / detach / alias / view.dtype / fill_ / _local_scalar_dense: one candidate following the
//     input exactly (Partial included);
//   split.Tensor / split_with_sizes: one candidate, the split dim unsharded, every piece follows;
//   slice.Tensor: keep the input placements unless the slice dim is sharded (and the slice is not
//     statically the whole dim), else unshard the slice dim;
//   select.int: unshard the selected dim, shift later shard dims down;
//   cat: one candidate per distinct input placement (the cat dim unsharded), every input moved
//     to it, then min-cost selection;
//   index_select: single-dim [S(d) | S(d), R] for d != dim, [S(dim) | R, S(0)],
//     [P(op) | P(op), R] for sum, avg, min, max, product;
//   index_fill / index_reduce: [S(d) | S(d), R..] for d != dim, plus the Partials each keeps;
//   bucketize: self sharded on any dim, or boundaries on dim 0 (Partial(sum) counts);
//   gather: full-mesh expansion of [R|R,R], [MaskP | S(dim), MaskP] when index.size(dim) == 1,
//     [S(dim) | R, S(dim)], [S(d) | S(d), S(d)] for d != dim when ranks agree;
//   scatter.src / scatter.value / scatter_add: [R|R..] and [S(d)|S(d)..] for d != dim where the
//     operands agree in size.
#include "dtensor/rules/RuleEngine.h"

#include <algorithm>
#include <set>

namespace commlens::rules {

llvm::Expected<Cands> followInputRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  Cands c;
  c.push_back(followCandidate(call, call.inputs[0].placements, call.inputs[0].placements));
  return c;
}

namespace {

using RP = RulePlacement;

llvm::Expected<Cands> splitRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  int64_t dim = normDim(call.intArg("dim", 2).value_or(0), call.rank(0));
  Placements p = unshardDim(call.inputs[0].placements, dim);
  Cands c;
  c.push_back(followCandidate(call, p, p));
  return c;
}

llvm::Expected<Cands> sliceRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  auto shape = call.shape(0);
  int64_t rawDim = call.intArg("dim", 1).value_or(0);
  int64_t dim = normDim(rawDim, call.rank(0));
  int64_t size = shape[dim];
  int64_t start = call.intArg("start", 2).value_or(0);
  std::optional<int64_t> endArg = call.intArg("end", 3);
  int64_t step = call.intArg("step", 4).value_or(1);
  int64_t end = (!endArg || *endArg > size) ? size : *endArg;
  start = normDim(start, size);
  end = normDim(end, size);
  bool redundant = start == 0 && end == size && step == 1;
  const Placements &cur = call.inputs[0].placements;
  Cands c;
  if (!isDimSharded(cur, dim) || redundant)
    c.push_back(followCandidate(call, cur, cur));
  else {
    Placements u = unshardDim(cur, dim);
    c.push_back(followCandidate(call, u, u));
  }
  return c;
}

llvm::Expected<Cands> selectRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  auto d = call.intArg("dim", 1);
  if (!d)
    return call.error("missing dim argument");
  int64_t dim = normDim(*d, call.rank(0));
  Placements in = unshardDim(call.inputs[0].placements, dim);
  Cands c;
  c.push_back(followCandidate(call, in, shiftAfterRemove(in, dim)));
  return c;
}

llvm::Expected<Cands> catRule(const OpCall &call) {
  if (call.inputs.empty())
    return call.error("no tensor operands");
  int64_t nd = call.rank(0);
  int64_t dim = normDim(call.intArg("dim", 1).value_or(0), nd);
  std::vector<Placements> pool;
  Cands cands;
  for (const OpInput &in : call.inputs) {
    Placements ex = isDimSharded(in.placements, dim) ? unshardDim(in.placements, dim) : in.placements;
    if (std::find(pool.begin(), pool.end(), ex) != pool.end())
      continue;
    pool.push_back(ex);
    Candidate c;
    for (size_t i = 0; i < call.inputs.size(); ++i)
      c.inputs.push_back(ex);
    c.outputs.push_back(ex);
    assignCosts(call, c);
    cands.push_back(std::move(c));
  }
  return cands;
}

llvm::Expected<Cands> indexSelectRule(const OpCall &call) {
  if (call.inputs.size() != 2)
    return call.error("expected two tensor operands, got {}", call.inputs.size());
  auto d = call.intArg("dim", 1);
  if (!d)
    return call.error("missing dim argument");
  int64_t dim = normDim(*d, call.rank(0));
  std::vector<SingleDimRule> rules;
  for (int64_t i = 0; i < call.rank(0); ++i)
    if (i != dim)
      rules.push_back({RP::ph(i), RP::ph(i), RP::R()});
  rules.push_back({RP::ph(dim), RP::R(), RP::ph(0)});
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product})
    rules.push_back({RP::P(op), RP::P(op), RP::R()});
  return expandSingleDim(call, std::move(rules), ExpandOptions{});
}

/// index_fill.int_Scalar / int_Tensor / index_reduce (_index_dim_strategy): [S(d) | S(d), R..]
/// for d != dim (index_reduce's source shards with self), then the Partial passthroughs each op
/// allows: a scalar fill survives only idempotent reductions, a 0-d tensor value any reduction
/// (it is reduced with self), index_reduce none.
llvm::Expected<Cands> indexDimRule(const OpCall &call) {
  bool reduce = call.op == "aten::index_reduce.default", tensorValue = call.op == "aten::index_fill.int_Tensor";
  size_t want = reduce || tensorValue ? 3 : 2;
  if (call.inputs.size() != want)
    return call.error("expected {} tensor operands, got {}", want, call.inputs.size());
  auto d = call.intArg("dim", 1);
  if (!d)
    return call.error("missing dim argument");
  int64_t dim = normDim(*d, call.rank(0));
  std::vector<SingleDimRule> rules;
  for (int64_t i = 0; i < call.rank(0); ++i)
    if (i != dim) {
      SingleDimRule r{RP::ph(i), RP::ph(i), RP::R()};
      if (want == 3)
        r.push_back(reduce ? RP::ph(i) : RP::R());
      rules.push_back(std::move(r));
    }
  if (tensorValue)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product})
      rules.push_back({RP::P(op), RP::P(op), RP::R(), RP::P(op)});
  else if (!reduce)
    for (ReduceOp op : {ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
      rules.push_back({RP::P(op), RP::P(op), RP::R()});
  return expandSingleDim(call, std::move(rules), ExpandOptions{});
}

/// What an index / index_put call indexes: the dims of self with a non-None entry in `indices`
/// (their tensors are the call's inputs 1..n, in order), whether those dims are consecutive, and
/// the rank the index tensors broadcast to. Bool masks are refused: their result shape depends on
/// the data.
struct Indexing {
  IntList dims;
  bool consecutive = true;
  int64_t broadcastNdim = 0;
};
llvm::Expected<Indexing> indexedDims(const OpCall &call, size_t tensorsAfter) {
  const Argument *ix = call.arg("indices", 1);
  IntList dims;
  if (ix && ix->is<OptionalTensorList>()) {
    const auto &items = ix->get<OptionalTensorList>().items;
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i])
        dims.push_back(static_cast<int64_t>(i));
  } else if (ix && ix->is<TensorList>()) {
    for (size_t i = 0; i < ix->get<TensorList>().size(); ++i)
      dims.push_back(static_cast<int64_t>(i));
  } else {
    return call.error("expected a list of indices");
  }
  if (dims.empty() || call.inputs.size() != 1 + dims.size() + tensorsAfter)
    return call.error("expected {} index tensors among {} tensor operands", dims.size(), call.inputs.size());
  for (size_t i = 1; i <= dims.size(); ++i) {
    ScalarType t = call.inputs[i].meta.dtype;
    if (t == ScalarType::Bool || t == ScalarType::Byte)
      return call.error("a boolean mask index (a data-dependent shape) is not modelled");
  }
  if (dims.back() >= call.rank(0))
    return call.error("{} indices for a tensor of {} dims", dims.back() + 1, call.rank(0));
  Indexing out{dims, dims.back() - dims.front() + 1 == static_cast<int64_t>(dims.size()), 0};
  for (size_t i = 1; i <= dims.size(); ++i)
    out.broadcastNdim = std::max(out.broadcastNdim, call.rank(static_cast<unsigned>(i)));
  return out;
}

/// index.Tensor (index_single_dim_strategy): self sharded on a dim no index touches (the result on
/// where that dim lands: after the broadcast index dims, which go where the indexed dims were when
/// those are consecutive, else first); the index tensors sharded together on one broadcast dim
/// (a size-1 dim replicated) with self replicated; self's Partial(sum / avg) passed through.
llvm::Expected<Cands> indexTensorRule(const OpCall &call) {
  auto indexing = indexedDims(call, 0);
  if (!indexing)
    return indexing.takeError();
  const IntList &dims = indexing->dims;
  int64_t rank = call.rank(0), n = static_cast<int64_t>(dims.size()), broadcastNdim = indexing->broadcastNdim;
  int64_t insert = indexing->consecutive ? dims.front() : 0;
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < rank; ++d) {
    if (llvm::is_contained(dims, d))
      continue;
    int64_t out = d;
    if (d >= insert)
      out = d + broadcastNdim - llvm::count_if(dims, [&](int64_t x) { return d > x; });
    SingleDimRule r{RP::ph(out), RP::ph(d)};
    r.append(static_cast<size_t>(n), RP::R());
    rules.push_back(std::move(r));
  }
  for (int64_t bd = 0; bd < broadcastNdim; ++bd) {
    SingleDimRule r{RP::ph(bd + insert), RP::R()};
    bool any = false;
    for (int64_t i = 1; i <= n; ++i) {
      auto shape = call.shape(static_cast<unsigned>(i));
      int64_t offset = broadcastNdim - static_cast<int64_t>(shape.size());
      int64_t size = bd < offset ? 1 : shape[bd - offset];
      any |= size > 1;
      r.push_back(size > 1 ? RP::ph(bd - offset) : RP::R());
    }
    if (any)
      rules.push_back(std::move(r));
  }
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    SingleDimRule r{RP::P(op), RP::P(op)};
    r.append(static_cast<size_t>(n), RP::R());
    rules.push_back(std::move(r));
  }
  return expandSingleDim(call, std::move(rules), ExpandOptions{});
}

/// index_put / index_put_ (index_put_single_dim_strategy): self and the result sharded alike on a
/// dim no index touches, values on the matching dim (right-aligned; Replicate where values has no
/// such dim or it is of size 1), the indices replicated; or all Partial(sum) but the indices.
llvm::Expected<Cands> indexPutRule(const OpCall &call) {
  auto indexing = indexedDims(call, 1);
  if (!indexing)
    return indexing.takeError();
  const IntList &dims = indexing->dims;
  int64_t rank = call.rank(0), n = static_cast<int64_t>(dims.size()), broadcastNdim = indexing->broadcastNdim;
  auto values = call.shape(static_cast<unsigned>(n + 1));
  int64_t valuesNdim = static_cast<int64_t>(values.size());
  IntList nonIndexed;
  for (int64_t d = 0; d < rank; ++d)
    if (!llvm::is_contained(dims, d))
      nonIndexed.push_back(d);
  int64_t resultNdim = broadcastNdim + static_cast<int64_t>(nonIndexed.size());
  std::vector<SingleDimRule> rules;
  for (size_t i = 0; i < nonIndexed.size(); ++i) {
    int64_t d = nonIndexed[i];
    int64_t valuesDim = indexing->consecutive ? (d < dims.front() ? d : d - n + broadcastNdim)
                                              : broadcastNdim + static_cast<int64_t>(i);
    int64_t vd = valuesDim - (resultNdim - valuesNdim);
    SingleDimRule r{RP::ph(d), RP::ph(d)};
    r.append(static_cast<size_t>(n), RP::R());
    r.push_back(vd < 0 || values[vd] == 1 ? RP::R() : RP::ph(vd));
    rules.push_back(std::move(r));
  }
  SingleDimRule partial{RP::P(), RP::P()};
  partial.append(static_cast<size_t>(n), RP::R());
  partial.push_back(RP::P());
  rules.push_back(std::move(partial));
  ExpandOptions opts;
  opts.inplace = isInplaceName(call.op);
  return expandSingleDim(call, std::move(rules), opts);
}

/// bucketize.Tensor(self, boundaries): self sharded on any dim with boundaries replicated;
/// boundaries sharded on dim 0 with self replicated, the counts Partial(sum); a Partial max/min
/// self kept (bucketize is monotone in self).
llvm::Expected<Cands> bucketizeRule(const OpCall &call) {
  if (call.inputs.size() != 2)
    return call.error("expected two tensor operands, got {}", call.inputs.size());
  std::vector<SingleDimRule> rules;
  for (int64_t i = 0; i < call.rank(0); ++i)
    rules.push_back({RP::ph(i), RP::ph(i), RP::R()});
  rules.push_back({RP::P(), RP::R(), RP::ph(0)});
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min})
    rules.push_back({RP::P(op), RP::P(op), RP::R()});
  return expandSingleDim(call, std::move(rules), ExpandOptions{});
}

llvm::Expected<Cands> gatherRule(const OpCall &call) {
  if (call.inputs.size() != 2)
    return call.error("expected two tensor operands, got {}", call.inputs.size());
  auto d = call.intArg("dim", 1);
  if (!d)
    return call.error("missing dim argument");
  int64_t dim = normDim(*d, call.rank(0));
  auto inShape = call.shape(0), idxShape = call.shape(1);
  std::vector<SingleDimRule> rules;
  rules.push_back({RP::R(), RP::R(), RP::R()});
  if (dim < static_cast<int64_t>(idxShape.size()) && idxShape[dim] == 1) {
    Placement mp{Placement::Kind::MaskPartial, dim, 1, ReduceOp::Sum};
    rules.push_back({RP::of(mp), RP::of(Placement::shard(dim)), RP::of(mp)});
  }
  rules.push_back({RP::of(Placement::shard(dim)), RP::R(), RP::of(Placement::shard(dim))});
  if (inShape.size() == idxShape.size())
    for (int64_t i = 0; i < static_cast<int64_t>(inShape.size()); ++i)
      if (i != dim)
        rules.push_back({RP::of(Placement::shard(i)), RP::of(Placement::shard(i)), RP::of(Placement::shard(i))});
  ExpandOptions opts;
  opts.insertReplicate = false;
  opts.fillPlaceholders = false;
  return expandSingleDim(call, std::move(rules), opts);
}

/// scatter.src / scatter.value / scatter_add: full-mesh expansion of [R|R,R(,R)] and
/// [S(d)|S(d),S(d)(,S(d))] for every d != dim on which input and index agree in size (scatter.src
/// also needs src to agree there; scatter_add does not check src).
llvm::Expected<Cands> scatterRule(const OpCall &call) {
  if (call.inputs.size() != 2 && call.inputs.size() != 3)
    return call.error("expected input, index (and src), got {} tensor operands", call.inputs.size());
  auto d = call.intArg("dim", 1);
  if (!d)
    return call.error("missing dim argument");
  int64_t dim = normDim(*d, call.rank(0));
  auto inShape = call.shape(0), idxShape = call.shape(1);
  bool checkSrc = call.inputs.size() == 3 && call.op != "aten::scatter_add.default";
  size_t specs = call.inputs.size() + 1;
  std::vector<SingleDimRule> rules;
  rules.push_back(SingleDimRule(specs, RP::R()));
  if (inShape.size() == idxShape.size())
    for (int64_t i = 0; i < static_cast<int64_t>(inShape.size()); ++i)
      if (i != dim && inShape[i] == idxShape[i] && (!checkSrc || call.shape(2)[i] == idxShape[i]))
        rules.push_back(SingleDimRule(specs, RP::of(Placement::shard(i))));
  ExpandOptions opts;
  opts.insertReplicate = false;
  opts.fillPlaceholders = false;
  return expandSingleDim(call, std::move(rules), opts);
}

/// linalg_replicate_strategy (tril, triu, diag, diagonal, diagonal_copy, diag_embed, and the
/// decompositions _linalg_svd, linalg_qr, _linalg_eigh): the input is replicated, every result
/// replicated.
llvm::Expected<Cands> replicateOnlyRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  Placements r = replicatePlacements(*call.mesh);
  Cands c;
  c.push_back(followCandidate(call, r, r));
  return c;
}

/// create_like_strategy (ones_like, zeros_like, full_like, rand*_like): the input stays as it is,
/// the output takes its placements with every Partial replicated (the values do not depend on it).
llvm::Expected<Cands> createLikeRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  Placements out;
  for (const Placement &p : call.inputs[0].placements)
    out.push_back(p.isPartial() ? Placement::replicate() : p);
  Cands c;
  c.push_back(followCandidate(call, call.inputs[0].placements, out));
  return c;
}

/// new_factory_strategy (new_empty, new_full, new_ones, new_zeros, new_empty_strided): a
/// Replicate output (cost 0) and, when the size equals the input's and the input is sharded (or
/// the factory leaves memory uninitialised), the input's placements (cost -0.1, so preferred).
llvm::Expected<Cands> newFactoryRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  auto size = call.intListArg("size", 1);
  if (!size)
    return call.error("missing size argument");
  const Placements &cur = call.inputs[0].placements;
  Cands c;
  Candidate rep;
  rep.inputs.push_back(cur);
  rep.outputs.push_back(replicatePlacements(*call.mesh));
  rep.costs.push_back(0.0);
  c.push_back(rep);
  auto shape = call.shape(0);
  bool sameShape = llvm::ArrayRef<int64_t>(shape) == llvm::ArrayRef<int64_t>(*size);
  bool uninitialized = call.op == "aten::new_empty.default" || call.op == "aten::new_empty_strided.default";
  bool sharded = llvm::any_of(cur, [](const Placement &p) { return p.isShard(); });
  if (sameShape && (sharded || uninitialized)) {
    Candidate follow;
    follow.inputs.push_back(cur);
    follow.outputs.push_back(cur);
    follow.costs.push_back(-0.1);
    c.push_back(follow);
  }
  return c;
}

/// roll / flip / _fft_r2c, _fft_c2c, _fft_c2r (fft_single_dim_strategy): single-dim [S(d) | S(d)]
/// for the dims the op leaves alone, [P(op) | P(op)] for sum, avg, max, min; the implicit
/// all-Replicate rule first. roll with no dims flattens: every dim is active.
llvm::Expected<Cands> rollFlipRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  int64_t rank = call.rank(0);
  bool isRoll = call.op == "aten::roll.default";
  bool isFft = llvm::StringRef(call.op).startswith("aten::_fft_");
  std::optional<IntList> dims = isFft ? call.intListArg("dim", 1) : call.intListArg("dims", isRoll ? 2 : 1);
  std::set<int64_t> active;
  if (!dims || dims->empty()) {
    if (!isRoll)
      return call.error("missing dims argument");
    for (int64_t d = 0; d < rank; ++d)
      active.insert(d);
  } else {
    for (int64_t d : *dims)
      active.insert(normDim(d, rank));
  }
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < rank; ++d)
    if (!active.count(d))
      rules.push_back({RP::ph(d), RP::ph(d)});
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    rules.push_back({RP::P(op), RP::P(op)});
  return expandSingleDim(call, std::move(rules), ExpandOptions{});
}

/// unbind: DTensor raises when the unbind dim is sharded; otherwise every piece follows the input
/// with later shard dims shifted down.
llvm::Expected<Cands> unbindRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  int64_t dim = normDim(call.intArg("dim", 1).value_or(0), call.rank(0));
  const Placements &cur = call.inputs[0].placements;
  if (isDimSharded(cur, dim))
    return call.error("Attempted to unbind along the sharded dimension {} (DTensor raises)", dim);
  Cands c;
  c.push_back(followCandidate(call, cur, shiftAfterRemove(cur, dim)));
  return c;
}

/// stack: one candidate. The placements every input is moved to merge the inputs' placements per
/// mesh dim (equal: kept; Partial vs Shard: the Shard; two different Partials or two different
/// Shards: Replicate; Replicate vs anything: the other); the output shifts shard dims at or after
/// the new dim up by one.
llvm::Expected<Cands> stackRule(const OpCall &call) {
  if (call.inputs.empty())
    return call.error("no tensor operands");
  int64_t dim = normDim(call.intArg("dim", 1).value_or(0), call.rank(0) + 1);
  Placements follow = call.inputs[0].placements;
  auto merge = [](const Placement &cur, const Placement &nw) {
    if (cur == nw)
      return cur;
    if (cur.isPartial()) {
      if (nw.isShard())
        return nw;
      return nw.isPartial() ? Placement::replicate() : cur;
    }
    if (cur.isShard())
      return nw.isShard() ? Placement::replicate() : cur;
    return nw;
  };
  for (size_t i = 1; i < call.inputs.size(); ++i)
    for (size_t k = 0; k < follow.size(); ++k)
      follow[k] = merge(follow[k], call.inputs[i].placements[k]);
  Placements out;
  for (Placement p : follow) {
    if (p.isShard() && p.dim >= dim)
      ++p.dim;
    out.push_back(p);
  }
  Candidate c;
  for (size_t i = 0; i < call.inputs.size(); ++i)
    c.inputs.push_back(follow);
  c.outputs.push_back(out);
  return singleCandidate(call, std::move(c));
}

/// constant_pad_nd: single-dim [S(d) | S(d)] for every dim without padding, then [P(op) | P(op)]
/// for avg, max, min (and sum when the pad value is 0 or nothing is padded); the implicit
/// all-Replicate rule first. The value is read positionally (args_schema[2]), as DTensor does.
llvm::Expected<Cands> constantPadRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  auto pad = call.intListArg("pad", 1);
  if (!pad)
    return call.error("missing pad argument");
  int64_t rank = call.rank(0);
  std::set<int64_t> padded;
  for (size_t i = 0; 2 * i + 1 < pad->size(); ++i) // pad: [last dim left, right, previous dim left, ...]
    if ((*pad)[2 * i] != 0 || (*pad)[2 * i + 1] != 0)
      padded.insert(rank - 1 - static_cast<int64_t>(i));
  bool noPadding = llvm::all_of(*pad, [](int64_t v) { return v == 0; });
  bool zeroValue = true;
  llvm::ArrayRef<NamedArgument> ins = call.node->inputs();
  if (ins.size() > 2 && !ins[2].keyword) {
    const Argument &v = ins[2].value;
    if (auto i = v.asInt())
      zeroValue = *i == 0;
    else if (v.is<double>())
      zeroValue = v.get<double>() == 0.0;
  }
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < rank; ++d)
    if (!padded.count(d))
      rules.push_back({RP::ph(d), RP::ph(d)});
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    if (op != ReduceOp::Sum || noPadding || zeroValue)
      rules.push_back({RP::P(op), RP::P(op)});
  return expandSingleDim(call, std::move(rules), ExpandOptions{});
}

/// slice_scatter(self, src, dim, ...): one candidate. When self is neither sharded on dim nor
/// Partial, self keeps its placements and src takes them; otherwise both take self's placements
/// with the dim's shards and every Partial replicated.
llvm::Expected<Cands> sliceScatterRule(const OpCall &call) {
  if (call.inputs.size() != 2)
    return call.error("expected two tensor operands, got {}", call.inputs.size());
  llvm::ArrayRef<NamedArgument> ins = call.node->inputs();
  int64_t rawDim = 0;
  if (ins.size() > 2 && !ins[2].keyword && ins[2].value.asInt())
    rawDim = *ins[2].value.asInt();
  int64_t dim = normDim(rawDim, call.rank(0));
  const Placements &cur = call.inputs[0].placements;
  bool partial = llvm::any_of(cur, [](const Placement &p) { return p.isPartial(); });
  Placements target = cur;
  if (isDimSharded(cur, dim) || partial) {
    target.clear();
    for (const Placement &p : cur)
      target.push_back(p.isPartial() || (p.isShard() && p.dim == dim) ? Placement::replicate() : p);
  }
  Candidate c;
  c.inputs = {target, target};
  c.outputs.push_back(target);
  return singleCandidate(call, std::move(c));
}

/// select_scatter(self, src, dim, index) / diagonal_scatter(self, src, offset, dim1, dim2):
/// single-dim [S(d) | S(d), S(d in src)] for every dim the op does not touch (src lacks the
/// selected dim, or dim1 and dim2); the implicit all-Replicate rule first.
llvm::Expected<Cands> scatterIntoRule(const OpCall &call) {
  if (call.inputs.size() != 2)
    return call.error("expected two tensor operands, got {}", call.inputs.size());
  int64_t rank = call.rank(0);
  llvm::ArrayRef<NamedArgument> ins = call.node->inputs();
  auto posInt = [&](size_t pos, int64_t dflt) {
    if (pos < ins.size() && !ins[pos].keyword && ins[pos].value.asInt())
      return *ins[pos].value.asInt();
    return dflt;
  };
  std::vector<SingleDimRule> rules;
  if (call.op == "aten::select_scatter.default") {
    auto d = call.intArg("dim", 2);
    if (!d)
      return call.error("missing dim argument");
    int64_t dim = normDim(*d, rank);
    for (int64_t k = 0; k < rank; ++k)
      if (k != dim)
        rules.push_back({RP::ph(k), RP::ph(k), RP::ph(k < dim ? k : k - 1)});
  } else {
    int64_t d1 = normDim(posInt(3, 0), rank), d2 = normDim(posInt(4, 1), rank);
    int64_t lo = std::min(d1, d2), hi = std::max(d1, d2);
    for (int64_t k = 0; k < rank; ++k)
      if (k != d1 && k != d2)
        rules.push_back({RP::ph(k), RP::ph(k), RP::ph(k - (k > lo ? 1 : 0) - (k > hi ? 1 : 0))});
  }
  return expandSingleDim(call, std::move(rules), ExpandOptions{});
}

} // namespace

void registerTensorRules(RuleTable &t) {
  for (const char *op : {"aten::contiguous.default", "aten::detach.default", "aten::alias.default",
                         "aten::detach_.default", "aten::view.dtype", "aten::fill_.Scalar", "aten::zero_.default"})
    t[op] = followInputRule;
  // item(): DTensor skips sharding propagation and reads the local shard as it is (the
  // replicate-only strategy it registers is never consulted).
  t["aten::_local_scalar_dense.default"] = followInputRule;
  t["aten::split.Tensor"] = splitRule;
  t["aten::split_with_sizes.default"] = splitRule;
  t["aten::split_with_sizes_copy.default"] = splitRule;
  t["aten::empty_like.default"] = followInputRule; // propagate_single_input_strategy
  for (const char *op : {"aten::ones_like.default", "aten::zeros_like.default", "aten::full_like.default",
                         "aten::rand_like.default", "aten::randn_like.default", "aten::randint_like.default",
                         "aten::randint_like.low_dtype"})
    t[op] = createLikeRule;
  for (const char *op : {"aten::new_empty.default", "aten::new_full.default", "aten::new_ones.default",
                         "aten::new_zeros.default", "aten::new_empty_strided.default"})
    t[op] = newFactoryRule;
  for (const char *op : {"aten::tril.default", "aten::triu.default", "aten::diag.default", "aten::diagonal.default",
                         "aten::diagonal_copy.default", "aten::diag_embed.default", "aten::_linalg_svd.default",
                         "aten::linalg_qr.default", "aten::_linalg_eigh.default"})
    t[op] = replicateOnlyRule;
  t["aten::roll.default"] = rollFlipRule;
  for (const char *op : {"aten::_fft_r2c.default", "aten::_fft_c2c.default", "aten::_fft_c2r.default"})
    t[op] = rollFlipRule;
  t["aten::flip.default"] = rollFlipRule;
  t["aten::unbind.int"] = unbindRule;
  t["aten::stack.default"] = stackRule;
  t["aten::constant_pad_nd.default"] = constantPadRule;
  t["aten::slice_scatter.default"] = sliceScatterRule;
  t["aten::select_scatter.default"] = scatterIntoRule;
  t["aten::diagonal_scatter.default"] = scatterIntoRule;
  t["aten::slice.Tensor"] = sliceRule;
  t["aten::select.int"] = selectRule;
  t["aten::cat.default"] = catRule;
  t["aten::index_select.default"] = indexSelectRule;
  t["aten::index.Tensor"] = indexTensorRule;
  t["aten::index_put.default"] = indexPutRule;
  t["aten::index_put_.default"] = indexPutRule;
  t["aten::gather.default"] = gatherRule;
  for (const char *op : {"aten::index_fill.int_Scalar", "aten::index_fill.int_Tensor", "aten::index_reduce.default"})
    t[op] = indexDimRule;
  t["aten::bucketize.Tensor"] = bucketizeRule;
  for (const char *op : {"aten::scatter.src", "aten::scatter.value", "aten::scatter_add.default"})
    t[op] = scatterRule;
}

} // namespace commlens::rules
