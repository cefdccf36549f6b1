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
// Planner choice (`_gen_transform_infos_non_cached`): the greedy planner above, unless a
// _StridedShard is present, the source has a non-default shard order, or
// use_min_cost_redistribution_plan() is on; then DTensor's graph-based planner runs: Dijkstra
// over (placements, shard order) states, one mesh dim changing per edge (S(a)->S(b) and S->R only
// on the last mesh dim in a tensor dim's order, P->R, R->S appended to the order, P->S, R->P for
// the reduce ops of source and target), edge costs from DTensor's cost model (see
// redistributeCost; they depend on RedistributeOptions::devicesPerHost), ties to the state pushed
// first. A _StridedShard enters it decoded into a Shard plus a shard order. When its split factor
// does not decode (view-op factors: any sf > 1 on a 1-D mesh, or one that is no product of later
// mesh dim sizes), DTensor falls back to the greedy planner with the _StridedShard as is:
// _S -> R / S(d) / _S all_gather (padded to rank 0's strided chunk) then a local reorder/split;
// P -> _S all_reduce (not reduce_scatter) then a local split; S -> _S all_gather then a split;
// R -> _S local. Those greedy logical shapes ignore _StridedShard nesting, so some N-D plans crash
// inside DTensor (a torch._check in the unpad); planRedistribute reports those as errors too.
//
// Caveats of the graph planner not modelled: DTensor caches one planner per (mesh, tensor meta)
// whose R->P reduce-op set grows with every redistribution it planned, and iterates that Python
// set in hash order; commlens uses the source's and target's ops in the order sum, avg, max, min,
// product. Only ties between R->P edges of different reduce ops can come out differently.
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
  /// DTensor's graph-based (Dijkstra) planner made the plan, not the greedy one.
  bool usedGraphPlanner = false;

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
  /// use_min_cost_redistribution_plan(): forces the graph planner.
  bool forceMinCostPlan = false;
  /// The source's DTensorSpec.shard_order, when known (ignored when the source has a
  /// _StridedShard: that encodes the order). A non-default order (mesh dims of some tensor dim not
  /// strictly increasing) forces the graph planner. DTensor.redistribute's target always has the
  /// default order.
  std::optional<llvm::SmallVector<ShardOrderEntry, 2>> srcShardOrder;
  /// `torch.<device>.device_count()` on the machine that runs the program, for the cost model
  /// (graph planner edge costs, redistributeCost); <= 0: 1 for a CPU mesh, 8 for CUDA.
  int64_t devicesPerHost = 0;
};

/// Plans `redistribute_local_tensor(current=src, target=dst)` for a tensor of global `meta` on
/// `mesh` (the internal path used both by DTensor.redistribute and by op dispatch). Shard dims may
/// be negative (normalised against the tensor rank). src == dst gives an empty plan, unless the
/// source has a non-default shard order: op dispatch then still moves it to the default order
/// (DTensor.redistribute itself compares placements only and does nothing).
/// Errors (one line): malformed input; and the combinations DTensor itself raises on when the step runs on a mesh dim of size > 1:
/// Shard -> Partial, Partial(a) -> Partial(b), Replicate -> Partial(product), mixed Partial
/// reduce ops within one placement tuple (sum with avg is allowed), the nested-_StridedShard
/// unpad crash, and a _StridedShard step merged over a flattened mesh (DTensor asserts).
/// Rank 0's local shape of a tensor of `globalSizes` under `placements` (tensor dims already
/// normalised) on `mesh`: torch.chunk's first (largest) shard per Shard, DTensor's split for
/// _StridedShard. Rank 0's nested chunks do not depend on the shard order.
llvm::SmallVector<int64_t, 4> rank0LocalShape(const DeviceMesh &mesh, llvm::ArrayRef<int64_t> globalSizes,
                                              llvm::ArrayRef<Placement> placements);

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
/// source costs 0 whatever the target; any _StridedShard otherwise makes it infinity. The steps
/// are the graph planner's where it runs (non-default shard order, forceMinCostPlan).
/// `devicesPerHost` (when > 0, else options.devicesPerHost) is `torch.<device>.device_count()` on
/// the machine that runs the program; <= 0 means 1 for a CPU mesh and 8 for CUDA. Errors for
/// malformed input.
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
