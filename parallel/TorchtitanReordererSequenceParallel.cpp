// torchtitan 0.2.2's ReordererSequenceParallel (torchtitan/distributed/expert_parallel.py), which
// its apply_moe_ep_tp applies to each MoE layer's TokenReorderer ("moe.reorderer") when expert
// parallel borrows the tensor-parallel ranks (ep set, etp None): the tokens, whole on every rank
// of the TP group after the MoE layer's input hook, are split along the folded bs*slen dim so
// that each rank routes, dispatches and computes only its slice ("effectively running Sequence
// Parallel"):
//   - input_fn: (top_scores, selected_experts_indices) [bs*slen, top_k] each become this rank's
//     rows [offset, offset + bs*slen / tp) (ValueError on an uneven split);
//   - output_fn: the sorted token indices get the rank's offset added, so the MoE layer's gathers
//     and scatters index the whole tokens.
// Neither hook communicates. What changes is what the experts' ExpertParallel hooks then send:
// the routed rows of this rank's slice, a tp-th of the program's (StyleHooks::tokensSplitBy).
// The MoE layer's output, written into a zero tensor of all tokens, holds each rank's partial
// contribution, which the layer's PrepareModuleInputOutput takes as Partial (the model's own
// plan), as with the experts' TensorParallel.
#include "parallel/StyleParts.h"

#include "ir/Error.h"
#include "ir/TensorMetaUtils.h"

namespace commlens {
namespace {

class TorchtitanReordererSequenceParallel final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &) const override {
    r.rejectUnknownKeys({"fqn", "style"}); // the class takes no argument
  }

  llvm::Error preHook(const ParallelStyle &style, StyleHooks &hooks, HookArguments &arguments) const override {
    if (arguments.args.size() != 2 || !arguments.args[0] || !arguments.args[1])
      return makeError("{} on {}: expected the TokenReorderer's two tensor arguments (top_scores, "
                       "selected_experts_indices), got {}",
                       name(style.kind), hooks.module().scope.displayName(), arguments.args.size());
    int64_t tokens = rowsOf(*arguments.args[0]->meta());
    if (tokens % hooks.meshSize() != 0)
      return makeError("{} on {}: {} tokens do not split evenly over the {} ranks of the mesh dim (torchtitan's "
                       "ReordererSequenceParallel refuses an uneven split)",
                       name(style.kind), hooks.module().scope.displayName(), tokens, hooks.meshSize());
    return llvm::Error::success();
  }

  llvm::Error postHook(const ParallelStyle &, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    // the sorted scores and token indices: this rank's slice's, by the mesh dim's size
    for (size_t i = 0; i < outputs.size() && i < 2; ++i)
      hooks.splitTokens(outputs[i]);
    return llvm::Error::success();
  }
};

} // namespace

const StyleModel &TorchtitanReordererSequenceParallelModel() {
  static const TorchtitanReordererSequenceParallel model;
  return model;
}

} // namespace commlens
