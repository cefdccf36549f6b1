// Analysis results the prediction passes build up: which values are DTensors with which
// placements, and every collective, with the op, argument and module that caused it. Each pass
// header (passes/*.h) says which of these fields its pass reads and writes.
#pragma once

#include "comm/CommTimeModel.h"
#include "ir/Graph.h"
#include "ir/Mesh.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

namespace commlens {

struct ActivationCheckpointUnit;
struct FullyShardUnit;

/// A value that is a DTensor: its placements on one of the plan's DTensor meshes. (Where a
/// collective's placements came from is its CollectiveRecord's `why`.)
struct DTensorLayout {
  Placements placements;
  MeshId mesh = 0;
};

enum class Phase : uint8_t { Forward, Backward };

struct CollectiveRecord {
  std::string opKey;               // as CommDebugMode prints it
  Phase phase = Phase::Forward;
  const ModuleScope *module = nullptr; // the module CommDebugMode charges
  const Node *node = nullptr;      // the runtime op (or plan boundary op) that caused it
  std::string argument;            // which operand was redistributed
  llvm::SmallVector<unsigned, 2> meshDims; // dims of the full mesh
  Placement src, dst;              // this step's placement change
  Placements fromPlacements, toPlacements; // the whole redistribution it belongs to
  int64_t bytesPerRank = 0;        // bytes handed to the collective on one rank
  /// False where the operand's dtype at run time is not the program's: an activation inside an
  /// FSDP unit whose MixedPrecisionPolicy casts parameters (and so the compute) to another dtype.
  bool bytesKnown = true;
  std::string why;
  bool approximate = false;
  /// Where the bytes depend on the routing of an MoE layer's tokens: the fewest and most bytes one
  /// rank can send (bytesPerRank is then the value under the routing model: balanced, or the
  /// busiest rank's under `routingSkew`).
  std::optional<std::pair<int64_t, int64_t>> bytesRange{};
  double routingSkew = 1.0; ///< predict --routing-skew, where bytesRange is set

  std::optional<CollectiveTime> time; // with a cluster (predict --cluster)
};

/// One autograd-visible step a plan boundary op took in forward (DTensor.from_local,
/// DTensor.redistribute, DTensor.to_local): the backward pass replays its autograd Function.
struct BoundaryStep {
  enum class Kind : uint8_t { FromLocal, Redistribute, ToLocal, AllToAll, AllReduceGradient };
  Kind kind = Kind::FromLocal;
  Placements from; ///< Redistribute: the source; ToLocal: the DTensor's placements
  /// FromLocal: the placements given; Redistribute: the target; ToLocal: the gradient's placements
  /// (grad_placements, by default `from` with Partial as Replicate). AllToAll, AllReduceGradient:
  /// neither.
  Placements to;
  MeshId mesh = 0; ///< the DTensor mesh it ran on
};

/// One FSDP parameter group: one fully_shard call on one module, or on a list of them.
struct FsdpUnit {
  /// Every module of the call, in forward order: one, or a list unit's.
  std::vector<const ModuleScope *> members{};
  const FullyShardUnit *spec = nullptr;
  /// The parameters it manages (graph input values; tied parameters once, unless tensor
  /// parallelism re-registered them).
  std::vector<const Value *> params;
  /// The tensor dim FSDP shards a parameter on where it is not 0 (shard_placement_fn).
  llvm::DenseMap<const Value *, int64_t> shardDimOf{};
  MeshDimGroup shardDims;     // dims of the plan's full mesh (several where flattened)
  MeshDimGroup replicateDims; // HSDP; empty for FSDP
  int64_t shardSize = 1;
  /// The root unit whose FSDP state context this unit shares: the outermost unit enclosing it
  /// (itself when no other unit does). Each root has its own post-forward order and final callback.
  unsigned root = 0;
  bool reshardAfterForward = true; // resolved (a root's default is false)
  int64_t regatherGroupSize = 1;   // the group its backward re-gather runs on
  /// Explicit prefetch targets (unit indices); an empty backward list keeps the default.
  llvm::SmallVector<unsigned, 2> forwardPrefetch, backwardPrefetch;

  bool hasGroup() const { return !params.empty(); }
  /// The module, or the list's module that runs first.
  const ModuleScope *scope() const { return members.front(); }
  bool isMember(const ModuleScope *s) const { return llvm::is_contained(members, s); }
  /// The module's name, or the list's ("[A.norm, A.output]").
  std::string label() const;
};

/// Where FSDP's runtime stands with one unit as the step runs (FSDPParamGroup's state); advanced
/// only by fsdp/FullyShard's FsdpRuntime. Which backward hooks run at all, autograd decides
/// (autograd/Engine.cpp: the unit's training state in backward).
struct FsdpUnitProgress {
  bool unsharded = false;
  /// Resharded by a post-forward onto its smaller group (reshard_after_forward=int): the next
  /// all-gather runs on that group; after a post-backward it is sharded on the whole group again.
  bool shardedPostForward = false;
  /// Modules of the unit whose pre-forward / post-forward ran in this forward: a list unit's
  /// first pre-forward prefetches, its last post-forward reshards (_register_group_forward_hooks).
  unsigned membersEntered = 0, membersForwarded = 0;
  /// Its entries in its root's post-forward order, the latest last.
  llvm::SmallVector<unsigned, 2> postForwardIndices;
};

struct FsdpState {
  /// The units as apply-plan resolved them from the plan; not changed afterwards.
  std::vector<FsdpUnit> units;
  /// The runtime's progress, one entry per unit (made when the runtime first runs).
  std::vector<FsdpUnitProgress> progress;
  /// Per root unit: unit indices, one entry per post-forward of a unit sharing that root's context.
  std::map<unsigned, std::vector<unsigned>> postForwardOrder;
};

struct PredictionState {
  /// The meshes DTensors live on, one per distinct mesh of the plan's styles (the plan's mesh when
  /// it has none); a DTensorLayout's `mesh` indexes it.
  std::vector<DTensorMesh> dtensorMeshes;
  llvm::DenseMap<const Value *, DTensorLayout> dtensors;
  /// Parameters a style re-created as new nn.Parameters with requires_grad=True whatever they
  /// had (SequenceParallel's _replicate_module_fn): freezing before parallelising is undone.
  llvm::DenseSet<const Value *> retrainedByStyle;
  /// Parameters whose accumulated gradient a hook all-reduces over its style's mesh (transformers'
  /// replicated_with_grad_allreduce), with the module that registered it and that mesh.
  llvm::DenseMap<const Value *, std::pair<const ModuleScope *, MeshId>> gradAllReduced;
  std::vector<CollectiveRecord> collectives;
  /// Values whose placements depend on an op modelled approximately (--allow-unsupported).
  llvm::DenseMap<const Value *, bool> approximate;
  std::vector<std::string> warnings;
  /// Per plan boundary node of the forward graph: the autograd steps it took, in order.
  llvm::DenseMap<const Node *, llvm::SmallVector<BoundaryStep, 3>> boundarySteps;
  /// The backward runtime ops in autograd-engine execution order (built by the autodiff pass).
  /// Operands may be forward values (saved tensors); each node's scope is the module
  /// CommDebugMode charges (null: Global only).
  std::shared_ptr<Graph> backward;
  /// The backward ops CommDebugMode lists as activation checkpointing (its JSON's
  /// operations_checkpointing): those run from a recomputation's forward hooks until the next
  /// module's full-backward pre-hook (torch 2.13 `_CommModeModuleTracker.activation_checkpointing`).
  llvm::DenseSet<const Node *> checkpointingOps;
  /// FSDP2 parameter groups (fsdp/FullyShard.h), in plan order.
  FsdpState fsdp;
  /// Modules whose calls are activation-checkpointed, with the plan entry that says how
  /// (autograd/ActivationCheckpoint.h).
  llvm::DenseMap<const ModuleScope *, const ActivationCheckpointUnit *> checkpointed;
  /// The loss value the `loss` pass appended to the forward graph (null: no loss computed).
  const Value *loss = nullptr;

  const DTensorLayout *layout(const Value *v) const {
    auto it = dtensors.find(v);
    return it == dtensors.end() ? nullptr : &it->second;
  }
};

/// Prints the graph with each DTensor value's placements after its type (`{S(0)}`).
void printAnnotatedGraph(llvm::raw_ostream &os, const Graph &graph, const PredictionState &state);

} // namespace commlens
