// The IR text parser: print -> parse -> print gives the same text for the programs the pass tests
// build (TestPrograms.h) and the graphs the passes make of them, and bad text fails with a
// message naming the line.
#include "ir/IRParser.h"
#include "ir/IRPrinter.h"
#include "ir/Error.h"
#include "passes/ApplyShardingPlan.h"
#include "passes/DecomposeToRuntimeOps.h"
#include "TestPrograms.h"

#include <gtest/gtest.h>

using namespace commlens;

namespace {

using test::f32;
using test::kLinear;

std::string print(const Graph &g) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printGraph(os, g);
  return os.str();
}

/// Prints `g`, parses the text and prints the result: both texts must agree.
void expectRoundTrip(const Graph &g) {
  std::string text = print(g);
  auto parsed = parseProgram(text);
  ASSERT_TRUE(static_cast<bool>(parsed)) << takeMessage(parsed.takeError()) << "\n" << text;
  EXPECT_EQ(print((*parsed)->graph()), text);
}

/// y = w2(relu(w1(x))), as ForwardPassesTest builds it.
test::TestProgram mlp() {
  test::TestProgram b("examples.mlp.MLP");
  Value *w1 = b.param("w1.weight", f32({32, 16}));
  Value *b1 = b.param("w1.bias", f32({32}));
  Value *w2 = b.param("w2.weight", f32({16, 32}));
  Value *x = b.input("x", f32({2, 8, 16}));
  Value *h = b.op("linear", "torch.ops.aten.linear.default", {{"input", x}, {"weight", w1}, {"bias", b1}},
                  f32({2, 8, 32}), {{"w1", kLinear, 0}});
  Value *r = b.op("relu", "torch.ops.aten.relu.default", {{"self", h}}, f32({2, 8, 32}), {});
  b.output(b.op("linear_1", "torch.ops.aten.linear.default", {{"input", r}, {"weight", w2}}, f32({2, 8, 16}),
                {{"w2", kLinear, 0}}));
  return b;
}

TEST(IRParser, RoundTripsTheMlp) {
  test::TestProgram b = mlp();
  expectRoundTrip(b.g);
  // The parsed graph is the same graph: scopes, parameters, values and their producers.
  auto parsed = parseProgram(print(b.g));
  ASSERT_TRUE(static_cast<bool>(parsed));
  const Graph &g = (*parsed)->graph();
  ASSERT_EQ(g.numNodes(), 3u);
  EXPECT_EQ(g.nodes()[0]->scope()->path(), "w1");
  EXPECT_EQ(g.nodes()[0]->scope()->type(), kLinear);
  EXPECT_EQ(g.nodes()[0]->name(), "linear");
  EXPECT_EQ(g.nodes()[0]->op().str(), "aten::linear.default");
  EXPECT_EQ(g.nodes()[1]->scope(), g.scopes().root());
  EXPECT_EQ(g.scopes().root()->displayName(), "MLP");
  ASSERT_NE(g.parameter("w1.weight"), nullptr);
  EXPECT_EQ(g.parameter("w1.weight")->value->meta()->str(), "f32[32, 16]");
  EXPECT_EQ(g.lookupValue("relu")->producer(), g.nodes()[1].get());
  EXPECT_EQ(g.outputs()[0].value.tensor(), g.lookupValue("linear_1"));
  EXPECT_EQ((*parsed)->modulePaths, (std::vector<std::string>{"", "w1", "w2"}));
}

TEST(IRParser, RoundTripsWhatThePassesMake) {
  // After decompose (views with int lists, t, addmm, mm) and apply-plan (commlens:: boundary ops).
  test::TestProgram b = mlp();
  ShardingPlan plan;
  plan.mesh.shape = {4};
  plan.mesh.dimNames = {"tp"};
  ParallelizeStep step;
  ParallelStyle col, row;
  col.kind = ParallelStyle::Kind::Colwise;
  col.pattern = "w1";
  row.kind = ParallelStyle::Kind::Rowwise;
  row.pattern = "w2";
  step.styles = {col, row};
  plan.steps.push_back(step);
  PassContext ctx{b.p, &plan, {}, PredictionState()};
  ASSERT_FALSE(static_cast<bool>(DecomposeToRuntimeOps().run(ctx)));
  expectRoundTrip(b.p.graph());
  ASSERT_FALSE(static_cast<bool>(ApplyShardingPlan().run(ctx)));
  expectRoundTrip(b.p.graph());
}

TEST(IRParser, RoundTripsStridesSymbolsCallsAndNames) {
  test::TestProgram b("m.M");
  Value *w = b.param("fc.weight", f32({8, 4}));
  // A transposed input: strides of a [2, 4, 4] tensor.
  Value *xt = b.input("xt", f32({4, 2, 4}, std::vector<int64_t>{4, 16, 1}));
  Value *x = b.g.createValue("x", ValueKind::Tensor);
  TensorMeta sym = f32({2, 4});
  sym.sizes[0] = SymInt::symbolic("s0", 2, true);
  x->setMeta(sym);
  b.g.inputs().push_back({InputKind::UserInput, x, "x", true, ""});
  Value *s = b.g.createValue("sym_size_int", ValueKind::SymInt);
  s->setSymbol(SymInt::symbolic("s0", 2, true));
  Node *size = b.g.appendNode("sym_size_int", "torch.ops.aten.sym_size.int", {{"self", x}, {"dim", int64_t(0)}},
                              {SymIntArg{s, 0}});
  (void)size;
  // Second call of block.fc inside the first call of block, and a call path in full.
  b.op("a", "torch.ops.aten.linear.default", {{"input", xt}, {"weight", w}}, f32({4, 2, 8}),
       {{"block", "m.Block", 0}, {"block.fc", kLinear, 1}});
  Value *v = b.op("v", "torch.ops.aten.view.default", {{"self", x}, {"size", SymIntList{{s, 0}, {nullptr, 4}}}},
                  f32({2, 4}), {{"block", "m.Block", 1}, {"block.fc", kLinear, 0}});
  // A node named unlike its result, with no grad, and one with no results.
  Value *c = b.g.createValue("c", ValueKind::Tensor);
  c->setMeta(f32({2, 4}));
  Node *n = b.g.appendNode("clone_default", "torch.ops.aten.clone.default",
                           {{"self", v}, {"memory_format", MemoryFormat::Contiguous}}, {c});
  n->setGradEnabled(false);
  b.g.appendNode("assert_1", "torch.ops.aten._assert_tensor_metadata.default",
                 {{"a", c}, {"dtype", ScalarType::Float}, {"device", Device{"cpu", std::nullopt}}, {"alpha", 0.5},
                  {"name", std::string("q\"uote")}, {"flags", BoolList{true, false}}, {"opt", OptionalTensorList{{c, nullptr}}}},
                 {});
  b.output(c);
  b.g.addCallSignature({"", 0, {Argument(xt), Argument(x)}, {}});
  b.g.addCallSignature({"block", 1, {Argument(x)}, {{"scale", Argument(0.5)}}});
  std::string text = print(b.g);
  EXPECT_NE(text.find("input %xt : f32[4, 2, 4] strides [4, 16, 1] user_input \"xt\""), std::string::npos) << text;
  EXPECT_NE(text.find("@M.block.fc#1\n"), std::string::npos) << text; // [0, 1]: outer calls first
  EXPECT_NE(text.find("@M.block.fc#1.0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("no_grad @M name \"clone_default\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("call @M.block#1(%x, scale=0.5)\n"), std::string::npos) << text;
  expectRoundTrip(b.g);
  auto parsed = parseProgram(text);
  ASSERT_TRUE(static_cast<bool>(parsed));
  const Graph &g = (*parsed)->graph();
  EXPECT_EQ(g.lookupValue("xt")->meta()->strides[1].hint, 16);
  EXPECT_EQ(g.lookupValue("x")->meta()->sizes[0], (SymInt::symbolic("s0", 2, true)));
  EXPECT_TRUE(g.nodes()[2]->input("size")->is<SymIntList>());
  EXPECT_EQ(g.nodes()[1]->callPath(), llvm::ArrayRef<unsigned>({0, 1}));
  EXPECT_EQ(g.scopes().lookup("block.fc")->numCalls(), 2u);
  EXPECT_EQ(g.callSignature("block", 1)->kwargs[0].first, "scale");
}

TEST(IRParser, ReadsTheProgramLineAndSkipsComments) {
  auto parsed = parseProgram("// a comment\n"
                             "program torch 2.13.0+cpu schema 8.20 dialect TRAINING\n"
                             "\n"
                             "scope Net : __main__.Net\n"
                             "input %x : bf16[2] {R} user_input \"x\"\n"
                             "%y : bf16[2] = aten::relu.default(%x)\n"
                             "output user_output %y\n");
  ASSERT_TRUE(static_cast<bool>(parsed)) << takeMessage(parsed.takeError());
  EXPECT_EQ((*parsed)->torchVersion, "2.13.0+cpu");
  EXPECT_EQ((*parsed)->schemaVersion.minor, 20);
  EXPECT_EQ((*parsed)->verifiers, std::vector<std::string>{"TRAINING"});
  const Node &n = *(*parsed)->graph().nodes()[0];
  EXPECT_TRUE(n.inputs()[0].name.empty());
  EXPECT_EQ(n.results()[0]->meta()->dtype, ScalarType::BFloat16);
}

std::string parseError(llvm::StringRef text) {
  auto parsed = parseProgram(text);
  if (parsed)
    return "(parsed)";
  return takeMessage(parsed.takeError());
}

TEST(IRParser, ErrorsNameTheLine) {
  constexpr const char *kHead = "scope Net : __main__.Net\ninput %x : f32[2] user_input \"x\"\n";
  auto with = [&](const char *line) { return std::string(kHead) + line; };
  EXPECT_EQ(parseError(with("%y : f32[2] = aten::relu.default(%z)\n")), "line 3: use of undefined value '%z'");
  EXPECT_EQ(parseError(with("%x : f32[2] = aten::relu.default(%x)\n")), "line 3: value '%x' is defined twice");
  EXPECT_EQ(parseError(with("%y : q7[2] = aten::relu.default(%x)\n")), "line 3: unknown type 'q7' of value '%y'");
  EXPECT_EQ(parseError(with("%y : f32[2] = aten::relu.default(%x) @Net.nope\n")),
            "line 3: unknown scope '@Net.nope' (declare it with a 'scope' line)");
  EXPECT_EQ(parseError(with("%y : f32[2] = aten::relu.default(%x\n")), "line 3: expected ')' at ''");
  EXPECT_EQ(parseError(with("%y : f32[2] aten::relu.default(%x)\n")),
            "line 3: expected 'RESULTS = OP(ARGS)' or one of program, scope, input, output, call");
  EXPECT_EQ(parseError(with("%y : f32[2] = aten::relu.default(%x) trailing\n")), "line 3: unexpected 'trailing'");
  EXPECT_EQ(parseError(with("%y : f32[2] = aten::cat.default([%x, 1])\n")), "line 3: list mixes kinds of elements");
  EXPECT_EQ(parseError(with("output user_result %x\n")), "line 3: unknown output kind 'user_result'");
  EXPECT_EQ(parseError(with("input %w : f32[2] weight \"w\"\n")), "line 3: unknown input kind 'weight'");
  EXPECT_EQ(parseError(with("input %w : f32[2, 3] strides [1] parameter \"w\"\n")), "line 3: 1 strides for 2 sizes");
  EXPECT_EQ(parseError(with("%y : f32[2] = aten::add.Tensor(%x, \"abc)\n")), "line 3: unterminated string");
  EXPECT_EQ(parseError(with("call @Other(%x)\n")), "line 3: call of '@Other', which is not 'Net' or 'Net.<path>'");
  EXPECT_EQ(parseError("scope Net : __main__.Model\n"),
            "line 1: the first scope is the root, named after its class '__main__.Model': expected 'Model', got 'Net'");
  EXPECT_EQ(parseError("scope Net : __main__.Net\nscope Other.fc : L\n"), "line 2: scope 'Other.fc' is not 'Net.<path>'");
  EXPECT_EQ(parseError("program torch 2.13 schema eight\n"), "line 1: bad schema version");
}

TEST(IRParser, MissingFile) {
  auto parsed = parseProgramFile("/nonexistent/commlens.ir");
  ASSERT_FALSE(static_cast<bool>(parsed));
  EXPECT_EQ(takeMessage(parsed.takeError()), "cannot open file: No such file or directory");
}

} // namespace
