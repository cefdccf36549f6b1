// The prediction report's module rows (PredictionReport::build).
#include "passes/PassManager.h"
#include "reports/PredictionReport.h"

#include "TestPrograms.h"

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
  PredictionReport r = PredictionReport::build(t.p, plan, ctx.state, true, false);
  std::vector<std::string> rows;
  for (const ModuleCounts &m : r.counts.modules())
    rows.push_back(m.fqn + " " + std::to_string(m.depth));
  EXPECT_EQ(rows, (std::vector<std::string>{"Global 0", "Net 1", "Net.a 2", "Net.b 2"}));
}
