// Tensor-manipulation ops (torch 2.13 `_ops/_tensor_ops.py`):
//   contiguous / detach / alias: one candidate following the input exactly (Partial included);
//   split.Tensor / split_with_sizes: one candidate, the split dim unsharded, every piece follows;
//   slice.Tensor: keep the input placements unless the slice dim is sharded (and the slice is not
//     statically the whole dim), else unshard the slice dim;
//   select.int: unshard the selected dim, shift later shard dims down;
//   cat: one candidate per distinct input placement (the cat dim unsharded), every input moved
//     to it, then min-cost selection;
//   index_select: single-dim [S(d) | S(d), R] for d != dim, [S(dim) | R, S(0)],
//     [P(op) | P(op), R] for sum, avg, min, max, product;
//   gather: full-mesh expansion of [R|R,R], [MaskP | S(dim), MaskP] when index.size(dim) == 1,
//     [S(dim) | R, S(dim)], [S(d) | S(d), S(d)] for d != dim when ranks agree.
#include "passes/rules/RuleEngine.h"

#include <set>

namespace commlens::rules {

namespace {

using RP = RulePlacement;
using Cands = llvm::SmallVector<Candidate, 8>;

llvm::Expected<Cands> followInputRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  Cands c;
  c.push_back(followCandidate(call, call.inputs[0].placements, call.inputs[0].placements));
  return c;
}

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

} // namespace

void registerTensorRules(RuleTable &t) {
  for (const char *op : {"aten::contiguous.default", "aten::detach.default", "aten::alias.default",
                         "aten::detach_.default"})
    t[op] = followInputRule;
  t["aten::split.Tensor"] = splitRule;
  t["aten::split_with_sizes.default"] = splitRule;
  t["aten::slice.Tensor"] = sliceRule;
  t["aten::select.int"] = selectRule;
  t["aten::cat.default"] = catRule;
  t["aten::index_select.default"] = indexSelectRule;
  t["aten::gather.default"] = gatherRule;
}

} // namespace commlens::rules
