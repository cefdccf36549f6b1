// The prediction report: its module rows (PredictionReport::build) and its JSON tree.
#include "passes/PassManager.h"
#include "reports/PredictionReport.h"

#include "TestPrograms.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <gtest/gtest.h>

using namespace commlens;

namespace {

using test::f32;

} // namespace

// Found by fuzz/predict: a module whose path appears under two parents (nn_module_stack puts
// `a` at the root for one node and under `b` for another) made two scopes with one name, and the
// report's cantFail on the duplicate row aborted. The name gets one row, under its first parent.
TEST(PredictionReport, ModuleUnderTwoParentsGetsOneRow) {
  test::TestProgram t("examples.Net");
  ShardingPlan plan;
  plan.mesh.shape = {4};
  plan.mesh.dimNames = {"tp"};
  Value *x = t.input("x", f32({8, 16}));
  Value *w = t.param("a.weight", f32({16, 16}));
  std::vector<ModuleStackEntry> atRoot{{"a", test::kLinear, 0}};
  std::vector<ModuleStackEntry> underB{{"b", "examples.Block", 0}, {"a", test::kLinear, 0}};
  Value *t1 = t.op("t_1", "aten::t.default", {{"self", w}}, f32({16, 16}, std::vector<int64_t>{1, 16}), atRoot);
  Value *h = t.op("mm_1", "aten::mm.default", {{"self", x}, {"mat2", t1}}, f32({8, 16}), atRoot);
  Value *t2 = t.op("t_2", "aten::t.default", {{"self", w}}, f32({16, 16}, std::vector<int64_t>{1, 16}), underB);
  t.output(t.op("mm_2", "aten::mm.default", {{"self", h}, {"mat2", t2}}, f32({8, 16}), underB));
  PassManager pm;
  buildPipeline(pm, /*backward=*/false);
  PassContext ctx{t.p, &plan, {}, PredictionState()};
  ASSERT_FALSE(static_cast<bool>(pm.run(ctx)));
  size_t named = 0;
  for (const ModuleScope *s : t.p.graph().scopes().inForwardOrder())
    named += s->displayName() == "Net.a";
  EXPECT_EQ(named, 2u); // two scopes, one name
  // A second row named Net.a would be an error of build (a duplicate module), not a skipped row.
  llvm::Expected<PredictionReport> r = PredictionReport::build(t.p, plan, ctx.state, true, false);
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  std::vector<std::string> rows;
  for (const ModuleCounts &m : r->counts.modules())
    rows.push_back(m.fqn + " " + std::to_string(m.depth));
  EXPECT_EQ(rows, (std::vector<std::string>{"Global 0", "Net 1", "Net.a 2", "Net.b 2"}));
}

// The JSON tree of a large model is written by two writers at once: a second one renders the
// subtrees of the last layers on another thread, and the first splices its text in (reports/
// PredictionReport.cpp, JsonTreeWriter::Handover). Spliced or not, the text must be exactly what
// one llvm::json writer writes for the same tree: parsing it and printing it again gives the same
// bytes (the report writes object keys in sorted order, as llvm::json prints objects, and has no
// floating-point values without a cluster).
TEST(PredictionReport, JsonTreeIsOneWritersText) {
  test::TestProgram t("examples.Stack");
  ShardingPlan plan;
  plan.mesh.shape = {4};
  plan.mesh.dimNames = {"tp"};
  ParallelizeStep step;
  step.meshDims = {{0}};
  ParallelStyle colwise;
  colwise.kind = ParallelStyle::Kind::Colwise;
  colwise.pattern = "layers.*.w1";
  colwise.inputLayouts = OptionalPlacements{Placement::replicate()};
  colwise.desiredInputLayouts = OptionalPlacements{Placement::replicate()};
  colwise.outputLayouts = OptionalPlacements{Placement::shard(-1)};
  ParallelStyle rowwise;
  rowwise.kind = ParallelStyle::Kind::Rowwise;
  rowwise.pattern = "layers.*.w2";
  rowwise.inputLayouts = OptionalPlacements{Placement::shard(-1)};
  rowwise.outputLayouts = OptionalPlacements{Placement::replicate()};
  step.styles = {colwise, rowwise};
  plan.steps = {step};

  Value *h = t.input("x", f32({8, 16}));
  const unsigned kLayers = 6;
  for (unsigned i = 0; i < kLayers; ++i) {
    std::string layer = fmt::format("layers.{}", i);
    std::vector<ModuleStackEntry> block{{"layers", "torch.nn.modules.container.ModuleList", 0},
                                        {layer, "examples.Block", 0}};
    auto in = [&](const char *linear) {
      std::vector<ModuleStackEntry> s = block;
      s.push_back({layer + "." + linear, test::kLinear, 0});
      return s;
    };
    Value *w1 = t.param(layer + ".w1.weight", f32({32, 16}));
    Value *w2 = t.param(layer + ".w2.weight", f32({16, 32}));
    Value *t1 = t.op(fmt::format("t_{}", 2 * i), "aten::t.default", {{"self", w1}},
                     f32({16, 32}, std::vector<int64_t>{1, 16}), in("w1"));
    Value *h1 = t.op(fmt::format("mm_{}", 2 * i), "aten::mm.default", {{"self", h}, {"mat2", t1}}, f32({8, 32}), in("w1"));
    Value *a = t.op(fmt::format("relu_{}", i), "aten::relu.default", {{"self", h1}}, f32({8, 32}), block);
    Value *t2 = t.op(fmt::format("t_{}", 2 * i + 1), "aten::t.default", {{"self", w2}},
                     f32({32, 16}, std::vector<int64_t>{1, 32}), in("w2"));
    h = t.op(fmt::format("mm_{}", 2 * i + 1), "aten::mm.default", {{"self", a}, {"mat2", t2}}, f32({8, 16}), in("w2"));
  }
  t.output(h);
  PassManager pm;
  buildPipeline(pm, /*backward=*/true);
  PassContext ctx{t.p, &plan, {}, PredictionState()};
  ASSERT_FALSE(static_cast<bool>(pm.run(ctx)));
  llvm::Expected<PredictionReport> r = PredictionReport::build(t.p, plan, ctx.state, true, true);
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  std::string text = r->toJson();
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  ASSERT_TRUE(static_cast<bool>(parsed)) << llvm::toString(parsed.takeError());
  EXPECT_EQ(llvm::formatv("{0:2}", *parsed).str() + "\n", text);
  // The tree holds what the splice must place: every layer, with its Linears' backward op
  // records (DTensor input shardings included) and their collectives (Rowwise's all_reduce of
  // the forward output).
  const llvm::json::Array *layers = (*parsed).getAsObject()->getArray("children");
  ASSERT_NE(layers, nullptr);
  layers = (*layers)[0].getAsObject()->getArray("children");
  ASSERT_TRUE(layers && layers->size() == 1);
  layers = (*layers)[0].getAsObject()->getArray("children");
  ASSERT_TRUE(layers && layers->size() == kLayers);
  for (unsigned i = 0; i < kLayers; ++i) {
    const llvm::json::Object &layer = *(*layers)[i].getAsObject();
    EXPECT_EQ(layer.getString("fqn"), llvm::StringRef(fmt::format("Stack.layers.{}", i)));
    const llvm::json::Object &w2 = *(*layer.getArray("children"))[1].getAsObject();
    EXPECT_EQ(w2.getString("fqn"), llvm::StringRef(fmt::format("Stack.layers.{}.w2", i)));
    const llvm::json::Array &ops = *w2.getArray("operations_backward");
    ASSERT_FALSE(ops.empty());
    EXPECT_EQ(ops[0].getAsObject()->getString("name"), llvm::StringRef("aten.t.default"));
    EXPECT_FALSE(ops[0].getAsObject()->getArray("input_sharding")->empty());
    EXPECT_EQ(w2.getArray("collectives_forward")->size(), 1u);
  }
}
