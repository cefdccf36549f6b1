// Strategies of the backward ops autograd runs (torch 2.13 `_ops/_math_ops.py`,
// `_ops/_embedding_ops.py`, `_ops/_matrix_ops.py`); the pointwise backward ops
// (threshold_backward, gelu_backward, silu_backward, ...) are pointwise rules, mm/bmm/sum/view
// reuse the forward ones.
//   native_layer_norm_backward: per outer dim d < axis, single-dim
//     [S(d), P (weight grad), P (bias grad) | S(d) grad_out, S(d) input, S(d) mean, S(d) rstd,
//      R weight, R bias]  (placeholders), plus the implicit all-Replicate rule;
//   _fused_rms_norm_backward: the same with [S(d), P | S(d) grad_out, S(d) input, S(d) rstd, R];
//   _softmax_backward_data / _log_softmax_backward_data: one candidate following whichever of
//     grad_output / output has more shards, with Partials and shards of the softmax dim replicated;
//   native_batch_norm_backward: per channel, [S(1), S(0), S(0) | S(1), S(1), S(0) ...];
//   nll_loss_backward (and nll_loss2d_backward): self with Partials and the class dim replicated, target following it,
//     grad_output replicated (or like the target for reduction none), the gradient like self;
//   embedding_dense_backward(grad_output, indices): single-dim [S(1) | S(grad.ndim-1), R],
//     [P | S(i), S(i)] per indices dim, [P | P, R];
//   native_group_norm_backward: no strategy; DTensor derives one from torch._decomp's
//     decomposition (DecompShardingStrategy) and runs the kernel on the local shards with the
//     call's global N, C and HxW: all-Replicate operands with a weight run whole, anything else
//     is refused;
//   SDPA's CPU backward: no strategy (DTensor raises), as the forward;
//   select_backward(grad, input_sizes, dim, index): grad kept as it is (Partial included), the
//     result's shard dims at or after `dim` shifted up by one;
//   slice_backward(grad, input_sizes, dim, ...): grad's placements with Shard(dim) replicated.
//   Both compare shard dims with `dim` as passed (autograd passes the forward call's own dim).
#include "dtensor/rules/RuleEngine.h"

namespace commlens::rules {

namespace {

using RP = RulePlacement;

int64_t numShards(const Placements &ps, const DeviceMesh &mesh) {
  int64_t n = 1;
  for (size_t i = 0; i < ps.size() && i < mesh.ndim(); ++i)
    if (ps[i].isShard())
      n *= mesh.shape[i];
  return n;
}

Placements replicateDims(const Placements &ps, int64_t dim) {
  Placements out;
  for (const Placement &p : ps)
    out.push_back(p.isPartial() || (p.isShard() && p.dim == dim) ? Placement::replicate() : p);
  return out;
}

llvm::Expected<Cands> layerNormBackwardRule(const OpCall &call) {
  if (call.inputs.size() < 4)
    return call.error("expected grad_out, input, mean, rstd (and weight, bias), got {} tensor operands",
                      call.inputs.size());
  auto ns = call.intListArg("normalized_shape", 2);
  if (!ns)
    return call.error("missing normalized_shape argument");
  int64_t axis = call.rank(1) - static_cast<int64_t>(ns->size());
  unsigned numOutputs = static_cast<unsigned>(call.results.size());
  unsigned extra = static_cast<unsigned>(call.inputs.size()) - 4; // weight, bias present
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < axis; ++d) {
    SingleDimRule r{RP::ph(d)};
    for (unsigned k = 1; k < numOutputs; ++k)
      r.push_back(RP::P());
    for (int k = 0; k < 4; ++k)
      r.push_back(RP::ph(d));
    for (unsigned k = 0; k < extra; ++k)
      r.push_back(RP::R());
    rules.push_back(std::move(r));
  }
  ExpandOptions opts;
  opts.numOutputs = numOutputs;
  return expandSingleDim(call, std::move(rules), opts);
}

/// _fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight?): per outer dim d,
/// [S(d), P (weight grad) | S(d) grad_out, S(d) input, S(d) rstd, R weight].
llvm::Expected<Cands> rmsNormBackwardRule(const OpCall &call) {
  if (call.inputs.size() < 3)
    return call.error("expected grad_out, input, rstd (and weight), got {} tensor operands", call.inputs.size());
  auto ns = call.intListArg("normalized_shape", 2);
  if (!ns)
    return call.error("missing normalized_shape argument");
  int64_t axis = call.rank(1) - static_cast<int64_t>(ns->size());
  unsigned numOutputs = static_cast<unsigned>(call.results.size());
  unsigned extra = static_cast<unsigned>(call.inputs.size()) - 3;
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < axis; ++d) {
    SingleDimRule r{RP::ph(d)};
    for (unsigned k = 1; k < numOutputs; ++k)
      r.push_back(RP::P());
    for (int k = 0; k < 3; ++k)
      r.push_back(RP::ph(d));
    for (unsigned k = 0; k < extra; ++k)
      r.push_back(RP::R());
    rules.push_back(std::move(r));
  }
  ExpandOptions opts;
  opts.numOutputs = numOutputs;
  return expandSingleDim(call, std::move(rules), opts);
}

llvm::Expected<Cands> softmaxBackwardRule(const OpCall &call) {
  if (call.inputs.size() != 2)
    return call.error("expected grad_output and output, got {} tensor operands", call.inputs.size());
  auto d = call.intArg("dim", 2);
  if (!d)
    return call.error("missing dim argument");
  int64_t dim = normDim(*d, call.rank(0));
  const Placements &g = call.inputs[0].placements, &o = call.inputs[1].placements;
  const Placements &src = numShards(g, *call.mesh) >= numShards(o, *call.mesh) ? g : o;
  Placements tgt = replicateDims(src, dim);
  Candidate c;
  c.inputs = {tgt, tgt};
  for (size_t i = 0; i < call.results.size(); ++i)
    c.outputs.push_back(tgt);
  return singleCandidate(call, std::move(c));
}

/// nll_loss_backward(grad_output, self, target, weight?, reduction, ignore_index, total_weight):
/// self with Partials and the class dim replicated; target following it without the class dim;
/// grad_output like the target (reduction none) or replicated; weight replicated; total_weight
/// replicated for mean; the gradient follows self.
llvm::Expected<Cands> nllLossBackwardRule(const OpCall &call) {
  if (call.inputs.size() < 4 || call.inputs.size() > 5)
    return call.error("expected grad_output, self, target, (weight,) total_weight, got {} tensor operands",
                      call.inputs.size());
  auto reduction = call.intArg("reduction", 4);
  if (!reduction)
    return call.error("missing reduction argument");
  int64_t channel = call.rank(1) >= 2 ? 1 : 0;
  Placements in = replicateDims(call.inputs[1].placements, channel);
  Placements target;
  for (Placement p : in) {
    if (p.isShard() && p.dim > channel)
      p.dim -= 1;
    target.push_back(p);
  }
  auto allReplicate = [&](const Placements &ps) {
    Placements out;
    for (size_t i = 0; i < ps.size(); ++i)
      out.push_back(Placement::replicate());
    return out;
  };
  Candidate c;
  c.inputs.push_back(*reduction == 0 ? target : allReplicate(call.inputs[0].placements));
  c.inputs.push_back(in);
  c.inputs.push_back(target);
  if (call.inputs.size() == 5)
    c.inputs.push_back(allReplicate(call.inputs[3].placements));
  const Placements &tw = call.inputs.back().placements;
  c.inputs.push_back(*reduction == 1 ? allReplicate(tw) : tw);
  for (size_t i = 0; i < call.results.size(); ++i)
    c.outputs.push_back(in);
  return singleCandidate(call, std::move(c));
}

llvm::Expected<Cands> embeddingDenseBackwardRule(const OpCall &call) {
  if (call.inputs.size() != 2)
    return call.error("expected grad_output and indices, got {} tensor operands", call.inputs.size());
  int64_t gradRank = call.rank(0), idxRank = call.rank(1);
  std::vector<SingleDimRule> rules;
  rules.push_back({RP::of(Placement::shard(1)), RP::of(Placement::shard(gradRank - 1)), RP::R()});
  for (int64_t i = 0; i < idxRank; ++i)
    rules.push_back({RP::P(), RP::of(Placement::shard(i)), RP::of(Placement::shard(i))});
  rules.push_back({RP::P(), RP::P(), RP::R()});
  ExpandOptions opts;
  return expandSingleDim(call, std::move(rules), opts);
}

/// native_batch_norm_backward: per channel, single-dim [S(1), S(0), S(0) | S(1) grad_out, S(1) input,
/// S(0) for every [C] operand].
llvm::Expected<Cands> batchNormBackwardRule(const OpCall &call) {
  if (call.inputs.size() < 2)
    return call.error("expected grad_out and input operands, got {} tensor operands", call.inputs.size());
  SingleDimRule r = {RP::ph(1), RP::ph(0), RP::ph(0), RP::ph(1), RP::ph(1)};
  r.append(call.inputs.size() - 2, RP::ph(0));
  ExpandOptions opts;
  opts.numOutputs = 3;
  return expandSingleDim(call, {r}, opts);
}

llvm::Expected<Cands> selectBackwardRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  auto dim = call.intArg("dim", 2);
  if (!dim)
    return call.error("missing dim argument");
  const Placements &in = call.inputs[0].placements;
  Placements out;
  for (const Placement &p : in)
    out.push_back(p.isShard() && p.dim >= *dim ? Placement::shard(p.dim + 1) : p);
  return singleCandidate(call, followCandidate(call, in, out));
}

llvm::Expected<Cands> sliceBackwardRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  auto dim = call.intArg("dim", 2);
  if (!dim)
    return call.error("missing dim argument");
  Placements p;
  for (const Placement &x : call.inputs[0].placements)
    p.push_back(x.isShard() && x.dim == *dim ? Placement::replicate() : x);
  return singleCandidate(call, followCandidate(call, p, p));
}

/// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, mask): with
/// every operand Replicate the kernel runs whole on each rank and its gradients are Replicate.
/// Without a weight DTensor raises (its decomposition's torch.ones is a plain tensor), and with a
/// gradient masked off (no bias, an input needing none) too (the decomposition returns fewer
/// outputs than the op): refused.
/// A sharded or partial operand is refused: DTensor's strategy then comes from tracing the
/// decomposition, and the kernel checks the local shards against the global N, C and HxW (a
/// Shard(0) input raises "Expected dY.numel() == N * C * HxW"), which commlens does not model.
llvm::Expected<Cands> groupNormBackwardRule(const OpCall &call) {
  if (call.inputs.size() < 5) // grad_out, input, mean, rstd and no weight
    return call.error("without a weight DTensor has no strategy for it (the decomposition it would derive one from "
                      "multiplies by a plain torch.ones; DTensor raises \"does not have a sharding strategy "
                      "registered\")");
  const Argument *maskArg = call.arg("output_mask", 9);
  BoolList mask = maskArg && maskArg->is<BoolList>() ? maskArg->get<BoolList>() : BoolList{};
  if (mask.size() != 3 || llvm::is_contained(mask, false)) {
    std::string shown;
    for (bool b : mask)
      shown += fmt::format("{}{}", shown.empty() ? "" : ", ", b ? "True" : "False");
    return call.error("with a gradient not asked for (output_mask [{}]) DTensor raises: the decomposition it derives "
                      "the strategy from returns fewer outputs than the op's 3",
                      shown);
  }
  for (size_t i = 0; i < call.inputs.size(); ++i)
    if (!llvm::all_of(call.inputs[i].placements, [](const Placement &p) { return p.isReplicate(); }))
      return call.error("operand {} is {}: DTensor has no strategy for it and derives one from torch._decomp's "
                        "decomposition, then runs the kernel on the local shards with the call's global N, C and HxW "
                        "(a batch shard raises \"Expected dY.numel() == N * C * HxW\"); only Replicate operands are "
                        "modelled",
                        i, str(call.inputs[i].placements));
  Placements replicated(call.mesh->ndim(), Placement::replicate());
  Candidate c;
  c.inputs.assign(call.inputs.size(), replicated);
  c.outputs.assign(call.results.size(), replicated);
  return singleCandidate(call, std::move(c));
}

} // namespace

void registerBackwardRules(RuleTable &t) {
  t["aten::native_layer_norm_backward.default"] = layerNormBackwardRule;
  t["aten::native_group_norm_backward.default"] = groupNormBackwardRule;
  t["aten::_fused_rms_norm_backward.default"] = rmsNormBackwardRule;
  t["aten::_softmax_backward_data.default"] = softmaxBackwardRule;
  t["aten::_log_softmax_backward_data.default"] = softmaxBackwardRule;
  t["aten::embedding_dense_backward.default"] = embeddingDenseBackwardRule;
  t["aten::nll_loss_backward.default"] = nllLossBackwardRule;
  t["aten::nll_loss2d_backward.default"] = nllLossBackwardRule; // the same strategy in DTensor
  t["aten::native_batch_norm_backward.default"] = batchNormBackwardRule;
  t["aten::select_backward.default"] = selectBackwardRule;
  t["aten::slice_backward.default"] = sliceBackwardRule;
}

} // namespace commlens::rules
