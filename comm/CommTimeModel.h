// Communication time per collective on a named cluster: NCCL's own cost model (ring and tree
// algorithms x LL, LL128 and Simple protocols, the fastest pair wins, as ncclTopoGetAlgoTime
// picks), or a measured nccl-tests bus-bandwidth table where the cluster has one for that
// collective and group.
#pragma once

#include "ir/Cluster.h"
#include "ir/Mesh.h"

#include <string>

namespace commlens {

/// A collective's estimated time on a cluster.
struct CollectiveTime {
  double us = 0;
  /// "ring/simple", "tree/ll128", ... or "measured" (a calibration table).
  std::string algorithm;
  int64_t ranks = 1, nodes = 1;
  /// nccl-tests' message size and the bus bandwidth the estimate achieves on it.
  int64_t messageBytes = 0;
  double busBandwidthGBps = 0;
};

/// Where one collective's group sits: its size and how many nodes it spans.
struct GroupTopology {
  int64_t ranks = 1;
  int64_t nodes = 1;
};

/// The group along `dims` of `mesh` that holds rank 0, with ranks laid out row-major as
/// init_device_mesh does and nodes of cluster.gpusPerNode consecutive ranks. When the cluster
/// places every dim of the group (topology file "mesh_dims"), that decides instead: an intra
/// dim stays in one node, an inter dim puts each of its ranks on another node.
GroupTopology groupTopology(const DeviceMesh &mesh, llvm::ArrayRef<unsigned> dims, const Cluster &cluster);

/// The message size NCCL and nccl-tests reason in, from the bytes one rank hands the
/// collective: all_gather's is the gathered output (bytes x ranks), the others' their input.
int64_t ncclMessageBytes(CollectiveKind kind, int64_t bytesPerRank, int64_t ranks);

/// Estimates one collective; `time.us` is 0 for a group of one.
CollectiveTime estimateCollectiveTime(const Cluster &cluster, CollectiveKind kind, int64_t bytesPerRank,
                                      GroupTopology group);

} // namespace commlens
