// torch 2.13 PrepareModuleOutput (torch/distributed/tensor/parallel/style.py): no parameters; a
// post-hook taking each output with a layout as that layout and redistributing it to its desired
// layout, handed back local if use_local_output.
#include "parallel/StyleParts.h"

namespace commlens {
namespace {

class PrepareModuleOutput final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &s) const override {
    r.rejectUnknownKeys({"fqn", "style", "output_layouts", "desired_output_layouts", "use_local_output"});
    s.outputLayouts = decodePlacementList(r.field("output_layouts"));
    s.desiredOutputLayouts = decodePlacementList(r.field("desired_output_layouts"));
    s.useLocalOutput = boolOr(r, "use_local_output", true);
    if (s.outputLayouts->empty())
      r.field("output_layouts").fail("expected at least one placement");
    checkLayoutPairs(r, "output_layouts", s.outputLayouts, "desired_output_layouts", s.desiredOutputLayouts);
  }

  llvm::Error postHook(const ParallelStyle &s, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    return prepareModuleOutputs(s, hooks, outputs);
  }
};

} // namespace

const StyleModel &PrepareModuleOutputModel() {
  static const PrepareModuleOutput model;
  return model;
}

} // namespace commlens
