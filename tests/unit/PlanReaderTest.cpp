#include "frontends/PlanReader.h"
#include "ir/Error.h"

#include <gtest/gtest.h>

using namespace commlens;

namespace {

constexpr const char *kPlan = R"x({
  "format": "commlens-plan", "version": 1, "name": "mlp_2d", "source": "test",
  "mesh": {"shape": [2, 4], "dim_names": ["dp", "tp"], "device_type": "cuda"},
  "parallelize": [{"mesh_dim": "tp", "plan": [
     {"fqn": "w1", "style": "ColwiseParallel"},
     {"fqn": "w2", "style": "RowwiseParallel", "output_layouts": ["Shard(1)"], "use_local_output": false},
     {"fqn": "norm", "style": "SequenceParallel", "sequence_sharding": ["Shard(0)"], "use_local_output": false},
     {"fqn": "blk", "style": "PrepareModuleInput", "input_layouts": ["Shard(1)", null],
      "desired_input_layouts": ["Replicate()", null], "input_kwarg_layouts": {"mask": "R"},
      "desired_input_kwarg_layouts": {"mask": "R"}, "use_local_output": true, "with_kwargs": true}]}],
  "src_data_rank": 0,
  "placements": {"norm.weight": {"mesh_dims": ["dp"], "placements": ["Partial(avg)"]}},
  "inputs": {"0": {"requires_grad": true, "placements": null}},
  "frozen": [],
  "loss": {"kind": "cross_entropy", "targets": "random", "seed": 0, "reduction": "sum", "ignore_index": -1},
  "loss_parallel": true
})x";

std::string errorOf(std::string doc, const std::string &from, const std::string &to) {
  size_t pos = doc.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  doc.replace(pos, from.size(), to);
  auto plan = parsePlan(doc);
  EXPECT_FALSE(static_cast<bool>(plan));
  return plan ? std::string() : takeMessage(plan.takeError());
}

} // namespace

TEST(PlanReader, ReadsMeshStylesPlacementsAndLoss) {
  auto plan = parsePlan(kPlan);
  ASSERT_TRUE(static_cast<bool>(plan)) << takeMessage(plan.takeError());
  EXPECT_EQ(plan->mesh.str(), "DeviceMesh((2, 4), 'cuda', mesh_dim_names=('dp', 'tp'))");
  ASSERT_EQ(plan->steps.size(), 1u);
  EXPECT_EQ(plan->steps[0].meshDim, 1u);
  const auto &styles = plan->steps[0].styles;
  ASSERT_EQ(styles.size(), 4u);
  // Colwise defaults from the constructor: input Replicate, output Shard(-1), local output.
  EXPECT_EQ(styles[0].kind, ParallelStyle::Kind::Colwise);
  EXPECT_EQ(styles[0].inputLayouts->at(0), Placement::replicate());
  EXPECT_EQ(styles[0].outputLayouts->at(0), Placement::shard(-1));
  EXPECT_TRUE(styles[0].useLocalOutput);
  // Rowwise: input default Shard(-1); desired input left for apply time (Linear vs Embedding).
  EXPECT_EQ(styles[1].inputLayouts->at(0), Placement::shard(-1));
  EXPECT_EQ(styles[1].outputLayouts->at(0), Placement::shard(1));
  EXPECT_FALSE(styles[1].desiredInputLayouts.has_value());
  EXPECT_FALSE(styles[1].useLocalOutput);
  EXPECT_EQ(styles[2].sequenceSharding, Placement::shard(0));
  EXPECT_EQ(styles[3].inputLayouts->size(), 2u);
  EXPECT_FALSE(styles[3].inputLayouts->at(1).has_value());
  EXPECT_EQ(styles[3].inputKwargLayouts.at("mask"), Placement::replicate());
  ASSERT_EQ(plan->placements.size(), 1u);
  EXPECT_EQ(plan->placements[0].second.meshDims, std::vector<unsigned>{0});
  EXPECT_EQ(plan->placements[0].second.placements[0], Placement::partial(ReduceOp::Avg));
  ASSERT_EQ(plan->inputs.size(), 1u);
  EXPECT_TRUE(plan->inputs[0].requiresGrad);
  EXPECT_EQ(plan->loss.kind, LossSpec::Kind::CrossEntropy);
  EXPECT_EQ(plan->loss.reduction, "sum");
  EXPECT_EQ(plan->loss.ignoreIndex, -1);
  EXPECT_TRUE(plan->lossParallel);
}

TEST(PlanReader, ErrorsNameThePath) {
  EXPECT_EQ(errorOf(kPlan, R"x("style": "ColwiseParallel")x", R"x("style": "FooParallel")x"),
            "parallelize[0].plan[0]: unknown parallel style 'FooParallel'");
  EXPECT_EQ(errorOf(kPlan, R"x("output_layouts": ["Shard(1)"])x", R"x("output_layouts": ["Shard(x)"])x"),
            "parallelize[0].plan[1].output_layouts[0]: bad placement 'Shard(x)' (expected Shard(d), Replicate() or "
            "Partial(op))");
  EXPECT_EQ(errorOf(kPlan, R"x("mesh_dim": "tp")x", R"x("mesh_dim": "sp")x"),
            "parallelize[0].mesh_dim: mesh dim 'sp' is not in the mesh (dim names: ['dp', 'tp'])");
  EXPECT_EQ(errorOf(kPlan, R"x("version": 1)x", R"x("version": 2)x"),
            "version: unsupported plan version 2 (commlens reads version 1)");
  EXPECT_EQ(errorOf(kPlan, R"x("frozen": [])x", R"x("frozen": [], "extra": 1)x"), ": unknown key 'extra'");
  EXPECT_EQ(errorOf(kPlan, R"x("placements": ["Partial(avg)"])x", R"x("placements": ["R", "R"])x"),
            "placements.norm.weight: 2 placements for 1 mesh dims");
  EXPECT_EQ(errorOf(kPlan, R"x("shape": [2, 4])x", R"x("shape": [2, 0])x"), "mesh.shape[1]: mesh sizes must be positive");
}

TEST(PlanReader, ModulePathMatchingFollowsParallelizeModule) {
  EXPECT_TRUE(matchesModulePath("layers.*.attention.wq", "layers.0.attention.wq"));
  EXPECT_FALSE(matchesModulePath("layers.*.attention", "layers.0.attention.wq")); // token counts differ
  EXPECT_TRUE(matchesModulePath("layers.[01].mlp", "layers.1.mlp"));
  EXPECT_FALSE(matchesModulePath("layers.*", "tok_embeddings"));
  EXPECT_TRUE(matchesModulePath("", ""));
}
