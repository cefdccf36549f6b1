// Convolution (torch 2.13 `_ops/_conv_ops.py`, single-dim strategies; run by the custom handlers
// of `_tp_conv.py`, modelled in runtime/OpDispatch):
//   convolution(input, weight, bias?): [S(0) | S(0) input, R weight, R bias] (the batch dim only),
//     plus the implicit all-Replicate rule;
//   convolution_backward(grad_output, input, weight, bias_sizes, ..., output_mask): [S(0) grad_input,
//     P(sum) grad_weight, P(sum) grad_bias | S(0) grad_output, S(0) input, R weight], plus all-Replicate;
//     a gradient the output mask leaves out has no spec.
// Only the batch dim shards, so the handlers' halo exchange (a shard of a spatial dim with padding)
// never runs under these strategies.
#include "dtensor/rules/RuleEngine.h"

namespace commlens::rules {

namespace {

using RP = RulePlacement;

llvm::Expected<Cands> convolutionRule(const OpCall &call) {
  if (call.inputs.size() < 2 || call.inputs.size() > 3)
    return call.error("expected input, weight (and bias), got {} tensor operands", call.inputs.size());
  SingleDimRule rule{RP::ph(0), RP::ph(0), RP::R()};
  if (call.inputs.size() == 3)
    rule.push_back(RP::R());
  ExpandOptions opts;
  opts.numOutputs = 1;
  return expandSingleDim(call, {rule}, opts);
}

llvm::Expected<Cands> convolutionBackwardRule(const OpCall &call) {
  if (call.inputs.size() != 3)
    return call.error("expected grad_output, input, weight, got {} tensor operands", call.inputs.size());
  SingleDimRule rule;
  const auto &outs = call.node->outputs();
  for (size_t i = 0; i < outs.size() && i < 3; ++i)
    if (!outs[i].isNone())
      rule.push_back(i == 0 ? RP::ph(0) : RP::P());
  unsigned numOutputs = static_cast<unsigned>(rule.size());
  if (numOutputs != call.results.size())
    return call.error("expected its gradients as separate results, got {}", call.results.size());
  for (RP p : {RP::ph(0), RP::ph(0), RP::R()})
    rule.push_back(p);
  ExpandOptions opts;
  opts.numOutputs = numOutputs;
  return expandSingleDim(call, {rule}, opts);
}

} // namespace

void registerConvolutionRules(RuleTable &t) {
  t["aten::convolution.default"] = convolutionRule;
  t["aten::convolution_backward.default"] = convolutionBackwardRule;
}

} // namespace commlens::rules
