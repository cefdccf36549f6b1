// The communication time model (comm/CommTimeModel) and the cluster topology reader. Expected
// times are derived by hand from NCCL's tuning model as docs/cluster-format.md states it:
//   time = latency + message / (1000 * algorithm bandwidth)      [us; bytes; GB/s]
//   ring: algorithm bandwidth = bus bandwidth * n / steps (all_reduce 2(n-1) steps, else n-1),
//         latency = base[proto] + intra steps * NVLink latency + inter steps * network latency
//   tree (all_reduce): algorithm bandwidth = bus bandwidth / 2 (x medium-size correction)
// and the fastest (algorithm, protocol) pair wins.
#include "frontends/ClusterReader.h"
#include "comm/CommTimeModel.h"

#include <gtest/gtest.h>

namespace commlens {
namespace {

Cluster h100() { return llvm::cantFail(clusterByName("h100-ib-ndr")); }

DeviceMesh mesh(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<std::string> names) {
  DeviceMesh m;
  m.shape.assign(shape.begin(), shape.end());
  m.dimNames.assign(names.begin(), names.end());
  return m;
}

TEST(CommTimeModel, LargeAllReduceInOneNodeRunsRingSimple) {
  // 1 GiB over 8 H100s on NVLink (370 GB/s). Ring/Simple: 8.4 + 14 * 3.4 = 56.0 us latency,
  // 370 * 8 / 14 = 211.43 GB/s -> 56.0 + 2^30 / 211428.57 = 56.0 + 5078.509 = 5134.509 us.
  // It beats tree/Simple (bus 370 * 0.92 = 340.4, alg 170.2: 8.4 + 2 * 7 * 4.0 + 6308.7 =
  // 6373.1 us) and ring/LL128 (bus min(370 * 120/128, 16 * 36.7) = 346.9, alg 198.2:
  // 14 + 14 * 1.9 + 5417.0 = 5457.6 us).
  CollectiveTime t = estimateCollectiveTime(h100(), CollectiveKind::AllReduce, int64_t{1} << 30, {8, 1});
  EXPECT_NEAR(t.us, 5134.509, 1e-3);
  EXPECT_EQ(t.algorithm, "ring/simple");
  EXPECT_EQ(t.messageBytes, int64_t{1} << 30);
  // nccl-tests' bus bandwidth: message * 2(n-1)/n / time = 2^30 * 1.75 / 5134.509 us.
  EXPECT_NEAR(t.busBandwidthGBps, 1073741824.0 * 1.75 / 5134509.0, 1e-3);
}

TEST(CommTimeModel, SmallAllReduceRunsRingLL) {
  // 1 KiB: latency-bound. Ring/LL: 6.6 + 14 * 0.6 = 15.0 us, bus min(141, 370 / 2) = 141 GB/s,
  // alg 141 * 8 / 14 = 80.571: + 1024 / 80571.4 = 0.0127 -> 15.0127 us. Tree/LL: 6.8 + 2 * 7 *
  // 0.6 = 15.2 us plus its transfer: slower.
  CollectiveTime t = estimateCollectiveTime(h100(), CollectiveKind::AllReduce, 1024, {8, 1});
  EXPECT_NEAR(t.us, 15.0127, 1e-4);
  EXPECT_EQ(t.algorithm, "ring/ll");
}

TEST(CommTimeModel, AllGatherAcrossTwoNodesIsBoundByTheNic) {
  // 16 ranks on 2 nodes, 64 MiB shard per rank: message = the gathered 1 GiB. Between nodes the
  // NIC's 50 GB/s bounds the ring and LL128 is off (InfiniBand). Ring/Simple: alg 50 * 16 / 15
  // = 53.333 GB/s; 15 steps, 1 across the network: 8.4 + 14 * max(3.4, 3.0) + 1 * 14.0 = 70.0 us
  // latency; 70.0 + 2^30 / 53333.33 = 70.0 + 20132.659 = 20202.659 us.
  CollectiveTime t = estimateCollectiveTime(h100(), CollectiveKind::AllGather, int64_t{64} << 20, {16, 2});
  EXPECT_EQ(t.messageBytes, int64_t{1} << 30);
  EXPECT_NEAR(t.us, 20202.659, 1e-3);
  EXPECT_EQ(t.algorithm, "ring/simple");
}

TEST(CommTimeModel, GroupOfOneTakesNoTime) {
  CollectiveTime t = estimateCollectiveTime(h100(), CollectiveKind::AllReduce, 4096, {1, 1});
  EXPECT_EQ(t.us, 0);
  EXPECT_EQ(t.algorithm, "none");
}

TEST(CommTimeModel, GroupTopologyFollowsTheRankLayout) {
  Cluster c = h100(); // 8 GPUs per node
  // (2, 8) dp x tp: tp groups are 8 consecutive ranks (one node), dp pairs ranks 0 and 8.
  DeviceMesh m = mesh({2, 8}, {"dp", "tp"});
  GroupTopology tp = groupTopology(m, {1}, c), dp = groupTopology(m, {0}, c), both = groupTopology(m, {0, 1}, c);
  EXPECT_EQ(std::make_pair(tp.ranks, tp.nodes), std::make_pair(int64_t{8}, int64_t{1}));
  EXPECT_EQ(std::make_pair(dp.ranks, dp.nodes), std::make_pair(int64_t{2}, int64_t{2}));
  EXPECT_EQ(std::make_pair(both.ranks, both.nodes), std::make_pair(int64_t{16}, int64_t{2}));
  // (8, 4): dp groups are ranks 0, 4, ..., 28: two per node, 4 nodes.
  DeviceMesh m2 = mesh({8, 4}, {"dp", "tp"});
  GroupTopology dp2 = groupTopology(m2, {0}, c);
  EXPECT_EQ(std::make_pair(dp2.ranks, dp2.nodes), std::make_pair(int64_t{8}, int64_t{4}));
  // The topology file decides for groups whose every dim it places.
  c.dimPlacement["dp"] = DimPlacement::IntraNode;
  EXPECT_EQ(groupTopology(m, {0}, c).nodes, 1);
  c.dimPlacement["dp"] = DimPlacement::InterNode;
  c.dimPlacement["tp"] = DimPlacement::IntraNode;
  GroupTopology placed = groupTopology(m2, {0, 1}, c);
  EXPECT_EQ(std::make_pair(placed.ranks, placed.nodes), std::make_pair(int64_t{32}, int64_t{8}));
  c.dimPlacement.erase("tp"); // tp unplaced: the layout decides the (dp, tp) group (32 ranks, 4 nodes)
  EXPECT_EQ(groupTopology(m2, {0, 1}, c).nodes, 4);
}

TEST(CommTimeModel, MeasuredTableReplacesTheModel) {
  Cluster c = h100();
  Calibration cal;
  cal.collective = CollectiveKind::AllReduce;
  cal.ranks = 8;
  cal.samples = {{1024, 20.0}, {1048576, 100.0}};
  c.calibrations.push_back(cal);
  auto at = [&](int64_t bytes) { return estimateCollectiveTime(c, CollectiveKind::AllReduce, bytes, {8, 1}); };
  EXPECT_EQ(at(1024).algorithm, "measured");
  EXPECT_DOUBLE_EQ(at(512).us, 20.0);                   // below the table: its smallest time
  EXPECT_DOUBLE_EQ(at((1024 + 1048576) / 2).us, 60.0);  // halfway: halfway
  EXPECT_DOUBLE_EQ(at(2097152).us, 200.0);              // past the table: its last bandwidth
  // Another group size or collective keeps the model.
  EXPECT_EQ(estimateCollectiveTime(c, CollectiveKind::AllReduce, 1024, {4, 1}).algorithm, "ring/ll");
  EXPECT_EQ(estimateCollectiveTime(c, CollectiveKind::AllGather, 1024, {8, 1}).algorithm, "ring/ll");
}

TEST(CommTimeModel, OpKeysMapToCollectives) {
  EXPECT_EQ(collectiveKindOfOp("c10d_functional.all_reduce"), CollectiveKind::AllReduce);
  EXPECT_EQ(collectiveKindOfOp("c10d._allgather_base_"), CollectiveKind::AllGather);
  EXPECT_EQ(collectiveKindOfOp("c10d_functional.reduce_scatter_tensor"), CollectiveKind::ReduceScatter);
  EXPECT_EQ(collectiveKindOfOp("_dtensor.shard_dim_alltoall"), CollectiveKind::AllToAll);
  EXPECT_EQ(collectiveKindOfOp("c10d.broadcast_"), std::nullopt);
}

constexpr const char *kNcclTestsOutput = R"(# nThread 1 nGpus 8 minBytes 1024 maxBytes 1048576 step: 1024(factor) warmup iters: 5 iters: 20
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256     float     sum      -1    20.00    0.05    0.09      0    19.50    0.05    0.09      0
     1048576        262144     float     sum      -1   100.00   10.49   18.35      0    98.00   10.70   18.72      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 9.22
)";

TEST(ClusterReader, ReadsNcclTestsOutput) {
  auto rows = parseNcclTestsOutput(kNcclTestsOutput);
  ASSERT_TRUE(static_cast<bool>(rows)) << llvm::toString(rows.takeError());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].bytes, 1024);
  EXPECT_DOUBLE_EQ((*rows)[0].us, 20.0);
  EXPECT_EQ((*rows)[1].bytes, 1048576);
  EXPECT_DOUBLE_EQ((*rows)[1].us, 100.0);
  auto none = parseNcclTestsOutput("# nothing measured\n");
  EXPECT_EQ(llvm::toString(none.takeError()), "no nccl-tests rows");
  auto headless = parseNcclTestsOutput("1024 256 float sum -1 20.0\n");
  EXPECT_EQ(llvm::toString(headless.takeError()), "no '# size ... time' header before the first row");
}

TEST(ClusterReader, TopologyFileOverridesItsBase) {
  auto c = parseCluster(R"({"format": "commlens-cluster", "version": 1, "base": "h100-ib-ndr",
      "inter": {"bus_bandwidth_GBps": 100}, "mesh_dims": {"dp": "inter"},
      "calibration": [{"collective": "all_reduce", "ranks": 8, "samples": [[1048576, 10.0]]}]})",
                        "");
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->name, "h100-ib-ndr+file");
  EXPECT_EQ(c->inter.kind, LinkKind::InfiniBand);
  EXPECT_EQ(c->inter.busBandwidthGBps, 100);
  EXPECT_EQ(c->intra.busBandwidthGBps, 370);
  EXPECT_EQ(c->dimPlacement.at("dp"), DimPlacement::InterNode);
  // A [size, busbw] row is the time nccl-tests would have printed: size * 2(n-1)/n / busbw =
  // 1048576 * 1.75 / 10 GB/s = 183.5008 us.
  ASSERT_EQ(c->calibrations.size(), 1u);
  EXPECT_NEAR(c->calibrations[0].samples[0].us, 183.5008, 1e-4);
}

TEST(ClusterReader, ErrorsNameTheField) {
  auto err = [](const char *text) {
    auto c = parseCluster(text, "");
    return c ? std::string("no error") : llvm::toString(c.takeError());
  };
  const char *head = R"({"format": "commlens-cluster", "version": 1, )";
  EXPECT_EQ(err((std::string(head) + R"("gpus": 8})").c_str()), "unknown key 'gpus'");
  EXPECT_EQ(err((std::string(head) + R"("base": "k80-ib"})").c_str()),
            "base: unknown cluster 'k80-ib' (known: h100-ib-ndr, h100-roce, h200-ib-ndr, b200-ib-ndr, b200-ib-xdr, "
            "gb200-nvl72, a100-ib-hdr, a100-roce, v100-ib-edr, l40s-pcie; or a topology JSON file)");
  EXPECT_EQ(err((std::string(head) + R"("intra": {"link": "nvswitch"}})").c_str()),
            "intra.link: unknown link 'nvswitch' (expected nvlink, pcie, infiniband, roce or ethernet)");
  EXPECT_EQ(err((std::string(head) + R"("inter": {"bus_bandwidth_GBps": 0}})").c_str()),
            "inter.bus_bandwidth_GBps: expected a positive number, got 0");
  EXPECT_EQ(err((std::string(head) + R"("mesh_dims": {"tp": "local"}})").c_str()),
            "mesh_dims.tp: expected \"intra\" or \"inter\", got \"local\"");
  EXPECT_EQ(err((std::string(head) + R"("calibration": [{"collective": "all_reduce", "ranks": 8}]})").c_str()),
            "calibration[0]: expected exactly one of 'samples' ([[size, busbw GB/s], ...]) or 'nccl_tests' (a file)");
  EXPECT_EQ(err((std::string(head) +
                 R"("calibration": [{"collective": "all_reduce", "ranks": 8, "nccl_tests": "/nonexistent/ar.txt"}]})")
                    .c_str()),
            "calibration[0].nccl_tests: /nonexistent/ar.txt: cannot open file: No such file or directory");
  EXPECT_EQ(err(R"({"format": "commlens-plan", "version": 1})"),
            "format: expected \"commlens-cluster\", got \"commlens-plan\"");
}

} // namespace
} // namespace commlens
