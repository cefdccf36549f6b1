// Activation checkpointing through the whole prediction pipeline on a small hand-built program:
//   Net: layers.0, layers.1 (Block), each y = mm(relu(mm(x, t(a))), t(b)) with a, b nn.Linear
//   weights [16, 16] f32 in layers.i.a / layers.i.b; the relu runs in the block itself; loss sum.
// Plan on a 4-rank mesh: RowwiseParallel on every a (input Shard(-1): the model input is each
// rank's shard, layers.1's input is layers.0.b's local shard; output Partial -> Replicate, one
// all_reduce at a's output, forward) and ColwiseParallel on every b (input Replicate, output
// Shard(-1) handed back as the local shard).
// Without checkpointing the backward issues one all_reduce per block: b's input gradient comes
// out of its Shard(0) weight's mm as Partial and goes to the Replicate its from_local took;
// a's output redistribution's backward (Replicate gradient to Partial) and its Shard(-1) input
// gradient move nothing.
// With non-reentrant checkpointing of a block (torch/utils/checkpoint.py), the first backward
// unpack of a saved tensor of that block call recomputes its forward and stops right after the
// last tensor the forward saved: a's mm (saves its input), the all_reduce at a's output, relu
// (saves its result), b's t (saves nothing), b's mm (saves input and weight) -- stop. So each
// checkpointed block repeats a's all_reduce in backward, charged to a (CommDebugMode charges the
// module whose forward issues it), before b's backward all_reduce.
// The expected lists are CommDebugMode's counts for the same model in torch (two Blocks of
// nn.Linear(16, 16, bias=False), x [8, 16], the plan above, sum loss, under commlens.measure on
// the fake process group); the model-checkpointing test is derived by hand (measure runs the
// wrapper form).
#include "passes/PassManager.h"

#include "TestPrograms.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

using namespace commlens;

namespace {

using test::f32;

struct Net : test::TestProgram {
  ShardingPlan plan;

  Net() : TestProgram("examples.Net") {
    plan.mesh.shape = {4};
    plan.mesh.dimNames = {"tp"};
    plan.loss.kind = LossSpec::Kind::Sum;
    ParallelizeStep step;
    // As the plan reader fills RowwiseParallel()'s and ColwiseParallel()'s defaults.
    ParallelStyle rowwise;
    rowwise.kind = ParallelStyle::Kind::Rowwise;
    rowwise.pattern = "layers.*.a";
    rowwise.inputLayouts = OptionalPlacements{Placement::shard(-1)};
    rowwise.outputLayouts = OptionalPlacements{Placement::replicate()};
    ParallelStyle colwise;
    colwise.kind = ParallelStyle::Kind::Colwise;
    colwise.pattern = "layers.*.b";
    colwise.inputLayouts = OptionalPlacements{Placement::replicate()};
    colwise.outputLayouts = OptionalPlacements{Placement::shard(-1)};
    step.styles = {rowwise, colwise};
    plan.steps.push_back(step);
    Value *x = input("x", f32({8, 16}));
    for (int i = 0; i < 2; ++i) {
      std::string l = "layers." + std::to_string(i);
      ModuleStackEntry block{l, "examples.Block", 0};
      auto linear = [&](const char *name, Value *in) {
        std::string path = l + "." + name;
        std::vector<ModuleStackEntry> stack{block, {path, test::kLinear, 0}};
        Value *w = param(path + ".weight", f32({16, 16}));
        Value *t = op(path + "_t", "aten::t.default", {{"self", w}}, f32({16, 16}, std::vector<int64_t>{1, 16}), stack);
        return op(path + "_mm", "aten::mm.default", {{"self", in}, {"mat2", t}}, f32({8, 16}), stack);
      };
      Value *h = linear("a", x);
      h = op(l + "_relu", "aten::relu.default", {{"self", h}}, f32({8, 16}), {block});
      x = linear("b", h);
    }
    output(x);
  }

  void checkpoint(std::string pattern, bool wrapper = true) {
    plan.activationCheckpoint.push_back({std::move(pattern), wrapper, {}});
  }

  /// "op phase @module" per collective, in issue order.
  std::vector<std::string> predict() {
    auto got = test::predictCollectives(p, plan, /*bytes=*/false);
    if (!got)
      ADD_FAILURE() << llvm::toString(got.takeError());
    return got ? *got : std::vector<std::string>{};
  }
};

const char *kAr = "c10d_functional.all_reduce";

std::string rec(const char *phase, const std::string &module) { return fmt::format("{} {} @Net.{}", kAr, phase, module); }

} // namespace

TEST(ActivationCheckpoint, NoCheckpointOneBackwardCollectivePerBlock) {
  Net net;
  EXPECT_EQ(net.predict(), (std::vector<std::string>{rec("fwd", "layers.0.a"), rec("fwd", "layers.1.a"),
                                                     rec("bwd", "layers.1.b"), rec("bwd", "layers.0.b")}));
}

TEST(ActivationCheckpoint, WrapperRecomputesUpToTheLastSave) {
  Net net;
  net.checkpoint("layers.*");
  const std::string w0 = "layers.0._checkpoint_wrapped_module", w1 = "layers.1._checkpoint_wrapped_module";
  // Backward runs layers.1 first: its recomputation comes before layers.0's.
  EXPECT_EQ(net.predict(), (std::vector<std::string>{rec("fwd", w0 + ".a"), rec("fwd", w1 + ".a"), rec("bwd", w1 + ".a"),
                                                     rec("bwd", w1 + ".b"), rec("bwd", w0 + ".a"),
                                                     rec("bwd", w0 + ".b")}));
}

TEST(ActivationCheckpoint, WrapperScopes) {
  Net net;
  net.checkpoint("layers.1");
  net.predict();
  // net.p's graph, not net.g: the passes replace the program's graph (decompose, apply-plan), so
  // the test program's reference to its first graph dangles after predict() (ASan:
  // heap-use-after-free).
  const ModuleScopeTree &tree = net.p.graph().scopes();
  std::vector<std::string> names;
  for (const ModuleScope *s : tree.inForwardOrder())
    names.push_back(s->displayName() + " " + s->type());
  EXPECT_EQ(names, (std::vector<std::string>{
                       "Net examples.Net", "Net.layers.0 examples.Block", "Net.layers.0.a " + std::string(test::kLinear),
                       "Net.layers.0.b " + std::string(test::kLinear),
                       "Net.layers.1 torch.distributed.algorithms._checkpoint.checkpoint_wrapper.CheckpointWrapper",
                       "Net.layers.1._checkpoint_wrapped_module examples.Block",
                       "Net.layers.1._checkpoint_wrapped_module.a " + std::string(test::kLinear),
                       "Net.layers.1._checkpoint_wrapped_module.b " + std::string(test::kLinear)}));
  const ModuleScope *inner = tree.lookup("layers.1._checkpoint_wrapped_module");
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(inner->parent(), tree.lookup("layers.1"));
  EXPECT_EQ(inner->depth(), 2u);
}

TEST(ActivationCheckpoint, ModelCheckpointKeepsNames) {
  Net net;
  net.checkpoint("layers.0", /*wrapper=*/false);
  EXPECT_EQ(net.predict(), (std::vector<std::string>{rec("fwd", "layers.0.a"), rec("fwd", "layers.1.a"),
                                                     rec("bwd", "layers.1.b"), rec("bwd", "layers.0.a"),
                                                     rec("bwd", "layers.0.b")}));
}

TEST(ActivationCheckpoint, CheckpointedLinearStopsBeforeItsOutputCollective) {
  // Checkpointing b alone: its recomputation is t, then mm (the last save), which issue nothing.
  // Its input gradient's all_reduce runs in the Colwise input hook's backward, inside the wrapper.
  Net net;
  net.checkpoint("layers.*.b");
  EXPECT_EQ(net.predict(), (std::vector<std::string>{rec("fwd", "layers.0.a"), rec("fwd", "layers.1.a"),
                                                     rec("bwd", "layers.1.b._checkpoint_wrapped_module"),
                                                     rec("bwd", "layers.0.b._checkpoint_wrapped_module")}));
}

TEST(ActivationCheckpoint, NestedCheckpointRefused) {
  Net net;
  net.checkpoint("layers.0");
  net.checkpoint("layers.0.a");
  auto got = test::predictCollectives(net.p, net.plan, /*bytes=*/false);
  ASSERT_FALSE(static_cast<bool>(got));
  EXPECT_EQ(llvm::toString(got.takeError()),
            "activation_checkpoint pattern 'layers.0.a': module Net.layers.0.a overlaps checkpointed module "
            "Net.layers.0 (nested checkpointing is not supported)");
}

TEST(ActivationCheckpoint, SelectivePolicyKeepsHookCollectivesAndOps) {
  const std::string w0 = "layers.0._checkpoint_wrapped_module", w1 = "layers.1._checkpoint_wrapped_module";
  // The all_reduce at a's output is a functional collective RowwiseParallel's hook calls: a policy
  // listing it keeps its output, so recomputation does not issue it again.
  Net kept;
  kept.plan.activationCheckpoint.push_back({"layers.*", true, {"_c10d_functional.all_reduce.default"}});
  EXPECT_EQ(kept.predict(), (std::vector<std::string>{rec("fwd", w0 + ".a"), rec("fwd", w1 + ".a"),
                                                      rec("bwd", w1 + ".b"), rec("bwd", w0 + ".b")}));
  // Keeping the mms changes nothing here: a's all_reduce is the hook's, after the (kept) mm.
  Net mm;
  mm.plan.activationCheckpoint.push_back({"layers.*", true, {"aten.mm.default"}});
  EXPECT_EQ(mm.predict(), (std::vector<std::string>{rec("fwd", w0 + ".a"), rec("fwd", w1 + ".a"), rec("bwd", w1 + ".a"),
                                                    rec("bwd", w1 + ".b"), rec("bwd", w0 + ".a"),
                                                    rec("bwd", w0 + ".b")}));
}
