// ShardingRules: per op family, decisions derived by hand from torch 2.13's DTensor rules (the
// derivation is in the comment of each case). Notation [out | in0, in1, ...] per mesh dim.
#include "dtensor/ShardingRules.h"

#include "ir/Error.h"
#include "ir/Graph.h"
#include "dtensor/rules/RuleEngine.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

using namespace commlens;

namespace {

TensorMeta meta(std::vector<int64_t> sizes, ScalarType dt = ScalarType::Float) {
  TensorMeta m;
  m.dtype = dt;
  for (int64_t s : sizes)
    m.sizes.push_back(SymInt::concrete(s));
  return m;
}

Placements pl(const std::vector<std::string> &texts) {
  Placements out;
  for (const std::string &t : texts) {
    auto p = Placement::parse(t);
    EXPECT_TRUE(static_cast<bool>(p)) << t;
    if (p)
      out.push_back(*p);
    else
      llvm::consumeError(p.takeError());
  }
  return out;
}

DeviceMesh mesh1(int64_t n) {
  DeviceMesh m;
  m.shape = {n};
  return m;
}

DeviceMesh mesh2(int64_t a, int64_t b) {
  DeviceMesh m;
  m.shape = {a, b};
  return m;
}

/// Builds one node with typed arguments and decides it.
class Call {
public:
  explicit Call(std::string op) : op_(std::move(op)) {}

  /// A DTensor operand (`placements` non-empty) or a plain tensor (empty).
  Call &tensor(const std::string &name, std::vector<int64_t> shape, std::vector<std::string> placements,
               ScalarType dt = ScalarType::Float) {
    Value *v = g_.createValue("v" + std::to_string(n_++), ValueKind::Tensor);
    v->setMeta(meta(shape, dt));
    args_.push_back({name, Argument(v), false});
    if (placements.empty())
      specs_.push_back(std::nullopt);
    else
      specs_.push_back(DTensorSpec{pl(placements), meta(shape, dt)});
    return *this;
  }
  Call &tensorP(const std::string &name, std::vector<int64_t> shape, Placements placements) {
    Value *v = g_.createValue("v" + std::to_string(n_++), ValueKind::Tensor);
    v->setMeta(meta(shape));
    args_.push_back({name, Argument(v), false});
    specs_.push_back(DTensorSpec{std::move(placements), meta(shape)});
    return *this;
  }
  /// A list of DTensor operands (one placement list per element).
  Call &tensorList(const std::string &name, std::vector<std::vector<int64_t>> shapes,
                   std::vector<std::vector<std::string>> placements) {
    TensorList l;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Value *v = g_.createValue("v" + std::to_string(n_++), ValueKind::Tensor);
      v->setMeta(meta(shapes[i]));
      l.push_back(v);
      specs_.push_back(DTensorSpec{pl(placements[i]), meta(shapes[i])});
    }
    args_.push_back({name, Argument(l), false});
    return *this;
  }
  Call &arg(const std::string &name, Argument a, bool keyword = false) {
    args_.push_back({name, std::move(a), keyword});
    return *this;
  }
  Call &out(std::vector<int64_t> shape, ScalarType dt = ScalarType::Float) {
    Value *v = g_.createValue("r" + std::to_string(n_++), ValueKind::Tensor);
    v->setMeta(meta(shape, dt));
    outs_.push_back(Argument(v));
    return *this;
  }
  Call &outList(std::vector<std::vector<int64_t>> shapes) {
    TensorList l;
    for (auto &s : shapes) {
      Value *v = g_.createValue("r" + std::to_string(n_++), ValueKind::Tensor);
      v->setMeta(meta(s));
      l.push_back(v);
    }
    outs_.push_back(Argument(l));
    return *this;
  }
  llvm::Expected<ShardingDecision> decide(const DeviceMesh &mesh) {
    Node *n = g_.appendNode("n", op_, llvm::SmallVector<NamedArgument, 4>(args_), llvm::SmallVector<Argument, 1>(outs_));
    return ShardingRules::get().decide(*n, specs_, mesh);
  }

private:
  std::string op_;
  Graph g_;
  unsigned n_ = 0;
  llvm::SmallVector<NamedArgument, 4> args_;
  llvm::SmallVector<Argument, 1> outs_;
  std::vector<std::optional<DTensorSpec>> specs_;
};

std::string s(const std::optional<Placements> &p) { return p ? str(*p) : "plain"; }

/// "[in0; in1 -> out0; out1]" for compact assertions.
std::string summary(const ShardingDecision &d) {
  std::string r;
  for (size_t i = 0; i < d.operandPlacements.size(); ++i)
    r += (i ? "; " : "") + s(d.operandPlacements[i]);
  r += " -> ";
  for (size_t i = 0; i < d.resultPlacements.size(); ++i)
    r += (i ? "; " : "") + s(d.resultPlacements[i]);
  return r;
}

std::string decideSummary(Call &c, const DeviceMesh &mesh) {
  auto d = c.decide(mesh);
  if (!d)
    return "error: " + takeMessage(d.takeError());
  return summary(*d);
}

} // namespace

// ---------------------------------------------------------------- matrix ops

TEST(MatrixRules, ColwiseMmKeepsShardedWeight) {
  // mm(x R, W^T S(1)): candidates (after rule 0 [R|R,R]): [P|S1,S0], [S0|S0,R], [S1|R,S1],
  // linearity [P|P,R], [P|R,P] (sum, avg). [S1|R,S1] needs no redistribution -> chosen.
  Call c("aten::mm.default");
  c.tensor("self", {32, 128}, {"R"}).tensor("mat2", {128, 64}, {"S(1)"}).out({32, 64});
  EXPECT_EQ(decideSummary(c, mesh1(4)), "[R]; [S(1)] -> [S(1)]");
}

TEST(MatrixRules, RowwiseMmGivesPartial) {
  // mm(x S(1), W^T S(0)): the contracting rule [P|S1,S0] matches as is -> P(sum), no comm.
  Call c("aten::mm.default");
  c.tensor("self", {32, 352}, {"S(1)"}).tensor("mat2", {352, 128}, {"S(0)"}).out({32, 128});
  EXPECT_EQ(decideSummary(c, mesh1(4)), "[S(1)]; [S(0)] -> [P(sum)]");
}

TEST(MatrixRules, MmBothShardedOnRowsPicksCheapestGather) {
  // mm(S(0), S(0)) on 4 ranks, [8,12]x[12,6]: no zero-cost candidate needs only local work?
  // [S0|S0,R] costs an all-gather of mat2 (288 B), [R|R,R] gathers both, [P|S1,S0] needs an
  // S0->S1 (all-gather + 1.0 penalty). The min-cost candidate is [S0|S0,R].
  Call c("aten::mm.default");
  c.tensor("self", {8, 12}, {"S(0)"}).tensor("mat2", {12, 6}, {"S(0)"}).out({8, 6});
  EXPECT_EQ(decideSummary(c, mesh1(4)), "[S(0)]; [R] -> [S(0)]");
}

TEST(MatrixRules, MmWithoutShardedInputsDropsPlaceholderRules) {
  // mm(P, P): no input is sharded, so every placeholder rule vanishes; left: [R|R,R] and the
  // linearity rules [P|P,R], [P|R,P]. The first zero-cost candidate that needs a redistribution
  // is ... none (P->R costs an all-reduce); min cost: [P|P,R] all-reduces mat2 only (smaller).
  Call c("aten::mm.default");
  c.tensor("self", {16, 16}, {"P(sum)"}).tensor("mat2", {16, 4}, {"P(sum)"}).out({16, 4});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[P(sum)]; [R] -> [P(sum)]");
}

TEST(MatrixRules, AddmmRowwiseBiasIsPartialLocally) {
  // addmm(bias R [6], x S(1), W^T S(0)): the contracting rule carries the bias as P (output P),
  // R -> P costs 0 (local divide), so [P | P, S1, S0] is a zero-cost candidate that needs a
  // (local) redistribution; no candidate is redistribution-free -> zero-cost pick.
  Call c("aten::addmm.default");
  c.tensor("self", {6}, {"R"}).tensor("mat1", {8, 12}, {"S(1)"}).tensor("mat2", {12, 6}, {"S(0)"}).out({8, 6});
  auto d = c.decide(mesh1(4));
  ASSERT_TRUE(static_cast<bool>(d)) << takeMessage(d.takeError());
  EXPECT_EQ(summary(*d), "[P(sum)]; [S(1)]; [S(0)] -> [P(sum)]");
  EXPECT_NE(d->why.find("zero cost"), std::string::npos) << d->why;
}

TEST(MatrixRules, AddmmColwiseBiasFollowsOutputShard) {
  // addmm(bias S(0) [6], x R, W^T S(1)): rhs-free rule [S1 | S0 (bias dim 0 <- out dim 1), R, S1].
  Call c("aten::addmm.default");
  c.tensor("self", {6}, {"S(0)"}).tensor("mat1", {8, 12}, {"R"}).tensor("mat2", {12, 6}, {"S(1)"}).out({8, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[S(0)]; [R]; [S(1)] -> [S(1)]");
}

TEST(MatrixRules, BmmHeadShardedIsBatchRule) {
  // bmm(S(0), S(0)): the batch rule [S0|S0,S0] matches.
  Call c("aten::bmm.default");
  c.tensor("self", {4, 6, 8}, {"S(0)"}).tensor("mat2", {4, 8, 6}, {"S(0)"}).out({4, 6, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[S(0)]; [S(0)] -> [S(0)]");
}

TEST(MatrixRules, MmOn2DMeshIsPerDimProduct) {
  // (S(0), S(1)) x (R, S(1)) on a (2, 2) mesh: the candidates are the 8x8 product of the per-dim
  // rules. None is redistribution-free (self's S(1) on mesh dim 1 is the contracting dim, which
  // would need mat2 S(0) there), none is free with a local-only change (self is not replicated).
  // Cheapest: all-gather self on mesh dim 1 (S(1) -> R, 128 B) to use [S0|S0,R] x [S1|R,S1]:
  // (S0, S1) | (S0, R), (R, S1). Moving mat2 instead (S(1) -> S(0) on dim 1) costs an all-gather
  // plus the 1.0 all-to-all penalty.
  Call c("aten::mm.default");
  c.tensor("self", {8, 8}, {"S(0)", "S(1)"}).tensor("mat2", {8, 8}, {"R", "S(1)"}).out({8, 8});
  EXPECT_EQ(decideSummary(c, mesh2(2, 2)), "[S(0), R]; [R, S(1)] -> [S(0), S(1)]");
}

// ---------------------------------------------------------------- view ops

TEST(ViewRules, FlattenLeadingShardKeepsShard) {
  // view [4,6,8] S(0) -> [24,8]: Flatten(InputDim0, InputDim1); Shard on the first flattened
  // dim, 4 % 2 == 0 -> output S(0).
  Call c("aten::view.default");
  c.tensor("self", {4, 6, 8}, {"S(0)"}).arg("size", IntList{24, 8}).out({24, 8});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[S(0)] -> [S(0)]");
}

TEST(ViewRules, FlattenInnerShardIsStridedShardError) {
  // view [4,6,8] S(1) -> [24,8]: 2.13 gives _StridedShard(0, split_factor=4): refused by name.
  Call c("aten::view.default");
  c.tensor("self", {4, 6, 8}, {"S(1)"}).arg("size", IntList{24, 8}).out({24, 8});
  std::string r = decideSummary(c, mesh1(2));
  EXPECT_NE(r.find("_StridedShard"), std::string::npos) << r;
}

TEST(ViewRules, ReshapeFlattenInnerShardReplicatesFirst) {
  // reshape (non-strict): a Shard on a non-first flattened dim cannot stay -> input to R.
  Call c("aten::reshape.default");
  c.tensor("self", {4, 6, 8}, {"S(1)"}).arg("shape", IntList{24, 8}).out({24, 8});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[R] -> [R]");
}

TEST(ViewRules, UnflattenShardOnFirstPiece) {
  // view [24,8] S(0) -> [4,6,8]: Split(InputDim0, (4,6), 0) is S-able when 4 % 2 == 0 -> S(0).
  Call c("aten::view.default");
  c.tensor("self", {24, 8}, {"S(0)"}).arg("size", IntList{4, 6, 8}).out({4, 6, 8});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[S(0)] -> [S(0)]");
}

TEST(ViewRules, StrictViewOfUnevenUnflattenErrors) {
  // view [12,2] S(0) -> [3,4,2] on 2 ranks: first piece 3 % 2 != 0 -> strict views raise.
  Call c("aten::view.default");
  c.tensor("self", {12, 2}, {"S(0)"}).arg("size", IntList{3, 4, 2}).out({3, 4, 2});
  std::string r = decideSummary(c, mesh1(2));
  EXPECT_NE(r.find("Cannot unflatten unevenly sharded tensor"), std::string::npos) << r;
}

TEST(ViewRules, UnsafeViewPartialPassesThrough) {
  // [2,16,128] P(sum) -> [32,128]: Partial is untouched by view rules.
  Call c("aten::_unsafe_view.default");
  c.tensor("self", {2, 16, 128}, {"P(sum)"}).arg("size", IntList{32, 128}).out({32, 128});
  EXPECT_EQ(decideSummary(c, mesh1(4)), "[P(sum)] -> [P(sum)]");
}

TEST(ViewRules, TransposeAndTFollowTheShard) {
  Call t("aten::t.default");
  t.tensor("self", {128, 352}, {"S(1)"}).out({352, 128});
  EXPECT_EQ(decideSummary(t, mesh1(4)), "[S(1)] -> [S(0)]");
  Call tr("aten::transpose.int");
  tr.tensor("self", {2, 8, 16, 4}, {"S(2)"}).arg("dim0", int64_t{1}).arg("dim1", int64_t{2}).out({2, 16, 8, 4});
  EXPECT_EQ(decideSummary(tr, mesh1(2)), "[S(2)] -> [S(1)]");
}

TEST(ViewRules, TransposeOfDimsOutOfRangeIsAnErrorAndOfAScalarItself) {
  // transpose(-2, -1) of a vector once ran past the rule's end (a crash); torch raises there, and
  // a 0-dim tensor transposes (dims 0 / -1) to itself.
  Call v("aten::transpose.int");
  v.tensor("self", {5}, {"R"}).arg("dim0", int64_t{-2}).arg("dim1", int64_t{-1}).out({5});
  EXPECT_EQ(decideSummary(v, mesh1(2)),
            "error: aten::transpose.int: dims (-2, -1) out of range for a 1-D tensor");
  Call s("aten::transpose.int");
  s.tensor("self", {}, {"R"}).arg("dim0", int64_t{0}).arg("dim1", int64_t{-1}).out({});
  EXPECT_EQ(decideSummary(s, mesh1(2)), "[R] -> [R]");
}

TEST(ViewRules, ExpandBroadcastDimIsReplicated) {
  // expand [1,6] S(1) -> [4,6]: dim 1 maps 1:1 -> S(1).
  Call c("aten::expand.default");
  c.tensor("self", {1, 6}, {"S(1)"}).arg("size", IntList{4, 6}).out({4, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[S(1)] -> [S(1)]");
}

TEST(ViewRules, SqueezeAndUnsqueezeRenumber) {
  Call u("aten::unsqueeze.default");
  u.tensor("self", {4, 6}, {"S(1)"}).arg("dim", int64_t{0}).out({1, 4, 6});
  EXPECT_EQ(decideSummary(u, mesh1(2)), "[S(1)] -> [S(2)]");
  Call q("aten::squeeze.dim");
  q.tensor("self", {4, 1, 6}, {"S(2)"}).arg("dim", int64_t{1}).out({4, 6});
  EXPECT_EQ(decideSummary(q, mesh1(2)), "[S(2)] -> [S(1)]");
}

// ---------------------------------------------------------------- tensor ops

TEST(TensorRules, StridedShardPassesOnlyThroughOpsThatFollowTheInput) {
  // A parameter transformers' packed_colwise placed _StridedShard(1, sf=2): its gradient leaf's
  // detach keeps it (DTensor's default_strategy copies the placements); any other op is refused.
  Call detach("aten::detach.default");
  detach.tensor("self", {4, 16, 6}, {"_StridedShard(dim=1, sf=2)"}).out({4, 16, 6});
  EXPECT_EQ(decideSummary(detach, mesh1(2)), "[_S(1,2)] -> [_S(1,2)]");
  Call neg("aten::neg.default");
  neg.tensor("self", {4, 16, 6}, {"_S(1, 2)"}).out({4, 16, 6});
  EXPECT_EQ(decideSummary(neg, mesh1(2)),
            "error: aten::neg.default: operand 0 is _StridedShard ([_S(1,2)]); strided-shard propagation is not "
            "modelled");
}

TEST(TensorRules, SplitUnshardsTheSplitDim) {
  // split(S(1), 3, dim=1): the split dim is unsharded (all-gather), pieces follow.
  Call c("aten::split.Tensor");
  c.tensor("self", {8, 6}, {"S(1)"}).arg("split_size", int64_t{3}).arg("dim", int64_t{1}).outList({{8, 3}, {8, 3}});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[R] -> [R]; [R]");
}

TEST(TensorRules, SliceAndSelect) {
  // slice on dim 0 of S(0), end 4 < 8: unshard dim 0. A full slice keeps the shard.
  Call a("aten::slice.Tensor");
  a.tensor("self", {8, 6}, {"S(0)"}).arg("dim", int64_t{0}).arg("start", int64_t{0}).arg("end", int64_t{4}).out({4, 6});
  EXPECT_EQ(decideSummary(a, mesh1(2)), "[R] -> [R]");
  Call b("aten::slice.Tensor");
  b.tensor("self", {8, 6}, {"S(0)"}).arg("dim", int64_t{0}).arg("start", int64_t{0}).arg("end", int64_t{INT64_MAX}).out({8, 6});
  EXPECT_EQ(decideSummary(b, mesh1(2)), "[S(0)] -> [S(0)]");
  // select dim 1 of S(2): shard dim shifts down.
  Call c("aten::select.int");
  c.tensor("self", {4, 6, 8}, {"S(2)"}).arg("dim", int64_t{1}).arg("index", int64_t{2}).out({4, 8});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[S(2)] -> [S(1)]");
}

TEST(TensorRules, CatFollowsFirstCheapestExemplar) {
  // cat([S(0), R], dim=1): exemplars S(0) (from input 0) and R (from input 1). S(0): input 1
  // R->S(0) is free (cost 0, needs a local chunk) -> first zero-cost candidate.
  Call c("aten::cat.default");
  c.tensor("t0", {4, 6}, {"S(0)"}).tensor("t1", {4, 2}, {"R"}).arg("dim", int64_t{1}).out({4, 8});
  // (a TensorList argument in real graphs; operands are what matter here)
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[S(0)]; [S(0)] -> [S(0)]");
}

TEST(TensorRules, ContiguousKeepsPartialButCloneReduces) {
  // contiguous: propagate_single_input_strategy, P stays P. clone: the single-dim pointwise
  // strategy (no Partial rule) takes precedence in 2.13 -> P -> R (an all-reduce).
  Call a("aten::contiguous.default");
  a.tensor("self", {5, 6}, {"P(sum)"}).out({5, 6});
  EXPECT_EQ(decideSummary(a, mesh1(2)), "[P(sum)] -> [P(sum)]");
  Call b("aten::clone.default");
  b.tensor("self", {5, 6}, {"P(sum)"}).out({5, 6});
  EXPECT_EQ(decideSummary(b, mesh1(2)), "[R] -> [R]");
}

// ---------------------------------------------------------------- pointwise

TEST(PointwiseRules, MulPartialByReplicateStaysPartial) {
  // mul(P, R): _MUL_RULES [P|P,R] needs no redistribution.
  Call c("aten::mul.Tensor");
  c.tensor("self", {4, 6}, {"P(sum)"}).tensor("other", {4, 6}, {"R"}).out({4, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[P(sum)]; [R] -> [P(sum)]");
}

TEST(PointwiseRules, MulPartialByPartialReducesOne) {
  // mul(P, P): no [P|P,P] rule for mul; candidates [R|R,R] (2 all-reduces), [P|P,R], [P|R,P]
  // (1 all-reduce each, same cost) -> first min: [P|P,R].
  Call c("aten::mul.Tensor");
  c.tensor("self", {4, 6}, {"P(sum)"}).tensor("other", {4, 6}, {"P(sum)"}).out({4, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[P(sum)]; [R] -> [P(sum)]");
}

TEST(PointwiseRules, AddPartialWithScalarReduces) {
  // add(P(sum), 2.0): one tensor operand, the additive rules all have 3 entries -> only R.
  Call c("aten::add.Tensor");
  c.tensor("self", {4, 6}, {"P(sum)"}).arg("other", 2.0).out({4, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[R] -> [R]");
}

TEST(PointwiseRules, BroadcastOperandGetsMappedShard) {
  // mul(x S(1) [2,16,128], w R [128]) (RMSNorm weight): rule for common dim 1 maps w to R
  // (broadcast) -> [S1|S1,R] needs no redistribution.
  Call c("aten::mul.Tensor");
  c.tensor("self", {2, 16, 128}, {"S(1)"}).tensor("other", {128}, {"R"}).out({2, 16, 128});
  EXPECT_EQ(decideSummary(c, mesh1(4)), "[S(1)]; [R] -> [S(1)]");
}

TEST(PointwiseRules, GeluOfPartialReduces) {
  Call c("aten::gelu.default");
  c.tensor("self", {4, 6}, {"P(sum)"}).out({4, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[R] -> [R]");
}

TEST(PointwiseRules, ReluKeepsPartialMax) {
  Call c("aten::relu.default");
  c.tensor("self", {4, 6}, {"P(max)"}).out({4, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[P(max)] -> [P(max)]");
}

TEST(PointwiseRules, ScalarPlainTensorIsReplicate) {
  // A plain 0-dim tensor is a Replicate spec; its operand entry is "plain".
  Call c("aten::mul.Tensor");
  c.tensor("self", {4, 6}, {"S(0)"}).tensor("other", {}, {}).out({4, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[S(0)]; plain -> [S(0)]");
}

TEST(PointwiseRules, MixedPlainTensorErrors) {
  Call c("aten::add.Tensor");
  c.tensor("self", {4, 6}, {"S(0)"}).tensor("other", {4, 6}, {}).out({4, 6});
  std::string r = decideSummary(c, mesh1(2));
  EXPECT_NE(r.find("mixed torch.Tensor and DTensor"), std::string::npos) << r;
}

TEST(PointwiseRules, InplaceKeepsSelf) {
  // add_.Scalar on S(1): only candidates keeping self S(1).
  Call c("aten::add_.Scalar");
  c.tensor("self", {2, 16, 1}, {"S(1)"}).arg("other", 1e-6).out({2, 16, 1});
  EXPECT_EQ(decideSummary(c, mesh1(4)), "[S(1)] -> [S(1)]");
}

TEST(PointwiseRules, ToCopyFloatToIntReducesSum) {
  // _to_copy f32 -> i64 of P(sum): the sum rule is dropped (float->int does not commute) -> R;
  // P(max) stays.
  Call a("aten::_to_copy.default");
  a.tensor("self", {4, 6}, {"P(sum)"}).arg("dtype", ScalarType::Long, true).out({4, 6}, ScalarType::Long);
  EXPECT_EQ(decideSummary(a, mesh1(2)), "[R] -> [R]");
  Call b("aten::_to_copy.default");
  b.tensor("self", {4, 6}, {"P(max)"}).arg("dtype", ScalarType::Long, true).out({4, 6}, ScalarType::Long);
  EXPECT_EQ(decideSummary(b, mesh1(2)), "[P(max)] -> [P(max)]");
}

TEST(PointwiseRules, NonIncreasingSwapsMaxAndMin) {
  // erfc is non-increasing: [P(min) | P(max)] and [P(max) | P(min)] are its extra rules.
  Call c("aten::erfc.default");
  c.tensor("self", {4, 6}, {"P(max)"}).out({4, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[P(max)] -> [P(min)]");
}

TEST(PointwiseRules, MultiOutputPointwiseShardsEveryOutput) {
  // frexp returns (mantissa, exponent): [S(i), S(i) | S(i)] per dim.
  Call c("aten::frexp.Tensor");
  c.tensor("self", {4, 6}, {"S(1)"}).out({4, 6}).out({4, 6}, ScalarType::Int);
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[S(1)] -> [S(1)]; [S(1)]");
}

TEST(PointwiseRules, DunderOpsAreInplaceForDTensor) {
  // DTensor's is_inplace_op looks at the last character of the name: __xor__ counts as in-place,
  // so a Partial self that no rule keeps is refused instead of reduced.
  Call c("aten::__xor__.Scalar");
  c.tensor("self", {4, 6}, {"P(sum)"}, ScalarType::Long).arg("other", int64_t{1}).out({4, 6}, ScalarType::Long);
  std::string r = decideSummary(c, mesh1(2));
  EXPECT_EQ(r.rfind("error:", 0), 0u) << r;
}

TEST(TensorRules, NewFactoryFollowsAShardedInputOfTheSameSize) {
  // new_factory_strategy: [R | x] at cost 0 and, same size and sharded input, [x | x] at -0.1
  // (the negative cost wins); a different size or a Partial input gives R.
  Call a("aten::new_zeros.default");
  a.tensor("self", {5, 6}, {"S(1)"}).arg("size", IntList{5, 6}).out({5, 6});
  EXPECT_EQ(decideSummary(a, mesh1(2)), "[S(1)] -> [S(1)]");
  Call b("aten::new_zeros.default");
  b.tensor("self", {5, 6}, {"P(sum)"}).arg("size", IntList{5, 6}).out({5, 6});
  EXPECT_EQ(decideSummary(b, mesh1(2)), "[P(sum)] -> [R]");
  Call c("aten::new_empty.default");
  c.tensor("self", {5, 6}, {"P(sum)"}).arg("size", IntList{5, 6}).out({5, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[P(sum)] -> [P(sum)]");
}

TEST(TensorRules, StackMergesInputPlacements) {
  // Partial vs Shard -> the Shard; the new dim 0 shifts S(0) to S(1) in the output.
  Call c("aten::stack.default");
  c.tensor("a", {4, 6}, {"P(sum)"});
  c.tensor("b", {4, 6}, {"S(0)"});
  c.arg("dim", int64_t{0}).out({2, 4, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[S(0)]; [S(0)] -> [S(1)]");
}

// ---------------------------------------------------------------- reductions

TEST(ReductionRules, SumOverShardedDimIsPartial) {
  Call c("aten::sum.dim_IntList");
  c.tensor("self", {4, 6, 8}, {"S(1)"}).arg("dim", IntList{1}).out({4, 8});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[S(1)] -> [P(sum)]");
}

TEST(ReductionRules, MeanUnevenReplicatesFirst) {
  // mean over dim 0 (size 5) sharded on 2 ranks: not evenly sharded -> not linear -> R first.
  Call c("aten::mean.dim");
  c.tensor("self", {5, 6}, {"S(0)"}).arg("dim", IntList{0}).arg("keepdim", true).out({1, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[R] -> [R]");
  Call e("aten::mean.dim");
  e.tensor("self", {2, 16, 128}, {"S(1)"}).arg("dim", IntList{-1}).arg("keepdim", true).out({2, 16, 1});
  EXPECT_EQ(decideSummary(e, mesh1(4)), "[S(1)] -> [S(1)]");
}

TEST(ReductionRules, MeanOfPartialSumReplicates) {
  Call c("aten::mean.dim");
  c.tensor("self", {4, 6}, {"P(sum)"}).arg("dim", IntList{1}).out({4});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[R] -> [R]");
}

TEST(ReductionRules, TopkKeepsShardsOffItsDim) {
  // sort_strategy: [R, R | R] and [S(d), S(d) | S(d)] for d != dim; S(0) already fits.
  Call c("aten::topk.default");
  c.tensor("self", {4, 6, 8}, {"S(0)"}).arg("k", int64_t{2}).arg("dim", int64_t{1}).out({4, 2, 8}).out({4, 2, 8}, ScalarType::Long);
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[S(0)] -> [S(0)]; [S(0)]");
}

TEST(ReductionRules, CumsumReplicatesItsDimUnlessNegative) {
  // scan_strategy: non-linear reduction over [dim] (keepdim). DTensor compares the dim as written
  // with the shard dims, so dim=-1 does not match S(1) of a 2-D input and the shard stays.
  Call a("aten::cumsum.default");
  a.tensor("self", {4, 6}, {"S(1)"}).arg("dim", int64_t{1}).out({4, 6});
  EXPECT_EQ(decideSummary(a, mesh1(2)), "[R] -> [R]");
  Call b("aten::cumsum.default");
  b.tensor("self", {4, 6}, {"S(1)"}).arg("dim", int64_t{-1}).out({4, 6});
  EXPECT_EQ(decideSummary(b, mesh1(2)), "[S(1)] -> [S(1)]");
}

TEST(ReductionRules, LogsumexpIsNonLinear) {
  // logsumexp: Partials and shards on the reduced dims go to R; other shards are renumbered.
  Call a("aten::logsumexp.default");
  a.tensor("self", {4, 6, 8}, {"P(sum)"}).arg("dim", IntList{1}).out({4, 8});
  EXPECT_EQ(decideSummary(a, mesh1(2)), "[R] -> [R]");
  Call b("aten::logsumexp.default");
  b.tensor("self", {4, 6, 8}, {"S(2)"}).arg("dim", IntList{1}).out({4, 8});
  EXPECT_EQ(decideSummary(b, mesh1(2)), "[S(2)] -> [S(1)]");
}

TEST(ReductionRules, SoftmaxUnshardsItsDim) {
  Call c("aten::_softmax.default");
  c.tensor("self", {2, 4, 8, 8}, {"S(3)"}).arg("dim", int64_t{-1}).arg("half_to_float", false).out({2, 4, 8, 8});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[R] -> [R]");
  Call h("aten::_softmax.default");
  h.tensor("self", {2, 4, 8, 8}, {"S(1)"}).arg("dim", int64_t{-1}).arg("half_to_float", false).out({2, 4, 8, 8});
  EXPECT_EQ(decideSummary(h, mesh1(2)), "[S(1)] -> [S(1)]");
}

TEST(ReductionRules, NllLossForwardReplicatesClassDim) {
  Call c("aten::nll_loss_forward.default");
  c.tensor("self", {8, 6}, {"S(1)"})
      .tensor("target", {8}, {"R"}, ScalarType::Long)
      .arg("weight", NoneArg{})
      .arg("reduction", int64_t{1})
      .arg("ignore_index", int64_t{-100})
      .out({})
      .out({});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[R]; [R] -> [R]; [R]");
}

TEST(ReductionRules, VectorNormShardBecomesMaxOrNormPartial) {
  // linalg_vector_norm(S(1), inf, [1]): like amax, the shard becomes P(max). With p = 2 the shard
  // becomes _NormPartial(2) (get_placement_from_reduction_op), with p = 0 P(sum); a shard on a
  // dim the norm keeps stays (dim 0 of [4, 6] reduced over dim 1).
  Call inf("aten::linalg_vector_norm.default");
  inf.tensor("self", {4, 6}, {"S(1)"}).arg("ord", Argument(std::numeric_limits<double>::infinity()))
      .arg("dim", Argument(IntList{1})).out({4});
  EXPECT_EQ(decideSummary(inf, mesh1(2)), "[S(1)] -> [P(max)]");
  Call two("aten::linalg_vector_norm.default");
  two.tensor("self", {4, 6}, {"S(1)"}).arg("ord", Argument(2.0)).arg("dim", Argument(IntList{1})).out({4});
  EXPECT_EQ(decideSummary(two, mesh1(2)), "[S(1)] -> [NP(2)]");
  Call half("aten::linalg_vector_norm.default");
  half.tensor("self", {4, 6}, {"S(1)"}).arg("ord", Argument(1.5)).arg("dim", Argument(IntList{1})).out({4});
  EXPECT_EQ(decideSummary(half, mesh1(2)), "[S(1)] -> [NP(1.5)]");
  Call zero("aten::linalg_vector_norm.default");
  zero.tensor("self", {4, 6}, {"S(1)"}).arg("ord", Argument(0.0)).arg("dim", Argument(IntList{1})).out({4});
  EXPECT_EQ(decideSummary(zero, mesh1(2)), "[S(1)] -> [P(sum)]");
  Call kept("aten::linalg_vector_norm.default");
  kept.tensor("self", {4, 6}, {"S(0)"}).arg("ord", Argument(2.0)).arg("dim", Argument(IntList{1})).out({4});
  EXPECT_EQ(decideSummary(kept, mesh1(2)), "[S(0)] -> [S(0)]");
}

TEST(ReductionRules, SumKeepsNormPartialNormReplicatesIt) {
  // A sum's reduce op is "sum", which _NormPartial's reduce_op is too (common_reduction_strategy
  // compares only reduce_op): the sum keeps NP(2). A second norm is not linear for it: replicated.
  Call sum("aten::sum.dim_IntList");
  sum.tensor("self", {4, 6}, {"NP(2)"}).arg("dim", Argument(IntList{1})).out({4});
  EXPECT_EQ(decideSummary(sum, mesh1(2)), "[NP(2)] -> [NP(2)]");
  Call norm("aten::linalg_vector_norm.default");
  norm.tensor("self", {4, 6}, {"NP(2)"}).arg("ord", Argument(2.0)).arg("dim", Argument(IntList{1})).out({4});
  EXPECT_EQ(decideSummary(norm, mesh1(2)), "[R] -> [R]");
}

TEST(LinalgRules, BatchDimsShardMatricesDoNot) {
  // _linalg_det(A S(2)) on [4, 3, 3]: only batch-dim rules, so the matrix dim is gathered;
  // A S(0) keeps its batch shard through all three results.
  Call gathered("aten::_linalg_det.default");
  gathered.tensor("A", {4, 3, 3}, {"S(2)"}).out({4}).out({4, 3, 3}).out({4, 3}, ScalarType::Int);
  EXPECT_EQ(decideSummary(gathered, mesh1(2)), "[R] -> [R]; [R]; [R]");
  Call batch("aten::_linalg_det.default");
  batch.tensor("A", {4, 3, 3}, {"S(0)"}).out({4}).out({4, 3, 3}).out({4, 3}, ScalarType::Int);
  EXPECT_EQ(decideSummary(batch, mesh1(2)), "[S(0)] -> [S(0)]; [S(0)]; [S(0)]");
}

TEST(LinalgRules, PinvRefusesAPartialKeywordTolerance) {
  Call c("aten::linalg_pinv.atol_rtol_tensor");
  c.tensor("self", {4, 3, 3}, {"S(0)"}).tensor("atol", {}, {"P(sum)"}).out({4, 3, 3});
  EXPECT_NE(decideSummary(c, mesh1(2)).find("keyword tensors without redistributing"), std::string::npos);
}

// ---------------------------------------------------------------- list ops

TEST(ListRules, ForeachElementsChooseAloneNonListOperandFollowsTheFirst) {
  // _foreach_add.Tensor([S(0) [4,6], P(sum) [5]], other P(sum) []): element 0 (add.Tensor of S(0)
  // and a 0-d P(sum)) has no rule keeping both, replicates other and stays S(0); element 1 keeps
  // P(sum) + P(sum) -> P(sum). other is moved once, to element 0's choice (R).
  Call c("aten::_foreach_add.Tensor");
  c.tensorList("self", {{4, 6}, {5}}, {{"S(0)"}, {"P(sum)"}}).tensor("other", {}, {"P(sum)"}).outList({{4, 6}, {5}});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[S(0)]; [P(sum)]; [R] -> [S(0)]; [P(sum)]");
}

TEST(ListRules, ForeachMmIsMmPerElement) {
  // _foreach_mm: element 0 is colwise (R x S(1) -> S(1)), element 1 rowwise (S(1) x S(0) -> P).
  Call c("aten::_foreach_mm.default");
  c.tensorList("self", {{4, 6}, {5, 2}}, {{"R"}, {"S(1)"}})
      .tensorList("mat2", {{6, 4}, {2, 3}}, {{"S(1)"}, {"S(0)"}})
      .outList({{4, 4}, {5, 3}});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "[R]; [S(1)]; [S(1)]; [S(0)] -> [S(1)]; [P(sum)]");
}

TEST(ListRules, FunctionalFusedAdamIsRefusedLikeDTensor) {
  Call c("aten::_fused_adam.default");
  c.tensorList("self", {{4, 6}}, {{"S(0)"}}).outList({{4, 6}});
  EXPECT_NE(decideSummary(c, mesh1(2)).find("DTensor 2.13 raises"), std::string::npos);
}

// ---------------------------------------------------------------- norms, embedding

TEST(NormRules, LayerNormSequenceParallel) {
  // [S(1)x3 | S(1), R, R] matches as is (SP); a Partial input goes to R.
  Call c("aten::native_layer_norm.default");
  c.tensor("input", {2, 16, 64}, {"S(1)"}).arg("normalized_shape", IntList{64}).tensor("weight", {64}, {"R"})
      .tensor("bias", {64}, {"R"}).arg("eps", 1e-5).out({2, 16, 64}).out({2, 16, 1}).out({2, 16, 1});
  EXPECT_EQ(decideSummary(c, mesh1(4)), "[S(1)]; [R]; [R] -> [S(1)]; [S(1)]; [S(1)]");
  Call p("aten::native_layer_norm.default");
  p.tensor("input", {2, 16, 64}, {"P(sum)"}).arg("normalized_shape", IntList{64}).tensor("weight", {64}, {"R"})
      .tensor("bias", {64}, {"R"}).arg("eps", 1e-5).out({2, 16, 64}).out({2, 16, 1}).out({2, 16, 1});
  EXPECT_EQ(decideSummary(p, mesh1(4)), "[R]; [R]; [R] -> [R]; [R]; [R]");
}

TEST(EmbeddingRules, RowwiseWeightGivesMaskPartial) {
  // weight S(0), ids R: [MaskP | S0, MaskP] costs 0 (ids R -> MaskP is local) -> zero-cost pick.
  Call c("aten::embedding.default");
  c.tensor("weight", {256, 128}, {"S(0)"}).tensor("indices", {2, 16}, {"R"}, ScalarType::Long).out({2, 16, 128});
  EXPECT_EQ(decideSummary(c, mesh1(4)), "[S(0)]; [MP(sum)] -> [MP(sum)]");
}

TEST(EmbeddingRules, ColwiseWeightShardsLastDim) {
  Call c("aten::embedding.default");
  c.tensor("weight", {256, 128}, {"S(1)"}).tensor("indices", {2, 16}, {"R"}, ScalarType::Long).out({2, 16, 128});
  EXPECT_EQ(decideSummary(c, mesh1(4)), "[S(1)]; [R] -> [S(2)]");
}

// ---------------------------------------------------------------- engine

TEST(RuleEngine, CostModelMatchesDTensorFormulas) {
  // 1-D CPU mesh of 4 (1 device per host -> inter-host): all_gather of a [8,12] f32 S(0):
  // bytes/num_shards = 96 B, gathered x4 = 384 B; cost = 6.6 + 3*2.7 + (384e-9/2^30*1e9 ... )
  DeviceMesh m = mesh1(4);
  double c = rules::specRedistributeCost(m, meta({8, 12}), pl({"S(0)"}), pl({"R"}));
  double gb = 384.0 / 1024 / 1024 / 1024;
  double expect = 6.6 + 3 * 2.7 + (gb * 3 / 4) / (87.7 * 0.22) * 1e6;
  EXPECT_NEAR(c, expect, 1e-9);
  EXPECT_EQ(rules::specRedistributeCost(m, meta({8, 12}), pl({"R"}), pl({"P(sum)"})), 0.0);
  EXPECT_TRUE(std::isinf(rules::specRedistributeCost(m, meta({8, 12}), pl({"S(0)"}), pl({"P(sum)"}))));
}

TEST(RuleEngine, UnsupportedOpNamesTheOp) {
  Call c("aten::_conj_physical.default");
  c.tensor("self", {4, 6}, {"S(0)"}).out({4, 6});
  std::string r = decideSummary(c, mesh1(2));
  EXPECT_NE(r.find("aten::_conj_physical.default"), std::string::npos) << r;
  EXPECT_FALSE(ShardingRules::get().supports("aten::_conj_physical.default"));
  EXPECT_TRUE(ShardingRules::get().supports("aten::addmm.default"));
}

TEST(RuleEngine, StridedShardOperandIsRefused) {
  Call c("aten::relu.default");
  c.tensorP("self", {8, 6}, Placements{Placement{Placement::Kind::StridedShard, 0, 2, ReduceOp::Sum}}).out({8, 6});
  std::string r = decideSummary(c, mesh1(2));
  EXPECT_NE(r.find("_StridedShard"), std::string::npos) << r;
}

TEST(ViewRules, NestedUnevenFlattenFailsLikeDTensorsLocalView) {
  // view [6,8] (S(0), S(0)) -> [48] on (2,2): propagation keeps (S(0), S(0)), but rank (0,0) holds
  // 6 -> 3 -> 2 rows (16 elements) while the local output shape is 48/2/2 = 12: DTensor's local
  // view raises at runtime ("shape '[12]' is invalid for input of size 16").
  Call c("aten::view.default");
  c.tensor("self", {6, 8}, {"S(0)", "S(0)"}).arg("size", IntList{48}).out({48});
  std::string r = decideSummary(c, mesh2(2, 2));
  EXPECT_NE(r.find("raises at runtime"), std::string::npos) << r;
}

TEST(RuleEngine, NoDTensorOperandIsAPlainOp) {
  Call c("aten::relu.default");
  c.tensor("self", {4, 6}, {}).out({4, 6});
  EXPECT_EQ(decideSummary(c, mesh1(2)), "plain -> plain");
}
