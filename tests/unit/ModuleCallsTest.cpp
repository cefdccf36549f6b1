#include "ir/ModuleCalls.h"

#include "TestPrograms.h"

#include <gtest/gtest.h>

using namespace commlens;
using namespace commlens::test;

namespace {

std::vector<std::string> names(const std::vector<const Value *> &values) {
  std::vector<std::string> out;
  for (const Value *v : values)
    out.push_back(v->name());
  return out;
}

// Net: x -> block(x) -> norm -> block(...) -> head, with block.w a Linear called in both block calls.
TEST(ModuleCalls, SplitsRepeatedCallsAndFindsTheirInputsAndOutputs) {
  TestProgram t("Net");
  Value *x = t.input("x", f32({2, 4}));
  Value *w = t.param("block.w.weight", f32({4, 4}));
  auto block = [](unsigned call) {
    return std::vector<ModuleStackEntry>{{"block", "Block", call}, {"block.w", kLinear, call}};
  };
  Value *a = t.op("a", "aten::mm.default", {{"self", x}, {"mat2", w}}, f32({2, 4}), block(0));
  Value *n = t.op("n", "aten::relu.default", {{"self", a}}, f32({2, 4}), {{"norm", "Norm", 0}});
  Value *b = t.op("b", "aten::mm.default", {{"self", n}, {"mat2", w}}, f32({2, 4}), block(1));
  Value *c = t.op("c", "aten::add.Tensor", {{"self", b}, {"other", x}}, f32({2, 4}), block(1));
  Value *h = t.op("h", "aten::relu.default", {{"self", c}}, f32({2, 4}), {{"head", "Head", 0}});
  t.output(h);

  ModuleCalls analysis(t.g, [](const ModuleScope *s) { return s->path() == "block" || s->path() == "block.w"; });
  std::vector<ModuleCall> &calls = analysis.calls();
  ASSERT_EQ(calls.size(), 4u); // block and block.w, twice each, in order of first node (inner first at a tie)
  EXPECT_EQ(calls[0].scope->path(), "block.w");
  EXPECT_EQ(calls[1].scope->path(), "block");
  EXPECT_EQ(calls[2].scope->path(), "block.w");
  EXPECT_EQ(calls[3].scope->path(), "block");
  EXPECT_EQ(calls[1].number(), 0u);
  EXPECT_EQ(calls[3].number(), 1u);
  EXPECT_EQ(calls[3].callPath, (llvm::SmallVector<unsigned, 4>{1}));
  EXPECT_EQ(calls[2].callPath, (llvm::SmallVector<unsigned, 4>{1, 1}));
  EXPECT_EQ((std::pair{calls[3].first, calls[3].last}), (std::pair{2u, 3u}));
  // The nodes each call ran: its module's and its submodules', in this call only (b and c both
  // have block.w's second call on their stacks).
  auto members = [&](const ModuleCall &call) {
    std::vector<std::string> out;
    for (const auto &node : t.g.nodes())
      if (call.contains(*node))
        out.push_back(node->name());
    return out;
  };
  EXPECT_EQ(members(calls[0]), (std::vector<std::string>{"a"}));
  EXPECT_EQ(members(calls[1]), (std::vector<std::string>{"a"}));
  EXPECT_EQ(members(calls[2]), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(members(calls[3]), (std::vector<std::string>{"b", "c"}));
  // the second block call's sum leaves it (read by head); the first call's product is read by norm
  EXPECT_EQ(names(calls[3].outputs), (std::vector<std::string>{"c"}));
  EXPECT_EQ(names(calls[1].outputs), (std::vector<std::string>{"a"}));
  // b reads n and the weight, c reads b (inside) and x: in order of first use
  auto none = [](const Value *) { return false; };
  EXPECT_EQ(names(analysis.externalTensors(calls[3], calls[3].first, none)),
            (std::vector<std::string>{"n", "p_block_w_weight", "x"}));
  EXPECT_EQ(names(analysis.externalTensors(calls[3], calls[3].first, [&](const Value *v) { return v == w; })),
            (std::vector<std::string>{"n", "x"}));
  // from c on, b was computed before `from`: it counts as coming from outside
  EXPECT_EQ(names(analysis.externalTensors(calls[3], 3, none)), (std::vector<std::string>{"b", "x"}));
}

} // namespace
