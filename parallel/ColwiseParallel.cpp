// torch 2.13 ColwiseParallel (torch/distributed/tensor/parallel/style.py): nn.Linear weight and bias
// Shard(0), nn.Embedding weight Shard(1); the input is taken as input_layouts and made Replicate,
// the output (Shard(-1)) redistributed to output_layouts and handed back local by default.
#include "parallel/StyleParts.h"

namespace commlens {
namespace {

class ColwiseParallel final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &s) const override {
    r.rejectUnknownKeys({"fqn", "style", "input_layouts", "output_layouts", "desired_input_layouts", "use_local_output"});
    s.inputLayouts = singlePlacement(r, "input_layouts").value_or(OptionalPlacements{Placement::replicate()});
    s.outputLayouts = singlePlacement(r, "output_layouts").value_or(OptionalPlacements{Placement::shard(-1)});
    // torch's ColwiseParallel always sets it: a plan may state it, but only as that
    if (auto desired = singlePlacement(r, "desired_input_layouts"); desired && !(*desired)[0]->isReplicate())
      r.field("desired_input_layouts").fail("ColwiseParallel's desired_input_layouts is always [\"Replicate()\"]");
    s.desiredInputLayouts = OptionalPlacements{Placement::replicate()};
    s.useLocalOutput = boolOr(r, "use_local_output", true);
  }

  llvm::Error checkModule(const ParallelStyle &s, const StyledModule &m) const override {
    return requireLinearOrEmbedding(s, m);
  }

  std::optional<Placement> parameterPlacement(const ParallelStyle &, const StyledModule &m, llvm::StringRef,
                                              bool direct) const override {
    if (!direct)
      return std::nullopt;
    return Placement::shard(m.embedding ? 1 : 0);
  }

  bool replicatesBuffers() const override { return true; }

  llvm::Error preHook(const ParallelStyle &s, StyleHooks &hooks, HookArguments &arguments) const override {
    return annotateFirstArgument(s, hooks, arguments, firstPlacement(s.inputLayouts),
                                 firstPlacement(s.desiredInputLayouts).value_or(Placement::replicate()));
  }

  llvm::Error postHook(const ParallelStyle &s, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    return redistributeOnlyOutput(s, hooks, outputs, firstPlacement(s.outputLayouts));
  }
};

} // namespace

const StyleModel &ColwiseParallelModel() {
  static const ColwiseParallel model;
  return model;
}

} // namespace commlens
