#include "frontends/PlanReader.h"
#include "ir/Error.h"

#include <fmt/format.h>

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
  EXPECT_EQ(plan->steps[0].meshDims, std::vector<MeshDimGroup>{{1}});
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
            "parallelize[0].plan[1].output_layouts[0]: bad placement 'Shard(x)' (expected Shard(d), Replicate(), "
            "Partial(op) or _StridedShard(dim=d, sf=k))");
  EXPECT_EQ(errorOf(kPlan, R"x("mesh_dim": "tp")x", R"x("mesh_dim": "sp")x"),
            "parallelize[0].mesh_dim: mesh dim 'sp' is not in the mesh (dim names: ['dp', 'tp'])");
  EXPECT_EQ(errorOf(kPlan, R"x("version": 1)x", R"x("version": 2)x"),
            "version: unsupported plan version 2 (commlens reads version 1)");
  EXPECT_EQ(errorOf(kPlan, R"x("frozen": [])x", R"x("frozen": [], "extra": 1)x"), "unknown key 'extra'");
  EXPECT_EQ(errorOf(kPlan, R"x("placements": ["Partial(avg)"])x", R"x("placements": ["R", "R"])x"),
            "placements.norm.weight: 2 placements for 1 mesh dims");
  EXPECT_EQ(errorOf(kPlan, R"x("shape": [2, 4])x", R"x("shape": [2, 0])x"), "mesh.shape[1]: mesh sizes must be positive");
}

// nlohmann's parser throws out_of_range, not parse_error, for a number past double's range.
TEST(PlanReader, NumberOverflowIsInvalidJson) {
  auto plan = parsePlan(R"({"format": "commlens-plan", "version": 1e999})");
  ASSERT_FALSE(static_cast<bool>(plan));
  EXPECT_EQ(takeMessage(plan.takeError()), "plan: invalid JSON: number overflow parsing '1e999'");
}

TEST(PlanReader, ModulePathMatchingFollowsParallelizeModule) {
  EXPECT_TRUE(matchesModulePath("layers.*.attention.wq", "layers.0.attention.wq"));
  EXPECT_FALSE(matchesModulePath("layers.*.attention", "layers.0.attention.wq")); // token counts differ
  EXPECT_TRUE(matchesModulePath("layers.[01].mlp", "layers.1.mlp"));
  EXPECT_FALSE(matchesModulePath("layers.*", "tok_embeddings"));
  EXPECT_TRUE(matchesModulePath("", ""));
}

namespace {

// A 3-D (replicate, shard, tp) plan: TP on "tp", HSDP units on (rep, shard).
constexpr const char *kFsdpPlan = R"x({
  "format": "commlens-plan", "version": 1, "name": "hsdp_tp", "source": "test",
  "mesh": {"shape": [2, 4, 2], "dim_names": ["rep", "shard", "tp"], "device_type": "cpu"},
  "parallelize": [{"mesh_dim": "tp", "plan": [{"fqn": "w1", "style": "ColwiseParallel"}]}],
  "fully_shard": [
    {"fqn": "layers.*", "mesh_dims": ["rep", "shard"], "reshard_after_forward": 2,
     "mp_policy": {"param_dtype": "bfloat16", "reduce_dtype": "float32", "output_dtype": null,
                   "cast_forward_inputs": false},
     "offload_policy": {"kind": "cpu", "pin_memory": false}, "requires_gradient_sync": false,
     "requires_all_reduce": false, "forward_prefetch": ["layers.1"], "backward_prefetch": []},
    {"fqn": "", "mesh_dims": ["shard"], "reshard_after_forward": null,
     "mp_policy": {"param_dtype": null, "reduce_dtype": null, "output_dtype": null, "cast_forward_inputs": true},
     "offload_policy": {"kind": "none"}, "requires_gradient_sync": true}],
  "src_data_rank": 0, "placements": {}, "inputs": {}, "frozen": [], "loss": {"kind": "sum"}, "loss_parallel": false
})x";

} // namespace

TEST(PlanReader, ReadsFullyShardUnits) {
  auto plan = parsePlan(kFsdpPlan);
  ASSERT_TRUE(static_cast<bool>(plan)) << takeMessage(plan.takeError());
  ASSERT_EQ(plan->fullyShard.size(), 2u);
  const FullyShardUnit &hsdp = plan->fullyShard[0], &root = plan->fullyShard[1];
  EXPECT_EQ(hsdp.pattern, "layers.*");
  EXPECT_EQ(hsdp.meshDims, (std::vector<MeshDimGroup>{{0}, {1}}));
  EXPECT_EQ(hsdp.reshard, FullyShardUnit::Reshard::ToGroup);
  EXPECT_EQ(hsdp.reshardGroupSize, 2);
  EXPECT_EQ(hsdp.paramDtype, ScalarType::BFloat16);
  EXPECT_EQ(hsdp.reduceDtype, ScalarType::Float);
  EXPECT_FALSE(hsdp.outputDtype.has_value());
  EXPECT_FALSE(hsdp.castForwardInputs);
  EXPECT_TRUE(hsdp.offloadToCpu);
  EXPECT_FALSE(hsdp.pinMemory);
  EXPECT_FALSE(hsdp.requiresGradientSync);
  EXPECT_FALSE(hsdp.requiresAllReduce);
  EXPECT_EQ(hsdp.forwardPrefetch, std::vector<std::string>{"layers.1"});
  EXPECT_TRUE(hsdp.backwardPrefetch.empty());
  EXPECT_EQ(root.pattern, "");
  EXPECT_EQ(root.meshDims, std::vector<MeshDimGroup>{{1}});
  EXPECT_EQ(root.reshard, FullyShardUnit::Reshard::Default);
  EXPECT_FALSE(root.paramDtype.has_value());
  EXPECT_TRUE(root.requiresGradientSync);
  EXPECT_TRUE(root.requiresAllReduce); // keys written before these setters existed: defaults
  // fully_shard normalises an int equal to the shard group (4) to True and 1 to False.
  auto reshardFor = [](const char *value) {
    std::string doc = kFsdpPlan;
    const std::string from = R"x("reshard_after_forward": 2)x";
    doc.replace(doc.find(from), from.size(), std::string(R"x("reshard_after_forward": )x") + value);
    auto plan = parsePlan(doc);
    EXPECT_TRUE(static_cast<bool>(plan));
    return plan ? plan->fullyShard[0].reshard : FullyShardUnit::Reshard::Default;
  };
  EXPECT_EQ(reshardFor("4"), FullyShardUnit::Reshard::Yes);
  EXPECT_EQ(reshardFor("1"), FullyShardUnit::Reshard::No);
  EXPECT_EQ(reshardFor("false"), FullyShardUnit::Reshard::No);
  // Plans written before fully_shard existed still read.
  auto old = parsePlan(kPlan);
  ASSERT_TRUE(static_cast<bool>(old));
  EXPECT_TRUE(old->fullyShard.empty());
}

TEST(PlanReader, FullyShardErrorsNameThePath) {
  EXPECT_EQ(errorOf(kFsdpPlan, R"x("forward_prefetch": ["layers.1"])x", R"x("forward_prefetch": [1])x"),
            "fully_shard[0].forward_prefetch[0]: expected a string");
  EXPECT_EQ(errorOf(kFsdpPlan, R"x("requires_gradient_sync": false)x", R"x("requires_gradient_sync": false, "x": 1)x"),
            "fully_shard[0]: unknown key 'x'");
  EXPECT_EQ(errorOf(kFsdpPlan, R"x("param_dtype": "bfloat16")x", R"x("param_dtype": "float64")x"),
            "fully_shard[0].mp_policy.param_dtype: dtype 'float64' (expected \"float32\", \"bfloat16\" or \"float16\")");
  EXPECT_EQ(errorOf(kFsdpPlan, R"x("mesh_dims": ["rep", "shard"])x", R"x("mesh_dims": ["rep", "shard", "x"])x"),
            "fully_shard[0].mesh_dims[2]: mesh dim 'x' is not in the mesh (dim names: ['rep', 'shard', 'tp'])");
  EXPECT_EQ(errorOf(kFsdpPlan, R"x("mesh_dims": ["rep", "shard"])x", R"x("mesh_dims": [])x"),
            "fully_shard[0].mesh_dims: 0 mesh dims (fully_shard takes a 1-D mesh, or a 2-D (replicate, shard) mesh for "
            "HSDP)");
  EXPECT_EQ(errorOf(kFsdpPlan, R"x("mesh_dims": ["rep", "shard"])x", R"x("mesh_dims": ["shard", "shard"])x"),
            "fully_shard[0].mesh_dims[1]: mesh dim 'shard' given twice");
  EXPECT_EQ(errorOf(kFsdpPlan, R"x("mesh_dims": ["shard"])x", R"x("mesh_dims": ["tp"])x"),
            "fully_shard[1].mesh_dims: mesh dim 'tp' is used by a parallelize step too (FSDP and tensor parallel "
            "dims must differ)");
  EXPECT_EQ(errorOf(kFsdpPlan, R"x("reshard_after_forward": 2)x", R"x("reshard_after_forward": 3)x"),
            "fully_shard[0].reshard_after_forward: reshard_after_forward 3 is not a factor of the shard group size 4");
  EXPECT_EQ(errorOf(kFsdpPlan, R"x({"kind": "cpu", "pin_memory": false})x", R"x({"kind": "disk"})x"),
            "fully_shard[0].offload_policy.kind: offload policy 'disk' (expected \"none\" or \"cpu\")");
}

TEST(PlanReader, ReadsATwoDimensionalSubMeshOfAStep) {
  // parallelize_module(model, mesh["dp", "tp"], ...), as torchtitan applies ExpertTensorParallel
  // on [ep, etp]: the step's mesh_dim is the list of its two dims
  std::string doc = kPlan;
  const std::string dim = R"x("mesh_dim": "tp")x";
  doc.replace(doc.find(dim), dim.size(), R"x("mesh_dim": ["dp", "tp"])x");
  auto plan = parsePlan(doc);
  ASSERT_TRUE(static_cast<bool>(plan)) << takeMessage(plan.takeError());
  EXPECT_EQ(plan->steps[0].meshDims, (std::vector<MeshDimGroup>{{0}, {1}}));
  EXPECT_EQ(errorOf(kPlan, dim, R"x("mesh_dim": ["tp"])x"),
            "parallelize[0].mesh_dim: a list of 1 mesh dims (a sub-mesh of 2 dims, or one dim's name)");
  EXPECT_EQ(errorOf(kPlan, dim, R"x("mesh_dim": ["tp", "tp"])x"),
            "parallelize[0].mesh_dim: mesh dim 'tp' is in both dims of the sub-mesh");
  EXPECT_EQ(errorOf(kPlan, dim, R"x("mesh_dim": ["tp", "dp"])x"),
            "parallelize[0].mesh_dim: the sub-mesh's dims are not in the mesh's order (torch raises \"Mesh dim "
            "indices should be in ascending order\")");
}

TEST(PlanReader, ReadsFlattenedDimsForFullyShard) {
  // torchtitan's fsdp dim over efsdp x ep: mesh["rep", "shard"]._flatten("dp") as the root's mesh,
  // with HSDP units on (rep, shard) beside it
  std::string doc = kFsdpPlan;
  const std::string mesh = R"x("device_type": "cpu"})x";
  doc.replace(doc.find(mesh), mesh.size(), R"x("device_type": "cpu", "flattened_dims": {"dp": ["rep", "shard"]}})x");
  const std::string root = R"x("mesh_dims": ["shard"])x";
  doc.replace(doc.find(root), root.size(), R"x("mesh_dims": ["dp"])x");
  auto plan = parsePlan(doc);
  ASSERT_TRUE(static_cast<bool>(plan)) << takeMessage(plan.takeError());
  EXPECT_EQ(plan->fullyShard[1].meshDims, (std::vector<MeshDimGroup>{{0, 1}}));
  EXPECT_EQ(plan->mesh.groupSize(plan->fullyShard[1].meshDims[0]), 8);
  EXPECT_EQ(plan->mesh.groupName(MeshDimGroup{0, 1}), "dp");
  EXPECT_EQ(plan->mesh.groupName(MeshDimGroup{1, 2}), "shard,tp");
  // errors name the entry
  auto flattened = [&](const char *entry) {
    return errorOf(doc, R"x("flattened_dims": {"dp": ["rep", "shard"]})x", entry);
  };
  EXPECT_EQ(flattened(R"x("flattened_dims": {"dp": ["shard", "rep"]})x"),
            "mesh.flattened_dims.dp[1]: mesh dim 'rep' is out of the mesh's order (a flattened dim takes dims in mesh "
            "order, each once)");
  EXPECT_EQ(flattened(R"x("flattened_dims": {"dp": ["rep"]})x"),
            "mesh.flattened_dims.dp: flattened dim 'dp' of 1 mesh dims (it flattens two or more)");
  EXPECT_EQ(flattened(R"x("flattened_dims": {"tp": ["rep", "shard"]})x"),
            "mesh.flattened_dims.tp: flattened dim 'tp' is named twice (or is a mesh dim's name)");
  EXPECT_EQ(flattened(R"x("flattened_dims": {"dp": ["rep", "x"]})x"),
            "mesh.flattened_dims.dp[1]: mesh dim 'x' is not in the mesh (dim names: ['rep', 'shard', 'tp'])");
  // a flattened dim overlapping a dim the unit names already
  EXPECT_EQ(errorOf(doc, R"x("mesh_dims": ["rep", "shard"])x", R"x("mesh_dims": ["rep", "dp"])x"),
            "fully_shard[0].mesh_dims[1]: mesh dim 'dp' given twice");
  // a parallelize step takes a flattened dim too (torchtitan's ep over fsdp x tp), as its group of
  // dims: here the HSDP units' rep and shard, which a Colwise step may not share
  EXPECT_EQ(errorOf(doc, R"x("mesh_dim": "tp")x", R"x("mesh_dim": "dp")x"),
            "fully_shard[0].mesh_dims: mesh dim 'rep' is used by a parallelize step too (FSDP and tensor parallel dims "
            "must differ)");
  // explicit placements do not
  EXPECT_EQ(errorOf(doc, R"x("placements": {})x",
                    R"x("placements": {"w2": {"mesh_dims": ["dp"], "placements": ["R"]}})x"),
            "placements.w2.mesh_dims[0]: 'dp' is a flattened dim (mesh.flattened_dims), which only fully_shard's "
            "mesh_dims and parallelize steps may name (DTensor placements on a flattened dim are not modelled)");
}

TEST(PlanReader, DenseUnitsMayShareTheDimOfAnExpertParallelStep) {
  // torchtitan and transformers put the experts under FSDP on a mesh dim of their own, and the
  // dense units on the dim whose ranks the experts are dispatched over; a step of a tensor
  // parallel style may not share its dim (FullyShardErrorsNameThePath).
  for (const char *style : {"TorchtitanExpertParallel", "TransformersEpDispatchExpertsParallel"}) {
    std::string doc = kFsdpPlan;
    const std::string colwise = R"x({"fqn": "w1", "style": "ColwiseParallel"})x";
    doc.replace(doc.find(colwise), colwise.size(), fmt::format(R"x({{"fqn": "w1", "style": "{}"}})x", style));
    const std::string root = R"x("mesh_dims": ["shard"])x";
    doc.replace(doc.find(root), root.size(), R"x("mesh_dims": ["tp"])x");
    auto plan = parsePlan(doc);
    ASSERT_TRUE(static_cast<bool>(plan)) << style << ": " << takeMessage(plan.takeError());
    EXPECT_EQ(plan->fullyShard[1].meshDims, std::vector<MeshDimGroup>{{2}}) << style;
  }
}

TEST(PlanReader, ReadsTransformersExpertDispatchKeywords) {
  // install_forward's keywords of transformers' ep_dispatch_experts, with their defaults
  std::string doc = kFsdpPlan;
  const std::string colwise = R"x({"fqn": "w1", "style": "ColwiseParallel"})x";
  const std::string dispatch = R"x({"fqn": "w1", "style": "TransformersEpDispatchExpertsParallel"})x";
  doc.replace(doc.find(colwise), colwise.size(), dispatch);
  auto plain = parsePlan(doc);
  ASSERT_TRUE(static_cast<bool>(plain)) << takeMessage(plain.takeError());
  const ParallelStyle &defaults = plain->steps[0].styles[0];
  EXPECT_FALSE(defaults.sharesBatch);
  EXPECT_EQ(defaults.epImplementation, ParallelStyle::EpImplementation::Auto);
  const std::string set = R"x("style": "TransformersEpDispatchExpertsParallel")x";
  std::string shared = doc;
  shared.replace(shared.find(set), set.size(),
                 set + R"x(, "shares_batch": true, "ep_implementation": "all_reduce")x");
  auto plan = parsePlan(shared);
  ASSERT_TRUE(static_cast<bool>(plan)) << takeMessage(plan.takeError());
  EXPECT_TRUE(plan->steps[0].styles[0].sharesBatch);
  EXPECT_EQ(plan->steps[0].styles[0].epImplementation, ParallelStyle::EpImplementation::AllReduce);

  EXPECT_EQ(errorOf(doc, set, set + R"x(, "ep_implementation": "megamoe")x"),
            "parallelize[0].plan[0].ep_implementation: ep_implementation 'megamoe' (expected \"auto\", "
            "\"all_to_all\" or \"all_reduce\"; transformers' MegaMoeEP is not modelled)");
  EXPECT_EQ(errorOf(doc, set, set + R"x(, "ep_implementation": "all_reduce")x"),
            "parallelize[0].plan[0].ep_implementation: ep_implementation \"all_reduce\" needs shares_batch (every "
            "rank of the expert group holding the same batch), as transformers' AllReduceEP does");
  EXPECT_EQ(errorOf(doc, set, set + R"x(, "shares_batch": "yes")x"),
            "parallelize[0].plan[0].shares_batch: expected a boolean");

  // tp_mesh_dim: a TP group inside the expert group (1 < tp_size < ep_size), a plain mesh dim
  std::string inside = doc;
  inside.replace(inside.find(set), set.size(), set + R"x(, "tp_mesh_dim": "shard")x");
  auto withTp = parsePlan(inside);
  ASSERT_TRUE(static_cast<bool>(withTp)) << takeMessage(withTp.takeError());
  EXPECT_EQ(withTp->steps[0].styles[0].tpMeshDim, std::optional<unsigned>(1));
  EXPECT_FALSE(withTp->steps[0].styles[0].sharesBatch);
  EXPECT_EQ(defaults.tpMeshDim, std::nullopt);
  EXPECT_EQ(errorOf(doc, set, set + R"x(, "tp_mesh_dim": "ep")x"),
            "parallelize[0].plan[0].tp_mesh_dim: mesh dim 'ep' is not in the mesh (dim names: ['rep', 'shard', "
            "'tp'])");
  EXPECT_EQ(errorOf(doc, set, set + R"x(, "shares_batch": true, "tp_mesh_dim": "shard")x"),
            "parallelize[0].plan[0].tp_mesh_dim: with shares_batch the TP group is the expert group itself; "
            "tp_mesh_dim names a TP group inside it (1 < tp_size < ep_size): give one or the other");
}

TEST(PlanReader, ReadsListUnitsAndTorchtitansSettings) {
  // torchtitan's fully_shard([norm, output]) with set_gradient_divide_factor(1.0), and its loss
  // over pred.float()
  std::string doc = kFsdpPlan;
  const std::string root = R"x({"fqn": "", "mesh_dims": ["shard"])x";
  doc.replace(doc.find(root), root.size(),
              R"x({"fqn": ["norm", "out*"], "mesh_dims": ["shard"], "gradient_divide_factor": 1.0)x");
  const std::string loss = R"x("loss": {"kind": "sum"})x";
  doc.replace(doc.find(loss), loss.size(),
              R"x("loss": {"kind": "cross_entropy", "reduction": "sum", "logits_dtype": "float32"})x");
  auto plan = parsePlan(doc);
  ASSERT_TRUE(static_cast<bool>(plan)) << takeMessage(plan.takeError());
  const FullyShardUnit &list = plan->fullyShard[1];
  EXPECT_EQ(list.pattern, "[norm, out*]");
  EXPECT_EQ(list.listPatterns, (std::vector<std::string>{"norm", "out*"}));
  EXPECT_EQ(list.patterns(), list.listPatterns);
  EXPECT_EQ(plan->fullyShard[0].patterns(), std::vector<std::string>{"layers.*"});
  EXPECT_EQ(plan->loss.logitsDtype, ScalarType::Float);
  EXPECT_EQ(errorOf(doc, R"x("fqn": ["norm", "out*"])x", R"x("fqn": [])x"),
            "fully_shard[1].fqn: an empty list of modules (fully_shard takes a module or a non-empty list of them)");
  EXPECT_EQ(errorOf(doc, R"x("gradient_divide_factor": 1.0)x", R"x("gradient_divide_factor": 0)x"),
            "fully_shard[1].gradient_divide_factor: gradient divide factor 0 (expected a positive number)");
  EXPECT_EQ(errorOf(doc, R"x("logits_dtype": "float32")x", R"x("logits_dtype": "int8")x"),
            "loss.logits_dtype: dtype 'int8' (expected \"float32\", \"bfloat16\" or \"float16\")");
}

TEST(PlanReader, ReadsActivationCheckpoint) {
  std::string doc = kPlan;
  const std::string from = R"x("loss_parallel": true)x";
  doc.replace(doc.find(from), from.size(),
              R"x("loss_parallel": true, "activation_checkpoint": [{"fqn": "layers.*"}, {"fqn": "blk", "wrapper": false}])x");
  auto plan = parsePlan(doc);
  ASSERT_TRUE(static_cast<bool>(plan)) << takeMessage(plan.takeError());
  ASSERT_EQ(plan->activationCheckpoint.size(), 2u);
  EXPECT_EQ(plan->activationCheckpoint[0].pattern, "layers.*");
  EXPECT_TRUE(plan->activationCheckpoint[0].wrapper); // the default: checkpoint_wrapper
  EXPECT_TRUE(plan->activationCheckpoint[0].earlyStop); // torch.utils.checkpoint's default
  EXPECT_EQ(plan->activationCheckpoint[1].pattern, "blk");
  EXPECT_FALSE(plan->activationCheckpoint[1].wrapper);
  // Below a wrapped module, paths gain the wrapper's attribute; the wrapper keeps the path.
  EXPECT_EQ(pathAfterCheckpointWrappers(*plan, "layers.3.attn.wq.weight"), "layers.3._checkpoint_wrapped_module.attn.wq.weight");
  EXPECT_EQ(pathAfterCheckpointWrappers(*plan, "layers.3"), "layers.3._checkpoint_wrapped_module");
  EXPECT_EQ(pathAfterCheckpointWrappers(*plan, "layers"), "layers");
  EXPECT_EQ(pathAfterCheckpointWrappers(*plan, "blk.w"), "blk.w"); // wrapper=false: names unchanged
  EXPECT_EQ(errorOf(doc, R"x({"fqn": "layers.*"})x", R"x({"fqn": "layers.*", "impl": "reentrant"})x"),
            "activation_checkpoint[0]: unknown key 'impl'");
  EXPECT_EQ(errorOf(doc, R"x({"fqn": "layers.*"})x", R"x({"fqn": 3})x"), "activation_checkpoint[0].fqn: expected a string");
  EXPECT_EQ(errorOf(doc, R"x({"fqn": "layers.*"})x", R"x({"fqn": "layers.*", "save_ops": ["mm"]})x"),
            "activation_checkpoint[0].save_ops[0]: 'mm' is not an op overload name (namespace.op.overload, e.g. "
            "'aten.mm.default')");
  EXPECT_EQ(errorOf(doc, R"x("wrapper": false)x", R"x("wrapper": false, "save_ops": ["aten.mm.default"])x"),
            "activation_checkpoint[1].save_ops: save_ops needs wrapper=true (a selective policy is passed to "
            "checkpoint_wrapper)");
  std::string noEarlyStop = doc;
  noEarlyStop.replace(noEarlyStop.find(R"x({"fqn": "layers.*"})x"), 19, R"x({"fqn": "layers.*", "early_stop": false})x");
  auto torchtitans = parsePlan(noEarlyStop);
  ASSERT_TRUE(static_cast<bool>(torchtitans)) << takeMessage(torchtitans.takeError());
  EXPECT_FALSE(torchtitans->activationCheckpoint[0].earlyStop);
  EXPECT_EQ(errorOf(doc, R"x("wrapper": false)x", R"x("wrapper": false, "early_stop": false)x"),
            "activation_checkpoint[1].early_stop: early_stop=false needs wrapper=true (it is passed to "
            "checkpoint_wrapper)");
  // torchtitan's per-op policy: every second mm of the saved ones is recomputed
  const std::string first = R"x({"fqn": "layers.*"})x";
  std::string perOp = doc;
  perOp.replace(perOp.find(first), first.size(),
                R"x({"fqn": "layers.*", "save_ops": ["aten.mm.default"], "recompute_every_second": ["aten.mm.default"]})x");
  auto titan = parsePlan(perOp);
  ASSERT_TRUE(static_cast<bool>(titan)) << takeMessage(titan.takeError());
  EXPECT_EQ(titan->activationCheckpoint[0].recomputeEverySecond, std::vector<std::string>{"aten.mm.default"});
  EXPECT_EQ(errorOf(perOp, R"x("save_ops": ["aten.mm.default"])x", R"x("save_ops": [])x"),
            "activation_checkpoint[0].recompute_every_second[0]: 'aten.mm.default' is not in save_ops "
            "(recompute_every_second recomputes every other call of an op the policy saves)");
  // and the mms it forces to recompute by their second operand's shape (an MoE router's gate)
  const std::string everySecond = R"x("recompute_every_second": ["aten.mm.default"])x";
  std::string forced = perOp;
  forced.replace(forced.find(everySecond), everySecond.size(),
                 everySecond + R"x(, "recompute_mm_rhs_shapes": [[128, 8]])x");
  auto withShapes = parsePlan(forced);
  ASSERT_TRUE(static_cast<bool>(withShapes)) << takeMessage(withShapes.takeError());
  EXPECT_EQ(withShapes->activationCheckpoint[0].recomputeMmRhsShapes,
            (std::vector<std::array<int64_t, 2>>{{128, 8}}));
  EXPECT_EQ(errorOf(forced, "[[128, 8]]", "[[128, 0]]"),
            "activation_checkpoint[0].recompute_mm_rhs_shapes[0]: sizes must be positive");
  EXPECT_EQ(errorOf(forced, "[[128, 8]]", "[[128]]"),
            "activation_checkpoint[0].recompute_mm_rhs_shapes[0]: expected [rows, columns] of an mm's second "
            "operand");
  EXPECT_EQ(errorOf(forced, everySecond + ", ", ""),
            "activation_checkpoint[0].recompute_mm_rhs_shapes: recompute_mm_rhs_shapes needs 'aten.mm.default' in "
            "recompute_every_second (torchtitan's per-op policy)");
}

TEST(PlanReader, MeshSizeAndPlacementListLimits) {
  EXPECT_EQ(errorOf(kPlan, R"x("shape": [2, 4])x", R"x("shape": [2, 4611686018427387904])x"),
            "mesh.shape: the mesh has more than 1048576 devices");
  EXPECT_EQ(errorOf(kPlan, R"x("shape": [2, 4])x", R"x("shape": [2, 18446744073709551615])x"),
            "mesh.shape[1]: integer 18446744073709551615 is out of range");
  EXPECT_EQ(errorOf(kPlan, R"x("output_layouts": ["Shard(1)"])x", R"x("output_layouts": [])x"),
            "parallelize[0].plan[1].output_layouts: expected one placement, got 0");
  EXPECT_EQ(errorOf(kPlan, R"x("output_layouts": ["Shard(1)"])x", R"x("output_layouts": [null])x"),
            "parallelize[0].plan[1].output_layouts[0]: null placement (only PrepareModuleInput and "
            "PrepareModuleOutput allow null entries)");
  EXPECT_EQ(errorOf(kPlan, R"x("desired_input_layouts": ["Replicate()", null])x", R"x("desired_input_layouts": [null, null])x"),
            "parallelize[0].plan[3].desired_input_layouts[0]: null placement for a non-null input_layouts entry");
}
