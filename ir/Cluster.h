// The machines a plan runs on, as the communication time model needs them: the GPU generation
// (which selects NCCL's per-generation protocol limits), GPUs per node, the link inside a node
// and the network between nodes, per mesh dim where its groups sit, and optional measured bus
// bandwidth tables (nccl-tests) that replace the analytic model where they apply.
#pragma once

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace commlens {

/// Index into NCCL's per-compute-capability tuning tables (sm70, sm80/sm89, sm90, sm100+).
enum class GpuGeneration : uint8_t { Volta, Ampere, Hopper, Blackwell };
llvm::StringRef name(GpuGeneration g);
std::optional<GpuGeneration> gpuGenerationByName(llvm::StringRef name);

enum class LinkKind : uint8_t { NVLink, PCIe, InfiniBand, RoCE, Ethernet };
llvm::StringRef name(LinkKind k);
std::optional<LinkKind> linkKindByName(llvm::StringRef name);

struct Link {
  LinkKind kind = LinkKind::NVLink;
  /// Bus bandwidth one GPU gets on this link at large messages, GB/s (1e9 bytes per second):
  /// NVLink's aggregate per GPU, or the NIC's line rate per GPU between nodes.
  double busBandwidthGBps = 0;
};

/// The collectives the model knows, named as nccl-tests names them.
enum class CollectiveKind : uint8_t { AllReduce, AllGather, ReduceScatter, AllToAll };
llvm::StringRef name(CollectiveKind k);
std::optional<CollectiveKind> collectiveKindByName(llvm::StringRef name);
/// nccl-tests' bus-bandwidth factor: 2(n-1)/n for all_reduce, (n-1)/n for the others.
double busBandwidthFactor(CollectiveKind kind, int64_t ranks);
/// The kind of a collective op as CommDebugMode keys it (c10d_functional.all_reduce,
/// c10d._allgather_base_, _dtensor.shard_dim_alltoall, ...); nullopt for anything else.
std::optional<CollectiveKind> collectiveKindOfOp(llvm::StringRef opKey);

/// One measured point: nccl-tests' message size ("size", bytes) and its out-of-place time.
struct MeasuredTime {
  int64_t bytes = 0;
  double us = 0;
};

/// A measured table for one collective on groups of `ranks` GPUs over `nodes` nodes.
struct Calibration {
  CollectiveKind collective = CollectiveKind::AllReduce;
  int64_t ranks = 0;
  int64_t nodes = 1;
  std::vector<MeasuredTime> samples; // ascending bytes
};

/// Where a mesh dim's groups sit, when the topology file says so instead of the layout.
enum class DimPlacement : uint8_t { IntraNode, InterNode };

struct Cluster {
  std::string name;
  GpuGeneration gpu = GpuGeneration::Hopper;
  int64_t gpusPerNode = 8;
  Link intra{LinkKind::NVLink, 370};
  Link inter{LinkKind::InfiniBand, 50};
  /// Channels NCCL runs per collective (caps the LL128 and tree protocols' bandwidth).
  int64_t channels = 16;
  /// Mesh dim name -> where its groups sit (default: derived from the rank layout).
  std::map<std::string, DimPlacement, std::less<>> dimPlacement;
  std::vector<Calibration> calibrations;

  /// "h100-ib-ndr: hopper, 8 GPUs/node, nvlink 370 GB/s, infiniband 50 GB/s".
  std::string str() const;
};

/// The named presets (h100-ib-ndr, a100-ib-hdr, b200-ib-xdr, ...).
llvm::ArrayRef<Cluster> clusterPresets();
llvm::Expected<Cluster> clusterByName(llvm::StringRef name);

} // namespace commlens
