// torch 2.13 PrepareModuleInputOutput (torch/distributed/tensor/parallel/style.py): a
// PrepareModuleInput and a PrepareModuleOutput on one module; the input half's use_local_output
// is held as use_local_input.
#include "parallel/StyleParts.h"

namespace commlens {
namespace {

class PrepareModuleInputOutput final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &s) const override {
    r.rejectUnknownKeys({"fqn", "style", "prepare_module_input", "prepare_module_output"});
    ParallelStyle in = decodeParallelStyle(r.field("prepare_module_input"), s.pattern);
    ParallelStyle out = decodeParallelStyle(r.field("prepare_module_output"), s.pattern);
    if (in.kind != ParallelStyle::Kind::PrepareModuleInput || out.kind != ParallelStyle::Kind::PrepareModuleOutput)
      r.fail("prepare_module_input/prepare_module_output must be PrepareModuleInput/PrepareModuleOutput");
    s.inputLayouts = in.inputLayouts;
    s.desiredInputLayouts = in.desiredInputLayouts;
    s.inputKwargLayouts = in.inputKwargLayouts;
    s.desiredInputKwargLayouts = in.desiredInputKwargLayouts;
    s.withKwargs = in.withKwargs;
    s.useLocalInput = in.useLocalOutput;
    s.outputLayouts = out.outputLayouts;
    s.desiredOutputLayouts = out.desiredOutputLayouts;
    s.useLocalOutput = out.useLocalOutput;
  }

  llvm::Error preHook(const ParallelStyle &s, StyleHooks &hooks, HookArguments &arguments) const override {
    return prepareModuleInputs(s, hooks, arguments, s.useLocalInput);
  }

  llvm::Error postHook(const ParallelStyle &s, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    return prepareModuleOutputs(s, hooks, outputs);
  }
};

} // namespace

const StyleModel &PrepareModuleInputOutputModel() {
  static const PrepareModuleInputOutput model;
  return model;
}

} // namespace commlens
