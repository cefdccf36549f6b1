#include "passes/EstimateCommTime.h"

#include "comm/CommTimeModel.h"

#include <map>

namespace commlens {

llvm::Error EstimateCommTime::run(PassContext &ctx) {
  if (!ctx.options.cluster || !ctx.plan)
    return llvm::Error::success();
  const Cluster &cluster = *ctx.options.cluster;
  // A group's span depends only on its mesh dims: found once per dims, not per collective.
  std::map<llvm::SmallVector<unsigned, 2>, GroupTopology> topologies;
  for (CollectiveRecord &r : ctx.state.collectives) {
    std::optional<CollectiveKind> kind = collectiveKindOfOp(r.opKey);
    if (!kind)
      continue; // not a collective the model knows: reported without a time
    auto [it, inserted] = topologies.try_emplace(r.meshDims);
    if (inserted)
      it->second = groupTopology(ctx.plan->mesh, r.meshDims, cluster);
    r.time = estimateCollectiveTime(cluster, *kind, r.bytesPerRank, it->second);
  }
  return llvm::Error::success();
}

} // namespace commlens
