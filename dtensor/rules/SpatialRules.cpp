// Pooling, upsampling, unpooling and grid sampling (torch 2.13 `_ops/_math_ops.py`). These ops
// work on the spatial dims of an (N, C, *spatial) input, so the batch dim and, when present, the
// channel dim shard freely:
//   pooling (avg, adaptive avg / max, fractional max, max with indices; 1-3 spatial dims): a
//     full-mesh expansion of [R ..], [S(0) ..], for avg pools (linear) [P(sum) ..], [P(avg) ..],
//     and [S(1) ..] when the input is batched (rank >= spatial rank + 2), every result and tensor
//     operand alike (max pools return values and indices; fractional pools take random_samples);
//   upsampling, forward and backward: single-dim [S(0) | S(0)], [S(1) | S(1)], [P | P] (sum, avg);
//   max_unpool2d/3d, _adaptive_avg_pool2d_backward: single-dim [S(d) | S(d), S(d)] for d = 0, 1;
//   max_pool2d_with_indices_backward(grad_output, self, ..., indices): single-dim [S(0) x 4],
//     [S(1) x 4] when grad_output is batched (rank >= 4), [P | P, R, R] (sum, avg: linear in
//     grad_output; self only gives the shape, indices are not reducible);
//   grid_sampler_2d/3d(input, grid): single-dim [S(0) | S(0), S(0)], [P | P, R] (sum, avg; the
//     grid has no channel dim); their backward: [S(0) x 5] (two gradients, three operands).
// Single-dim strategies get the implicit all-Replicate rule first; none of these accepts an uneven
// shard (a candidate needing one is dropped).
#include "dtensor/rules/RuleEngine.h"

namespace commlens::rules {

namespace {

using RP = RulePlacement;
using Rules = std::vector<SingleDimRule>;

struct Pool {
  int64_t spatialRank;
  bool linear; ///< avg pools: Partial sum / avg pass through
};

const llvm::StringMap<Pool> &pools() {
  static const llvm::StringMap<Pool> m = {
      {"aten::avg_pool1d.default", {1, true}},
      {"aten::avg_pool2d.default", {2, true}},
      {"aten::avg_pool3d.default", {3, true}},
      {"aten::adaptive_avg_pool1d.default", {1, true}},
      {"aten::_adaptive_avg_pool2d.default", {2, true}},
      {"aten::_adaptive_avg_pool3d.default", {3, true}},
      {"aten::adaptive_max_pool1d.default", {1, false}},
      {"aten::adaptive_max_pool2d.default", {2, false}},
      {"aten::adaptive_max_pool3d.default", {3, false}},
      {"aten::fractional_max_pool2d.default", {2, false}},
      {"aten::fractional_max_pool3d.default", {3, false}},
      {"aten::max_pool1d_with_indices.default", {1, false}},
      {"aten::max_pool2d_with_indices.default", {2, false}},
      {"aten::max_pool3d_with_indices.default", {3, false}},
  };
  return m;
}

llvm::Expected<Cands> poolRule(const OpCall &call) {
  Pool pool = pools().lookup(call.op);
  unsigned nOut = pool.linear ? 1 : 2;
  size_t n = nOut + call.inputs.size();
  Rules rules = {SingleDimRule(n, RP::R()), SingleDimRule(n, RP::of(Placement::shard(0)))};
  if (pool.linear)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
      rules.push_back(SingleDimRule(n, RP::P(op)));
  if (call.rank(0) >= pool.spatialRank + 2)
    rules.push_back(SingleDimRule(n, RP::of(Placement::shard(1))));
  ExpandOptions opts;
  opts.numOutputs = nOut;
  opts.insertReplicate = false;
  opts.fillPlaceholders = false;
  return expandSingleDim(call, std::move(rules), opts);
}

/// Batch and channel shards through every result and operand of a single-dim strategy with
/// `numOutputs` results, then `extra` rules.
Cands batchChannelRule(const OpCall &call, unsigned numOutputs, bool channel, Rules extra) {
  size_t n = numOutputs + call.inputs.size();
  Rules rules = {SingleDimRule(n, RP::ph(0))};
  if (channel)
    rules.push_back(SingleDimRule(n, RP::ph(1)));
  rules.insert(rules.end(), extra.begin(), extra.end());
  ExpandOptions opts;
  opts.numOutputs = numOutputs;
  return expandSingleDim(call, std::move(rules), opts);
}

llvm::Expected<Cands> upsampleRule(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  return batchChannelRule(call, 1, true, {{RP::P(ReduceOp::Sum), RP::P(ReduceOp::Sum)},
                                          {RP::P(ReduceOp::Avg), RP::P(ReduceOp::Avg)}});
}

llvm::Expected<Cands> unpoolRule(const OpCall &call) {
  if (call.inputs.size() != 2)
    return call.error("expected two tensor operands, got {}", call.inputs.size());
  return batchChannelRule(call, 1, true, {});
}

llvm::Expected<Cands> maxPoolBackwardRule(const OpCall &call) {
  if (call.inputs.size() != 3)
    return call.error("expected three tensor operands (grad_output, self, indices), got {}", call.inputs.size());
  Rules linear;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
    linear.push_back({RP::P(op), RP::P(op), RP::R(), RP::R()});
  return batchChannelRule(call, 1, call.rank(0) >= 4, std::move(linear));
}

llvm::Expected<Cands> gridSamplerRule(const OpCall &call) {
  if (call.inputs.size() != 2)
    return call.error("expected two tensor operands (input, grid), got {}", call.inputs.size());
  return batchChannelRule(call, 1, false, {{RP::P(ReduceOp::Sum), RP::P(ReduceOp::Sum), RP::R()},
                                           {RP::P(ReduceOp::Avg), RP::P(ReduceOp::Avg), RP::R()}});
}

llvm::Expected<Cands> gridSamplerBackwardRule(const OpCall &call) {
  if (call.inputs.size() != 3)
    return call.error("expected three tensor operands (grad_output, input, grid), got {}", call.inputs.size());
  return batchChannelRule(call, 2, false, {});
}

} // namespace

void registerSpatialRules(RuleTable &t) {
  for (const auto &e : pools())
    t[e.getKey()] = poolRule;
  for (const char *name : {"upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
                           "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
                           "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa", "_upsample_lanczos2d_aa",
                           "upsample_bicubic2d", "upsample_bilinear2d", "upsample_linear1d", "upsample_trilinear3d"}) {
    t[fmt::format("aten::{}.default", name)] = upsampleRule;
    t[fmt::format("aten::{}_backward.default", name)] = upsampleRule;
  }
  for (const char *op : {"aten::max_unpool2d.default", "aten::max_unpool3d.default",
                         "aten::_adaptive_avg_pool2d_backward.default"})
    t[op] = unpoolRule;
  t["aten::max_pool2d_with_indices_backward.default"] = maxPoolBackwardRule;
  t["aten::grid_sampler_2d.default"] = gridSamplerRule;
  t["aten::grid_sampler_3d.default"] = gridSamplerRule;
  t["aten::grid_sampler_2d_backward.default"] = gridSamplerBackwardRule;
  t["aten::grid_sampler_3d_backward.default"] = gridSamplerBackwardRule;
}

} // namespace commlens::rules
