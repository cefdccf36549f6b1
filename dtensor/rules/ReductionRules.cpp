// Reductions, softmax and nll_loss_forward (torch 2.13 `_ops/_math_ops.py`); each strategy has
// one candidate derived from the input's current placements:
//   linear reductions (sum -> P(sum), mean -> P(avg), amax -> P(max), amin -> P(min)): a Shard on
//     a reduced dim becomes the reduction's Partial with no communication, other shard dims are
//     renumbered; the input is first replicated on the reduced dims and cleared of Partials when
//     the reduction is not "linear" for it: a Partial whose op differs from the reduction's, or
//     (mean only) a reduced dim that is not evenly sharded; an explicit empty dim list reduces no
//     dim here (_infer_reduction_dims), though torch's kernel reduces every dim;
//   _softmax / _log_softmax: the softmax dim is unsharded and every Partial replicated;
//   nll_loss_forward: the class dim (1, or 0 for 1-D input) unsharded and Partials replicated;
//     the target follows that with the class dim removed; weight replicated; the loss is a
//     reduction of the target placements (avg for mean, sum for sum; none keeps the target's);
//   non-linear reductions (std/var, global median, logsumexp, and the scans
//     cumsum/cumprod/logcumsumexp with keepdim): the reduced dims replicated and Partials cleared
//     first, as for a linear reduction that is not linear for its input;
//   sort-like ops (topk, sort, cummax, cummin): full-mesh expansion of [R, R | R] and
//     [S(d), S(d) | S(d)] for every d but the sort dim, min-cost selection;
//   values-and-indices reductions over one dim (max.dim, min.dim, median.dim, nanmedian.dim, mode,
//     kthvalue): single-dim strategies [S(d'), S(d') | S(d)] for d != dim (d' after the dim is
//     dropped unless keepdim), the implicit all-Replicate rule first.
//   p-norms (linalg_vector_norm, norm.Scalar): inf / -inf as amax / amin; other p replicate every
//     Partial, a reduced shard becomes P(sum) (p = 0) or _NormPartial(p) (NP(p): a Partial that
//     no other strategy lists, so the next op redistributes it; a linear reduction keeps it, as its
//     reduce_op is "sum");
//     linalg__powsum: a linear sum; _foreach_max / _foreach_norm / _foreach_powsum: the same
//     whole-tensor reductions per list element.
//   argmax / argmin (argmax_argmin_strategy): a non-linear reduction (indices cannot be Partial).
//     DTensor's dispatcher does not redistribute by it: a custom handler (_nonlinear_redux.py, modelled
//     in runtime/OpDispatch) reduces locally and all-gathers values and indices; only the output
//     placements come from the strategy.
// Which argument DTensor reads matters: keepdim is the positional args_schema[2] for the linear
// and dim-with-indices reductions, the keyword only for logsumexp and std/var.
#include "dtensor/rules/RuleEngine.h"

#include <cmath>
#include <set>

namespace commlens::rules {

namespace {

using RP = RulePlacement;

/// replicate_reduction_dims: Partials and shards on `dims` -> R.
Placements replicateReductionDims(llvm::ArrayRef<Placement> ps, const std::set<int64_t> &dims) {
  Placements out;
  for (const Placement &p : ps)
    out.push_back(p.isPartial() || (p.isShard() && dims.count(p.dim)) ? Placement::replicate() : p);
  return out;
}

std::set<int64_t> allDims(int64_t rank) {
  std::set<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d)
    dims.insert(d);
  return dims;
}

/// map_placements_after_reduction.
Placements mapAfterReduction(llvm::ArrayRef<Placement> ps, const std::set<int64_t> &dims, int64_t rank, bool keepdim,
                             ReduceOp op) {
  llvm::SmallVector<int64_t, 4> dimMap;
  int64_t next = 0;
  for (int64_t d = 0; d < rank; ++d)
    dimMap.push_back(dims.count(d) && !keepdim ? -1 : next++);
  Placements out;
  for (const Placement &p : ps) {
    if (!p.isShard()) {
      out.push_back(p);
      continue;
    }
    if (dimMap[p.dim] == -1 || dims.count(p.dim))
      out.push_back(Placement::partial(op));
    else
      out.push_back(Placement::shard(dimMap[p.dim]));
  }
  return out;
}

const llvm::StringMap<ReduceOp> &linearReductions() {
  static const llvm::StringMap<ReduceOp> m = {
      {"aten::sum.default", ReduceOp::Sum},   {"aten::sum.dim_IntList", ReduceOp::Sum},
      {"aten::mean.default", ReduceOp::Avg},  {"aten::mean.dim", ReduceOp::Avg},
      {"aten::amax.default", ReduceOp::Max},  {"aten::amin.default", ReduceOp::Min},
      {"aten::max.default", ReduceOp::Max},   {"aten::min.default", ReduceOp::Min},
      {"aten::prod.default", ReduceOp::Product}, {"aten::nansum.default", ReduceOp::Sum},
      {"aten::prod.dim_int", ReduceOp::Product}, {"aten::all.default", ReduceOp::Product},
      {"aten::all.dim", ReduceOp::Product},   {"aten::any.default", ReduceOp::Sum},
      {"aten::any.dim", ReduceOp::Sum},       {"aten::any.dims", ReduceOp::Sum},
  };
  return m;
}

/// common_reduction_strategy (reduction_linear=True) for the input's current placements: they are
/// kept and a shard on a reduced dim becomes P(out), unless some Partial is not P(keeps) (any
/// Partial when `keeps` is unset, as for p-norms) or, for avg, a reduced dim is sharded unevenly;
/// then Partials and the reduced dims' shards are replicated first.
Cands commonReduction(const OpCall &call, const std::set<int64_t> &dims, bool keepdim, std::optional<ReduceOp> keeps,
                      ReduceOp out) {
  const Placements &cur = call.inputs[0].placements;
  auto shape = call.shape(0);
  bool linear = true;
  if (out == ReduceOp::Avg)
    for (int64_t d : dims)
      if (!isEvenlyShardableOnDim(shape, cur, *call.mesh, d))
        linear = false;
  for (const Placement &p : cur)
    if (p.isPartial() && (!keeps || p.reduceOp != *keeps)) // MaskPartial is a Partial(sum) here
      linear = false;
  Placements in = linear ? cur : replicateReductionDims(cur, dims);
  Cands c;
  c.push_back(followCandidate(call, in, mapAfterReduction(in, dims, call.rank(0), keepdim, out)));
  return c;
}

std::set<int64_t> reductionDims(const OpCall &call, const Argument *a);

llvm::Expected<Cands> linearReductionRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  ReduceOp op = linearReductions().lookup(call.op);
  int64_t rank = call.rank(0);
  llvm::StringRef opName = call.op;
  bool hasDimArg = opName == "aten::sum.dim_IntList" || opName == "aten::mean.dim" || opName == "aten::amax.default" ||
                   opName == "aten::amin.default" || opName == "aten::prod.dim_int" || opName == "aten::all.dim" ||
                   opName == "aten::any.dim" || opName == "aten::any.dims";
  // _infer_reduction_dims: no dim argument (or None) reduces every dim; an explicit [] reduces no dim
  // of a tensor with dims (DTensor keeps its shards, though torch's kernel sums everything: what
  // `x.amax(keepdim=True)` and autograd's mask.sum(dim, true) pass).
  std::set<int64_t> dims = reductionDims(call, hasDimArg ? call.arg("dim", 1) : nullptr);
  bool keepdim = false;
  if (hasDimArg)
    if (const Argument *a = call.arg("keepdim", 2); a && a->is<bool>())
      keepdim = a->get<bool>();
  if (dims.empty() && !keepdim && rank > 0 && llvm::any_of(call.inputs[0].placements, [](const Placement &p) {
        return p.isShard();
      }))
    return call.error("an explicit empty dim list reduces every dim in torch but none in DTensor, which would keep "
                      "the shard on the 0-dim result; not modelled");
  return commonReduction(call, dims, keepdim, op, op);
}

llvm::Expected<Cands> softmaxRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  auto d = call.intArg("dim", 1);
  if (!d)
    return call.error("missing dim argument");
  Placements in = replicateReductionDims(call.inputs[0].placements, {normDim(*d, call.rank(0))});
  Cands c;
  c.push_back(followCandidate(call, in, in));
  return c;
}

llvm::Expected<Cands> nllLossForwardRule(const OpCall &call) {
  if (call.inputs.size() < 2 || call.inputs.size() > 3)
    return call.error("expected 2 or 3 tensor operands, got {}", call.inputs.size());
  auto reduction = call.intArg("reduction", 3);
  if (!reduction)
    return call.error("missing reduction argument");
  int64_t rank = call.rank(0);
  int64_t channel = rank >= 2 ? 1 : 0;
  Placements in = replicateReductionDims(call.inputs[0].placements, {channel});
  Placements target;
  for (Placement p : in) {
    if (p.isShard() && p.dim >= channel)
      p.dim -= 1; // _skip_dim (the channel dim itself is no longer sharded)
    target.push_back(p);
  }
  Candidate c;
  c.inputs.push_back(in);
  c.inputs.push_back(target);
  if (call.inputs.size() == 3) {
    Placements w;
    for (const Placement &p : call.inputs[2].placements)
      w.push_back(p.isPartial() || p.isShard() ? Placement::replicate() : p);
    c.inputs.push_back(w);
  }
  auto targetShape = call.shape(1);
  int64_t trank = static_cast<int64_t>(targetShape.size());
  Placements out, totalWeight;
  if (*reduction == 0) { // none
    out = target;
    totalWeight = replicatePlacements(*call.mesh);
  } else {
    ReduceOp op = *reduction == 1 ? ReduceOp::Avg : ReduceOp::Sum;
    if (op == ReduceOp::Avg)
      for (int64_t d = 0; d < trank; ++d)
        if (!isEvenlyShardableOnDim(targetShape, target, *call.mesh, d))
          return call.error("The intermediate results of nll_loss cannot be evenly sharded, resulting in biased mean "
                            "result. (DTensor raises)");
    std::set<int64_t> all = allDims(trank);
    out = mapAfterReduction(target, all, trank, false, op);
    totalWeight = mapAfterReduction(target, all, trank, false, ReduceOp::Sum);
  }
  c.outputs.push_back(out);
  c.outputs.push_back(totalWeight);
  c.outputs.resize(call.results.size());
  return singleCandidate(call, std::move(c));
}

/// _infer_reduction_dims: the listed dims, normalised, or nullopt where torch's gives None (no dim
/// argument, or a 0-d input reduced over [], [0] or [-1]).
std::optional<std::set<int64_t>> inferReductionDims(const OpCall &call, const Argument *a) {
  int64_t rank = call.rank(0);
  std::optional<IntList> l;
  if (a && !a->isNone()) {
    if (auto v = a->asIntList())
      l = v;
    else if (auto i = a->asInt())
      l = IntList{*i};
  }
  if (!l || (rank == 0 && (l->empty() || (l->size() == 1 && ((*l)[0] == 0 || (*l)[0] == -1)))))
    return std::nullopt;
  std::set<int64_t> dims;
  for (int64_t d : *l)
    dims.insert(normDim(d, rank));
  return dims;
}

/// The reduced dims as the reductions read _infer_reduction_dims: None means every dim.
std::set<int64_t> reductionDims(const OpCall &call, const Argument *a) {
  if (std::optional<std::set<int64_t>> dims = inferReductionDims(call, a))
    return *dims;
  return allDims(call.rank(0));
}

/// common_reduction_strategy with reduction_linear=False: Partials and shards on the reduced dims
/// are replicated first, the output follows (reduced dims dropped unless keepdim).
Cands nonLinearReduction(const OpCall &call, const std::set<int64_t> &dims, bool keepdim) {
  Placements in = replicateReductionDims(call.inputs[0].placements, dims);
  Cands c;
  c.push_back(followCandidate(call, in, mapAfterReduction(in, dims, call.rank(0), keepdim, ReduceOp::Sum)));
  return c;
}

/// keepdim as DTensor reads it: `positional` says whether the strategy reads args_schema[pos]
/// (argmax, cumsum) or only the keyword (logsumexp, std/var: kwargs_schema["keepdim"]).
bool keepdimArg(const OpCall &call, unsigned pos, bool positional) {
  for (const NamedArgument &na : call.node->inputs())
    if (na.name == "keepdim" && (na.keyword || positional) && na.value.is<bool>())
      return na.value.get<bool>();
  if (positional)
    if (const Argument *a = call.arg("keepdim", pos); a && a->is<bool>())
      return a->get<bool>();
  return false;
}

/// The positional argument `pos` (args_schema[pos]); null when absent or given by keyword.
const Argument *positionalArg(const OpCall &call, unsigned pos) {
  llvm::ArrayRef<NamedArgument> ins = call.node->inputs();
  if (pos < ins.size() && !ins[pos].keyword)
    return &ins[pos].value;
  return nullptr;
}

/// cumsum / cumprod / logcumsumexp (scan_strategy): non-linear reduction over [dim] with keepdim.
/// DTensor compares the dim argument as written with the (non-negative) shard dims, so a negative
/// dim never matches a shard: the input keeps a shard on the scanned dim (only its Partials are
/// replicated). Reproduced as is.
llvm::Expected<Cands> scanRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  auto d = call.intArg("dim", 1);
  if (!d)
    return call.error("missing dim argument");
  std::set<int64_t> dims;
  if (*d >= 0)
    dims.insert(*d);
  return nonLinearReduction(call, dims, true);
}

/// argmax / argmin: non-linear reduction over args_schema[1] (None or absent: every dim), keepdim
/// args_schema[2]; both read positionally, as the strategy reads them.
llvm::Expected<Cands> argMinMaxRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  const Argument *keepdim = positionalArg(call, 2);
  return nonLinearReduction(call, reductionDims(call, positionalArg(call, 1)),
                            keepdim && keepdim->is<bool>() && keepdim->get<bool>());
}

/// logsumexp: non-linear reduction over the (normalised) dims; keepdim read from the keyword only.
llvm::Expected<Cands> logsumexpRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  const Argument *a = call.arg("dim", 1);
  if (!a || a->isNone())
    return call.error("missing dim argument");
  // logsumexp_strategy does not take None (every other reduction reads it as "all dims").
  std::optional<std::set<int64_t>> dims = inferReductionDims(call, a);
  if (!dims)
    return call.error("DTensor's logsumexp strategy raises for a 0-d input (\"Expected reduce_dims to not be None\")");
  return nonLinearReduction(call, *dims, keepdimArg(call, 2, false));
}

/// std / var .correction: non-linear reduction over dim (None: every dim); keepdim is keyword-only.
llvm::Expected<Cands> stdVarRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  return nonLinearReduction(call, reductionDims(call, positionalArg(call, 1)), keepdimArg(call, 2, false));
}

/// A p-norm over `dims` (vector_norm_strategy), p read as args_schema[1] (default 2): inf / -inf
/// reduce like amax / amin; any other p keeps no Partial (they are replicated with the reduced
/// shards), and a shard left on a reduced dim becomes P(sum) for p = 0 and _NormPartial(p)
/// otherwise.
llvm::Expected<Cands> normReduction(const OpCall &call, const std::set<int64_t> &dims, bool keepdim) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  double ord = 2;
  if (const Argument *a = positionalArg(call, 1)) {
    if (a->is<double>())
      ord = a->get<double>();
    else if (auto i = a->asInt())
      ord = static_cast<double>(*i);
    else
      return call.error("unsupported norm order argument");
  }
  if (std::isinf(ord)) {
    ReduceOp op = ord > 0 ? ReduceOp::Max : ReduceOp::Min;
    return commonReduction(call, dims, keepdim, op, op);
  }
  // No Partial survives into the input (the reduction is not linear for any), so each P(sum) of the
  // output is a reduced shard's: get_placement_from_reduction_op makes it _NormPartial(p), p != 0.
  Cands c = commonReduction(call, dims, keepdim, std::nullopt, ReduceOp::Sum);
  if (ord != 0)
    for (std::optional<Placements> &out : c[0].outputs)
      if (out)
        for (Placement &p : *out)
          if (p.isPartial())
            p = Placement::normPartial(ord);
  return c;
}

/// linalg_vector_norm(self, ord, dim, keepdim) / norm.Scalar(self, p): dim and keepdim read
/// positionally, as DTensor does.
llvm::Expected<Cands> vectorNormRule(const OpCall &call) {
  const Argument *k = positionalArg(call, 3);
  return normReduction(call, reductionDims(call, positionalArg(call, 2)), k && k->is<bool>() && k->get<bool>());
}

/// linalg__powsum(self, ord, dim, keepdim): sum(|x|^ord), linear for DTensor: P(sum) kept.
llvm::Expected<Cands> powsumRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  const Argument *k = positionalArg(call, 3);
  return commonReduction(call, reductionDims(call, positionalArg(call, 2)), k && k->is<bool>() && k->get<bool>(),
                         ReduceOp::Sum, ReduceOp::Sum);
}

/// One element of _foreach_norm(self[], ord) / _foreach_powsum(self[], ord): the whole tensor.
llvm::Expected<Cands> wholeNormRule(const OpCall &call) { return normReduction(call, allDims(call.rank(0)), false); }
llvm::Expected<Cands> wholePowsumRule(const OpCall &call) {
  return commonReduction(call, allDims(call.rank(0)), false, ReduceOp::Sum, ReduceOp::Sum);
}

llvm::Expected<Cands> foreachMaxRule(const OpCall &call) {
  return perElement(call, "aten::max.default", linearReductionRule);
}
llvm::Expected<Cands> foreachNormRule(const OpCall &call) { return perElement(call, call.op, wholeNormRule); }
llvm::Expected<Cands> foreachPowsumRule(const OpCall &call) { return perElement(call, call.op, wholePowsumRule); }

/// sort_strategy (topk, sort, cummax, cummin): full-mesh expansion of [R, R | R] and
/// [S(d), S(d) | S(d)] for every d but the (normalised) sort dim.
Cands sortLike(const OpCall &call, int64_t dim) {
  int64_t rank = call.rank(0);
  int64_t sortDim = normDim(dim, rank);
  std::vector<SingleDimRule> rules;
  rules.push_back(SingleDimRule(3, RP::R()));
  for (int64_t d = 0; d < rank; ++d)
    if (d != sortDim)
      rules.push_back(SingleDimRule(3, RP::of(Placement::shard(d))));
  ExpandOptions opts;
  opts.numOutputs = 2;
  opts.insertReplicate = false;
  opts.fillPlaceholders = false;
  return expandSingleDim(call, std::move(rules), opts);
}

llvm::Expected<Cands> topkRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  const Argument *a = positionalArg(call, 2);
  return sortLike(call, a && a->asInt() ? *a->asInt() : -1);
}

llvm::Expected<Cands> sortRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  std::optional<int64_t> dim;
  if (call.op == "aten::sort.stable") { // dim is keyword-only
    for (const NamedArgument &na : call.node->inputs())
      if (na.name == "dim" && na.keyword)
        dim = na.value.asInt();
  } else if (const Argument *a = positionalArg(call, 1)) {
    dim = a->asInt();
  }
  return sortLike(call, dim.value_or(-1));
}

llvm::Expected<Cands> cumMaxMinRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  auto d = call.intArg("dim", 1);
  if (!d)
    return call.error("missing dim argument");
  return sortLike(call, *d);
}

/// max.dim / min.dim / median.dim / nanmedian.dim / mode / kthvalue: single-dim strategies
/// [S(out d), S(out d) | S(d)] for every d but the reduced dim (values and indices), the implicit
/// all-Replicate rule first. `dimPos`: position of the dim argument (kthvalue: 2), -1 if absent.
llvm::Expected<Cands> dimWithIndicesRule(const OpCall &call, unsigned dimPos, unsigned keepPos) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  int64_t rank = call.rank(0);
  const Argument *a = positionalArg(call, dimPos);
  int64_t dim = normDim(a && a->asInt() ? *a->asInt() : -1, rank);
  const Argument *k = positionalArg(call, keepPos);
  bool keepdim = k && k->is<bool>() && k->get<bool>();
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == dim)
      continue;
    int64_t outD = keepdim || d < dim ? d : d - 1;
    rules.push_back({RP::ph(outD), RP::ph(outD), RP::ph(d)});
  }
  ExpandOptions opts;
  opts.numOutputs = 2;
  return expandSingleDim(call, std::move(rules), opts);
}

llvm::Expected<Cands> maxMinDimRule(const OpCall &call) { return dimWithIndicesRule(call, 1, 2); }
llvm::Expected<Cands> kthvalueRule(const OpCall &call) { return dimWithIndicesRule(call, 2, 3); }

/// histc: full-mesh expansion of [R | R] and, when min and max are both given positionally
/// (four arguments), [P(sum) | S(d)] for every dim (fixed bin edges make per-shard counts add up).
llvm::Expected<Cands> histcRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  std::vector<SingleDimRule> rules;
  rules.push_back({RP::R(), RP::R()});
  llvm::ArrayRef<NamedArgument> ins = call.node->inputs();
  size_t positional = 0;
  while (positional < ins.size() && !ins[positional].keyword)
    ++positional;
  if (positional == 4)
    for (int64_t d = 0; d < call.rank(0); ++d)
      rules.push_back({RP::P(), RP::of(Placement::shard(d))});
  ExpandOptions opts;
  opts.insertReplicate = false;
  opts.fillPlaceholders = false;
  return expandSingleDim(call, std::move(rules), opts);
}

} // namespace

void registerReductionRules(RuleTable &t) {
  for (const auto &e : linearReductions())
    t[e.getKey()] = linearReductionRule;
  t["aten::_softmax.default"] = softmaxRule;
  t["aten::_log_softmax.default"] = softmaxRule;
  t["aten::_safe_softmax.default"] = softmaxRule;
  t["aten::nll_loss_forward.default"] = nllLossForwardRule;
  t["aten::nll_loss2d_forward.default"] = nllLossForwardRule; // the same strategy in DTensor
  for (const char *op : {"aten::cumsum.default", "aten::cumprod.default", "aten::logcumsumexp.default"})
    t[op] = scanRule;
  t["aten::logsumexp.default"] = logsumexpRule;
  t["aten::argmax.default"] = argMinMaxRule;
  t["aten::argmin.default"] = argMinMaxRule;
  t["aten::std.correction"] = stdVarRule;
  t["aten::median.default"] = stdVarRule; // global median: every dim, non-linear
  t["aten::nanmedian.default"] = stdVarRule;
  t["aten::var.correction"] = stdVarRule;
  t["aten::var_mean.correction"] = stdVarRule; // one output spec for both results
  t["aten::topk.default"] = topkRule;
  t["aten::sort.default"] = sortRule;
  t["aten::sort.stable"] = sortRule;
  t["aten::cummax.default"] = cumMaxMinRule;
  t["aten::cummin.default"] = cumMaxMinRule;
  for (const char *op : {"aten::max.dim", "aten::min.dim", "aten::median.dim", "aten::nanmedian.dim",
                         "aten::mode.default"})
    t[op] = maxMinDimRule;
  t["aten::kthvalue.default"] = kthvalueRule;
  t["aten::histc.default"] = histcRule;
  t["aten::linalg_vector_norm.default"] = vectorNormRule;
  t["aten::norm.Scalar"] = vectorNormRule;
  t["aten::linalg__powsum.default"] = powsumRule;
  t["aten::_foreach_max.default"] = foreachMaxRule;
  t["aten::_foreach_norm.Scalar"] = foreachNormRule;
  t["aten::_foreach_powsum.Scalar"] = foreachPowsumRule;
}

} // namespace commlens::rules
