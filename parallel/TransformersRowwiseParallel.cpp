// transformers 5.23's RowwiseParallel (transformers/distributed/tensor_parallel.py, registered as
// "rowwise" and "rowwise_split_input"; from_pretrained(tp_plan="auto") applies it with shard_param
// and install_forward, not parallelize_module): an nn.Linear's weight Shard(-1), its bias Replicate;
// the input taken as input_layouts and made Shard(-1). With grad it runs as torch's
// RowwiseParallel does: the Partial output redistributed to output_layouts, to_local when
// use_local_output. Without grad (model.eval() + torch.no_grad(), a generate() step) the Linear
// runs on its local shards and, for a Replicate output, its partial sums are summed by
// `dist.all_reduce` in place (c10d.allreduce_, the output's bytes) and come back plain whatever
// use_local_output says; any other output layout is redistributed as with grad.
#include "parallel/StyleParts.h"

#include "ir/Error.h"

namespace commlens {
namespace {

class TransformersRowwiseParallel final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &s) const override {
    r.rejectUnknownKeys({"fqn", "style", "input_layouts", "output_layouts", "use_local_output"});
    s.inputLayouts = singlePlacement(r, "input_layouts").value_or(OptionalPlacements{Placement::shard(-1)});
    s.outputLayouts = singlePlacement(r, "output_layouts").value_or(OptionalPlacements{Placement::replicate()});
    s.useLocalOutput = boolOr(r, "use_local_output", true);
  }

  // install_forward raises for a module without `in_features`.
  llvm::Error checkModule(const ParallelStyle &s, const StyledModule &m) const override {
    if (m.linear)
      return llvm::Error::success();
    return makeError("{} on {} ({}): transformers' row-wise layer shards nn.Linear layers only", name(s.kind).str(),
                     m.scope.displayName(), m.scope.type());
  }

  // shard_param: the bias Replicate, the 2-D weight Shard(-1), which distribute_tensor stores as Shard(1).
  std::optional<Placement> parameterPlacement(const ParallelStyle &, const StyledModule &, llvm::StringRef name,
                                              bool direct) const override {
    if (!direct)
      return std::nullopt;
    return name == "bias" ? Placement::replicate() : Placement::shard(1);
  }

  llvm::Error preHook(const ParallelStyle &s, StyleHooks &hooks, HookArguments &arguments) const override {
    return annotateFirstArgument(s, hooks, arguments, firstPlacement(s.inputLayouts), Placement::shard(-1));
  }

  llvm::Error postHook(const ParallelStyle &s, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    std::optional<Placement> layout = firstPlacement(s.outputLayouts);
    if (hooks.gradEnabled() || !layout || !layout->isReplicate())
      return redistributeOnlyOutput(s, hooks, outputs, layout);
    auto y = onlyOutput(s, hooks, outputs);
    if (!y)
      return y.takeError();
    **y = hooks.allReduceLocal(**y);
    return llvm::Error::success();
  }
};

} // namespace

const StyleModel &TransformersRowwiseParallelModel() {
  static const TransformersRowwiseParallel model;
  return model;
}

} // namespace commlens
