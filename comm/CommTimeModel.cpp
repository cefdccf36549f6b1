#include "comm/CommTimeModel.h"

#include "llvm/ADT/DenseSet.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace commlens {
namespace {

// NCCL's tuning constants (src/graph/tuning.cc, ncclTunerConstantsDefaults), which torch's
// inductor comm_analysis.py also uses. Indices: algorithm (tree, ring), protocol (LL, LL128,
// Simple), link (NVLink, PCIe, network), GPU generation, and the node-count scale (1, 2, >2).
enum Algo { Tree = 0, Ring = 1 };
enum Proto { LL = 0, LL128 = 1, Simple = 2 };
enum Hw { HwNVLink = 0, HwPCIe = 1, HwNet = 2 };

constexpr double kBaseLatencyUs[2][3] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}};
constexpr double kHwLatencyUs[3][2][3] = {
    {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}}, // NVLink: tree, ring
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}},  // PCIe
    {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}}, // network
};
constexpr double kLLMaxBusBw[4][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
constexpr double kRingLL128PerChannelBw[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {40, 40, 40}};
constexpr double kTreeLL128PerChannelBw[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20}};
constexpr double kTreePerChannelBw[4][3] = {{26.5, 18.5, 10}, {24, 23.6, 17.8}, {38.7, 41.4, 36}, {70, 42.8, 24}};
// Tree all_reduce's efficiency at medium sizes, by log2(bytes / 64) from 64 B to 256 MiB.
constexpr double kTreeCorrection[3][24] = {
    {1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0, 1.0},
    {0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9, 0.9},
};
constexpr const char *kAlgoNames[2] = {"tree", "ring"};
constexpr const char *kProtoNames[3] = {"ll", "ll128", "simple"};

int log2Floor(int64_t n) {
  int r = 0;
  while (n > 1) {
    n >>= 1;
    ++r;
  }
  return r;
}

bool isNetworkIB(LinkKind k) { return k == LinkKind::InfiniBand || k == LinkKind::RoCE; }

/// Ring steps of a collective over n ranks (all_to_all as its (n-1)/n bus factor implies).
int64_t ringSteps(CollectiveKind kind, int64_t n) { return kind == CollectiveKind::AllReduce ? 2 * (n - 1) : n - 1; }

/// NCCL's time for one (algorithm, protocol); nullopt where that pair does not run.
std::optional<double> algoTimeUs(const Cluster &c, CollectiveKind kind, int64_t messageBytes, GroupTopology g,
                                 Algo algo, Proto proto) {
  int64_t n = g.ranks, nodes = g.nodes;
  if (algo == Tree && kind != CollectiveKind::AllReduce)
    return std::nullopt; // NCCL's tree runs all_reduce only
  bool nvlinkNode = c.intra.kind == LinkKind::NVLink;
  // LL128 needs NVLink inside the node and stays off across an IB/RoCE network or past 2 nodes.
  if (proto == LL128 && (!nvlinkNode || nodes > 2 || (nodes > 1 && isNetworkIB(c.inter.kind))))
    return std::nullopt;
  unsigned gen = static_cast<unsigned>(c.gpu);
  unsigned scale = nodes == 1 ? 0 : (nodes == 2 ? 1 : 2);
  // The slowest link a ring step crosses: NVLink/PCIe inside one node, the NIC otherwise.
  double bw = nodes == 1 ? c.intra.busBandwidthGBps : c.inter.busBandwidthGBps;
  double ch = static_cast<double>(c.channels);
  double llMax = kLLMaxBusBw[nodes == 1 ? gen : 0][scale];
  if (algo == Ring && proto == LL)
    bw = std::min(llMax, bw * 0.5);
  else if (algo == Ring && proto == LL128)
    bw = std::min(bw * 120.0 / 128.0, ch * kRingLL128PerChannelBw[gen][scale]);
  else if (algo == Tree && proto == LL)
    bw = std::min(bw / 3.8, llMax);
  else if (algo == Tree && proto == LL128)
    bw = std::min(bw * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), ch * kTreeLL128PerChannelBw[gen][scale]);
  else if (algo == Tree && proto == Simple)
    bw = std::min(bw * 0.92, ch * kTreePerChannelBw[gen][scale]);
  if (bw <= 0)
    return std::nullopt;
  int64_t steps = ringSteps(kind, n);
  // Bus bandwidth -> algorithm bandwidth: tree all_reduce halves it, a ring moves n/steps.
  double algBw = algo == Tree ? bw * 0.5 : bw * static_cast<double>(n) / static_cast<double>(steps);

  Hw intraHw = nvlinkNode ? HwNVLink : HwPCIe;
  double lat = kBaseLatencyUs[algo][proto];
  double intraLat = kHwLatencyUs[intraHw][algo][proto];
  double interLat = kHwLatencyUs[HwNet][algo][proto];
  if (nodes > 1)
    intraLat = std::max(intraLat, proto == Simple ? 3.0 : 1.0); // network proxy overhead
  if (algo == Ring) {
    int64_t interSteps = nodes == 1 ? 0 : (kind == CollectiveKind::AllReduce ? 2 * (nodes - 1) : nodes - 1);
    lat += static_cast<double>(steps - interSteps) * intraLat + static_cast<double>(interSteps) * interLat;
  } else {
    lat += 2 * (static_cast<double>(n / nodes - 1) * intraLat + log2Floor(nodes) * interLat);
    int logSize = messageBytes >= 64 ? log2Floor(messageBytes >> 6) : 0;
    if (logSize < 24)
      algBw *= kTreeCorrection[proto][logSize];
  }
  return lat + static_cast<double>(messageBytes) / (1000.0 * algBw);
}

const Calibration *calibrationFor(const Cluster &c, CollectiveKind kind, GroupTopology g) {
  for (const Calibration &cal : c.calibrations)
    if (cal.collective == kind && cal.ranks == g.ranks && cal.nodes == g.nodes && !cal.samples.empty())
      return &cal;
  return nullptr;
}

/// Time at `bytes` from a measured table: linear in size between samples; below the smallest,
/// that sample's time (latency bound); above the largest, at the largest one's bandwidth.
double measuredTimeUs(const Calibration &cal, int64_t bytes) {
  const auto &v = cal.samples;
  if (bytes <= v.front().bytes)
    return v.front().us;
  if (bytes >= v.back().bytes)
    return v.back().us * static_cast<double>(bytes) / static_cast<double>(v.back().bytes);
  auto hi = std::lower_bound(v.begin(), v.end(), bytes, [](const MeasuredTime &s, int64_t b) { return s.bytes < b; });
  auto lo = std::prev(hi);
  double t = static_cast<double>(bytes - lo->bytes) / static_cast<double>(hi->bytes - lo->bytes);
  return lo->us + t * (hi->us - lo->us);
}

} // namespace

GroupTopology groupTopology(const DeviceMesh &mesh, llvm::ArrayRef<unsigned> dims, const Cluster &cluster) {
  GroupTopology g;
  llvm::SmallVector<int64_t, 4> strides(mesh.ndim(), 1);
  for (size_t i = mesh.ndim(); i-- > 1;)
    strides[i - 1] = strides[i] * mesh.shape[i];
  // Dims the topology file places: when it places every dim of the group, the inter-node
  // dims' sizes are the nodes spanned.
  unsigned placed = 0;
  int64_t interRanks = 1;
  for (unsigned d : dims) {
    g.ranks *= mesh.shape[d];
    if (d >= mesh.dimNames.size())
      continue;
    auto it = cluster.dimPlacement.find(mesh.dimNames[d]);
    if (it == cluster.dimPlacement.end())
      continue;
    ++placed;
    if (it->second == DimPlacement::InterNode)
      interRanks *= mesh.shape[d];
  }
  if (!dims.empty() && placed == dims.size()) {
    g.nodes = interRanks;
    return g;
  }
  // The ranks of rank 0's group, and the nodes they live on.
  llvm::SmallVector<int64_t, 64> ranks{0};
  for (unsigned d : dims) {
    llvm::SmallVector<int64_t, 64> next;
    for (int64_t r : ranks)
      for (int64_t k = 0; k < mesh.shape[d]; ++k)
        next.push_back(r + k * strides[d]);
    ranks = std::move(next);
  }
  llvm::DenseSet<int64_t> nodes;
  for (int64_t r : ranks)
    nodes.insert(r / std::max<int64_t>(cluster.gpusPerNode, 1));
  g.nodes = static_cast<int64_t>(nodes.size());
  return g;
}

int64_t ncclMessageBytes(CollectiveKind kind, int64_t bytesPerRank, int64_t ranks) {
  return kind == CollectiveKind::AllGather ? bytesPerRank * ranks : bytesPerRank;
}

CollectiveTime estimateCollectiveTime(const Cluster &cluster, CollectiveKind kind, int64_t bytesPerRank,
                                      GroupTopology group) {
  CollectiveTime t;
  t.ranks = group.ranks;
  t.nodes = group.nodes;
  t.messageBytes = ncclMessageBytes(kind, bytesPerRank, group.ranks);
  if (group.ranks <= 1) {
    t.algorithm = "none";
    return t;
  }
  double factor = busBandwidthFactor(kind, group.ranks);
  if (const Calibration *cal = calibrationFor(cluster, kind, group)) {
    t.us = measuredTimeUs(*cal, t.messageBytes);
    t.algorithm = "measured";
  } else {
    double best = std::numeric_limits<double>::infinity();
    for (Algo a : {Tree, Ring})
      for (Proto p : {LL, LL128, Simple})
        if (auto us = algoTimeUs(cluster, kind, t.messageBytes, group, a, p); us && *us < best) {
          best = *us;
          t.algorithm = std::string(kAlgoNames[a]) + "/" + kProtoNames[p];
        }
    t.us = best;
  }
  t.busBandwidthGBps = t.us > 0 ? static_cast<double>(t.messageBytes) * factor / (1000.0 * t.us) : 0;
  return t;
}

} // namespace commlens
