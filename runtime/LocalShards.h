// The plain tensors a style hands back with use_local_output=True (DTensor.to_local, torch 2.13
// torch/distributed/tensor/_api.py): each rank then computes on its own shard, while the exported
// program records the global shapes. Two things the run does with such shards fail where the
// global program would not, and a prediction from the program would be silently wrong:
//   - a view whose inferred (-1) size the local shard cannot give: 8 k/v heads on a tp of 16
//     leave 64 of a head's 128 features per rank, and `k.view(bsz, seq, -1, head_dim)` raises
//     ("shape '[2, 16, -1, 128]' is invalid for input of size 2048");
//   - DTensor.from_local of an uneven shard: without `shape` it takes the global size to be the
//     local one times the mesh dim size (a 1376-wide FFN on tp=64: 22 x 64 = 1408), so the next
//     DTensor op raises or communicates other bytes than the program's shapes give.
// LocalShards follows the shards through plain ops with DTensor's own sharding rules (a plain op
// keeps a shard where DTensor's strategy would keep it without redistributing) and refuses those
// two cases by name. Where the rules cannot say how a shard flows, it stops following that value:
// nothing is refused on a guess.
#pragma once

#include "dtensor/ShardingDecisionCache.h"
#include "ir/Graph.h"
#include "ir/Mesh.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Error.h"

#include <optional>

namespace commlens {

class LocalShards {
public:
  LocalShards(const DeviceMesh &mesh, ShardingDecisionCache &decisions) : mesh_(mesh), decisions_(decisions) {}

  /// `local` is `to_local()` of a DTensor with `placements` (normalised to its rank).
  void toLocal(const Value *local, const Placements &placements);
  /// `out` is `in` unchanged (a hook that passes its tensors through).
  void passThrough(const Value *in, const Value *out);
  /// A plain op (no DTensor operand) at `n`: follows the shards among its operands to its results;
  /// an error when it is a view the local shard cannot give.
  llvm::Error plainOp(const Node &n);
  /// DTensor.from_local(`x`, `placements`) at `n` (shape not given): an error when `x` is a shard
  /// whose global shape DTensor would infer differently from the program's on some rank.
  llvm::Error fromLocal(const Node &n, const Value *x, const Placements &placements) const;

private:
  llvm::Error checkView(const Node &n, const Value *x, const Placements &have) const;

  const DeviceMesh &mesh_;
  ShardingDecisionCache &decisions_;
  /// Values known to be local shards: their placements, or nullopt where the shard's layout could
  /// not be followed (then nothing downstream is checked).
  llvm::DenseMap<const Value *, std::optional<Placements>> shards_;
};

} // namespace commlens
