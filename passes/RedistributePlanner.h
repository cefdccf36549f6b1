// RedistributePlanner: the exact sequence of collectives DTensor (torch 2.13) issues to move a
// tensor from one placement tuple to another on a device mesh, as CommDebugMode records them.
//
// Model of torch/distributed/tensor/_redistribute.py (`redistribute_local_tensor`):
//   1. Plan transform steps with the *greedy* planner (the default path). On a 1-D mesh it is one
//      step src[0] -> dst[0]. On an N-D mesh, when the source has more than one shard in total, it
//      first walks mesh dims from last to first and, wherever the target is Shard(d) but the mesh
//      dims *before* it shard tensor dim d differently in current vs target (nested/misaligned
//      sharding), it replicates that mesh dim first; then it walks mesh dims first to last and
//      emits every remaining current != target step.
//   2. Merge consecutive same-kind collectives (all_gather / all_reduce / reduce_scatter with
//      mergeable placements) into one collective over a flattened mesh, but only where the user
//      created that flattened mesh (`mesh["a", "b"]._flatten()`), see RedistributeOptions.
//   3. Execute the steps in order. A step on a mesh dim (or flattened group) of size 1 issues
//      nothing. Per step: P->R all_reduce; P->S(d) reduce_scatter (padded when uneven);
//      S(d)->R all_gather (padded when uneven, still one collective); S(a)->S(b) the
//      `_dtensor.shard_dim_alltoall` custom op on CUDA, but on a CPU mesh an all_gather plus a local
//      chunk; R->S(d) a local chunk; R->P a local partition (sum: divide by n).
//
// _StridedShard (from view ops or FSDP2+TP): DTensor tries its graph-based planner, but falls back
// to the greedy one when a split factor does not decode into a shard order (any sf > 1 on a 1-D
// mesh, or one that is not a product of later mesh dim sizes). That greedy fallback is modelled:
// _S -> R / S(d) / _S all_gather (padded to rank 0's strided chunk) then a local reorder/split;
// P -> _S all_reduce (not reduce_scatter) then a local split; S -> _S all_gather then split;
// R -> _S local. Its logical shapes ignore _StridedShard nesting, so some N-D plans crash inside
// DTensor (a torch._check in the unpad); planRedistribute reports those as errors too.
//
// Not modelled (planRedistribute returns an error naming the case instead of guessing): plans by
// the graph-based Dijkstra planner, whose choice depends on its topology cost model and tie order:
// _StridedShards that decode into a shard order, non-default shard orders, and
// use_min_cost_redistribution_plan() (RedistributeOptions::forceMinCostPlan).
//
// Symbolic sizes are planned with their hints (DTensor's guard_or_true would treat an unknown
// divisibility as uneven: padding never changes the count, only the bytes).
#pragma once

#include "ir/Mesh.h"
#include "ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>

namespace commlens {

/// What one transform step does at runtime.
enum class RedistributeAction : uint8_t {
  AllReduce,        ///< P -> R: c10d_functional.all_reduce
  ReduceScatter,    ///< P -> S(d): c10d_functional.reduce_scatter_tensor
  AllGather,        ///< S(d) -> R: c10d_functional.all_gather_into_tensor
  ShardDimAllToAll, ///< S(a) -> S(b), CUDA mesh: _dtensor.shard_dim_alltoall
  AllGatherChunk,   ///< S(a) -> S(b), CPU mesh: c10d_functional.all_gather_into_tensor + local chunk
  LocalChunk,       ///< R -> S(d): torch.chunk + clone, no communication
  LocalPartition,   ///< R -> P: local divide by n (sum) or identity (avg/min/max), no communication
  SkippedSize1,     ///< any transform on a mesh dim (or flattened group) of size 1: nothing runs
};
llvm::StringRef name(RedistributeAction a); // "all_reduce", "local_chunk", "skipped_size1", ...

/// CommDebugMode's key for the collective of an action, exactly as `str(packet)` prints it
/// (native `_c10d_functional.*` ops are re-keyed to the legacy `c10d_functional.*` packets);
/// empty for actions that issue no collective.
llvm::StringRef commDebugOpKey(RedistributeAction a);

/// One step of a redistribution, in execution order.
struct RedistributeStep {
  /// The mesh dim this step acts on; several (ascending) when consecutive steps were merged into
  /// one collective over a user-created flattened mesh.
  llvm::SmallVector<unsigned, 2> meshDims;
  /// The placement change of this step on those mesh dims. A merged sum/avg Partial group runs
  /// as P(sum) and divides afterwards, so `src` is then P(sum).
  Placement src, dst;
  RedistributeAction action = RedistributeAction::SkippedSize1;
  /// Ranks in the collective's group: the mesh dim size (product over merged dims).
  int64_t groupSize = 1;
  /// DTensor's `_TransformInfo.logical_shape`: the global shape with the source's sharding on the
  /// mesh dims before this one applied (rank-0 chunk sizes). Used for padding decisions.
  llvm::SmallVector<int64_t, 4> logicalShape;
  /// Shape of the local tensor on global rank 0 (coordinate 0 on every mesh dim) before/after.
  llvm::SmallVector<int64_t, 4> localShapeBefore, localShapeAfter;
  /// Bytes of the tensor handed to the collective op on rank 0, after DTensor's padding
  /// (uneven shards are padded up to the rank-0 chunk size, ceil(size/n), so every rank of the
  /// group passes this many bytes; torch.chunk gives rank 0 the largest chunk, so this is also
  /// the maximum over ranks). Zero for steps that issue no collective.
  int64_t inputBytes = 0;
  /// Bytes the collective returns on rank 0, before any unpadding: all_gather = input x n,
  /// reduce_scatter = input / n, all_reduce and all-to-all = input. Zero without a collective.
  int64_t outputBytes = 0;

  unsigned meshDim() const { return meshDims.front(); }
  bool isCollective() const { return !commDebugOpKey(action).empty(); }
  llvm::StringRef opKey() const { return commDebugOpKey(action); }
  /// "all_gather_into_tensor on mesh dim 1: S(0) -> R, 96 B in" style one-liner.
  std::string str() const;
};

struct RedistributePlan {
  /// Every step DTensor executes, local and size-1 steps included.
  llvm::SmallVector<RedistributeStep, 4> steps;

  /// The steps that issue a collective, in order (what CommDebugMode counts).
  llvm::SmallVector<const RedistributeStep *, 4> collectives() const;
  size_t numCollectives() const { return collectives().size(); }
  int64_t totalInputBytes() const;
  /// One line per step, indented, e.g. for an explanation.
  std::string str() const;
};

/// A tensor dim's sharding order over mesh dims, as DTensorSpec.shard_order holds it.
struct ShardOrderEntry {
  int64_t tensorDim = 0;
  llvm::SmallVector<unsigned, 2> meshDims;
};

struct RedistributeOptions {
  /// Mesh-dim groups (ascending) of this mesh for which a flattened DeviceMesh exists. DTensor
  /// finds them by layout in the root mesh's flatten mapping, via mesh dim *names*: a mesh with no
  /// dim names never merges. Empty (the default): no flattened meshes, no merging.
  llvm::SmallVector<llvm::SmallVector<unsigned, 2>, 1> flattenedDims;
  /// disable_redistribute_transform_optimization(): never merge.
  bool disableTransformOptimization = false;
  /// use_min_cost_redistribution_plan(): forces the graph planner (not implemented: error).
  bool forceMinCostPlan = false;
  /// The source's DTensorSpec.shard_order, when known. A non-default order (mesh dims of some
  /// tensor dim not strictly increasing) forces the graph planner (not implemented: error). The
  /// target of DTensor.redistribute always has the default order.
  std::optional<llvm::SmallVector<ShardOrderEntry, 2>> srcShardOrder;
};

/// Plans `redistribute_local_tensor(current=src, target=dst)` for a tensor of global `meta` on
/// `mesh` (the internal path used both by DTensor.redistribute and by op dispatch). Shard dims may
/// be negative (normalised against the tensor rank). src == dst gives an empty plan.
/// Errors (one line): malformed input; the unimplemented graph-planner cases above; and the
/// combinations DTensor itself raises on when the step runs on a mesh dim of size > 1:
/// Shard -> Partial, Partial(a) -> Partial(b), Replicate -> Partial(product), mixed Partial
/// reduce ops within one placement tuple (sum with avg is allowed), the nested-_StridedShard
/// unpad crash, and a _StridedShard step merged over a flattened mesh (DTensor asserts).
llvm::Expected<RedistributePlan> planRedistribute(const DeviceMesh &mesh, const TensorMeta &meta,
                                                  llvm::ArrayRef<Placement> src,
                                                  llvm::ArrayRef<Placement> dst,
                                                  const RedistributeOptions &options = {});

/// The user-facing `DTensor.redistribute(placements=dst)` refuses any target mesh dim that is a
/// Partial unless the source placement there is that same Partial ("redistributing to Partial
/// is for internal use only!"). Returns DTensor's message for the first such dim, or nullopt
/// when the call is accepted. Internal redistributions (op dispatch) have no such check.
/// `tensorRank` (when >= 0) normalises negative shard dims for the message, as DTensor has.
std::optional<std::string> userRedistributeRefusal(llvm::ArrayRef<Placement> src,
                                                   llvm::ArrayRef<Placement> dst,
                                                   int64_t tensorRank = -1);

/// DTensor's `redistribute_cost(current, target)` (_collective_utils.py): the cost sharding
/// propagation sums over an op's inputs to pick a strategy (so ties and near-ties decide which
/// collectives run). It sums per-step costs over the greedy plan's steps *before* flattened-mesh
/// merging, starting from bytes = global bytes / num_shards(src) and updating them per step:
///   S->R all_gather(bytes*n); S(a)->S(b) all_gather(bytes) + 1.0 (no all-to-all model);
///   P->R all_reduce(bytes); P->S reduce_scatter(bytes), then bytes/n; R->S 0, then bytes/n;
///   R->P 0; S->P and P(a)->P(b) infinity.
/// with a ring model per mesh dim (latency 6.6 us + hops x 0.6 us, 87.7 GB/s; mesh dims whose
/// cumulative size from the innermost dim exceeds `devicesPerHost` are inter-host: x0.22
/// bandwidth, 2.7 us per hop). A size-1 mesh dim still costs the 6.6 us latency. An all-Replicate
/// source costs 0 whatever the target; any _StridedShard otherwise makes it infinity.
/// `devicesPerHost` is `torch.<device>.device_count()` on the machine that runs the program; <= 0
/// means 1 for a CPU mesh (torch.cpu.device_count()) and 8 for CUDA. Errors as planRedistribute
/// for malformed input and non-default shard orders.
llvm::Expected<double> redistributeCost(const DeviceMesh &mesh, const TensorMeta &meta,
                                        llvm::ArrayRef<Placement> src, llvm::ArrayRef<Placement> dst,
                                        int64_t devicesPerHost = 0,
                                        const RedistributeOptions &options = {});

/// Placements the backward of `DTensor.redistribute` redistributes the gradient to (then planned
/// with planRedistribute(grad placements -> this)): the forward *source* placements, except that
/// a mesh dim whose forward source was Partial and whose gradient there is Shard or Replicate
/// targets Replicate (DTensor never turns a gradient back into Partial).
Placements redistributeBackwardTarget(llvm::ArrayRef<Placement> gradPlacements,
                                      llvm::ArrayRef<Placement> forwardSrc);

} // namespace commlens
