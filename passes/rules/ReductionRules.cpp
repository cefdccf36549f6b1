// Reductions, softmax and nll_loss_forward (torch 2.13 `_ops/_math_ops.py`); each strategy has
// one candidate derived from the input's current placements:
//   linear reductions (sum -> P(sum), mean -> P(avg), amax -> P(max), amin -> P(min)): a Shard on
//     a reduced dim becomes the reduction's Partial with no communication, other shard dims are
//     renumbered; the input is first replicated on the reduced dims and cleared of Partials when
//     the reduction is not "linear" for it: a Partial whose op differs from the reduction's, or
//     (mean only) a reduced dim that is not evenly sharded;
//   _softmax / _log_softmax: the softmax dim is unsharded and every Partial replicated;
//   nll_loss_forward: the class dim (1, or 0 for 1-D input) unsharded and Partials replicated;
//     the target follows that with the class dim removed; weight replicated; the loss is a
//     reduction of the target placements (avg for mean, sum for sum; none keeps the target's).
#include "passes/rules/RuleEngine.h"

#include <set>

namespace commlens::rules {

namespace {

using Cands = llvm::SmallVector<Candidate, 8>;

/// replicate_reduction_dims: Partials and shards on `dims` -> R.
Placements replicateReductionDims(llvm::ArrayRef<Placement> ps, const std::set<int64_t> &dims) {
  Placements out;
  for (const Placement &p : ps)
    out.push_back(p.isPartial() || (p.isShard() && dims.count(p.dim)) ? Placement::replicate() : p);
  return out;
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
  };
  return m;
}

llvm::Expected<Cands> linearReductionRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  ReduceOp op = linearReductions().lookup(call.op);
  int64_t rank = call.rank(0);
  std::set<int64_t> dims;
  bool hasDimArg = call.op == "aten::sum.dim_IntList" || call.op == "aten::mean.dim" ||
                   call.op == "aten::amax.default" || call.op == "aten::amin.default";
  std::optional<IntList> dimList = hasDimArg ? call.intListArg("dim", 1) : std::nullopt;
  // An empty dim list is what the exporter writes for the schema default (reduce everything).
  if (dimList && !dimList->empty() && rank > 0) {
    for (int64_t d : *dimList)
      dims.insert(normDim(d, rank));
  } else {
    for (int64_t d = 0; d < rank; ++d)
      dims.insert(d);
  }
  bool keepdim = false;
  if (hasDimArg)
    if (const Argument *a = call.arg("keepdim", 2); a && a->is<bool>())
      keepdim = a->get<bool>();

  const Placements &cur = call.inputs[0].placements;
  auto shape = call.shape(0);
  bool linear = true;
  if (op == ReduceOp::Avg)
    for (int64_t d : dims)
      if (!isEvenlyShardableOnDim(shape, cur, *call.mesh, d))
        linear = false;
  for (const Placement &p : cur)
    if (p.isPartial() && p.reduceOp != op) // MaskPartial is a Partial(sum) here
      linear = false;
  Placements in = linear ? cur : replicateReductionDims(cur, dims);
  Cands c;
  c.push_back(followCandidate(call, in, mapAfterReduction(in, dims, rank, keepdim, op)));
  return c;
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
    std::set<int64_t> all;
    for (int64_t d = 0; d < trank; ++d)
      all.insert(d);
    out = mapAfterReduction(target, all, trank, false, op);
    totalWeight = mapAfterReduction(target, all, trank, false, ReduceOp::Sum);
  }
  c.outputs.push_back(out);
  c.outputs.push_back(totalWeight);
  c.outputs.resize(call.results.size());
  assignCosts(call, c);
  Cands cs;
  cs.push_back(std::move(c));
  return cs;
}

} // namespace

void registerReductionRules(RuleTable &t) {
  for (const auto &e : linearReductions())
    t[e.getKey()] = linearReductionRule;
  t["aten::_softmax.default"] = softmaxRule;
  t["aten::_log_softmax.default"] = softmaxRule;
  t["aten::_safe_softmax.default"] = softmaxRule;
  t["aten::nll_loss_forward.default"] = nllLossForwardRule;
}

} // namespace commlens::rules
