// torch 2.13 RowwiseParallel (torch/distributed/tensor/parallel/style.py): nn.Linear weight
// Shard(1) and bias Replicate, nn.Embedding weight Shard(0); the input is taken as input_layouts
// and made Shard(-1) (Replicate for an embedding: `_apply` picks it by module type), the Partial
// output redistributed to output_layouts and handed back local by default.
#include "parallel/StyleParts.h"

namespace commlens {
namespace {

class RowwiseParallel final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &s) const override {
    r.rejectUnknownKeys({"fqn", "style", "input_layouts", "output_layouts", "desired_input_layouts", "use_local_output"});
    s.inputLayouts = singlePlacement(r, "input_layouts").value_or(OptionalPlacements{Placement::shard(-1)});
    s.outputLayouts = singlePlacement(r, "output_layouts").value_or(OptionalPlacements{Placement::replicate()});
    s.desiredInputLayouts = singlePlacement(r, "desired_input_layouts"); // set per module type at apply time
    s.useLocalOutput = boolOr(r, "use_local_output", true);
  }

  llvm::Error checkModule(const ParallelStyle &s, const StyledModule &m) const override {
    return requireLinearOrEmbedding(s, m);
  }

  std::optional<Placement> parameterPlacement(const ParallelStyle &, const StyledModule &m, llvm::StringRef name,
                                              bool direct) const override {
    if (!direct)
      return std::nullopt;
    if (m.embedding)
      return Placement::shard(0);
    // the weight Shard(1); the bias, and anything else a subclass registers, Replicate
    // (replicate_module_params_buffers)
    return name == "weight" ? Placement::shard(1) : Placement::replicate();
  }

  bool replicatesBuffers() const override { return true; }

  llvm::Error preHook(const ParallelStyle &s, StyleHooks &hooks, HookArguments &arguments) const override {
    std::optional<Placement> desired = firstPlacement(s.desiredInputLayouts);
    if (!desired)
      desired = hooks.module().embedding ? Placement::replicate() : Placement::shard(-1);
    return annotateFirstArgument(s, hooks, arguments, firstPlacement(s.inputLayouts), desired);
  }

  llvm::Error postHook(const ParallelStyle &s, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    return redistributeOnlyOutput(s, hooks, outputs, firstPlacement(s.outputLayouts));
  }
};

} // namespace

const StyleModel &RowwiseParallelModel() {
  static const RowwiseParallel model;
  return model;
}

} // namespace commlens
