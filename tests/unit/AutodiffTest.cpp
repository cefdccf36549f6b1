// The loss and autodiff passes on small hand-built runtime graphs (no plan styles, plain tensors).
// Each expected backward op list is derived in the test from torch 2.13's derivative formulas
// (tools/autograd/derivatives.yaml, FunctionsManual.cpp) and the autograd engine's order: the
// ready node with the highest sequence number runs first, AccumulateGrad (sequence UINT64_MAX)
// before anything else; broadcast inputs get `sum_to` as the engine validates outputs; a second
// gradient for the same value is added in the input buffer.
#include "ir/Graph.h"
#include "passes/AppendLoss.h"
#include "passes/Autodiff.h"
#include "ir/TensorMetaUtils.h"
#include "TestPrograms.h"

#include <gtest/gtest.h>

using namespace commlens;

namespace {

using test::f32;
using test::kLinear;

struct ProgramBuilder : test::TestProgram {
  ShardingPlan plan;

  explicit ProgramBuilder(llvm::StringRef rootType) : TestProgram(rootType) {
    plan.mesh.shape = {4};
    plan.loss.kind = LossSpec::Kind::Sum;
  }
  Value *input(llvm::StringRef name, TensorMeta m, bool requiresGrad) {
    Value *v = TestProgram::input(name, std::move(m));
    if (requiresGrad)
      plan.inputs.push_back({"0", true, std::nullopt});
    return v;
  }

  /// Runs loss + autodiff; returns the backward ops as "op @module" (Global for none).
  std::vector<std::string> backward() {
    PassContext ctx{p, &plan, {}, PredictionState()};
    if (llvm::Error err = AppendLoss().run(ctx)) {
      ADD_FAILURE() << llvm::toString(std::move(err));
      return {};
    }
    if (llvm::Error err = Autodiff().run(ctx)) {
      ADD_FAILURE() << llvm::toString(std::move(err));
      return {};
    }
    std::vector<std::string> out;
    for (const auto &n : ctx.state.backward->nodes())
      out.push_back(n->op().name + "@" + (n->scope() ? n->scope()->path() : std::string("Global")));
    return out;
  }
};

/// y = w2(relu(w1(x))) as runtime ops: Linear on a contiguous 3-D input with bias is
/// view, t, addmm, view (DecomposeToRuntimeOps); x: [2, 8, 16], hidden 32.
ProgramBuilder mlp(bool inputGrad) {
  ProgramBuilder b("examples.mlp.MLP");
  Value *w1 = b.param("w1.weight", f32({32, 16}));
  Value *b1 = b.param("w1.bias", f32({32}));
  Value *w2 = b.param("w2.weight", f32({16, 32}));
  Value *b2 = b.param("w2.bias", f32({16}));
  Value *x = b.input("x", f32({2, 8, 16}), inputGrad);
  ModuleStackEntry m1{"w1", kLinear, 0}, m2{"w2", kLinear, 0};
  Value *v1 = b.op("view1", "aten::view.default", {{"self", x}, {"size", IntList{16, 16}}}, f32({16, 16}), {m1});
  Value *t1 = b.op("t1", "aten::t.default", {{"self", w1}}, f32({16, 32}, std::vector<int64_t>{1, 16}), {m1});
  Value *a1 = b.op("addmm1", "aten::addmm.default", {{"self", b1}, {"mat1", v1}, {"mat2", t1}}, f32({16, 32}), {m1});
  Value *h = b.op("h", "aten::view.default", {{"self", a1}, {"size", IntList{2, 8, 32}}}, f32({2, 8, 32}), {m1});
  Value *r = b.op("relu", "aten::relu.default", {{"self", h}}, f32({2, 8, 32}));
  Value *v2 = b.op("view2", "aten::view.default", {{"self", r}, {"size", IntList{16, 32}}}, f32({16, 32}), {m2});
  Value *t2 = b.op("t2", "aten::t.default", {{"self", w2}}, f32({32, 16}, std::vector<int64_t>{1, 32}), {m2});
  Value *a2 = b.op("addmm2", "aten::addmm.default", {{"self", b2}, {"mat1", v2}, {"mat2", t2}}, f32({16, 16}), {m2});
  b.output(b.op("y", "aten::view.default", {{"self", a2}, {"size", IntList{2, 8, 16}}}, f32({2, 8, 16}), {m2}));
  return b;
}

} // namespace

TEST(Autodiff, MlpFollowsDerivativeFormulasAndEngineOrder) {
  // Loss sum(y): SumBackward0 expands the seed gradient, before any module's output hook (Global).
  // Then MLP's output hook, then w2's (the last one to fire names the module). In w2:
  //   ViewBackward0: view(grad, [16, 16]);
  //   AddmmBackward0: mat1 = grad.mm(mat2.t()) -> t, mm; mat2 is t(w2), column-major, so
  //     mm_mat2_backward gives grad.t().mm(mat1).t() -> t, mm, t; bias grad is grad itself,
  //     reduced by the engine's sum_to to [16] -> sum.dim_IntList(dim [0], keepdim), view;
  //   ready next: AccumulateGrad(w2.bias) (detach), then TBackward0 of t(w2) (created after the
  //     view of the input, so higher sequence number) -> t, AccumulateGrad(w2.weight) -> detach,
  //     then ViewBackward0 of the input -> view([2, 8, 32]);
  //   relu's ThresholdBackward runs while w2 is still the current module (relu is in MLP, whose
  //     hook fired earlier).
  // w1 (its output hook fires next) repeats the Linear pattern; x requires grad, so its input
  // view backward runs and its AccumulateGrad detaches the gradient.
  std::vector<std::string> linear = {"view", "t", "mm", "t", "mm", "t", "sum", "view", "detach", "t", "detach", "view"};
  std::vector<std::string> expected = {"expand@Global"};
  for (const std::string &op : linear)
    expected.push_back(op + "@w2");
  expected.push_back("threshold_backward@w2");
  for (const std::string &op : linear)
    expected.push_back(op + "@w1");
  expected.push_back("detach@w1");
  EXPECT_EQ(mlp(/*inputGrad=*/true).backward(), expected);
}

TEST(Autodiff, NoInputGradSkipsTheFirstInputGradient) {
  // x does not require grad: AddmmBackward0 of w1 computes no mat1 gradient (no t, mm for it), and
  // the view of x has no autograd node at all.
  std::vector<std::string> got = mlp(/*inputGrad=*/false).backward();
  std::vector<std::string> w1;
  for (const std::string &s : got)
    if (llvm::StringRef(s).endswith("@w1"))
      w1.push_back(s.substr(0, s.find('@')));
  EXPECT_EQ(w1, (std::vector<std::string>{"view", "t", "mm", "t", "sum", "view", "detach", "t", "detach"}));
}

TEST(Autodiff, FrozenParametersGetNoGradient) {
  ProgramBuilder b = mlp(/*inputGrad=*/false);
  b.plan.frozen = {"w1.*"};
  // Nothing below w2's input requires grad: w1 and relu have no autograd node, w2's AddmmBackward0
  // computes no mat1 gradient, and the input view of w2 has no node either.
  EXPECT_EQ(b.backward(), (std::vector<std::string>{"expand@Global", "view@w2", "t@w2", "mm@w2", "t@w2", "sum@w2",
                                                    "view@w2", "detach@w2", "t@w2", "detach@w2"}));
}

TEST(Autodiff, BroadcastSumToAndAccumulation) {
  // z = relu(x * w) + x, loss sum(z); x [2, 8, 16] requires grad, w [16] is a parameter.
  //   SumBackward0: expand. AddBackward0: both gradients are the incoming one (alpha 1).
  //   The engine runs the highest sequence number first: MulBackward0's input (relu) before x's
  //   AccumulateGrad, which waits for its second gradient.
  //   ThresholdBackward0: threshold_backward. MulBackward0: self: mul(grad, w); other:
  //   mul(grad, x), whose [2, 8, 16] gradient the engine reduces to w's [16]: sum.dim_IntList over
  //   [0, 1] with keepdim, then view (the engine validates every output before routing any).
  //   x's second gradient is then added in the input buffer of the root module's input hook
  //   (add); AccumulateGrad(w) runs first (detach), then the hook, then AccumulateGrad(x).
  ProgramBuilder b("M");
  Value *w = b.param("w", f32({16}));
  Value *x = b.input("x", f32({2, 8, 16}), true);
  Value *m = b.op("m", "aten::mul.Tensor", {{"self", x}, {"other", w}}, f32({2, 8, 16}));
  Value *r = b.op("r", "aten::relu.default", {{"self", m}}, f32({2, 8, 16}));
  b.output(b.op("z", "aten::add.Tensor", {{"self", r}, {"other", x}}, f32({2, 8, 16})));
  EXPECT_EQ(b.backward(), (std::vector<std::string>{"expand@Global", "threshold_backward@", "mul@", "mul@", "sum@",
                                                    "view@", "add@", "detach@", "detach@"}));
}

TEST(Autodiff, CrossEntropyLossRunsAtGlobal) {
  // loss = cross_entropy(logits.flatten(0, -2), targets.flatten()): the loss pass appends, outside
  // every module, view [8, 8], the targets' from_local-if-DTensor marker, their view [8],
  // _log_softmax(dim 1) and nll_loss_forward (reduction mean). Backward, before the root module's
  // output hook fires (so at Global): NllLossBackward0 -> nll_loss_backward,
  // LogSoftmaxBackward0 -> _log_softmax_backward_data, ViewBackward0 -> view [2, 4, 8]. Then in
  // the root module: MulBackward0 for w only (x needs no grad): mul(grad, x), reduced by sum_to
  // to w's [8] (sum over [0, 1] with keepdim, view), AccumulateGrad: detach.
  ProgramBuilder b("M");
  Value *w = b.param("w", f32({8}));
  Value *x = b.input("x", f32({2, 4, 8}), false);
  b.output(b.op("y", "aten::mul.Tensor", {{"self", x}, {"other", w}}, f32({2, 4, 8})));
  b.plan.loss.kind = LossSpec::Kind::CrossEntropy;
  std::vector<std::string> bw = b.backward();
  std::vector<std::string> fwd;
  for (const auto &n : b.p.graph().nodes())
    fwd.push_back(n->op().name + "@" + (n->scope() ? n->scope()->path() : std::string("Global")));
  EXPECT_EQ(fwd, (std::vector<std::string>{"mul@", "view@Global", "loss_targets@Global", "view@Global",
                                           "_log_softmax@Global", "nll_loss_forward@Global"}));
  EXPECT_EQ(bw, (std::vector<std::string>{"nll_loss_backward@Global", "_log_softmax_backward_data@Global",
                                          "view@Global", "mul@", "sum@", "view@", "detach@"}));
}

TEST(Autodiff, SplitFillsAPieceWithoutGradientWithZeros) {
  // y0, y1 = x.split(2, 1) on a plain x [4, 4]; loss sum(relu(y0)). SplitBackward0 (split_backward)
  // gives y1, which got no gradient, a zeros tensor of its size and cats the pieces; on a DTensor x
  // torch 2.13 raises there instead (DTensor's cat refuses the plain zeros), as the formula does.
  ProgramBuilder b("M");
  Value *x = b.input("x", f32({4, 4}), true);
  Value *y0 = b.g.createValue("y0", ValueKind::Tensor), *y1 = b.g.createValue("y1", ValueKind::Tensor);
  y0->setMeta(f32({4, 2}));
  y1->setMeta(f32({4, 2}));
  Node *split = b.g.appendNode("split", "aten::split.Tensor", {{"self", x}, {"split_size", int64_t(2)}, {"dim", int64_t(1)}},
                               {y0, y1});
  split->setScope(b.g.scopes().getOrCreate({}), {});
  b.output(b.op("z", "aten::relu.default", {{"self", y0}}, f32({4, 2})));
  EXPECT_EQ(b.backward(),
            (std::vector<std::string>{"expand@Global", "threshold_backward@", "zeros@", "cat@", "detach@"}));
}
