// transformers 5.23's EpDispatchExpertsParallel (transformers/distributed/expert_parallel.py,
// registered as "ep_dispatch_experts"), which from_pretrained(distributed_config=
// DistributedConfig(ep_size=...)) applies to the experts module of Qwen3-MoE, Mixtral, OLMoE, ...
// on the `ep` dim of its expert mesh, with "grouped_gemm" (MoEParamShard(Shard(0))) on each of
// the experts' 3-D parameters: every rank keeps its experts. Its forward hands the experts'
// (hidden_states, top_k_index, top_k_weights) to AllToAllEP (what AutoEP runs when the ranks of
// the expert group hold different batches, as with a tensor-parallel mesh of one rank):
//   - under no autograd, dist.all_to_all_single of the per-expert token counts, one int64 per
//     expert of the layer (c10d.alltoall_base_), then the split sizes are read back;
//   - all_to_all_single_autograd of hidden_states[order // top_k]: each token sent once per
//     expert it routes to (top_k rows a token); what a rank receives is the routing's;
//   - the experts run on their local experts (param.to_local()) with the rows received;
//   - all_to_all_single_autograd of their outputs back to the tokens' ranks (the received rows
//     sent back), then weighted and summed per token locally.
// Each autograd all-to-all's backward is one more all-to-all of the gradient (autograd/Engine):
// CommDebugMode charges the combine's to the experts module and the dispatch's to the module whose
// backward ran last inside the experts (their act_fn), where autograd/Engine emits them.
#include "parallel/StyleParts.h"

#include "ir/Error.h"
#include "ir/TensorMetaUtils.h"

namespace commlens {
namespace {

class TransformersEpDispatchExpertsParallel final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &) const override {
    r.rejectUnknownKeys({"fqn", "style"}); // the class takes no argument
  }

  // grouped_gemm on every parameter of the experts module: Shard(0), the experts dim.
  std::optional<Placement> parameterPlacement(const ParallelStyle &, const StyledModule &, llvm::StringRef,
                                              bool direct) const override {
    if (!direct)
      return std::nullopt;
    return Placement::shard(0);
  }
  bool retrainsParameters() const override { return true; } // nn.Parameter(distribute_tensor(...))
  bool parametersUsedLocally() const override { return true; }

  llvm::Error preHook(const ParallelStyle &style, StyleHooks &hooks, HookArguments &arguments) const override {
    if (!arguments.hasSignature)
      return makeError("{} on {}: its forward reads the call's positional (hidden_states, top_k_index, "
                       "top_k_weights), which needs the module's call signature (python -m commlens.export "
                       "records it)",
                       name(style.kind).str(), hooks.module().scope.displayName());
    auto topK = topKOf(style, hooks);
    if (!topK)
      return topK.takeError();
    auto experts = expertsOf(style, hooks);
    if (!experts)
      return experts.takeError();
    arguments.args[1] = hooks.allToAllCounts(arguments.args[1], *experts, "exchanges the per-expert token counts");
    arguments.args[0] = hooks.allToAll(arguments.args[0], /*autograd=*/true, /*sendsRouted=*/false,
                                       /*receivesRouted=*/true, *topK,
                                       "dispatches each token to its top-k experts' ranks");
    return llvm::Error::success();
  }

  llvm::Error postHook(const ParallelStyle &style, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    auto topK = topKOf(style, hooks);
    if (!topK)
      return topK.takeError();
    auto y = onlyOutput(style, hooks, outputs);
    if (!y)
      return y.takeError();
    **y = hooks.allToAll(**y, /*autograd=*/true, /*sendsRouted=*/true, /*receivesRouted=*/false, *topK,
                         "combines the experts' outputs back on the tokens' ranks");
    return llvm::Error::success();
  }

private:
  /// top_k: the routing's experts per token, the last dim of the call's (hidden_states [tokens,
  /// hidden], top_k_index [tokens, top_k], ...), as the experts' forward takes them.
  static llvm::Expected<int64_t> topKOf(const ParallelStyle &style, StyleHooks &hooks) {
    const Value *hidden = hooks.callArgument(0), *index = hooks.callArgument(1);
    if (!hidden || !index || hidden->meta()->rank() != 2 || index->meta()->rank() != 2 ||
        sizesOf(*hidden->meta())[0] != sizesOf(*index->meta())[0])
      return makeError("{} on {}: expected a call with positional (hidden_states [tokens, hidden], top_k_index "
                       "[tokens, top_k], ...), as transformers' experts take them (python -m commlens.export "
                       "records the call signature)",
                       name(style.kind).str(), hooks.module().scope.displayName());
    return sizesOf(*index->meta())[1];
  }

  /// The layer's experts: the first dim of the experts' own parameters, which grouped_gemm shards.
  static llvm::Expected<int64_t> expertsOf(const ParallelStyle &style, StyleHooks &hooks) {
    const std::vector<const Value *> &params = hooks.module().parameters;
    if (params.empty() || !params.front()->meta() || params.front()->meta()->rank() != 3)
      return makeError("{} on {}: expected the experts' 3-D parameters [experts, ...] on the module itself",
                       name(style.kind).str(), hooks.module().scope.displayName());
    return sizesOf(*params.front()->meta())[0];
  }
};

} // namespace

const StyleModel &TransformersEpDispatchExpertsParallelModel() {
  static const TransformersEpDispatchExpertsParallel model;
  return model;
}

} // namespace commlens
