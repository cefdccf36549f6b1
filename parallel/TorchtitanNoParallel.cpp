// torchtitan 0.2.2's NoParallel (torchtitan/distributed/__init__.py), which its apply_moe_ep_tp
// applies to each MoE layer's router gate ("moe.router.gate") on the tensor-parallel mesh:
//   - distribute_module with no partition_fn: every parameter below the module becomes a new
//     nn.Parameter replicated on the mesh (Replicate);
//   - input_fn: the first argument, when plain, from_local as input_layout (default Replicate),
//     then redistributed to Replicate (desired_input_layout) when input_layout differs;
//   - output_fn: the output redistributed to output_layout (default Replicate) when its
//     placements differ, handed back local when use_local_output (default True).
// With the defaults nothing is communicated, in forward or backward: the gate computes whole on
// every rank.
#include "parallel/StyleParts.h"

namespace commlens {
namespace {

class TorchtitanNoParallel final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &s) const override {
    r.rejectUnknownKeys({"fqn", "style", "input_layout", "output_layout", "desired_input_layout", "use_local_output"});
    s.inputLayouts = singlePlacement(r, "input_layout").value_or(OptionalPlacements{Placement::replicate()});
    s.outputLayouts = singlePlacement(r, "output_layout").value_or(OptionalPlacements{Placement::replicate()});
    // the constructor always sets it
    if (auto desired = singlePlacement(r, "desired_input_layout"); desired && !(*desired)[0]->isReplicate())
      r.field("desired_input_layout").fail("NoParallel's desired_input_layout is always [\"Replicate()\"]");
    s.desiredInputLayouts = OptionalPlacements{Placement::replicate()};
    s.useLocalOutput = boolOr(r, "use_local_output", true);
  }

  std::optional<Placement> parameterPlacement(const ParallelStyle &, const StyledModule &, llvm::StringRef,
                                              bool) const override {
    return Placement::replicate(); // every parameter of the module and its submodules
  }
  bool retrainsParameters() const override { return true; }

  llvm::Error preHook(const ParallelStyle &s, StyleHooks &hooks, HookArguments &arguments) const override {
    return annotateFirstArgument(s, hooks, arguments, firstPlacement(s.inputLayouts),
                                 firstPlacement(s.desiredInputLayouts));
  }

  llvm::Error postHook(const ParallelStyle &s, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    return redistributeOnlyOutput(s, hooks, outputs, firstPlacement(s.outputLayouts));
  }
};

} // namespace

const StyleModel &TorchtitanNoParallelModel() {
  static const TorchtitanNoParallel model;
  return model;
}

} // namespace commlens
