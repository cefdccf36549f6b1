// transformers 5.23's EpDispatchExpertsParallel (transformers/distributed/expert_parallel.py,
// registered as "ep_dispatch_experts"), which from_pretrained(distributed_config=
// DistributedConfig(ep_size=...)) applies to the experts module of Qwen3-MoE, Mixtral, OLMoE, ...
// on the `ep` dim of its expert mesh, with "grouped_gemm" (MoEParamShard(Shard(0))) on each of
// the experts' 3-D parameters: every rank keeps its experts, and the forward runs them on their
// local shards. install_forward's keywords are the plan's fields: `shares_batch` (the TP group is
// the expert group, ep_size == tp_size, so every rank of it holds the same batch), `tp_mesh_dim`
// (the plan dim of a TP group inside the expert group, 1 < tp_size < ep_size; neither: the TP
// group is one rank) and `ep_implementation`, which picks how the tokens reach the experts:
// - AllToAllEP ("all_to_all"; "auto" in training, and wherever the batches differ):
//   - with a TP group of several ranks, hidden_states, top_k_index and top_k_weights go from
//     Replicate to Shard(0) on it (DTensor.from_local(...).redistribute(...).to_local(): a local
//     chunk, whose backward all-gathers the gradients), so each rank sends its slice of the tokens;
//   - under no autograd, dist.all_to_all_single of the per-expert token counts, one int64 per
//     expert of the layer (c10d.alltoall_base_);
//   - all_to_all_single_autograd of hidden_states[order // top_k]: each token sent once per
//     expert it routes to (top_k rows a token); what a rank receives is the routing's;
//   - all_to_all_single_autograd of the experts' outputs back to the tokens' ranks, weighted and
//     summed per token locally; with a TP group of several ranks, the slices then all-gathered
//     over it (DTensor.from_local(Shard(0)).full_tensor());
// - AllReduceEP ("all_reduce"; "auto" when the batch is shared and hidden_states need no grad):
//   hidden_states and top_k_weights through _AllReduceBackward (their gradient summed by
//   dist.all_reduce), the experts masked to this rank's, the partial output summed by
//   dist.all_reduce in place (_AllReduceForward): c10d.allreduce_, as moe_tp_experts does.
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
  void decode(const JsonRef &r, ParallelStyle &style) const override {
    r.rejectUnknownKeys({"fqn", "style", "shares_batch", "tp_mesh_dim", "ep_implementation"});
    style.sharesBatch = boolOr(r, "shares_batch", false);
    if (auto tp = r.optField("tp_mesh_dim"); tp && style.sharesBatch) // the plan reader resolves the name
      tp->fail("with shares_batch the TP group is the expert group itself; tp_mesh_dim names a TP group inside "
               "it (1 < tp_size < ep_size): give one or the other");
    if (auto implementation = r.optField("ep_implementation")) {
      llvm::StringRef v = implementation->asStringRef();
      if (v == "auto")
        style.epImplementation = ParallelStyle::EpImplementation::Auto;
      else if (v == "all_to_all")
        style.epImplementation = ParallelStyle::EpImplementation::AllToAll;
      else if (v == "all_reduce")
        style.epImplementation = ParallelStyle::EpImplementation::AllReduce;
      else
        implementation->fail(fmt::format("ep_implementation '{}' (expected \"auto\", \"all_to_all\" or "
                                         "\"all_reduce\"; transformers' MegaMoeEP is not modelled)",
                                         v.str()));
      if (style.epImplementation == ParallelStyle::EpImplementation::AllReduce && !style.sharesBatch)
        implementation->fail("ep_implementation \"all_reduce\" needs shares_batch (every rank of the expert group "
                             "holding the same batch), as transformers' AllReduceEP does");
    }
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
    auto call = readCall(style, hooks);
    if (!call)
      return call.takeError();
    if (allReduces(style, hooks)) { // AllReduceEP
      arguments.args[0] = hooks.allReduceInBackward(arguments.args[0], "hidden_states");
      if (arguments.args.size() >= 3 && arguments.args[2])
        arguments.args[2] = hooks.allReduceInBackward(arguments.args[2], "top_k_weights");
      return llvm::Error::success();
    }
    if (StyleHooks *tp = batchSlicing(style, hooks))
      for (size_t i = 0; i < 3 && i < arguments.args.size(); ++i)
        if (arguments.args[i])
          arguments.args[i] = tp->annotate(arguments.args[i], Placement::replicate(), Placement::shard(0),
                                           /*useLocalOutput=*/true, "slice");
    hooks.allToAllCounts(arguments.args[1], call->experts, "exchanges the per-expert token counts");
    arguments.args[0] = hooks.allToAll(arguments.args[0], /*autograd=*/true, /*sendsRouted=*/false,
                                       /*receivesRouted=*/true, call->routedRows,
                                       "dispatches each token to its top-k experts' ranks");
    return llvm::Error::success();
  }

  llvm::Error postHook(const ParallelStyle &style, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    auto call = readCall(style, hooks);
    if (!call)
      return call.takeError();
    auto y = onlyOutput(style, hooks, outputs);
    if (!y)
      return y.takeError();
    if (allReduces(style, hooks)) {
      **y = hooks.allReduceSum(**y, "sums the experts' partial outputs");
      return llvm::Error::success();
    }
    **y = hooks.allToAll(**y, /*autograd=*/true, /*sendsRouted=*/true, /*receivesRouted=*/false, call->routedRows,
                         "combines the experts' outputs back on the tokens' ranks");
    if (StyleHooks *tp = batchSlicing(style, hooks))
      **y = tp->annotate(**y, Placement::shard(0), Placement::replicate(), /*useLocalOutput=*/true, "gathered");
    return llvm::Error::success();
  }

private:
  struct Call {
    int64_t experts;    // the layer's experts: the first dim of the experts' own parameters
    int64_t routedRows; // the rows the dispatch sends: this rank's tokens times top_k
  };

  /// The experts' (hidden_states [tokens, hidden], top_k_index [tokens, top_k], ...) as the
  /// program has them, and the module's 3-D parameters [experts, ...].
  static llvm::Expected<Call> readCall(const ParallelStyle &style, StyleHooks &hooks) {
    const Value *hidden = hooks.callArgument(0), *index = hooks.callArgument(1);
    if (!hidden || !index || hidden->meta()->rank() != 2 || index->meta()->rank() != 2 ||
        sizesOf(*hidden->meta())[0] != sizesOf(*index->meta())[0])
      return makeError("{} on {}: expected a call with positional (hidden_states [tokens, hidden], top_k_index "
                       "[tokens, top_k], ...), as transformers' experts take them (python -m commlens.export "
                       "records the call signature)",
                       name(style.kind).str(), hooks.module().scope.displayName());
    llvm::ArrayRef<const InputSpec *> params = hooks.module().parameters;
    const Value *first = params.empty() ? nullptr : params.front()->value;
    if (!first || !first->meta() || first->meta()->rank() != 3)
      return makeError("{} on {}: expected the experts' 3-D parameters [experts, ...] on the module itself",
                       name(style.kind).str(), hooks.module().scope.displayName());
    int64_t tokens = sizesOf(*hidden->meta())[0];
    if (StyleHooks *tp = batchSlicing(style, hooks)) // torch.chunk's first (largest) slice: rank 0's
      tokens = (tokens + tp->meshSize() - 1) / tp->meshSize();
    return Call{sizesOf(*first->meta())[0], tokens * sizesOf(*index->meta())[1]};
  }

  /// AllReduceEP: named, or AutoEP's choice when the batch is shared and hidden_states need no
  /// grad (`torch.is_grad_enabled() and hidden_states.requires_grad` is false).
  static bool allReduces(const ParallelStyle &style, StyleHooks &hooks) {
    switch (style.epImplementation) {
    case ParallelStyle::EpImplementation::AllReduce:
      return true;
    case ParallelStyle::EpImplementation::AllToAll:
      return false;
    case ParallelStyle::EpImplementation::Auto:
      return style.sharesBatch && !(hooks.gradEnabled() && hooks.requiresGrad(hooks.callArgument(0)));
    }
    return false;
  }

  /// AllToAllEP's TP group where it has several ranks, which hold one batch and each dispatch
  /// their slice of it (`tp_mesh.size() > 1`): the expert group itself (shares_batch) or the plan
  /// dim tp_mesh_dim names; null where each rank holds a batch of its own.
  static StyleHooks *batchSlicing(const ParallelStyle &style, StyleHooks &hooks) {
    StyleHooks *tp = style.sharesBatch ? &hooks : style.tpMeshDim ? &hooks.onPlanMeshDim(*style.tpMeshDim) : nullptr;
    return tp && tp->meshSize() > 1 ? tp : nullptr;
  }
};

} // namespace

const StyleModel &TransformersEpDispatchExpertsParallelModel() {
  static const TransformersEpDispatchExpertsParallel model;
  return model;
}

} // namespace commlens
