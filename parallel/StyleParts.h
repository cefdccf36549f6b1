// The plan fields and hook steps several styles share (parallel/StyleModel.h).
#pragma once

#include "parallel/StyleModel.h"

#include <map>

namespace commlens {

// ---- plan fields
Placement decodePlacement(const JsonRef &r);
/// A list of placements where null entries are allowed ("leave this input alone").
OptionalPlacements decodePlacementList(const JsonRef &r);
std::optional<OptionalPlacements> optionalPlacementList(const JsonRef &entry, const char *field);
/// Colwise / Rowwise / SequenceParallel hold one placement per layout attribute (torch wraps the
/// single Placement the constructor takes in a 1-tuple); null is not allowed there.
std::optional<OptionalPlacements> singlePlacement(const JsonRef &entry, const char *field);
std::map<std::string, std::optional<Placement>> decodeKwargLayouts(const JsonRef &r);
/// PrepareModuleInput / PrepareModuleOutput: the layouts and their desired layouts pair up one to
/// one (torch asserts equal lengths), and an entry that converts needs a desired placement.
void checkLayoutPairs(const JsonRef &entry, const char *field, const std::optional<OptionalPlacements> &layouts,
                      const char *desiredField, const std::optional<OptionalPlacements> &desired);
bool boolOr(const JsonRef &r, const char *field, bool fallback);

// ---- hooks
std::optional<Placement> firstPlacement(const std::optional<OptionalPlacements> &list);
/// `_apply`'s check of Colwise/Rowwise: nn.Linear or nn.Embedding.
llvm::Error requireLinearOrEmbedding(const ParallelStyle &style, const StyledModule &module);
/// The argument the input hook of Colwise/Rowwise/SequenceParallel reads: the first positional one.
llvm::Expected<Value **> firstTensorArgument(const ParallelStyle &style, StyleHooks &hooks, HookArguments &arguments);
/// The input hook of Colwise/Rowwise (torch's and transformers'): the first positional argument
/// taken as `layout` and made `desired`, handed on as a DTensor.
llvm::Error annotateFirstArgument(const ParallelStyle &style, StyleHooks &hooks, HookArguments &arguments,
                                  const std::optional<Placement> &layout, const std::optional<Placement> &desired);
/// The output a style's output hook rewrites: the call's one tensor output.
llvm::Expected<Value **> onlyOutput(const ParallelStyle &style, StyleHooks &hooks, std::vector<Value *> &outputs);
/// The output hook of Colwise/Rowwise/SequenceParallel: the call's one output, redistributed to
/// `layout` (none: kept) and to_local when the style's use_local_output says so.
llvm::Error redistributeOnlyOutput(const ParallelStyle &style, StyleHooks &hooks, std::vector<Value *> &outputs,
                                   const std::optional<Placement> &layout);
/// PrepareModuleInput's pre-hook: input_layouts over the positional arguments (their number must
/// match, as torch checks) and, with input_kwarg_layouts, each keyword argument passed that the
/// style names. `useLocalOutput`: the input half's use_local_output.
llvm::Error prepareModuleInputs(const ParallelStyle &style, StyleHooks &hooks, HookArguments &arguments,
                                bool useLocalOutput);
/// The input hooks of torchtitan's expert styles read the call's (routed_input,
/// num_tokens_per_expert), as GroupedExperts.forward takes them: two positional tensors, which
/// needs the module's recorded call signature.
llvm::Error checkGroupedExpertsCall(const ParallelStyle &style, StyleHooks &hooks, const HookArguments &arguments);
/// The tensor dim torchtitan's TensorParallel and ExpertTensorParallel shard a GroupedExperts
/// parameter on over the tensor-parallel dim: w1 and w3 ([experts, hidden, dim]) column-wise, 1;
/// w2 ([experts, dim, hidden]) row-wise, 2; none for others (their _partition_fn registers these
/// three alone).
std::optional<int64_t> groupedExpertsTensorParallelDim(llvm::StringRef parameter);
/// Their input hook's routed tokens: DTensor.from_local(Replicate) on `tp`'s mesh, then
/// to_local(grad_placements=(Partial(),)): nothing moves in forward; in backward the tokens'
/// gradient, taken as Partial, is all-reduced.
Value *replicatedWithPartialGradient(StyleHooks &tp, Value *tokens);
/// torchtitan's ExpertParallel._token_dispatch on the expert-parallel mesh `ep` (whose hooks these
/// are): the per-expert token counts exchanged (all_to_all_single under no_grad), then the routed
/// tokens dispatched to their experts' ranks (all_to_all_single_autograd); an error where the
/// experts do not split evenly over its ranks.
llvm::Error expertParallelDispatch(const ParallelStyle &style, StyleHooks &ep, HookArguments &arguments);
/// ExpertParallel._token_combine: the experts' outputs sent back to the tokens' ranks.
llvm::Error expertParallelCombine(const ParallelStyle &style, StyleHooks &ep, std::vector<Value *> &outputs);
/// PrepareModuleOutput's post-hook: output_layouts over the call's tensor outputs.
llvm::Error prepareModuleOutputs(const ParallelStyle &style, StyleHooks &hooks, std::vector<Value *> &outputs);

} // namespace commlens
