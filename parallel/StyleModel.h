// What parallelize_module does with one ParallelStyle (torch 2.13
// torch/distributed/tensor/parallel/style.py, each class's constructor and `_apply`): the fields a
// plan gives it, the module types it accepts, the placements it gives the module's parameters,
// and the forward pre- and post-hooks it registers. One class per style, in
// parallel/<TorchClass>.cpp, listed in ir/ParallelStyles.def; passes/ApplyShardingPlan applies them.
// Backward needs nothing here: the hooks' boundary ops have their own backward (runtime/OpDispatch).
#pragma once

#include "ir/Graph.h"
#include "ir/JsonRef.h"
#include "ir/ShardingPlan.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace commlens {

/// The module a style is applied to, as `_apply`'s isinstance checks see it.
struct StyledModule {
  const ModuleScope &scope;
  bool linear = false;    // nn.Linear
  bool embedding = false; // nn.Embedding or a subclass
  /// Its own parameters (named_parameters(recurse=False)), as the program has them: unsharded.
  llvm::ArrayRef<const InputSpec *> parameters;
  /// The first parameter of a module below it (its FQN relative to the module), or "".
  llvm::StringRef childParameter = {};
};

/// The arguments of one module call as the pre-hooks see them (null: not a tensor). Without a
/// recorded call signature, the call's tensor inputs in order of first use, as positional ones.
struct HookArguments {
  std::vector<Value *> args;
  std::vector<std::pair<std::string, Value *>> kwargs;
  bool hasSignature = false;
};

/// The boundary ops a style's hooks insert at one call of its module (runtime/OpDispatch runs
/// them). Each returns the value that replaces `x` after the call's hooks.
class StyleHooks {
public:
  virtual ~StyleHooks() = default;
  virtual const StyledModule &module() const = 0;
  /// from_local(x, layout) when x is a plain tensor, redistribute to `desired` when the layouts
  /// differ, to_local when `useLocalOutput`: PrepareModuleInput/Output's step and the input side
  /// of Colwise/Rowwise. `tag` names the result ("in", "out").
  virtual Value *annotate(Value *x, const std::optional<Placement> &layout, const std::optional<Placement> &desired,
                          bool useLocalOutput, llvm::StringRef tag) = 0;
  /// SequenceParallel's input: redistribute a DTensor to Shard(sequence dim), from_local a plain one.
  virtual Value *sequenceParallelInput(Value *x, const Placement &sharding) = 0;
  /// DTensor.to_local(grad_placements=(gradPlacement,)) of a DTensor (none: the default gradient
  /// placements).
  virtual Value *toLocal(Value *x, const std::optional<Placement> &gradPlacement) = 0;
  /// A style's output hook: redistribute to `layout` (none: keep), to_local when `useLocalOutput`.
  virtual Value *redistributeOutput(Value *x, const std::optional<Placement> &layout, bool useLocalOutput) = 0;
  /// `dist.all_reduce` in place on the local tensor of a Partial DTensor (c10d.allreduce_): a
  /// plain tensor holding the sum comes back.
  virtual Value *allReduceLocal(Value *x) = 0;
  /// all_to_all_single of a plain tensor over the styles' mesh dim (`autograd`: the autograd
  /// version, whose backward exchanges the gradient back); `sendsRouted` / `receivesRouted`: the
  /// rows sent / received are tokens routed to this rank's experts (their number is the routing's);
  /// `rows`: the rows of x's row size it sends (a token once per top-k expert, this rank's slice of
  /// a batch its TP group shares), the value handed on keeping x's shape; `what` says what it
  /// exchanges ("dispatches the routed tokens ...").
  virtual Value *allToAll(Value *x, bool autograd, bool sendsRouted, bool receivesRouted, int64_t rows,
                          llvm::StringRef what) = 0;
  /// `dist.all_to_all_single` (c10d.alltoall_base_, no autograd) of one int64 count per expert
  /// (`experts` of them), computed from the routing `routing`: the split sizes an expert-parallel
  /// dispatch exchanges before its tokens. Returns the counts received (i64[experts]).
  virtual Value *allToAllCounts(Value *routing, int64_t experts, llvm::StringRef what) = 0;
  /// The call's positional argument `i` as the program has it, before any hook (null: none or
  /// not a tensor): what a post-hook reads of the call's inputs.
  virtual const Value *callArgument(size_t i) const = 0;
  /// x[..., start:end] and torch.cat(parts, dim=-1): the local ops a hook splits a tensor by.
  virtual Value *sliceLastDim(Value *x, int64_t start, int64_t end) = 0;
  virtual Value *catLastDim(llvm::ArrayRef<Value *> parts) = 0;
  /// Whether a value of the program (callArgument's) requires grad.
  virtual bool requiresGrad(const Value *programValue) const = 0;
  /// The number of ranks of the styles' mesh dim.
  virtual int64_t meshSize() const = 0;
  /// The hooks on the 1-D sub-mesh of dim `dim` of the style's mesh (`device_mesh["ep"]` of a
  /// 2-D one; the style's own hooks where it is 1-D).
  virtual StyleHooks &onMeshDim(unsigned dim) = 0;
  /// The hooks on the 1-D mesh of the plan's mesh dim `planDim`, one a style field names beside
  /// its own mesh (transformers' tp_mesh of an expert-parallel dispatch).
  virtual StyleHooks &onPlanMeshDim(unsigned planDim) = 0;
  /// transformers' _AllReduceForward: `dist.all_reduce` in place of a plain tensor holding this
  /// rank's partial sums (c10d.allreduce_ of its bytes), identity in backward. `what` says what it
  /// sums ("sums the experts' partial outputs").
  virtual Value *allReduceSum(Value *x, llvm::StringRef what) = 0;
  /// transformers' _AllReduceBackward: identity in forward; in backward, where a gradient reaches
  /// it, that gradient is summed over the mesh dim (c10d.allreduce_). `what` names the input
  /// ("hidden_states").
  virtual Value *allReduceInBackward(Value *x, llvm::StringRef what) = 0;
  /// Whether the call runs with grad enabled (false in a no_grad region and in inference).
  virtual bool gradEnabled() const = 0;
  /// torchtitan's ReordererSequenceParallel: `x` (a hook's result) holds this rank's slice of the
  /// tokens, a mesh-dim-size-th of the program's rows.
  virtual void splitTokens(const Value *x) = 0;
  /// How many ranks the tokens behind `x` are split over: the mesh dim's size where `x` derives,
  /// within the styled module's parent module, from a value splitTokens marked; 1 otherwise.
  virtual int64_t tokensSplitBy(const Value *x) const = 0;
};

class StyleModel {
public:
  virtual ~StyleModel() = default;
  /// Reads the style's fields from its plan entry (docs/plan-format.md, "Styles"), taking the
  /// torch constructor's defaults for those not given. Failures throw JsonRef's ParseError.
  virtual void decode(const JsonRef &entry, ParallelStyle &style) const = 0;
  /// `_apply`'s check of the module type.
  virtual llvm::Error checkModule(const ParallelStyle &, const StyledModule &) const { return llvm::Error::success(); }
  /// The dims of the sub-mesh `_apply` takes: 1 (torch's styles distribute over a 1-D mesh), 2
  /// for torchtitan's ExpertTensorParallel on [ep, etp].
  virtual unsigned meshNdim() const { return 1; }
  /// The placement `_apply` gives the parameter `name` below the module (its FQN relative to the
  /// module; `direct`: registered on the module itself), or nullopt where it leaves it alone.
  virtual std::optional<Placement> parameterPlacement(const ParallelStyle &, const StyledModule &,
                                                      llvm::StringRef /*name*/, bool /*direct*/) const {
    return std::nullopt;
  }
  /// The placements, one per dim of its mesh (meshNdim()): parameterPlacement's by default.
  virtual std::optional<Placements> parameterPlacements(const ParallelStyle &style, const StyledModule &module,
                                                        llvm::StringRef name, bool direct) const {
    std::optional<Placement> p = parameterPlacement(style, module, name, direct);
    return p ? std::optional<Placements>(Placements{*p}) : std::nullopt;
  }
  /// Whether `_apply` runs distribute_module with a partition function, whose
  /// replicate_module_params_buffers then makes every buffer below the module a Replicate DTensor.
  virtual bool replicatesBuffers() const { return false; }
  /// Whether the parameters it places come back trainable (re-registered as new nn.Parameters).
  virtual bool retrainsParameters() const { return false; }
  /// Whether the module's forward computes with its own parameters' local shards
  /// (`param.to_local()`, as torchtitan's GroupedExperts does under its expert-parallel styles):
  /// each of them is handed to the call as its local tensor.
  virtual bool parametersUsedLocally() const { return false; }
  /// Whether it all-reduces each of the module's own parameters' gradients once accumulated (a
  /// post-accumulate-grad hook calling dist.all_reduce over its mesh: c10d.allreduce_).
  virtual bool allReducesParameterGradients() const { return false; }
  /// The forward pre-hook: rewrites `arguments` to what the module's forward receives.
  virtual llvm::Error preHook(const ParallelStyle &, StyleHooks &, HookArguments &) const {
    return llvm::Error::success();
  }
  /// The forward post-hook: rewrites the call's tensor `outputs` to what its caller receives.
  virtual llvm::Error postHook(const ParallelStyle &, StyleHooks &, std::vector<Value *> & /*outputs*/) const {
    return llvm::Error::success();
  }
};

/// The model of a style kind (ir/ParallelStyles.def).
const StyleModel &styleModel(ParallelStyle::Kind kind);

/// A plan's style entry ({"fqn": ..., "style": "ColwiseParallel", ...}) read by its style's model.
ParallelStyle decodeParallelStyle(const JsonRef &entry, const std::string &pattern);

} // namespace commlens
