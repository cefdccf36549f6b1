#include "parallel/StyleParts.h"

#include "ir/Error.h"
#include "ir/TensorMetaUtils.h"

namespace commlens {

Placement decodePlacement(const JsonRef &r) {
  auto p = Placement::parse(r.asString());
  if (!p)
    r.fail(takeMessage(p.takeError()));
  return *p;
}

OptionalPlacements decodePlacementList(const JsonRef &r) {
  OptionalPlacements out;
  for (const JsonRef &item : r.items())
    out.push_back(item.isNull() ? std::nullopt : std::optional<Placement>(decodePlacement(item)));
  return out;
}

std::optional<OptionalPlacements> optionalPlacementList(const JsonRef &entry, const char *field) {
  if (auto f = entry.optField(field))
    return decodePlacementList(*f);
  return std::nullopt;
}

std::optional<OptionalPlacements> singlePlacement(const JsonRef &entry, const char *field) {
  auto f = entry.optField(field);
  if (!f)
    return std::nullopt;
  if (f->isArray() && f->size() != 1)
    f->fail(fmt::format("expected one placement, got {}", f->size()));
  OptionalPlacements list = decodePlacementList(*f);
  if (!list[0])
    f->at(0).fail("null placement (only PrepareModuleInput and PrepareModuleOutput allow null entries)");
  return list;
}

std::map<std::string, std::optional<Placement>> decodeKwargLayouts(const JsonRef &r) {
  std::map<std::string, std::optional<Placement>> out;
  for (const auto &[k, v] : r.members())
    out[k.str()] = v.isNull() ? std::nullopt : std::optional<Placement>(decodePlacement(v));
  return out;
}

void checkLayoutPairs(const JsonRef &entry, const char *field, const std::optional<OptionalPlacements> &layouts,
                      const char *desiredField, const std::optional<OptionalPlacements> &desired) {
  if (!layouts)
    return;
  if (!desired)
    entry.fail(fmt::format("{} needs {}", field, desiredField));
  if (layouts->size() != desired->size())
    entry.field(desiredField)
        .fail(fmt::format("{} placements for {} entries of {}", desired->size(), layouts->size(), field));
  for (size_t i = 0; i < layouts->size(); ++i)
    if ((*layouts)[i] && !(*desired)[i])
      entry.field(desiredField).at(i).fail(fmt::format("null placement for a non-null {} entry", field));
}

bool boolOr(const JsonRef &r, const char *field, bool fallback) {
  auto f = r.optField(field);
  return f ? f->asBool() : fallback;
}

std::optional<Placement> firstPlacement(const std::optional<OptionalPlacements> &list) {
  if (!list || list->empty())
    return std::nullopt;
  return list->front();
}

llvm::Error requireLinearOrEmbedding(const ParallelStyle &style, const StyledModule &module) {
  if (!module.linear && !module.embedding)
    return makeError("{} on {} ({}): only nn.Linear and nn.Embedding are supported{}", name(style.kind).str(),
                     module.scope.displayName(), module.scope.type(),
                     module.scope.type().rfind("torch.nn.", 0) == 0
                         ? ""
                         : " (a subclass of either is one where the plan's module_subclasses names it, as "
                           "commlens.capture records it)");
  // A subclass with modules of its own (a LoRA adapter): the partition functions run on every module
  // below it, registering its parameters under their dotted names (KeyError) or sharding each
  // child's weight as the module's.
  if (!module.childParameter.empty())
    return makeError("{} on {} ({}): parameter '{}' of a module below it is not modelled (torch's partition "
                     "of the module partitions it too, or raises)",
                     name(style.kind).str(), module.scope.displayName(), module.scope.type(),
                     module.childParameter.str());
  return llvm::Error::success();
}

llvm::Expected<Value **> firstTensorArgument(const ParallelStyle &style, StyleHooks &hooks, HookArguments &arguments) {
  if (arguments.args.empty() || !arguments.args[0])
    return makeError("{} on {}: the module call has no positional tensor input", name(style.kind).str(),
                     hooks.module().scope.displayName());
  return &arguments.args[0];
}

llvm::Error annotateFirstArgument(const ParallelStyle &style, StyleHooks &hooks, HookArguments &arguments,
                                  const std::optional<Placement> &layout, const std::optional<Placement> &desired) {
  auto x = firstTensorArgument(style, hooks, arguments);
  if (!x)
    return x.takeError();
  **x = hooks.annotate(**x, layout, desired, false, "in");
  return llvm::Error::success();
}

llvm::Expected<Value **> onlyOutput(const ParallelStyle &style, StyleHooks &hooks, std::vector<Value *> &outputs) {
  if (outputs.size() != 1)
    return makeError("{} on {}: expected one tensor output, found {}", name(style.kind).str(),
                     hooks.module().scope.displayName(), outputs.size());
  return &outputs[0];
}

llvm::Error redistributeOnlyOutput(const ParallelStyle &style, StyleHooks &hooks, std::vector<Value *> &outputs,
                                   const std::optional<Placement> &layout) {
  auto y = onlyOutput(style, hooks, outputs);
  if (!y)
    return y.takeError();
  **y = hooks.redistributeOutput(**y, layout, style.useLocalOutput);
  return llvm::Error::success();
}

llvm::Error prepareModuleInputs(const ParallelStyle &style, StyleHooks &hooks, HookArguments &arguments,
                                bool useLocalOutput) {
  const std::string &module = hooks.module().scope.displayName();
  std::vector<Value *> &args = arguments.args;
  auto notTensor = [&](llvm::StringRef which) {
    return makeError("{} on {}: {} is not a tensor but has an input layout", name(style.kind).str(), module,
                     which.str());
  };
  if (style.withKwargs && !arguments.hasSignature)
    return makeError("{} on {}: input_kwarg_layouts need the module's call signature, which the program does not "
                     "record (export with python -m commlens.export, which preserves every submodule's)",
                     name(style.kind).str(), module);
  if (style.inputLayouts) {
    if (style.inputLayouts->size() != args.size())
      return makeError("{} on {}: {} input_layouts for {} {}", name(style.kind).str(), module,
                       style.inputLayouts->size(), args.size(),
                       arguments.hasSignature ? "positional arguments"
                                              : "tensor inputs found in the graph (in order of first use: the "
                                                "program records no call signature for the module)");
    for (size_t i = 0; i < args.size(); ++i) {
      const std::optional<Placement> &layout = (*style.inputLayouts)[i];
      if (!layout)
        continue;
      if (!args[i])
        return notTensor(fmt::format("positional argument {}", i));
      std::optional<Placement> desired =
          style.desiredInputLayouts && i < style.desiredInputLayouts->size() ? (*style.desiredInputLayouts)[i]
                                                                             : std::nullopt;
      args[i] = hooks.annotate(args[i], layout, desired, useLocalOutput, "in");
    }
  }
  if (!style.withKwargs)
    return llvm::Error::success();
  for (auto &[key, value] : arguments.kwargs) {
    auto layout = style.inputKwargLayouts.find(key);
    if (layout == style.inputKwargLayouts.end() || !layout->second)
      continue;
    if (!value)
      return notTensor(fmt::format("keyword argument '{}'", key));
    auto desired = style.desiredInputKwargLayouts.find(key);
    value = hooks.annotate(value, layout->second,
                           desired == style.desiredInputKwargLayouts.end() ? std::nullopt : desired->second,
                           useLocalOutput, "in");
  }
  return llvm::Error::success();
}

llvm::Error checkGroupedExpertsCall(const ParallelStyle &style, StyleHooks &hooks, const HookArguments &arguments) {
  const std::string &module = hooks.module().scope.displayName();
  if (!arguments.hasSignature)
    return makeError("{} on {}: its input hook reads the call's (routed_input, num_tokens_per_expert), which needs "
                     "the module's call signature (python -m commlens.export records it)",
                     name(style.kind).str(), module);
  if (arguments.args.size() != 2 || !arguments.args[0] || !arguments.args[1] || !arguments.kwargs.empty())
    return makeError("{} on {}: expected a call with two positional tensors (routed_input, num_tokens_per_expert), "
                     "as torchtitan's GroupedExperts takes",
                     name(style.kind).str(), module);
  return llvm::Error::success();
}

namespace {

/// The rows of the routed tokens this rank sends: the program's, or this rank's slice of them
/// where a ReordererSequenceParallel split the layer's tokens over the TP ranks.
int64_t routedRows(const StyleHooks &hooks, const Value &routed) {
  return rowsOf(*routed.meta()) / hooks.tokensSplitBy(&routed);
}

} // namespace

std::optional<int64_t> groupedExpertsTensorParallelDim(llvm::StringRef parameter) {
  if (parameter == "w1" || parameter == "w3")
    return 1;
  if (parameter == "w2")
    return 2;
  return std::nullopt;
}

Value *replicatedWithPartialGradient(StyleHooks &tp, Value *tokens) {
  Value *replicated = tp.annotate(tokens, Placement::replicate(), std::nullopt, /*useLocalOutput=*/false, "in");
  return tp.toLocal(replicated, Placement::partial());
}

llvm::Error expertParallelDispatch(const ParallelStyle &style, StyleHooks &ep, HookArguments &arguments) {
  // Shard(0) of the experts' weights is uneven otherwise, and the dispatch's split sizes (the
  // counts viewed per rank) do not add up to the rows each rank holds.
  int64_t experts = rowsOf(*arguments.args[1]->meta());
  if (experts % ep.meshSize() != 0)
    return makeError("{} on {}: {} experts do not split evenly over the {} ranks of the mesh dim (torchtitan's "
                     "dispatch raises \"Split sizes doesn't match total dim 0 size\")",
                     name(style.kind).str(), ep.module().scope.displayName(), experts, ep.meshSize());
  arguments.args[1] = ep.allToAll(arguments.args[1], /*autograd=*/false, false, false, experts,
                                  "exchanges the per-expert token counts");
  arguments.args[0] = ep.allToAll(arguments.args[0], /*autograd=*/true, /*sendsRouted=*/false,
                                  /*receivesRouted=*/true, routedRows(ep, *arguments.args[0]),
                                  "dispatches the routed tokens to their experts' ranks");
  return llvm::Error::success();
}

llvm::Error expertParallelCombine(const ParallelStyle &style, StyleHooks &ep, std::vector<Value *> &outputs) {
  auto y = onlyOutput(style, ep, outputs);
  if (!y)
    return y.takeError();
  **y = ep.allToAll(**y, /*autograd=*/true, /*sendsRouted=*/true, /*receivesRouted=*/false, routedRows(ep, ***y),
                    "combines the experts' outputs back on the tokens' ranks");
  return llvm::Error::success();
}

llvm::Error prepareModuleOutputs(const ParallelStyle &style, StyleHooks &hooks, std::vector<Value *> &outputs) {
  if (!style.outputLayouts)
    return llvm::Error::success();
  if (style.outputLayouts->size() != outputs.size())
    return makeError("{} on {}: {} output_layouts for {} tensor outputs found in the graph", name(style.kind).str(),
                     hooks.module().scope.displayName(), style.outputLayouts->size(), outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::optional<Placement> &layout = (*style.outputLayouts)[i];
    if (!layout)
      continue;
    std::optional<Placement> desired =
        style.desiredOutputLayouts && i < style.desiredOutputLayouts->size() ? (*style.desiredOutputLayouts)[i]
                                                                             : std::nullopt;
    outputs[i] = hooks.annotate(outputs[i], layout, desired, style.useLocalOutput, "out");
  }
  return llvm::Error::success();
}

} // namespace commlens
