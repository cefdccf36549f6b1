// The forward prediction passes on small hand-built graphs. Expected op sequences come from
// ATen's CompositeImplicit kernels of torch 2.13 (Linear.cpp, LinearAlgebra.cpp) and expected
// placements/collectives from DTensor's rules, derived in each test.
#include "ir/Graph.h"
#include "ir/IRPrinter.h"
#include "passes/ApplyShardingPlan.h"
#include "ir/TensorMetaUtils.h"
#include "passes/DecomposeToRuntimeOps.h"
#include "passes/ShardingPropagation.h"
#include "TestPrograms.h"

#include <gtest/gtest.h>

using namespace commlens;

namespace {

using ProgramBuilder = test::TestProgram;
using test::f32;
using test::kLinear;

std::vector<std::string> ops(const Graph &g) {
  std::vector<std::string> out;
  for (const auto &n : g.nodes())
    out.push_back(n->opString());
  return out;
}

llvm::Error decompose(ExportedProgram &p) {
  PassContext ctx{p, nullptr, {}, PredictionState()};
  return DecomposeToRuntimeOps().run(ctx);
}

/// y = w2(relu(w1(x))), x: [2, 8, 16], w1: 16 -> 32 (bias), w2: 32 -> 16 (bias `w2bias`).
ProgramBuilder mlp(bool w2bias) {
  ProgramBuilder b("examples.mlp.MLP");
  Value *w1 = b.param("w1.weight", f32({32, 16}));
  Value *b1 = b.param("w1.bias", f32({32}));
  Value *w2 = b.param("w2.weight", f32({16, 32}));
  Value *b2 = w2bias ? b.param("w2.bias", f32({16})) : nullptr;
  Value *x = b.input("x", f32({2, 8, 16}));
  Value *h = b.op("linear", "torch.ops.aten.linear.default", {{"input", x}, {"weight", w1}, {"bias", b1}},
                  f32({2, 8, 32}), {{"w1", kLinear, 0}});
  Value *r = b.op("relu", "torch.ops.aten.relu.default", {{"self", h}}, f32({2, 8, 32}), {});
  llvm::SmallVector<NamedArgument, 4> args{{"input", r}, {"weight", w2}};
  if (b2)
    args.push_back({"bias", b2});
  b.output(b.op("linear_1", "torch.ops.aten.linear.default", std::move(args), f32({2, 8, 16}), {{"w2", kLinear, 0}}));
  return b;
}

} // namespace

TEST(DecomposeToRuntimeOps, LinearFollowsAtenLinear) {
  // at::linear: a contiguous 3-D input with bias takes _flatten_nd_linear (view, t, addmm, view);
  // without bias, matmul folds the batch dims (t, view, mm, _unsafe_view).
  ProgramBuilder b = mlp(/*w2bias=*/false);
  ASSERT_FALSE(static_cast<bool>(decompose(b.p)));
  EXPECT_EQ(ops(b.p.graph()), (std::vector<std::string>{"aten::view.default", "aten::t.default", "aten::addmm.default",
                                                         "aten::view.default", "aten::relu.default", "aten::t.default",
                                                         "aten::view.default", "aten::mm.default",
                                                         "aten::_unsafe_view.default"}));
  // Results keep their names and shapes; intermediates are derived from them.
  const Graph &g = b.p.graph();
  EXPECT_EQ(g.nodes()[1]->results()[0]->meta()->str(), "f32[16, 32]");   // t(w1): [32,16] -> [16,32]
  EXPECT_EQ(g.nodes()[2]->results()[0]->meta()->str(), "f32[16, 32]");   // addmm: [2*8, 16] @ [16, 32]
  EXPECT_EQ(g.nodes()[3]->results()[0]->name(), "linear");
  EXPECT_EQ(g.nodes().back()->results()[0]->name(), "linear_1");
  EXPECT_EQ(g.outputs()[0].value.tensor(), g.nodes().back()->results()[0]);
}

TEST(DecomposeToRuntimeOps, TwoDimensionalAndNonContiguousLinear) {
  ProgramBuilder b("m.M");
  Value *w = b.param("fc.weight", f32({8, 4}));
  Value *bias = b.param("fc.bias", f32({8}));
  Value *x2 = b.input("x", f32({3, 4}));
  // A transposed 3-D input [4, 2, 4] with strides of a [2, 4, 4] tensor: not contiguous.
  Value *xt = b.input("xt", f32({4, 2, 4}, std::vector<int64_t>{4, 16, 1}));
  b.output(b.op("a", "torch.ops.aten.linear.default", {{"input", x2}, {"weight", w}, {"bias", bias}}, f32({3, 8}),
                {{"fc", kLinear, 0}}));
  b.output(b.op("c", "torch.ops.aten.linear.default", {{"input", xt}, {"weight", w}, {"bias", bias}}, f32({4, 2, 8}),
                {{"fc", kLinear, 1}}));
  ASSERT_FALSE(static_cast<bool>(decompose(b.p)));
  // 2-D with bias: addmm(bias, x, t(w)). Non-contiguous 3-D: matmul(x, t(w)), whose fold needs
  // a reshape that cannot be a view (clone + _unsafe_view), then an out-of-place add of the bias.
  EXPECT_EQ(ops(b.p.graph()),
            (std::vector<std::string>{"aten::t.default", "aten::addmm.default", "aten::t.default", "aten::clone.default",
                                      "aten::_unsafe_view.default", "aten::mm.default", "aten::_unsafe_view.default",
                                      "aten::add.Tensor"}));
}

TEST(DecomposeToRuntimeOps, TensorToIsSelfUnlessSomethingChanges) {
  // TensorConversions.cpp: to() returns self when dtype and device stay and copy is false;
  // otherwise it is _to_copy. _assert_tensor_metadata is export's check of the call (eager code
  // never dispatches it).
  ProgramBuilder b("examples.Net");
  Value *x = b.input("x", f32({4, 8}));
  Value *same = b.op("to", "torch.ops.aten.to.dtype", {{"self", x}, {"dtype", ScalarType::Float}}, f32({4, 8}));
  b.op("check", "torch.ops.aten._assert_tensor_metadata.default", {{"a", same}, {"dtype", ScalarType::Float}},
       f32({4, 8}));
  TensorMeta bf16 = f32({4, 8});
  bf16.dtype = ScalarType::BFloat16;
  Value *cast = b.op("to_1", "torch.ops.aten.to.dtype", {{"self", same}, {"dtype", ScalarType::BFloat16}}, bf16);
  Value *copied = b.op("to_2", "torch.ops.aten.to.dtype", {{"self", x}, {"dtype", ScalarType::Float}, {"copy", true}},
                       f32({4, 8}));
  b.output(b.op("add", "torch.ops.aten.add.Tensor", {{"self", cast}, {"other", copied}}, bf16));
  ASSERT_FALSE(static_cast<bool>(decompose(b.p)));
  EXPECT_EQ(ops(b.p.graph()), (std::vector<std::string>{"aten::_to_copy.default", "aten::_to_copy.default",
                                                        "aten::add.Tensor"}));
  // The first _to_copy reads x itself: the same-dtype to() was bound away.
  EXPECT_EQ(b.p.graph().nodes()[0]->input("self")->tensor()->name(), "x");
}

TEST(DecomposeToRuntimeOps, ViewStridesFollowComputeStride) {
  EXPECT_EQ(viewStrides(f32({2, 8, 16}), {16, 16}), (llvm::SmallVector<int64_t, 4>{16, 1}));
  EXPECT_EQ(viewStrides(f32({2, 8, 16}), {2, 8, 4, 4}), (llvm::SmallVector<int64_t, 4>{128, 16, 4, 1}));
  // [4, 2, 4] viewed from a transposed [2, 4, 4]: dims 0 and 1 cannot merge.
  EXPECT_FALSE(viewStrides(f32({4, 2, 4}, std::vector<int64_t>{4, 16, 1}), {8, 4}).has_value());
  EXPECT_TRUE(isContiguous(f32({2, 1, 3}, std::vector<int64_t>{3, 7, 1}))); // size-1 dims' strides do not matter
}

namespace {

ShardingPlan tpPlan(int64_t tp, ParallelStyle w1, ParallelStyle w2) {
  ShardingPlan plan;
  plan.mesh.shape = {tp};
  plan.mesh.dimNames = {"tp"};
  ParallelizeStep step;
  step.meshDims = {{0}};
  w1.pattern = "w1";
  w2.pattern = "w2";
  step.styles = {w1, w2};
  plan.steps = {step};
  return plan;
}

ParallelStyle colwise() {
  ParallelStyle s;
  s.kind = ParallelStyle::Kind::Colwise;
  s.inputLayouts = OptionalPlacements{Placement::replicate()};
  s.desiredInputLayouts = OptionalPlacements{Placement::replicate()};
  s.outputLayouts = OptionalPlacements{Placement::shard(-1)};
  return s;
}

ParallelStyle rowwise(Placement output) {
  ParallelStyle s;
  s.kind = ParallelStyle::Kind::Rowwise;
  s.inputLayouts = OptionalPlacements{Placement::shard(-1)};
  s.outputLayouts = OptionalPlacements{output};
  return s;
}

llvm::Error runForward(PassContext &ctx) {
  for (Pass *p : std::initializer_list<Pass *>{new DecomposeToRuntimeOps, new ApplyShardingPlan, new ShardingPropagation}) {
    std::unique_ptr<Pass> owned(p);
    if (llvm::Error err = owned->run(ctx))
      return err;
  }
  return llvm::Error::success();
}

} // namespace

TEST(ApplyShardingPlan, StyleHooksAndParameterPlacements) {
  ProgramBuilder b = mlp(true);
  ShardingPlan plan = tpPlan(4, colwise(), rowwise(Placement::replicate()));
  PassContext ctx{b.p, &plan, {}, PredictionState()};
  ASSERT_FALSE(static_cast<bool>(DecomposeToRuntimeOps().run(ctx)));
  ASSERT_FALSE(static_cast<bool>(ApplyShardingPlan().run(ctx)));
  const Graph &g = b.p.graph();
  // Colwise shards the Linear's weight and bias on dim 0; Rowwise the weight on dim 1 and
  // replicates the bias (style.py _partition_linear_fn).
  auto placementOf = [&](llvm::StringRef fqn) {
    for (const InputSpec &in : g.inputs())
      if (in.target == fqn)
        return ctx.state.layout(in.value) ? str(ctx.state.layout(in.value)->placements) : std::string("plain");
    return std::string("?");
  };
  EXPECT_EQ(placementOf("w1.weight"), "[S(0)]");
  EXPECT_EQ(placementOf("w1.bias"), "[S(0)]");
  EXPECT_EQ(placementOf("w2.weight"), "[S(1)]");
  EXPECT_EQ(placementOf("w2.bias"), "[R]");
  EXPECT_EQ(placementOf("x"), "plain");
  // Each styled call gets its input hook before its first op and its output hook after its last.
  EXPECT_EQ(ops(g), (std::vector<std::string>{"commlens::annotate.default", "aten::view.default", "aten::t.default",
                                               "aten::addmm.default", "aten::view.default",
                                               "commlens::redistribute_output.default", "aten::relu.default",
                                               "commlens::annotate.default", "aten::view.default", "aten::t.default",
                                               "aten::addmm.default", "aten::view.default",
                                               "commlens::redistribute_output.default"}));
  EXPECT_EQ(g.nodes()[0]->scope()->displayName(), "MLP.w1");
  EXPECT_EQ(g.nodes()[12]->scope()->displayName(), "MLP.w2");
  // Rowwise on a Linear wants its input as Shard(-1) (desired = input layout for Linear).
  std::string text;
  llvm::raw_string_ostream os(text);
  printNode(os, *g.nodes()[7]);
  EXPECT_EQ(os.str(), "%relu_in : f32[2, 8, 32] = commlens::annotate.default(self=%relu, layout=\"S(-1)\", "
                      "desired=\"S(-1)\", use_local_output=False, module=\"MLP.w2\") @MLP.w2");
}

TEST(ShardingPropagation, ColwiseRowwiseMlpForward) {
  // w1 (Colwise): x is annotated Replicate; addmm(S(0) bias, R, S(1) w^T) gives S(1), viewed
  // back to S(2); the output hook's Shard(-1) is S(2) normalised: no collective, to_local.
  // relu runs on the local shard. w2 (Rowwise): from_local S(-1) -> S(2); view gives S(1);
  // mm(S(1), S(0)) contracts the sharded dim: Partial(sum); the R bias becomes P by a local
  // divide. The output hook wants Replicate: one all_reduce of the [2, 8, 16] f32 output,
  // 2*8*16*4 = 1024 bytes per rank, charged to MLP.w2.
  ProgramBuilder b = mlp(true);
  ShardingPlan plan = tpPlan(4, colwise(), rowwise(Placement::replicate()));
  PassContext ctx{b.p, &plan, {}, PredictionState()};
  ASSERT_FALSE(static_cast<bool>(runForward(ctx)));
  ASSERT_EQ(ctx.state.collectives.size(), 1u);
  const CollectiveRecord &c = ctx.state.collectives[0];
  EXPECT_EQ(c.opKey, "c10d_functional.all_reduce");
  EXPECT_EQ(c.module->displayName(), "MLP.w2");
  EXPECT_EQ(str(c.fromPlacements), "[P(sum)]");
  EXPECT_EQ(str(c.toPlacements), "[R]");
  EXPECT_EQ(c.bytesPerRank, 1024);
  EXPECT_EQ(c.node->opString(), "commlens::redistribute_output.default");
}

TEST(ShardingPropagation, RowwiseShardedOutputReduceScatters) {
  // Same MLP with w2's output_layouts = Shard(1): Partial -> Shard(1) is one reduce_scatter of
  // the full [2, 8, 16] f32 tensor (1024 bytes in per rank).
  ProgramBuilder b = mlp(false);
  ShardingPlan plan = tpPlan(2, colwise(), rowwise(Placement::shard(1)));
  PassContext ctx{b.p, &plan, {}, PredictionState()};
  ASSERT_FALSE(static_cast<bool>(runForward(ctx)));
  ASSERT_EQ(ctx.state.collectives.size(), 1u);
  EXPECT_EQ(ctx.state.collectives[0].opKey, "c10d_functional.reduce_scatter_tensor");
  EXPECT_EQ(ctx.state.collectives[0].bytesPerRank, 1024);
}

TEST(ShardingPropagation, MixingPlainAndDTensorOperandsIsAnError) {
  // Styling only w1, with use_local_output=False, hands a DTensor to relu and on to the unstyled
  // w2, whose weight is a plain tensor: mm(DTensor, plain) raises in DTensor.
  ProgramBuilder b = mlp(false);
  ParallelStyle w1 = colwise();
  w1.useLocalOutput = false;
  ShardingPlan plan;
  plan.mesh.shape = {2};
  plan.mesh.dimNames = {"tp"};
  w1.pattern = "w1";
  plan.steps = {ParallelizeStep{{{0}}, {w1}}};
  PassContext ctx{b.p, &plan, {}, PredictionState()};
  llvm::Error err = runForward(ctx);
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_EQ(llvm::toString(std::move(err)),
            "node 'linear_1_mm' aten::mm.default in MLP.w2: mixes DTensor and plain torch.Tensor operands "
            "('linear_1_t' is a plain tensor); DTensor would raise here");
}
