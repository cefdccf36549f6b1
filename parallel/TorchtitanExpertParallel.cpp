// torchtitan 0.2.2's ExpertParallel (torchtitan/distributed/expert_parallel.py), applied by its
// apply_moe_ep_tp to each MoE layer's GroupedExperts on the expert-parallel mesh dim:
//   - _partition_fn: every parameter registered on the module (w1, w2, w3 [experts, ...]) becomes
//     a new nn.Parameter distributed Shard(0): each rank keeps its experts;
//   - input_fn (_token_dispatch) on (routed_input, num_tokens_per_expert): under no_grad, an
//     all_to_all_single of the per-expert token counts (each rank learns how many tokens it gets
//     for its experts), then all_to_all_single_autograd of the routed tokens, each sent to its
//     expert's rank; what a rank receives is the routing's (the program has the balanced number);
//   - GroupedExperts.forward then computes with w1/w2/w3.to_local() on plain tensors;
//   - output_fn (_token_combine): all_to_all_single_autograd of the experts' outputs back to the
//     tokens' ranks (it sends the routed rows and receives the program's).
// Each autograd all-to-all's backward is one more all-to-all of the gradient (autograd/Engine).
// Token permutation and padding between them are local ops with no collective. Under
// ReordererSequenceParallel (parallel/TorchtitanReordererSequenceParallel.cpp) the rank routes only
// its slice of the tokens: the routed rows are that slice's.
#include "parallel/StyleParts.h"

namespace commlens {
namespace {

class TorchtitanExpertParallel final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &) const override {
    r.rejectUnknownKeys({"fqn", "style"}); // the class takes no argument
  }

  std::optional<Placement> parameterPlacement(const ParallelStyle &, const StyledModule &, llvm::StringRef,
                                              bool direct) const override {
    if (!direct) // named_parameters(recurse=False)
      return std::nullopt;
    return Placement::shard(0);
  }
  bool retrainsParameters() const override { return true; }
  bool parametersUsedLocally() const override { return true; }

  llvm::Error preHook(const ParallelStyle &style, StyleHooks &hooks, HookArguments &arguments) const override {
    if (llvm::Error err = checkGroupedExpertsCall(style, hooks, arguments))
      return err;
    return expertParallelDispatch(style, hooks, arguments);
  }

  llvm::Error postHook(const ParallelStyle &style, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    return expertParallelCombine(style, hooks, outputs);
  }
};

} // namespace

const StyleModel &TorchtitanExpertParallelModel() {
  static const TorchtitanExpertParallel model;
  return model;
}

} // namespace commlens
