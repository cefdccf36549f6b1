// Scaled dot product attention kernels (torch 2.13 `_ops/_matrix_ops.py`): fixed candidate lists
// expanded over the mesh (expand_to_full_mesh_op_strategy), without context-parallel entries:
//   all Replicate; heads sharded (q, k, v, output, logsumexp on dim 1); batch sharded (dim 0).
// Entries follow the node's tensor results, then its tensor operands; DTensor's None entries
// for non-tensor results (cum_seq_*, max_*) are dropped, and a None on a tensor result (a
// philox tensor DTensor leaves plain) stays None. Placements per kernel:
//   flash:     [out, lse, philox_seed R, philox_offset None, debug_mask R | q, k, v]
//   efficient: [out, lse, seed None, offset None | q, k, v, (attn_bias)]  (lse R when not computed)
//   cudnn:     [out, lse, seed None, offset None | q, k, v]  (torch 2.13 lists no attn_bias entry
//              outside all-Replicate, so DTensor fails on a bias: so do we)
// Backward: [grad_q, grad_k, grad_v, (grad_bias) | grad_out, q, k, v, (bias), out, lse, rest R].
// The CPU kernel (_scaled_dot_product_flash_attention_for_cpu) has no strategy.
#include "dtensor/rules/RuleEngine.h"

namespace commlens::rules {

namespace {

using RP = RulePlacement;

RP shard(int64_t d) { return RP::of(Placement::shard(d)); }

/// One of the three sharding patterns: Replicate (nullopt), heads (1) or batch (0).
RP pat(std::optional<int64_t> d) { return d ? shard(*d) : RP::R(); }

llvm::Expected<Cands> expandFixed(const OpCall &call, std::vector<SingleDimRule> rules, unsigned numOutputs) {
  for (const SingleDimRule &r : rules)
    if (r.size() != numOutputs + call.inputs.size())
      return call.error("expected {} tensor operands, got {}", r.size() - numOutputs, call.inputs.size());
  ExpandOptions opts;
  opts.numOutputs = numOutputs;
  opts.insertReplicate = false;
  return expandSingleDim(call, std::move(rules), opts);
}

constexpr std::optional<int64_t> kPatterns[] = {std::nullopt, 1, 0};

llvm::Expected<Cands> flashRule(const OpCall &call) {
  std::vector<SingleDimRule> rules;
  for (auto d : kPatterns)
    rules.push_back({pat(d), pat(d), RP::R(), RP::none(), RP::R(), pat(d), pat(d), pat(d)});
  return expandFixed(call, std::move(rules), 5);
}

bool computesLogsumexp(const OpCall &call) {
  const Argument *a = call.arg("compute_log_sumexp", 4);
  return a && a->is<bool>() && a->get<bool>();
}

llvm::Expected<Cands> efficientRule(const OpCall &call) {
  bool lse = computesLogsumexp(call);
  bool bias = call.inputs.size() == 4;
  std::vector<SingleDimRule> rules;
  for (auto d : kPatterns) {
    SingleDimRule r{pat(d), lse ? pat(d) : RP::R(), RP::none(), RP::none(), pat(d), pat(d), pat(d)};
    if (bias)
      r.push_back(pat(d));
    rules.push_back(std::move(r));
  }
  return expandFixed(call, std::move(rules), 4);
}

llvm::Expected<Cands> cudnnRule(const OpCall &call) {
  if (call.inputs.size() > 3)
    return call.error("torch 2.13 DTensor's strategy lists no attn_bias placement for its heads and batch "
                      "patterns, so DTensor fails on cuDNN attention with an attn_mask");
  bool lse = computesLogsumexp(call);
  std::vector<SingleDimRule> rules;
  for (auto d : kPatterns)
    rules.push_back({pat(d), lse ? pat(d) : RP::R(), RP::none(), RP::none(), pat(d), pat(d), pat(d)});
  return expandFixed(call, std::move(rules), 4);
}

/// Backward kernels: `numGrads` results, then grad_out, q, k, v, [bias], out, lse (the
/// pattern) and every further tensor operand (philox state) Replicate.
llvm::Expected<Cands> backwardRule(const OpCall &call, unsigned numGrads, bool bias) {
  unsigned patterned = 6 + (bias ? 1 : 0);
  if (call.inputs.size() < patterned)
    return call.error("expected at least {} tensor operands, got {}", patterned, call.inputs.size());
  std::vector<SingleDimRule> rules;
  for (auto d : kPatterns) {
    SingleDimRule r(numGrads + patterned, pat(d));
    r.append(call.inputs.size() - patterned, RP::R());
    rules.push_back(std::move(r));
  }
  return expandFixed(call, std::move(rules), numGrads);
}

llvm::Expected<Cands> flashBackwardRule(const OpCall &call) { return backwardRule(call, 3, false); }

llvm::Expected<Cands> efficientBackwardRule(const OpCall &call) {
  const Argument *bias = call.arg("attn_bias", 4);
  bool hasBias = bias && !bias->isNone();
  return backwardRule(call, hasBias && call.results.size() == 4 ? 4 : 3, hasBias);
}

llvm::Expected<Cands> cudnnBackwardRule(const OpCall &call) {
  // Operands: grad_out, q, k, v, out, lse, philox_seed, philox_offset, (attn_bias): the bias
  // follows the philox pair, so it is patterned on its own.
  const Argument *bias = call.arg("attn_bias", 8);
  bool hasBias = bias && !bias->isNone();
  std::vector<SingleDimRule> rules;
  for (auto d : kPatterns) {
    SingleDimRule r(3 + 6, pat(d));
    r.append({RP::R(), RP::R()});
    if (hasBias)
      r.push_back(pat(d));
    rules.push_back(std::move(r));
  }
  return expandFixed(call, std::move(rules), 3);
}

/// The CPU kernels have no strategy in torch 2.13 (their decomposition fallback fails too):
/// DTensor raises NotImplementedError, so do we.
llvm::Expected<Cands> sdpaCpuRule(const OpCall &call) {
  return call.error("torch 2.13 DTensor has no sharding strategy for this op (NotImplementedError); "
                    "scaled_dot_product_attention on CPU DTensors fails at runtime");
}

llvm::Expected<Cands> sdpaCpuBackwardRule(const OpCall &call) {
  return call.error("torch 2.13 DTensor has no sharding strategy for this op (NotImplementedError)");
}

} // namespace

void registerAttentionRules(RuleTable &t) {
  t["aten::_scaled_dot_product_flash_attention.default"] = flashRule;
  t["aten::_scaled_dot_product_efficient_attention.default"] = efficientRule;
  t["aten::_scaled_dot_product_cudnn_attention.default"] = cudnnRule;
  t["aten::_scaled_dot_product_flash_attention_backward.default"] = flashBackwardRule;
  t["aten::_scaled_dot_product_efficient_attention_backward.default"] = efficientBackwardRule;
  t["aten::_scaled_dot_product_cudnn_attention_backward.default"] = cudnnBackwardRule;
  t["aten::_scaled_dot_product_flash_attention_for_cpu.default"] = sdpaCpuRule;
  t["aten::_scaled_dot_product_flash_attention_for_cpu_backward.default"] = sdpaCpuBackwardRule;
}

} // namespace commlens::rules
