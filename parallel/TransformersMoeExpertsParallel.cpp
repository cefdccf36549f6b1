// transformers 5.23's MoeExpertsParallel (transformers/distributed/tensor_parallel.py, registered
// as "moe_tp_experts"; from_pretrained(tp_plan="auto") installs it on the experts module of
// Qwen3-MoE, Qwen2-MoE, Mixtral, OLMoE, ...). It places no parameter: the experts' 3-D weights
// have plan entries of their own, packed_colwise (gate_up_proj _StridedShard(1, sf=2)) and rowwise
// (down_proj Shard(-1)), which a plan holds as `placements`. Its install_forward:
//   - transform_inputs_pre_forward: hidden_states (to_local if a DTensor) and, when the experts
//     are called with routing arguments (hidden_states, top_k_index, top_k_weights, ...),
//     top_k_weights go through _AllReduceBackward (parallel_utils.py): identity forward, the
//     gradient summed by dist.all_reduce in backward, when grad is enabled and the tensor requires
//     it;
//   - the forward runs with the module's DTensor parameters as their local shards
//     (_use_local_dtensor_params): each rank computes its slice of every expert's intermediate
//     features, so the output holds partial sums;
//   - transform_output_post_forward: _AllReduceForward sums them with dist.all_reduce in place
//     (c10d.allreduce_), with or without grad; its backward is the identity.
// CommDebugMode charges the backward all-reduces to the module whose backward ran last (the
// experts' act_fn): autograd/Engine emits them in the module whose backward runs then.
#include "parallel/StyleParts.h"

#include "ir/Error.h"

namespace commlens {
namespace {

class TransformersMoeExpertsParallel final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &) const override {
    r.rejectUnknownKeys({"fqn", "style"}); // the class takes no argument
  }

  bool parametersUsedLocally() const override { return true; }

  // Positional arguments only, as transform_inputs_pre_forward reads `args`.
  llvm::Error preHook(const ParallelStyle &style, StyleHooks &hooks, HookArguments &arguments) const override {
    if (!arguments.hasSignature)
      return makeError("{} on {}: its input hook reads the call's positional (hidden_states, top_k_index, "
                       "top_k_weights), which needs the module's call signature (python -m commlens.export "
                       "records it)",
                       name(style.kind).str(), hooks.module().scope.displayName());
    auto hidden = firstTensorArgument(style, hooks, arguments);
    if (!hidden)
      return hidden.takeError();
    **hidden = hooks.allReduceInBackward(**hidden, "hidden_states");
    if (arguments.args.size() >= 3 && arguments.args[2])
      arguments.args[2] = hooks.allReduceInBackward(arguments.args[2], "top_k_weights");
    return llvm::Error::success();
  }

  llvm::Error postHook(const ParallelStyle &style, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    auto y = onlyOutput(style, hooks, outputs);
    if (!y)
      return y.takeError();
    **y = hooks.allReduceSum(**y, "sums the experts' partial outputs");
    return llvm::Error::success();
  }
};

} // namespace

const StyleModel &TransformersMoeExpertsParallelModel() {
  static const TransformersMoeExpertsParallel model;
  return model;
}

} // namespace commlens
