// A sharding plan as commlens analyses it: the device mesh, the tensor-parallel styles applied
// by each parallelize_module step, explicit DTensor placements, which inputs require grad, the
// loss. Mirrors docs/plan-format.md (format "commlens-plan", version 1).
#pragma once

#include "ir/Mesh.h"
#include "ir/Types.h"

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace commlens {

/// A placement list where torch allows None entries ("leave this input alone").
using OptionalPlacements = std::vector<std::optional<Placement>>;

/// One style of a parallelize_module plan, with the attributes torch's style classes hold (each
/// style reads its own; parallel/ models what it does).
struct ParallelStyle {
  enum class Kind : uint8_t {
#define STYLE(KIND, CLASS) KIND,
#include "ir/ParallelStyles.def"
  };
  Kind kind = Kind::Colwise;
  std::string pattern; // the plan key, matched as parallelize_module matches it

  // Field names follow torch/distributed/tensor/parallel/style.py.
  std::optional<OptionalPlacements> inputLayouts, desiredInputLayouts;
  std::map<std::string, std::optional<Placement>> inputKwargLayouts, desiredInputKwargLayouts;
  std::optional<OptionalPlacements> outputLayouts, desiredOutputLayouts;
  std::optional<Placement> sequenceSharding; // SequenceParallel
  bool useLocalOutput = true;
  bool useLocalInput = false; // PrepareModuleInputOutput: the input half's use_local_output
  bool withKwargs = false;
  // transformers' EpDispatchExpertsParallel (its install_forward's keywords): whether the expert
  // group is the TP group (ep_size == tp_size: every rank of it holds the same batch), or the plan
  // mesh dim of a TP group inside the expert group (1 < tp_size < ep_size), and ep_implementation.
  bool sharesBatch = false;
  std::optional<unsigned> tpMeshDim;
  enum class EpImplementation : uint8_t { Auto, AllToAll, AllReduce };
  EpImplementation epImplementation = EpImplementation::Auto;
  int64_t qkRopeHeadDim = 0; // transformers' MlaKvAProjParallel: the model config's
};
/// The torch class name ("ColwiseParallel").
llvm::StringRef name(ParallelStyle::Kind k);
/// The kind of the torch class named `torchClass`, if commlens models it.
std::optional<ParallelStyle::Kind> styleKindNamed(llvm::StringRef torchClass);

/// One parallelize_module(model, mesh[dims], plan) call.
struct ParallelizeStep {
  /// The sub-mesh's dims, each a plan mesh dim or several flattened into one (torchtitan's ep over
  /// fsdp x tp); two for a 2-D sub-mesh (torchtitan's [ep, etp]). Empty: the whole (1-D) mesh.
  std::vector<MeshDimGroup> meshDims;
  /// meshDims, or the 1-D mesh's one dim where empty.
  std::vector<MeshDimGroup> subMeshDims() const {
    return meshDims.empty() ? std::vector<MeshDimGroup>{{0}} : meshDims;
  }
  std::vector<ParallelStyle> styles; // in plan order: hooks registered earlier run first
};

/// Placements on the whole mesh or on the sub-mesh of some dims.
struct PlacementSpec {
  std::vector<unsigned> meshDims; // empty: the whole mesh, one placement per dim
  Placements placements;
};

struct InputSetting {
  std::string key; // "0", "1", ... or a keyword name
  bool requiresGrad = false;
  std::optional<PlacementSpec> placements;
};

struct LossSpec {
  enum class Kind : uint8_t { Sum, CrossEntropy };
  Kind kind = Kind::Sum;
  std::string targets = "random";
  std::string reduction = "mean";
  int64_t ignoreIndex = -100;
  /// The logits are cast to this dtype before cross-entropy (torchtitan's pred.float()).
  std::optional<ScalarType> logitsDtype{};
};

/// One fully_shard(module, mesh=..., ...) call per module the pattern matches (FSDP2). Field
/// names follow torch/distributed/fsdp/_fully_shard/_fully_shard.py and _fsdp_api.py.
struct FullyShardUnit {
  std::string pattern; // matched as parallelize_module matches plan keys ("" is the root)
  /// fully_shard([m1, m2, ...]) (torchtitan's [norm, output]): one call, so one parameter group,
  /// on every module these patterns match; empty for a pattern's one call per module. `pattern`
  /// then shows the list, "[norm, output]".
  std::vector<std::string> listPatterns{};
  /// What the call matches: the list's patterns, or the one pattern.
  std::vector<std::string> patterns() const {
    return listPatterns.empty() ? std::vector<std::string>{pattern} : listPatterns;
  }
  /// The sub-mesh's dims: one (FSDP: shard) or two (HSDP: replicate, shard), each a plan mesh dim
  /// or several flattened into one (torchtitan's fsdp over efsdp x ep).
  std::vector<MeshDimGroup> meshDims;
  /// reshard_after_forward: none (torch's default: True, False for the root), a bool, or the
  /// size of the group to reshard to (an int).
  enum class Reshard : uint8_t { Default, Yes, No, ToGroup } reshard = Reshard::Default;
  int64_t reshardGroupSize = 0; // Reshard::ToGroup
  // MixedPrecisionPolicy; none: keep the parameter's dtype.
  std::optional<ScalarType> paramDtype, reduceDtype, outputDtype;
  bool castForwardInputs = true;
  bool offloadToCpu = false, pinMemory = true; // OffloadPolicy / CPUOffloadPolicy
  bool requiresGradientSync = true;           // set_requires_gradient_sync
  bool requiresAllReduce = true;              // set_requires_all_reduce (HSDP)
  /// set_modules_to_forward_prefetch / set_modules_to_backward_prefetch: module paths.
  std::vector<std::string> forwardPrefetch, backwardPrefetch;
  /// shard_placement_fn: parameters (FQNs relative to the module) FSDP shards on this dim, not 0.
  std::map<std::string, int64_t, std::less<>> shardDims{};
};

/// Non-reentrant activation checkpointing of every module the pattern matches (matched on the
/// model parallelize_module left, before fully_shard).
struct ActivationCheckpointUnit {
  std::string pattern;
  /// checkpoint_wrapper (torchtitan): the module's path gains "._checkpoint_wrapped_module";
  /// false: the model's own forward calls checkpoint() on the module (names unchanged).
  bool wrapper = true;
  /// Selective checkpointing's op list (create_selective_checkpoint_contexts): op overloads as
  /// torch names them ("aten.mm.default", "_c10d_functional.reduce_scatter_tensor.default") whose
  /// outputs the forward keeps; recomputation reuses them instead of running them.
  std::vector<std::string> saveOps;
  /// Of these saveOps (compute ops, not collectives), the 2nd, 4th, ... call in each run of the
  /// module is recomputed after all: torchtitan's per-op policy, which saves every other mm
  /// (torchtitan/distributed/activation_checkpoint.py, _apply_op_sac).
  std::vector<std::string> recomputeEverySecond{};
  /// aten.mm calls whose second operand has one of these shapes are recomputed, and not counted
  /// by recomputeEverySecond: torchtitan's per_op_sac_force_recompute_mm_shapes_by_fqns (an MoE
  /// router's gate by default), [in_features, out_features] of each Linear it names.
  std::vector<std::array<int64_t, 2>> recomputeMmRhsShapes{};
  /// checkpoint_wrapper's early_stop (torch.utils.checkpoint): false recomputes the module's whole
  /// forward, not only up to the last tensor it saved.
  bool earlyStop = true;
};

/// The torch module classes torch's styles test with isinstance (ColwiseParallel and
/// RowwiseParallel partition nn.Linear and nn.Embedding, style.py).
enum class TorchModuleBase { Linear, Embedding };

struct ShardingPlan {
  std::string name, source;
  DeviceMesh mesh;
  std::vector<ParallelizeStep> steps;
  std::vector<FullyShardUnit> fullyShard; // in call order
  std::vector<ActivationCheckpointUnit> activationCheckpoint;
  std::optional<int64_t> srcDataRank = 0;
  std::vector<std::pair<std::string, PlacementSpec>> placements; // param/buffer pattern -> spec
  std::vector<InputSetting> inputs;
  std::vector<std::string> frozen; // parameter patterns, frozen before parallelize_module
  std::vector<std::string> frozenAfterParallelize; // ... after it (before fully_shard)
  LossSpec loss;
  bool lossParallel = false;
  /// Module classes of the program, named as its nn_module_stack names them ("pkg.LoRALinear"),
  /// that subclass nn.Linear or nn.Embedding: the program keeps only class names, and the styles
  /// test isinstance. capture records the classes of the modules it saw styled.
  std::map<std::string, TorchModuleBase, std::less<>> moduleSubclasses;
};

/// parallelize_module's matching: the pattern and the path split on '.', each token fnmatch'ed
/// against the attribute name at that level ("" is the root module itself).
bool matchesModulePath(llvm::StringRef pattern, llvm::StringRef path);
/// Python's fnmatch.fnmatchcase over the whole text (`*`, `?`, `[...]`, `[!...]`; `*` crosses
/// dots), as the plan's `frozen` patterns are matched; a pattern that is no glob (an unclosed
/// `[`) matches only itself, as in Python.
bool matchesGlob(llvm::StringRef pattern, llvm::StringRef text);

/// A module's path once the plan's checkpoint wrappers are in: below a wrapped module, the
/// wrapper's `_checkpoint_wrapped_module` attribute follows its path.
std::string pathAfterCheckpointWrappers(const ShardingPlan &plan, llvm::StringRef path);

} // namespace commlens
