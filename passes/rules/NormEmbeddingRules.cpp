// native_layer_norm, _fused_rms_norm and embedding (torch 2.13 `_ops/_math_ops.py`,
// `_ops/_embedding_ops.py`): single-dim strategies.
//   native_layer_norm: per outer dim d < axis (axis = rank - len(normalized_shape)):
//     [S(d), S(d), S(d) | S(d), R (weight), R (bias)]   (placeholders; no Partial rule, so a
//     Partial input or a shard on a normalized dim goes to R)
//   _fused_rms_norm: [S(d), S(d) | S(d), R (weight)]
//   embedding(weight, indices): [S(indices.ndim) | S(1), R] (colwise),
//     [MaskP | S(0), MaskP] (rowwise: the indices go R -> MaskPartial locally),
//     [S(i) | R, S(i)] per indices dim (batch); concrete placements, not placeholders.
#include "passes/rules/RuleEngine.h"

namespace commlens::rules {

namespace {

using RP = RulePlacement;

llvm::Expected<Cands> normRule(const OpCall &call, unsigned numOutputs) {
  if (call.inputs.empty())
    return call.error("no tensor operands");
  auto ns = call.intListArg("normalized_shape", 1);
  if (!ns)
    return call.error("missing normalized_shape argument");
  int64_t axis = call.rank(0) - static_cast<int64_t>(ns->size());
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < axis; ++d) {
    SingleDimRule r(numOutputs + 1, RP::ph(d));
    for (size_t k = 1; k < call.inputs.size(); ++k)
      r.push_back(RP::R());
    rules.push_back(std::move(r));
  }
  ExpandOptions opts;
  opts.numOutputs = numOutputs;
  auto cands = expandSingleDim(call, std::move(rules), opts);
  for (Candidate &c : cands)
    c.outputs.resize(call.results.size());
  return cands;
}

llvm::Expected<Cands> layerNormRule(const OpCall &call) { return normRule(call, 3); }
llvm::Expected<Cands> rmsNormRule(const OpCall &call) { return normRule(call, 2); }

llvm::Expected<Cands> embeddingRule(const OpCall &call) {
  if (call.inputs.size() != 2)
    return call.error("expected two tensor operands (weight, indices), got {}", call.inputs.size());
  int64_t idxRank = call.rank(1);
  Placement mp{Placement::Kind::MaskPartial, 0, 1, ReduceOp::Sum};
  std::vector<SingleDimRule> rules;
  rules.push_back({RP::of(Placement::shard(idxRank)), RP::of(Placement::shard(1)), RP::R()});
  rules.push_back({RP::of(mp), RP::of(Placement::shard(0)), RP::of(mp)});
  for (int64_t i = 0; i < idxRank; ++i)
    rules.push_back({RP::of(Placement::shard(i)), RP::R(), RP::of(Placement::shard(i))});
  ExpandOptions opts;
  return expandSingleDim(call, std::move(rules), opts);
}

/// SDPA on a CPU mesh reaches DTensor as _scaled_dot_product_flash_attention_for_cpu, which has
/// no strategy in torch 2.13 (its decomposition fallback fails too): DTensor raises
/// NotImplementedError, so do we.
llvm::Expected<Cands> sdpaCpuRule(const OpCall &call) {
  return call.error("torch 2.13 DTensor has no sharding strategy for this op (NotImplementedError); "
                    "scaled_dot_product_attention on CPU DTensors fails at runtime");
}

} // namespace

void registerNormEmbeddingRules(RuleTable &t) {
  t["aten::native_layer_norm.default"] = layerNormRule;
  t["aten::_fused_rms_norm.default"] = rmsNormRule;
  t["aten::embedding.default"] = embeddingRule;
  t["aten::_scaled_dot_product_flash_attention_for_cpu.default"] = sdpaCpuRule;
}

} // namespace commlens::rules
