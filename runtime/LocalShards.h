// The plain tensors a style hands back with use_local_output=True (DTensor.to_local, torch 2.13
// torch/distributed/tensor/_api.py): each rank then computes on its own shard, while the exported
// program records the global shapes. Several things the run does with such shards fail where the
// global program would not, and a prediction from the program would be silently wrong:
//   - a view whose inferred (-1) size the local shard cannot give: 8 k/v heads on a tp of 16
//     leave 64 of a head's 128 features per rank, and `k.view(bsz, seq, -1, head_dim)` raises
//     ("shape '[2, 16, -1, 128]' is invalid for input of size 2048");
//   - a plain matrix product whose contracted sizes differ once a shard is local (a Linear left
//     unparallelized after a ColwiseParallel one multiplies its whole weight by the shard), or a
//     plain pointwise op whose operands no longer broadcast (a whole tensor added to a shard);
//   - DTensor.from_local of an uneven shard: without `shape` it takes the global size to be the
//     local one times the mesh dim size (a 1376-wide FFN on tp=64: 22 x 64 = 1408), so the next
//     DTensor op raises or communicates other bytes than the program's shapes give.
// LocalShards follows the shards through plain ops with DTensor's own sharding rules (a plain op
// keeps a shard where DTensor's strategy would keep it without redistributing) and refuses
// those cases by name. Where the rules cannot say how a shard flows, it stops following that value:
// nothing is refused on a guess.
//
// It also knows which plain tensors are whole on every rank: parameters, buffers and constants
// no plan made DTensors, what factory ops create, a replicated DTensor's local tensor, and what
// plain ops compute from those or from a model input. DTensor.from_local takes its argument as
// this rank's shard, so a style's input hook that wraps such a tensor as Shard(d) makes a global
// tensor the mesh dim's size times the program's along d, and every shape and byte after it
// differs from the program's: refused by name. A model input itself (or a view of one) reaching a
// Shard input layout is each rank's own shard (docs/plan-format.md, "Inputs and local shards").
#pragma once

#include "dtensor/ShardingDecisionCache.h"
#include "ir/Graph.h"
#include "ir/Mesh.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>

namespace commlens {

class LocalShards {
public:
  /// `meshes`: the DTensor meshes shards are of (DTensorLayout::mesh indexes them).
  LocalShards(const std::vector<DTensorMesh> &meshes, ShardingDecisionCache &decisions)
      : meshes_(meshes), decisions_(decisions) {}

  /// The program's inputs, before its first node: model inputs, and the parameters, buffers and
  /// constants (whole on every rank where they are plain tensors).
  void programInputs(const Graph &forward);
  /// `local` is `to_local()` of a DTensor with `placements` (normalised to its rank) on `mesh`.
  void toLocal(const Value *local, const Placements &placements, MeshId mesh);
  /// `out` is `in` unchanged (a hook that passes its tensors through).
  void passThrough(const Value *in, const Value *out);
  /// A plain op (no DTensor operand) at `n`: follows the shards among its operands to its results
  /// (and which results are whole on every rank); an error when it is a view the local shard
  /// cannot give.
  llvm::Error plainOp(const Node &n);
  /// DTensor.from_local(`x`, `placements`) at `n` (shape not given): an error when `x` is a shard
  /// whose global shape DTensor would infer differently from the program's on some rank, or a
  /// tensor whole on every rank wrapped as a Shard.
  llvm::Error fromLocal(const Node &n, const Value *x, const Placements &placements, MeshId mesh) const;

private:
  // The checks of a plain op whose shards are all of `mesh`.
  llvm::Error checkView(const Node &n, const Value *x, const Placements &have, const DeviceMesh &mesh) const;
  llvm::Error checkMatrixProduct(const Node &n, const DeviceMesh &mesh) const;
  llvm::Error checkGroupedMm(const Node &n, const DeviceMesh &mesh) const;
  llvm::Error checkBroadcast(const Node &n, const DeviceMesh &mesh) const;
  /// A plain tensor's placements as its local tensor holds them on `mesh`: a shard's, Replicate
  /// for a tensor whole on every rank, nullopt for a shard no longer followed or a value of
  /// unknown origin.
  std::optional<Placements> localPlacements(const Value *v, const DeviceMesh &mesh) const;
  /// "'x' [2, 8, 16] (whole on every rank)" or "'y' [2, 2, 16] (a local shard: [S(1)] of ...)".
  std::string describeLocal(const Value *v, const Placements &have, llvm::ArrayRef<int64_t> local,
                            const DeviceMesh &mesh) const;
  /// Records the origin of a plain op's results from its operands' (none of them a shard).
  void plainOrigins(const Node &n);

  /// Where a plain tensor that is not a local shard comes from, where known.
  enum class Origin : uint8_t {
    WholeOnEveryRank,
    ModelInput, ///< a model input or a view of one: each rank passes its shard to a Shard layout
  };

  /// A value known to be a local shard: its placements on its DTensor's mesh, or nullopt where
  /// the shard's layout could not be followed (then nothing downstream is checked).
  struct Shard {
    std::optional<Placements> placements;
    MeshId mesh = 0;
  };

  const std::vector<DTensorMesh> &meshes_;
  ShardingDecisionCache &decisions_;
  llvm::DenseMap<const Value *, Shard> shards_;
  llvm::DenseMap<const Value *, Origin> origins_;
};

} // namespace commlens
