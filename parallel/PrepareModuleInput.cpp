// torch 2.13 PrepareModuleInput (torch/distributed/tensor/parallel/style.py): no parameters; a
// pre-hook taking each positional (and, with_kwargs, keyword) argument with a layout as that
// layout and redistributing it to its desired layout, handed on local if use_local_output.
#include "parallel/StyleParts.h"

namespace commlens {
namespace {

class PrepareModuleInput final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &s) const override {
    r.rejectUnknownKeys({"fqn", "style", "input_layouts", "desired_input_layouts", "input_kwarg_layouts",
                          "desired_input_kwarg_layouts", "use_local_output", "with_kwargs"});
    s.inputLayouts = optionalPlacementList(r, "input_layouts");
    s.desiredInputLayouts = optionalPlacementList(r, "desired_input_layouts");
    if (auto f = r.optField("input_kwarg_layouts"))
      s.inputKwargLayouts = decodeKwargLayouts(*f);
    if (auto f = r.optField("desired_input_kwarg_layouts"))
      s.desiredInputKwargLayouts = decodeKwargLayouts(*f);
    s.useLocalOutput = boolOr(r, "use_local_output", false);
    s.withKwargs = boolOr(r, "with_kwargs", !s.inputKwargLayouts.empty());
    checkLayoutPairs(r, "input_layouts", s.inputLayouts, "desired_input_layouts", s.desiredInputLayouts);
    for (const auto &[key, layout] : s.inputKwargLayouts) {
      auto desired = s.desiredInputKwargLayouts.find(key);
      if (desired == s.desiredInputKwargLayouts.end())
        r.field("desired_input_kwarg_layouts").fail(fmt::format("no entry for input_kwarg_layouts key '{}'", key));
      if (layout && !desired->second)
        r.field("desired_input_kwarg_layouts")
            .fail(fmt::format("null for '{}', whose input_kwarg_layouts entry is a placement", key));
    }
  }

  llvm::Error preHook(const ParallelStyle &s, StyleHooks &hooks, HookArguments &arguments) const override {
    return prepareModuleInputs(s, hooks, arguments, s.useLocalOutput);
  }
};

} // namespace

const StyleModel &PrepareModuleInputModel() {
  static const PrepareModuleInput model;
  return model;
}

} // namespace commlens
