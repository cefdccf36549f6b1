// torchtitan 0.2.2's TensorParallel for grouped experts (torchtitan/distributed/expert_parallel.py),
// which its apply_moe_ep_tp applies to each MoE layer's GroupedExperts on the tensor-parallel mesh
// when expert parallel is off:
//   - _partition_fn: w1 and w3 ([experts, hidden, dim]) become new nn.Parameters Shard(1)
//     (column-wise), w2 ([experts, dim, hidden]) Shard(2) (row-wise); GroupedExperts.forward
//     computes with their to_local() on plain tensors, so its output is each rank's partial sum;
//   - input_fn on (routed_input, num_tokens_per_expert): routed_input goes
//     DTensor.from_local(Replicate).to_local(grad_placements=(Partial(),)). Nothing moves in
//     forward; in backward the tokens' gradient is taken as Partial and from_local's backward
//     redistributes it to Replicate: one all_reduce, when a gradient reaches the routed tokens.
// The layer's Partial output is reduced by the PrepareModuleInputOutput on the MoE module.
#include "parallel/StyleParts.h"

#include "ir/Error.h"

namespace commlens {
namespace {

class TorchtitanTensorParallel final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &) const override {
    r.rejectUnknownKeys({"fqn", "style"}); // the class takes no argument
  }

  std::optional<Placement> parameterPlacement(const ParallelStyle &, const StyledModule &, llvm::StringRef name,
                                              bool direct) const override {
    std::optional<int64_t> dim = groupedExpertsTensorParallelDim(name);
    if (!direct || !dim)
      return std::nullopt;
    return Placement::shard(*dim);
  }
  bool retrainsParameters() const override { return true; }
  bool parametersUsedLocally() const override { return true; }

  llvm::Error preHook(const ParallelStyle &style, StyleHooks &hooks, HookArguments &arguments) const override {
    if (llvm::Error err = checkGroupedExpertsCall(style, hooks, arguments))
      return err;
    // torchtitan splits the tokens (ReordererSequenceParallel) only for ExpertParallel; here the
    // routed rows' all-reduce would be of a slice the program's shapes do not show.
    if (hooks.tokensSplitBy(arguments.args[0]) > 1)
      return makeError("{} on {}: its routed tokens are a ReordererSequenceParallel's slice (torchtitan pairs that "
                       "reorderer with ExpertParallel only); not modelled",
                       name(style.kind).str(), hooks.module().scope.displayName());
    arguments.args[0] = replicatedWithPartialGradient(hooks, arguments.args[0]);
    return llvm::Error::success();
  }
};

} // namespace

const StyleModel &TorchtitanTensorParallelModel() {
  static const TorchtitanTensorParallel model;
  return model;
}

} // namespace commlens
