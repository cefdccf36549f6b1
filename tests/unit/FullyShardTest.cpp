// FSDP2 units through the whole prediction pipeline on a small hand-built program:
//   Net: layers.0, layers.1, layers.2 (each y = mm(x, t(w_i)), w_i [16, 16] f32), then, in the
//   root itself, y * scale (scale [16], a root parameter), loss sum.
// Every expected collective is derived here from torch 2.13's FSDP2 hooks
// (torch/distributed/fsdp/_fully_shard/_fsdp_state.py, _fsdp_param_group.py) and CommDebugMode's
// attribution: forward collectives belong to the module whose pre-hook is running; backward
// ones to the module whose output hook (full-backward pre-hook) fired last.
#include "passes/PassManager.h"

#include <fmt/format.h>
#include "TestPrograms.h"

#include <gtest/gtest.h>

using namespace commlens;

namespace {

using test::f32;

struct Net : test::TestProgram {
  ShardingPlan plan;

  /// units: the fully_shard calls; `rootScale` adds the root's own parameter.
  explicit Net(bool rootScale = true) : TestProgram("examples.Net") {
    plan.mesh.shape = {8};
    plan.mesh.dimNames = {"dp"};
    plan.loss.kind = LossSpec::Kind::Sum;
    Value *x = input("x", f32({8, 16}));
    for (int i = 0; i < 3; ++i) {
      std::string l = "layers." + std::to_string(i);
      Value *w = param(l + ".weight", f32({16, 16}));
      std::vector<ModuleStackEntry> stack{{l, "examples.Block", 0}};
      Value *t = op("t" + std::to_string(i), "aten::t.default", {{"self", w}}, f32({16, 16}, std::vector<int64_t>{1, 16}),
                    stack);
      x = op("mm" + std::to_string(i), "aten::mm.default", {{"self", x}, {"mat2", t}}, f32({8, 16}), stack);
    }
    if (rootScale)
      x = op("scaled", "aten::mul.Tensor", {{"self", x}, {"other", param("scale", f32({16}))}}, f32({8, 16}));
    output(x);
  }

  FullyShardUnit &unit(std::string pattern, std::vector<unsigned> dims = {0}) {
    FullyShardUnit u;
    u.pattern = std::move(pattern);
    for (unsigned d : dims)
      u.meshDims.push_back({d});
    plan.fullyShard.push_back(u);
    return plan.fullyShard.back();
  }

  /// "op phase @module bytes" per collective, in issue order.
  std::vector<std::string> predict() {
    auto got = test::predictCollectives(p, plan, /*bytes=*/true);
    if (!got)
      ADD_FAILURE() << llvm::toString(got.takeError());
    return got ? *got : std::vector<std::string>{};
  }
};

// One rank's FSDP shard of w_i on 8 ranks: ceil(16 / 8) x 16 = 32 f32 = 128 bytes; the
// reduce-scatter input is the whole padded gradient, 16 x 16 f32 = 1024 bytes. scale [16]:
// 2 elements (8 bytes) gathered, 16 x 4 = 64 bytes reduce-scattered.
const char *kAg = "c10d._allgather_base_";
const char *kRs = "c10d._reduce_scatter_base_";

std::string rec(const char *op, const char *phase, const char *module, int bytes) {
  return fmt::format("{} {} @{} {}", op, phase, module, bytes);
}

} // namespace

TEST(FullyShard, BlocksAndRootDefaultReshard) {
  Net net;
  net.unit("layers.*");
  net.unit("");
  // Forward: the root's pre-forward gathers scale first (it runs before its children), then
  //   each block in its own pre-forward. Post-forward order: layers.0, layers.1, layers.2, root.
  // Backward: sum's backward (Global), then the root's output hook names FSDPNet; the root's
  //   pre-backward is a tensor hook on mul's output, so it runs before MulBackward: the root
  //   keeps its parameters (reshard_after_forward is False for the root) and prefetches the
  //   unit before it in post-forward order, layers.2 (charged to FSDPNet). layers.2's output
  //   hook then names it; its pre-backward finds itself gathered and prefetches layers.1
  //   (charged to layers.2); its post-backward (the Function on its input) reduce-scatters.
  //   layers.1 prefetches layers.0 and reduce-scatters. layers.0's input x needs no gradient,
  //   so its post-backward runs in the final callback, together with the root's, root first
  //   (named_modules order), both while layers.0 is the last module named.
  EXPECT_EQ(net.predict(), (std::vector<std::string>{
                               rec(kAg, "fwd", "FSDPNet", 8),
                               rec(kAg, "fwd", "FSDPNet.layers.0", 128),
                               rec(kAg, "fwd", "FSDPNet.layers.1", 128),
                               rec(kAg, "fwd", "FSDPNet.layers.2", 128),
                               rec(kAg, "bwd", "FSDPNet", 128),
                               rec(kAg, "bwd", "FSDPNet.layers.2", 128),
                               rec(kRs, "bwd", "FSDPNet.layers.2", 1024),
                               rec(kAg, "bwd", "FSDPNet.layers.1", 128),
                               rec(kRs, "bwd", "FSDPNet.layers.1", 1024),
                               rec(kRs, "bwd", "FSDPNet.layers.0", 64),
                               rec(kRs, "bwd", "FSDPNet.layers.0", 1024),
                           }));
}

TEST(FullyShard, ListUnitGathersAtItsFirstModuleAndReducesAfterItsBackward) {
  Net net;
  net.unit("layers.0");
  net.unit("[layers.1, layers.2]").listPatterns = {"layers.1", "layers.2"}; // fully_shard([layers.1, layers.2])
  net.unit("");
  // fully_shard([a, b]) is one group (_register_group_forward_hooks): its pre-hook runs on both
  // modules, and the first unshards w1 and w2 (2 x 128 bytes) in layers.1's pre-forward; its
  // post-forward runs once, when layers.2 completes the group, so its pre-backward hooks
  // layers.2's output and its post-backward wraps layers.1's input. Post-forward order: layers.0,
  // the list, root. Backward: the root keeps its parameters and prefetches the list (charged to
  // FSDPNet); the list's pre-backward in layers.2 finds itself gathered and prefetches layers.0;
  // the list reduce-scatters both gradients (2 x 1024 bytes) when layers.1's backward is done;
  // the root's and layers.0's post-backward run in the final callback, as above.
  EXPECT_EQ(net.predict(), (std::vector<std::string>{
                               rec(kAg, "fwd", "FSDPNet", 8),
                               rec(kAg, "fwd", "FSDPNet.layers.0", 128),
                               rec(kAg, "fwd", "FSDPNet.layers.1", 256),
                               rec(kAg, "bwd", "FSDPNet", 256),
                               rec(kAg, "bwd", "FSDPNet.layers.2", 128),
                               rec(kRs, "bwd", "FSDPNet.layers.1", 2048),
                               rec(kRs, "bwd", "FSDPNet.layers.0", 64),
                               rec(kRs, "bwd", "FSDPNet.layers.0", 1024),
                           }));
}

TEST(FullyShard, RootWithoutParametersHasNoGroup) {
  Net net(/*rootScale=*/false);
  net.unit("layers.*");
  net.unit("");
  // No root group: nothing gathered for the root, and nothing prefetches layers.2, whose own
  // pre-backward re-gathers it and prefetches layers.1.
  EXPECT_EQ(net.predict(), (std::vector<std::string>{
                               rec(kAg, "fwd", "FSDPNet.layers.0", 128),
                               rec(kAg, "fwd", "FSDPNet.layers.1", 128),
                               rec(kAg, "fwd", "FSDPNet.layers.2", 128),
                               rec(kAg, "bwd", "FSDPNet.layers.2", 128),
                               rec(kAg, "bwd", "FSDPNet.layers.2", 128),
                               rec(kRs, "bwd", "FSDPNet.layers.2", 1024),
                               rec(kAg, "bwd", "FSDPNet.layers.1", 128),
                               rec(kRs, "bwd", "FSDPNet.layers.1", 1024),
                               rec(kRs, "bwd", "FSDPNet.layers.0", 1024),
                           }));
}

TEST(FullyShard, NoReshardAfterForwardGathersOnlyInForward) {
  Net net;
  net.unit("layers.*").reshard = FullyShardUnit::Reshard::No;
  net.unit("");
  auto out = net.predict();
  EXPECT_EQ(std::count_if(out.begin(), out.end(), [](const std::string &s) { return s.find(" bwd ") != s.npos &&
                                                                                    s.find(kAg) == 0; }),
            0);
  EXPECT_EQ(std::count_if(out.begin(), out.end(), [](const std::string &s) { return s.find(kRs) == 0; }), 4);
}

TEST(FullyShard, ReshardToGroupRegathersOnTheSmallerGroup) {
  Net net;
  FullyShardUnit &u = net.unit("layers.*");
  u.reshard = FullyShardUnit::Reshard::ToGroup;
  u.reshardGroupSize = 2;
  net.unit("");
  // Backward re-gathers run on the post-forward group of 2: ceil(16 / 2) x 16 f32 = 512 bytes.
  auto out = net.predict();
  ASSERT_EQ(out.size(), 11u);
  EXPECT_EQ(out[4], rec(kAg, "bwd", "FSDPNet", 512));
  EXPECT_EQ(out[5], rec(kAg, "bwd", "FSDPNet.layers.2", 512));
  EXPECT_EQ(out[7], rec(kAg, "bwd", "FSDPNet.layers.1", 512));
}

TEST(FullyShard, HsdpAllReducesOverTheReplicateGroupWithMixedPrecisionBytes) {
  Net net;
  net.plan.mesh.shape = {2, 4};
  net.plan.mesh.dimNames = {"rep", "shard"};
  FullyShardUnit &u = net.unit("layers.*", {0, 1});
  u.paramDtype = ScalarType::BFloat16;
  u.reduceDtype = ScalarType::Float;
  net.unit("", {0, 1});
  // Shard group 4: w_i shard ceil(16 / 4) x 16 = 64 elements, gathered in bf16 (128 bytes);
  // reduce-scatter input 16 x 16 f32 (1024), HSDP all-reduce of the 64-element f32 shard (256).
  auto out = net.predict();
  EXPECT_EQ(out[1], rec(kAg, "fwd", "FSDPNet.layers.0", 128));
  EXPECT_EQ(out[6], rec(kRs, "bwd", "FSDPNet.layers.2", 1024));
  EXPECT_EQ(out[7], rec("c10d.allreduce_", "bwd", "FSDPNet.layers.2", 256));
  EXPECT_EQ(std::count_if(out.begin(), out.end(), [](const std::string &s) { return s.find("allreduce_") != s.npos; }),
            4);
}

TEST(FullyShard, AFlattenedDimGathersOverAllItsRanks) {
  // torchtitan's fsdp over efsdp x ep (mesh["efsdp", "ep"]._flatten("fsdp")): the layers on the
  // flattened dim, a group of 2 x 4 = 8 ranks, the root on efsdp alone (2 ranks)
  Net net;
  net.plan.mesh.shape = {2, 4};
  net.plan.mesh.dimNames = {"efsdp", "ep"};
  net.plan.mesh.flattened = {{"fsdp", {0, 1}}};
  net.plan.fullyShard.push_back({});
  net.plan.fullyShard.back().pattern = "layers.*";
  net.plan.fullyShard.back().meshDims = {{0, 1}};
  net.unit("", {0});
  // w_i [16, 16] f32 on 8 ranks: shard 2 x 16 = 32 elements (128 bytes), reduce-scatter input the
  // whole 1024 bytes; the root's scale [16] on 2 ranks: 8 elements (32 bytes), input 64 bytes,
  // reduce-scattered by the root's final callback while layers.0's hooks are the last to have run
  auto out = net.predict();
  EXPECT_EQ(out[1], rec(kAg, "fwd", "FSDPNet.layers.0", 128));
  EXPECT_EQ(std::count(out.begin(), out.end(), rec(kRs, "bwd", "FSDPNet.layers.1", 1024)), 1);
  EXPECT_EQ(std::count(out.begin(), out.end(), rec(kRs, "bwd", "FSDPNet.layers.0", 64)), 1);
  EXPECT_EQ(std::count(out.begin(), out.end(), rec(kAg, "fwd", "FSDPNet", 32)), 1);
}

TEST(FullyShard, GradientSyncOffSkipsTheReduction) {
  Net net;
  net.unit("layers.*").requiresGradientSync = false;
  net.unit("");
  auto out = net.predict();
  std::vector<std::string> rs;
  for (const std::string &s : out)
    if (s.find(kRs) == 0)
      rs.push_back(s);
  EXPECT_EQ(rs, std::vector<std::string>{rec(kRs, "bwd", "FSDPNet.layers.0", 64)}); // the root's only
}

// A frozen parameter is gathered like any other (the forward needs it) but has no gradient, and
// foreach_reduce packs only the gradients the unit's parameters received
// (_fsdp_param_group.post_backward: the FSDPParams whose unsharded grad is not None).
TEST(FullyShard, FrozenParameterIsGatheredButNotReduced) {
  // One root unit holding all four parameters, layers.1.weight frozen. Forward: the root gathers
  //   its whole group at once, 3 x 128 + 8 = 392 bytes. Backward: the root keeps its parameters
  //   (no reshard after forward for the root), so nothing is re-gathered; x needs no gradient, so
  //   its post-backward runs in the final callback, while layers.0 is the last module named, and
  //   reduce-scatters the three gradients there: 1024 + 1024 + 64 = 2112 bytes (3136 with the
  //   frozen one's 1024).
  Net root;
  root.plan.frozen = {"layers.1.weight"};
  root.unit("");
  EXPECT_EQ(root.predict(), (std::vector<std::string>{
                                rec(kAg, "fwd", "FSDPNet", 392),
                                rec(kRs, "bwd", "FSDPNet.layers.0", 2112),
                            }));
  // Per-block units: as in BlocksAndRootDefaultReshard, except that layers.1, whose one parameter
  //   is frozen, reduce-scatters nothing in its post-backward. It is still re-gathered (by
  //   layers.2's prefetch: its output needs a gradient for layers.0's weight) and still
  //   prefetches layers.0.
  Net blocks;
  blocks.plan.frozen = {"layers.1.weight"};
  blocks.unit("layers.*");
  blocks.unit("");
  EXPECT_EQ(blocks.predict(), (std::vector<std::string>{
                                  rec(kAg, "fwd", "FSDPNet", 8),
                                  rec(kAg, "fwd", "FSDPNet.layers.0", 128),
                                  rec(kAg, "fwd", "FSDPNet.layers.1", 128),
                                  rec(kAg, "fwd", "FSDPNet.layers.2", 128),
                                  rec(kAg, "bwd", "FSDPNet", 128),
                                  rec(kAg, "bwd", "FSDPNet.layers.2", 128),
                                  rec(kRs, "bwd", "FSDPNet.layers.2", 1024),
                                  rec(kAg, "bwd", "FSDPNet.layers.1", 128),
                                  rec(kRs, "bwd", "FSDPNet.layers.0", 64),
                                  rec(kRs, "bwd", "FSDPNet.layers.0", 1024),
                              }));
}

TEST(FullyShard, ListUnitsCalledTwiceAreRefused) {
  // A list unit counts its modules' hooks to find the group's first pre-forward and last
  // post-forward; with a member called twice that count no longer marks one pass of the group.
  Net net;
  net.unit("[layers.0, layers.1]").listPatterns = {"layers.0", "layers.1"};
  Value *w = net.g.lookupValue("p_layers_0_weight");
  std::vector<ModuleStackEntry> second{{"layers.0", "examples.Block", 1}};
  net.op("t_again", "aten::t.default", {{"self", w}}, f32({16, 16}, std::vector<int64_t>{1, 16}), second);
  PassManager pm;
  buildPipeline(pm, /*backward=*/false);
  PassContext ctx{net.p, &net.plan, {}, PredictionState()};
  llvm::Error err = pm.run(ctx);
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_EQ(llvm::toString(std::move(err)),
            "fully_shard '[layers.0, layers.1]' on Net.layers.0: the module is called 2 times (a list unit whose "
            "modules are called more than once is not supported yet)");
}

TEST(FullyShard, ExplicitPrefetchMovesTheGathersToTheTriggeringUnit) {
  Net net;
  for (int i = 0; i < 3; ++i) {
    FullyShardUnit &u = net.unit("layers." + std::to_string(i));
    if (i < 2)
      u.forwardPrefetch = {"layers." + std::to_string(i + 1)};
    if (i > 0)
      u.backwardPrefetch = {"layers." + std::to_string(i - 1)};
  }
  net.unit("");
  // Forward: layers.0's pre-forward gathers itself, then prefetches layers.1
  //   (set_modules_to_forward_prefetch, charged to layers.0); layers.1 finds its all-gather
  //   pending and only prefetches layers.2; layers.2 issues nothing.
  // Backward: the root has no explicit list, so its default prefetch takes layers.2 (the unit
  //   before it in post-forward order); layers.2's explicit list prefetches layers.1 and
  //   layers.1's prefetches layers.0 (the lists replace the default); layers.0 has an empty
  //   list, so the default applies, with nothing before it.
  EXPECT_EQ(net.predict(), (std::vector<std::string>{
                               rec(kAg, "fwd", "FSDPNet", 8),
                               rec(kAg, "fwd", "FSDPNet.layers.0", 128),
                               rec(kAg, "fwd", "FSDPNet.layers.0", 128),
                               rec(kAg, "fwd", "FSDPNet.layers.1", 128),
                               rec(kAg, "bwd", "FSDPNet", 128),
                               rec(kAg, "bwd", "FSDPNet.layers.2", 128),
                               rec(kRs, "bwd", "FSDPNet.layers.2", 1024),
                               rec(kAg, "bwd", "FSDPNet.layers.1", 128),
                               rec(kRs, "bwd", "FSDPNet.layers.1", 1024),
                               rec(kRs, "bwd", "FSDPNet.layers.0", 64),
                               rec(kRs, "bwd", "FSDPNet.layers.0", 1024),
                           }));
}

TEST(FullyShard, HsdpWithoutAllReduceAndBadPrefetchTarget) {
  Net net;
  net.plan.mesh.shape = {2, 4};
  net.plan.mesh.dimNames = {"rep", "shard"};
  net.unit("layers.*", {0, 1}).requiresAllReduce = false;
  net.unit("", {0, 1});
  auto out = net.predict();
  // Only the root's post-backward all-reduces its gradient shard (16 / 4 = 4 f32 elements).
  std::vector<std::string> ar;
  for (const std::string &s : out)
    if (s.find("allreduce_") != s.npos)
      ar.push_back(s);
  EXPECT_EQ(ar, std::vector<std::string>{rec("c10d.allreduce_", "bwd", "FSDPNet.layers.0", 16)});

  Net bad;
  bad.unit("layers.*").forwardPrefetch = {"layers.9"};
  PassManager pm;
  buildPipeline(pm, /*backward=*/false);
  PassContext ctx{bad.p, &bad.plan, {}, PredictionState()};
  llvm::Error err = pm.run(ctx);
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_EQ(llvm::toString(std::move(err)),
            "fully_shard 'layers.*' on Net.layers.0: forward_prefetch target 'layers.9' is not a module fully_shard "
            "wrapped");
}
