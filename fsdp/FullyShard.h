// FSDP2 (`fully_shard`, torch 2.13 torch/distributed/fsdp/_fully_shard/) as the prediction
// passes model it. Each fully_shard call on a module is one parameter group ("unit") that:
//
//   pre-forward    all-gathers its parameters (c10d._allgather_base_ on the shard group), unless
//                  they are still unsharded; wraps the module's grad-requiring inputs in
//                  RegisterPostBackwardFunction (its backward is the unit's post-backward);
//   post-forward   reshards (reshard_after_forward: True for non-root units, False for the root
//                  by default, or to a smaller group), records itself in the post-forward order
//                  and hooks its outputs: the first output gradient runs the pre-backward;
//   pre-backward   unshards (re-gather when resharded) and prefetches the unit before it in
//                  post-forward order: that re-gather is charged to the module CommDebugMode
//                  names at that moment, not to the prefetched unit;
//   post-backward  redistributes DTensor (tensor-parallel) gradients to their parameter's
//                  placements (Partial -> Replicate is a c10d_functional.all_reduce), then
//                  reduce-scatters the gradients (c10d._reduce_scatter_base_) and, for HSDP,
//                  all-reduces the shard over the replicate group (c10d.allreduce_). Units whose
//                  inputs need no gradient run it in the root's final engine callback.
//
// A unit called several times per forward runs its forward hooks at every call (re-gathering
// after each reshard) and its backward hooks per call, latest first: pre-backward runs unless
// the unit is already in pre-backward (so the earlier call re-gathers after the later call's
// post-backward resharded; autograd/Engine.cpp decides which hooks run), and each call's
// post-backward reduce-scatters only the gradients accumulated by then.
//
// fully_shard([a, b]) (torchtitan's [norm, output]) is one unit of several modules: its
// pre-forward runs on each (the first all-gathers and registers the post-backward on its inputs),
// its post-forward once, when the last one completes the group (_register_group_forward_hooks).
//
// A world of one skips the collective (unshard and reduce-scatter check the group size).
// Units that manage no parameter (a root whose children own every parameter) have no group and
// do nothing. The compute itself sees unsharded parameters: plain tensors, or the tensor-parallel
// DTensors on the TP sub-mesh, so sharding propagation is unchanged.
#pragma once

#include "ir/Graph.h"
#include "ir/ShardingPlan.h"
#include "state/PredictionState.h"

#include "llvm/Support/Error.h"

namespace commlens {

/// Finds the modules the plan's fully_shard calls wrap and the parameters each manages.
/// `tpPlacements` gives the parameters tensor parallelism made DTensors (re-registered, so
/// untied from their aliases), on `dtensorMeshes`. Renames the units' classes to FSDP<Class>, as fully_shard does.
llvm::Expected<std::vector<FsdpUnit>>
resolveFsdpUnits(const ShardingPlan &plan, Graph &graph,
                 const llvm::DenseMap<const Value *, DTensorLayout> &tpPlacements,
                 llvm::ArrayRef<DTensorMesh> dtensorMeshes);

/// The collectives FSDP issues at each of its hooks, appended to `out`. `at` is the node that
/// stands for the hook (its scope is the module CommDebugMode charges).
class FsdpRuntime {
public:
  FsdpRuntime(FsdpState &state, const PredictionState &prediction, std::vector<CollectiveRecord> &out)
      : state_(state), prediction_(prediction), out_(out) {
    state_.progress.resize(state_.units.size());
  }

  void preForward(unsigned unit, const Node &at);
  void postForward(unsigned unit);
  void preBackward(unsigned unit, const Node &at);
  /// Whether the unit's post-backward reduces the gradients it finds (it has a group and
  /// gradient sync is on).
  bool reducesGradients(unsigned unit) const;
  /// After the gradients were redistributed to their parameters' placements: the reduce-scatter
  /// (and HSDP all-reduce) of the gradients of `params`, the unit's parameters whose gradient
  /// autograd accumulated and no earlier post-backward took (none, for the later call of a unit
  /// called twice: its parameters' gradients are accumulated after the earlier call's backward).
  void reduceGradients(unsigned unit, const Node &at, llvm::ArrayRef<const Value *> params);

private:
  void unshard(unsigned unit, const Node &at, Phase phase, const std::string &why);
  /// Local (tensor-parallel) shape of a parameter.
  llvm::SmallVector<int64_t, 4> localSizes(const Value *param) const;
  /// Elements of one rank's shard when the unit's shard dim of the parameter (0 unless
  /// shard_placement_fn chose another) is split into `parts` (FSDP pads dim 0).
  int64_t shardNumel(const FsdpUnit &unit, const Value *param, int64_t parts) const;
  void record(CollectiveRecord r) { out_.push_back(std::move(r)); }
  FsdpUnitProgress &progress(unsigned unit) { return state_.progress[unit]; }

  FsdpState &state_;
  const PredictionState &prediction_;
  std::vector<CollectiveRecord> &out_;
};

} // namespace commlens
