// Normalizations and embedding (torch 2.13 `_ops/_math_ops.py`,
// `_ops/_embedding_ops.py`): single-dim strategies.
//   native_layer_norm: per outer dim d < axis (axis = rank - len(normalized_shape)):
//     [S(d), S(d), S(d) | S(d), R (weight), R (bias)]   (placeholders; no Partial rule, so a
//     Partial input or a shard on a normalized dim goes to R)
//   _fused_rms_norm: [S(d), S(d) | S(d), R (weight)]
//   batch norm (native_batch_norm, _native_batch_norm_legit*, the functional variants): per
//     channel, so [S(1) out, S(0) save_mean, S(0) save_invstd, (R reserve), (S(0) updated running
//     stats) | S(1) input, S(0) for every [C] operand]; native_group_norm: per sample,
//     [S(0) x 3 | S(0), R ...];
//   embedding(weight, indices): [S(indices.ndim) | S(1), R] (colwise),
//     [MaskP | S(0), MaskP] (rowwise: the indices go R -> MaskPartial locally),
//     [S(i) | R, S(i)] per indices dim (batch); concrete placements, not placeholders.
#include "dtensor/rules/RuleEngine.h"

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

struct BatchNorm {
  bool reserve;      ///< _batch_norm_with_update: an opaque workspace result, replicated
  bool runningStats; ///< functional variants: the updated running_mean / running_var
};

const llvm::StringMap<BatchNorm> &batchNorms() {
  static const llvm::StringMap<BatchNorm> m = {
      {"aten::native_batch_norm.default", {false, false}},
      {"aten::_native_batch_norm_legit.default", {false, false}},
      {"aten::_batch_norm_with_update.default", {true, false}},
      {"aten::_native_batch_norm_legit.no_stats", {false, false}},
      {"aten::_native_batch_norm_legit_no_training.default", {false, false}},
      {"aten::_native_batch_norm_legit_functional.default", {false, true}},
      {"aten::_batch_norm_with_update_functional.default", {true, true}},
  };
  return m;
}

llvm::Expected<Cands> batchNormRule(const OpCall &call) {
  if (call.inputs.empty())
    return call.error("no tensor operands");
  BatchNorm bn = batchNorms().lookup(call.op);
  SingleDimRule r = {RP::ph(1), RP::ph(0), RP::ph(0)};
  if (bn.reserve)
    r.push_back(RP::R());
  if (bn.runningStats)
    r.append(2, RP::ph(0));
  unsigned numOutputs = static_cast<unsigned>(r.size());
  r.push_back(RP::ph(1));
  r.append(call.inputs.size() - 1, RP::ph(0));
  ExpandOptions opts;
  opts.numOutputs = numOutputs;
  return expandSingleDim(call, {r}, opts);
}

llvm::Expected<Cands> groupNormRule(const OpCall &call) {
  if (call.inputs.empty())
    return call.error("no tensor operands");
  SingleDimRule r(4, RP::ph(0));
  r.append(call.inputs.size() - 1, RP::R());
  ExpandOptions opts;
  opts.numOutputs = 3;
  return expandSingleDim(call, {r}, opts);
}

} // namespace

void registerNormEmbeddingRules(RuleTable &t) {
  t["aten::native_layer_norm.default"] = layerNormRule;
  t["aten::_fused_rms_norm.default"] = rmsNormRule;
  t["aten::embedding.default"] = embeddingRule;
  for (const auto &e : batchNorms())
    t[e.getKey()] = batchNormRule;
  t["aten::native_group_norm.default"] = groupNormRule;
}

} // namespace commlens::rules
