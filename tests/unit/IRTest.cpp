#include "ir/Graph.h"
#include "ir/GraphBuilder.h"
#include "ir/IRPrinter.h"
#include "ir/ShardingPlan.h"

#include <gtest/gtest.h>

using namespace commlens;

namespace {

TensorMeta f32(std::initializer_list<int64_t> sizes) {
  TensorMeta m;
  for (int64_t s : sizes)
    m.sizes.push_back(SymInt::concrete(s));
  return m;
}

} // namespace

TEST(OpName, ParsesTorchOpsTargets) {
  OpName op = OpName::parse("torch.ops.aten.mm.default");
  EXPECT_EQ(op.ns, "aten");
  EXPECT_EQ(op.name, "mm");
  EXPECT_EQ(op.overload, "default");
  EXPECT_EQ(op.str(), "aten::mm.default");
  EXPECT_EQ(OpName::parse("torch.ops._c10d_functional.all_reduce.default").str(), "_c10d_functional::all_reduce.default");
  EXPECT_EQ(OpName::parse("aten::add.Tensor").str(), "aten::add.Tensor");
  EXPECT_EQ(OpName::parse("aten::relu").str(), "aten::relu.default");
  // Python callables keep their text.
  EXPECT_EQ(OpName::parse("_operator.getitem").str(), "_operator.getitem");
}

TEST(InternedOp, ResultAliasesSelfAsTorchSchemasAnnotate) {
  // view(Tensor(a) self, ...) -> Tensor(a); split(Tensor(a -> *) self, ...) -> Tensor(a)[];
  // contiguous(Tensor(a) self, ...) -> Tensor(a) (it may return self); add_(Tensor(a!) self, ...)
  // -> Tensor(a!); add and mm return new tensors; commlens' own ops and Python callables have no
  // schema in torch's dispatcher.
  for (const char *op : {"aten::view.default", "torch.ops.aten.t.default", "aten::split.Tensor",
                         "aten::contiguous.default", "aten::add_.Tensor"})
    EXPECT_TRUE(InternedOp::get(op).resultAliasesSelf) << op;
  for (const char *op : {"aten::add.Tensor", "aten::mm.default", "aten::_to_copy.default", "commlens::annotate.default",
                         "_operator.getitem"})
    EXPECT_FALSE(InternedOp::get(op).resultAliasesSelf) << op;
}

TEST(TensorMeta, NumelBytesAndText) {
  TensorMeta m = f32({2, 4, 8});
  EXPECT_EQ(m.numel(), 64);
  EXPECT_EQ(m.nbytes(), 256); // 64 elements x 4 bytes
  m.dtype = ScalarType::BFloat16;
  EXPECT_EQ(m.nbytes(), 128);
  m.sizes[0] = SymInt::symbolic("s0", 2, true);
  EXPECT_EQ(m.str(), "bf16[s0=2, 4, 8]");
  EXPECT_EQ(torchName(ScalarType::Float), "torch.float32");
  EXPECT_EQ(scalarTypeFromShortName("i64"), ScalarType::Long);
}

// A symbolic size keeps its text after the string it was made from is gone, once per text.
TEST(SymInt, SymbolicTextIsInterned) {
  std::string text = "s0 + 1";
  SymInt a = SymInt::symbolic(text, 3, true);
  text.assign("overwritten");
  SymInt b = SymInt::symbolic("s0 + 1", 3, true);
  EXPECT_EQ(a.str(), "s0 + 1=3");
  EXPECT_EQ(a.expr().data(), b.expr().data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, SymInt::symbolic("s0 + 1", 3, false));
  EXPECT_EQ(SymInt::symbolic("s1", 0, false).str(), "s1");
  EXPECT_FALSE(SymInt::concrete(4).isSymbolic());
}

TEST(ModuleScopeTree, NamesLikeCommDebugModeAndKeepsForwardOrder) {
  ModuleScopeTree tree;
  ModuleScope *wq = tree.getOrCreate({{"", "__main__.Transformer", 0},
                                      {"layers.0", "m.Block", 0},
                                      {"layers.0.attention.wq", "torch.nn.modules.linear.Linear", 0}});
  ModuleScope *emb = tree.getOrCreate({{"", "__main__.Transformer", 0}, {"tok_embeddings", "E", 0}});
  ModuleScope *wq2 = tree.getOrCreate({{"", "__main__.Transformer", 0},
                                       {"layers.0", "m.Block", 0},
                                       {"layers.0.attention.wq", "torch.nn.modules.linear.Linear", 1}});
  EXPECT_EQ(wq, wq2);
  EXPECT_EQ(wq->numCalls(), 2u);
  EXPECT_EQ(tree.root()->displayName(), "Transformer");
  EXPECT_EQ(wq->displayName(), "Transformer.layers.0.attention.wq");
  EXPECT_EQ(wq->depth(), 2u);
  ASSERT_EQ(tree.inForwardOrder().size(), 4u);
  EXPECT_EQ(tree.inForwardOrder()[1]->path(), "layers.0");
  EXPECT_EQ(tree.inForwardOrder()[3], emb);
  EXPECT_TRUE(tree.root()->isAncestorOf(wq));
  EXPECT_FALSE(emb->isAncestorOf(wq));
  EXPECT_EQ(tree.lookup("Transformer.tok_embeddings"), emb);
  EXPECT_EQ(tree.lookup("layers.0.attention.wq"), wq);
}

namespace {

/// x -> fc (an nn.Linear, its second call) -> output, with the root's call signature.
std::unique_ptr<ExportedProgram> linearProgram() {
  auto p = std::make_unique<ExportedProgram>();
  p->torchVersion = "2.13.0+cpu";
  p->schemaVersion = {8, 20};
  p->verifiers = {"TRAINING"};
  Graph &g = p->graph();
  Value *w = g.createValue("p_fc_weight", ValueKind::Tensor);
  w->setMeta(f32({16, 8}));
  Value *x = g.createValue("x", ValueKind::Tensor);
  x->setMeta(f32({2, 8}));
  g.inputs().push_back({InputKind::Parameter, w, "fc.weight", true, ""});
  g.inputs().push_back({InputKind::UserInput, x, "x", true, ""});
  g.scopes().setRootType("__main__.Net");
  ModuleScope *fc = g.scopes().getOrCreate({{"fc", "torch.nn.modules.linear.Linear", 1}});
  Value *y = g.createValue("linear", ValueKind::Tensor);
  y->setMeta(f32({2, 16}));
  Node *n = g.appendNode("linear", "torch.ops.aten.linear.default",
                         {{"input", x, false}, {"weight", w, false}, {"alpha", 0.5, true}, {"dims", IntList{0, -1}, false}},
                         {y});
  n->setScope(fc, {1});
  g.outputs().push_back({OutputKind::UserOutput, y, ""});
  g.addCallSignature({"", 0, {Argument(x)}, {}});
  return p;
}

std::string printed(const ExportedProgram &p) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printProgram(os, p);
  return os.str();
}

} // namespace

TEST(IRPrinter, PrintsAStableReadableGraph) {
  auto p = linearProgram();
  const Node &n = *p->graph().nodes().front();
  Value *y = p->graph().lookupValue("linear");
  EXPECT_EQ(y->producer(), &n);
  EXPECT_EQ(n.operands().size(), 2u);
  EXPECT_EQ(printed(*p), "program torch 2.13.0+cpu schema 8.20 dialect TRAINING\n"
                         "scope Net : __main__.Net\n"
                         "scope Net.fc : torch.nn.modules.linear.Linear\n"
                         "input %p_fc_weight : f32[16, 8] parameter \"fc.weight\"\n"
                         "input %x : f32[2, 8] user_input \"x\"\n"
                         "%linear : f32[2, 16] = aten::linear.default(input=%x, weight=%p_fc_weight, alpha=0.5, "
                         "dims=[0, -1]) @Net.fc#1\n"
                         "output user_output %linear\n"
                         "call @Net(%x)\n");
}

// commlens rank predicts every plan on a copy of one decoded program: a plan's passes rename
// scopes (fully_shard), wrap them (checkpoint_wrapper) and replace the graph, which must not
// reach the original or the next plan's copy.
TEST(CloneProgram, IsADeepCopyAPlanCanRewriteAlone) {
  auto original = linearProgram();
  std::string before = printed(*original);
  auto copy = cloneProgram(*original);
  EXPECT_EQ(printed(*copy), before);
  EXPECT_EQ(copy->verifiers, original->verifiers);
  const Node &n = *copy->graph().nodes().front();
  EXPECT_NE(&n, original->graph().nodes().front().get());
  // The copy's node reads the copy's values and lies in the copy's scope tree.
  EXPECT_EQ(n.input("input")->tensor(), copy->graph().inputs()[1].value);
  EXPECT_NE(copy->graph().inputs()[1].value, original->graph().inputs()[1].value);
  EXPECT_EQ(n.scope(), copy->graph().scopes().lookup("fc"));
  EXPECT_EQ(n.callPath().vec(), std::vector<unsigned>{1});
  EXPECT_EQ(copy->graph().lookupValue("linear")->producer(), &n);
  ASSERT_EQ(copy->graph().callSignatures().size(), 1u);
  EXPECT_EQ(copy->graph().callSignatures()[0].args[0].tensor(), copy->graph().inputs()[1].value);

  ModuleScopeTree &scopes = copy->graph().scopes();
  scopes.setType(scopes.lookup("fc"), "torch.distributed.fsdp.FSDPLinear");
  scopes.wrap(scopes.lookup("fc"), "CheckpointWrapper", "_checkpoint_wrapped_module");
  scopes.setType(scopes.root(), "FSDPNet");
  EXPECT_EQ(printed(*original), before);
  EXPECT_EQ(original->graph().scopes().lookup("fc")->type(), "torch.nn.modules.linear.Linear");
  EXPECT_EQ(n.scope()->displayName(), "FSDPNet.fc._checkpoint_wrapped_module");
}

// Expectations are Python's fnmatch.fnmatchcase(text, pattern), which torch applies to frozen names.
TEST(ShardingPlanPatterns, MatchesGlobLikePythonFnmatch) {
  EXPECT_TRUE(matchesGlob("w1.*", "w1.weight"));
  EXPECT_TRUE(matchesGlob("layers.*.attn.w?", "layers.0.attn.wq"));
  EXPECT_TRUE(matchesGlob("*", "a.b.c")); // '*' crosses dots
  EXPECT_TRUE(matchesGlob("layers.*", "layers.0.w"));
  EXPECT_FALSE(matchesGlob("w1.*", "w2.weight"));
  EXPECT_TRUE(matchesGlob("layers.[01].x", "layers.1.x"));
  EXPECT_FALSE(matchesGlob("layers.[!01].x", "layers.1.x"));
  EXPECT_TRUE(matchesGlob("layers.[0-3]", "layers.2"));
  EXPECT_TRUE(matchesGlob("a[", "a[")); // an unclosed '[' is a literal
  EXPECT_FALSE(matchesGlob("a[", "a"));
}

TEST(Mesh, PlacementParseTakesTorchsStridedShardRepr) {
  // torch's repr of transformers' packed_colwise placement, and the short form str() writes.
  for (const char *text : {"_StridedShard(dim=1, sf=2)", "_StridedShard(1, split_factor=2)", "_S(1,2)"}) {
    auto p = Placement::parse(text);
    ASSERT_TRUE(static_cast<bool>(p)) << text << ": " << llvm::toString(p.takeError());
    EXPECT_EQ(*p, (Placement{Placement::Kind::StridedShard, 1, 2, ReduceOp::Sum})) << text;
    EXPECT_EQ(p->torchStr(), "_StridedShard(dim=1, sf=2)");
    EXPECT_EQ(p->str(), "_S(1,2)");
  }
  for (const char *text : {"_StridedShard(dim=1)", "_StridedShard(dim=1, sf=0)", "_S(1,x)"}) {
    auto p = Placement::parse(text);
    ASSERT_FALSE(static_cast<bool>(p)) << text;
    EXPECT_EQ(llvm::toString(p.takeError()),
              std::string("bad placement '") + text +
                  "' (expected Shard(d), Replicate(), Partial(op) or _StridedShard(dim=d, sf=k))");
  }
}

TEST(Mesh, PlacementParseTakesNormPartial) {
  // DTensor's partial p-norm: its repr "_NormPartial(2)", its str "_NormP(2)", the short form
  // "NP(2)"; a Partial of reduce op sum that equals no Partial(sum), nor another p.
  for (const char *text : {"_NormPartial(2)", "_NormPartial(norm_type=2.0)", "_NormP(2)", "NP(2)"}) {
    auto p = Placement::parse(text);
    ASSERT_TRUE(static_cast<bool>(p)) << text << ": " << llvm::toString(p.takeError());
    EXPECT_EQ(*p, Placement::normPartial(2)) << text;
    EXPECT_TRUE(p->isPartial());
    EXPECT_EQ(p->reduceOp, ReduceOp::Sum);
    EXPECT_NE(*p, Placement::partial(ReduceOp::Sum));
    EXPECT_EQ(p->str(), "NP(2)");
    EXPECT_EQ(p->torchStr(), "_NormPartial(2)");
  }
  EXPECT_NE(Placement::normPartial(2), Placement::normPartial(3));
  EXPECT_EQ(Placement::normPartial(1.5).str(), "NP(1.5)");
  EXPECT_FALSE(static_cast<bool>(Placement::parse("NP(two)")));
}

TEST(Mesh, LocalShapeIsTorchChunkOfEachMeshDimInOrder) {
  // By hand: 6 split 4 ways by torch.chunk is 2, 2, 2, 0 (chunks of ceil(6/4) = 2).
  DeviceMesh tp{{4}, {"tp"}};
  Placements s1{Placement::shard(1)};
  std::vector<std::vector<int64_t>> locals;
  ASSERT_FALSE(llvm::errorToBool(forEachMeshCoordinate(tp, [&](llvm::ArrayRef<int64_t> c) {
    auto l = localShape({2, 6}, s1, tp, c);
    locals.push_back({l.begin(), l.end()});
    return llvm::Error::success();
  })));
  EXPECT_EQ(locals, (std::vector<std::vector<int64_t>>{{2, 2}, {2, 2}, {2, 2}, {2, 0}}));
  // (S(0), S(0)) on (2, 2): 7 rows -> 4 | 3 on dim 0, then 4 -> 2 | 2 and 3 -> 2 | 1 on dim 1.
  DeviceMesh m2{{2, 2}, {"a", "b"}};
  Placements s00{Placement::shard(0), Placement::shard(0)};
  std::vector<int64_t> rows;
  ASSERT_FALSE(llvm::errorToBool(forEachMeshCoordinate(m2, [&](llvm::ArrayRef<int64_t> c) {
    rows.push_back(localShape({7, 3}, s00, m2, c)[0]);
    return llvm::Error::success();
  })));
  EXPECT_EQ(rows, (std::vector<int64_t>{2, 2, 2, 1}));
  // Replicate and Partial keep the global size.
  EXPECT_EQ(localShape({7, 3}, Placements{Placement::replicate(), Placement::partial()}, m2, {1, 1}),
            (llvm::SmallVector<int64_t, 4>{7, 3}));
}
