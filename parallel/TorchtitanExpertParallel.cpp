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

#include "ir/Error.h"
#include "ir/TensorMetaUtils.h"

namespace commlens {
namespace {

/// The rows of the routed tokens this rank sends: the program's, or this rank's slice of them
/// where a ReordererSequenceParallel split the layer's tokens over the TP ranks.
int64_t routedRows(const StyleHooks &hooks, const Value &routed) {
  return rowsOf(*routed.meta()) / hooks.tokensSplitBy(&routed);
}

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
    // Shard(0) of the experts' weights is uneven otherwise, and the dispatch's split sizes (the
    // counts viewed per rank) do not add up to the rows each rank holds.
    int64_t experts = rowsOf(*arguments.args[1]->meta());
    if (experts % hooks.meshSize() != 0)
      return makeError("{} on {}: {} experts do not split evenly over the {} ranks of the mesh dim (torchtitan's "
                       "dispatch raises \"Split sizes doesn't match total dim 0 size\")",
                       name(style.kind).str(), hooks.module().scope.displayName(), experts, hooks.meshSize());
    arguments.args[1] = hooks.allToAll(arguments.args[1], /*autograd=*/false, false, false, experts,
                                       "exchanges the per-expert token counts");
    arguments.args[0] = hooks.allToAll(arguments.args[0], /*autograd=*/true, /*sendsRouted=*/false,
                                       /*receivesRouted=*/true, routedRows(hooks, *arguments.args[0]),
                                       "dispatches the routed tokens to their experts' ranks");
    return llvm::Error::success();
  }

  llvm::Error postHook(const ParallelStyle &style, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    auto y = onlyOutput(style, hooks, outputs);
    if (!y)
      return y.takeError();
    **y = hooks.allToAll(**y, /*autograd=*/true, /*sendsRouted=*/true, /*receivesRouted=*/false,
                         routedRows(hooks, ***y), "combines the experts' outputs back on the tokens' ranks");
    return llvm::Error::success();
  }
};

} // namespace

const StyleModel &TorchtitanExpertParallelModel() {
  static const TorchtitanExpertParallel model;
  return model;
}

} // namespace commlens
