#include "ir/Cluster.h"

#include "ir/Error.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"

namespace commlens {

llvm::StringRef name(GpuGeneration g) {
  switch (g) {
  case GpuGeneration::Volta: return "volta";
  case GpuGeneration::Ampere: return "ampere";
  case GpuGeneration::Hopper: return "hopper";
  case GpuGeneration::Blackwell: return "blackwell";
  }
  return "?";
}

std::optional<GpuGeneration> gpuGenerationByName(llvm::StringRef n) {
  return llvm::StringSwitch<std::optional<GpuGeneration>>(n)
      .Case("volta", GpuGeneration::Volta)
      .Case("ampere", GpuGeneration::Ampere)
      .Case("hopper", GpuGeneration::Hopper)
      .Case("blackwell", GpuGeneration::Blackwell)
      .Default(std::nullopt);
}

llvm::StringRef name(LinkKind k) {
  switch (k) {
  case LinkKind::NVLink: return "nvlink";
  case LinkKind::PCIe: return "pcie";
  case LinkKind::InfiniBand: return "infiniband";
  case LinkKind::RoCE: return "roce";
  case LinkKind::Ethernet: return "ethernet";
  }
  return "?";
}

std::optional<LinkKind> linkKindByName(llvm::StringRef n) {
  return llvm::StringSwitch<std::optional<LinkKind>>(n)
      .Case("nvlink", LinkKind::NVLink)
      .Case("pcie", LinkKind::PCIe)
      .Cases("infiniband", "ib", LinkKind::InfiniBand)
      .Case("roce", LinkKind::RoCE)
      .Case("ethernet", LinkKind::Ethernet)
      .Default(std::nullopt);
}

llvm::StringRef name(CollectiveKind k) {
  switch (k) {
  case CollectiveKind::AllReduce: return "all_reduce";
  case CollectiveKind::AllGather: return "all_gather";
  case CollectiveKind::ReduceScatter: return "reduce_scatter";
  case CollectiveKind::AllToAll: return "all_to_all";
  }
  return "?";
}

std::optional<CollectiveKind> collectiveKindByName(llvm::StringRef n) {
  return llvm::StringSwitch<std::optional<CollectiveKind>>(n)
      .Case("all_reduce", CollectiveKind::AllReduce)
      .Case("all_gather", CollectiveKind::AllGather)
      .Case("reduce_scatter", CollectiveKind::ReduceScatter)
      .Case("all_to_all", CollectiveKind::AllToAll)
      .Default(std::nullopt);
}

double busBandwidthFactor(CollectiveKind kind, int64_t ranks) {
  double n = static_cast<double>(ranks);
  return kind == CollectiveKind::AllReduce ? 2 * (n - 1) / n : (n - 1) / n;
}

std::optional<CollectiveKind> collectiveKindOfOp(llvm::StringRef opKey) {
  return llvm::StringSwitch<std::optional<CollectiveKind>>(opKey)
      .Cases("c10d_functional.all_reduce", "c10d.allreduce_", CollectiveKind::AllReduce)
      .Cases("c10d_functional.all_gather_into_tensor", "c10d._allgather_base_", CollectiveKind::AllGather)
      .Cases("c10d_functional.reduce_scatter_tensor", "c10d._reduce_scatter_base_", CollectiveKind::ReduceScatter)
      .Cases("_dtensor.shard_dim_alltoall", "c10d_functional.all_to_all_single", CollectiveKind::AllToAll)
      .Default(std::nullopt);
}

std::string Cluster::str() const {
  return fmt::format("{}: {}, {} GPUs/node, {} {} GB/s, {} {} GB/s", name, commlens::name(gpu), gpusPerNode,
                     commlens::name(intra.kind), intra.busBandwidthGBps, commlens::name(inter.kind),
                     inter.busBandwidthGBps);
}

namespace {

// Link rates: NVLink per GPU as NCCL's topology code rates it (sm70 120, sm80 240, sm90 370.8,
// sm100 721.8 GB/s: links x per-link rate); network per GPU at one NIC per GPU (HDR 200 Gb/s =
// 25 GB/s, NDR 400 Gb/s = 50 GB/s, XDR 800 Gb/s = 100 GB/s); PCIe Gen4/5 through the host as
// NCCL's ring sees it (~24 GB/s). Channels: the rings NCCL typically builds per generation.
Cluster preset(const char *name, GpuGeneration gpu, int64_t gpusPerNode, Link intra, Link inter, int64_t channels) {
  Cluster c;
  c.name = name;
  c.gpu = gpu;
  c.gpusPerNode = gpusPerNode;
  c.intra = intra;
  c.inter = inter;
  c.channels = channels;
  return c;
}

const std::vector<Cluster> &presets() {
  using G = GpuGeneration;
  using L = LinkKind;
  static const std::vector<Cluster> list = {
      preset("h100-ib-ndr", G::Hopper, 8, {L::NVLink, 370}, {L::InfiniBand, 50}, 16),
      preset("h100-roce", G::Hopper, 8, {L::NVLink, 370}, {L::RoCE, 50}, 16),
      preset("h200-ib-ndr", G::Hopper, 8, {L::NVLink, 370}, {L::InfiniBand, 50}, 16),
      preset("b200-ib-ndr", G::Blackwell, 8, {L::NVLink, 720}, {L::InfiniBand, 50}, 32),
      preset("b200-ib-xdr", G::Blackwell, 8, {L::NVLink, 720}, {L::InfiniBand, 100}, 32),
      preset("gb200-nvl72", G::Blackwell, 72, {L::NVLink, 720}, {L::InfiniBand, 50}, 32),
      preset("a100-ib-hdr", G::Ampere, 8, {L::NVLink, 240}, {L::InfiniBand, 25}, 8),
      preset("a100-roce", G::Ampere, 8, {L::NVLink, 240}, {L::RoCE, 25}, 8),
      preset("v100-ib-edr", G::Volta, 8, {L::NVLink, 120}, {L::InfiniBand, 12}, 2),
      preset("l40s-pcie", G::Ampere, 8, {L::PCIe, 24}, {L::Ethernet, 12.5}, 8),
  };
  return list;
}

} // namespace

llvm::ArrayRef<Cluster> clusterPresets() { return presets(); }

llvm::Expected<Cluster> clusterByName(llvm::StringRef n) {
  for (const Cluster &c : presets())
    if (c.name == n)
      return c;
  llvm::SmallVector<llvm::StringRef, 12> names;
  for (const Cluster &c : presets())
    names.push_back(c.name);
  return makeError("unknown cluster '{}' (known: {}; or a topology JSON file)", n, llvm::join(names, ", "));
}

} // namespace commlens
