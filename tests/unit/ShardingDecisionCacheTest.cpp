// ShardingDecisionCache: nodes that ask decide the same question share one decision; anything
// decide reads (an argument, which operand is which, placements, metas, the mesh) makes a new key.
#include "dtensor/ShardingDecisionCache.h"

#include "ir/Error.h"
#include "ir/Graph.h"
#include "autograd/Derivatives.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace commlens;

namespace {

TensorMeta meta(std::vector<int64_t> sizes, ScalarType dt = ScalarType::Float) { return metaOf(dt, sizes, Device{}); }

Placements pl(llvm::StringRef text) { return {llvm::cantFail(Placement::parse(text))}; }

class CacheTest : public ::testing::Test {
protected:
  CacheTest() { mesh_.shape = {4}; }

  Value *tensor(std::vector<int64_t> sizes, ScalarType dt = ScalarType::Float) {
    Value *v = g_.createValue("v" + std::to_string(n_++), ValueKind::Tensor);
    v->setMeta(meta(std::move(sizes), dt));
    return v;
  }
  /// `op(args...)` with one result of `out`'s meta, named uniquely (names never enter the key).
  Node *node(llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> args, const TensorMeta &out) {
    Value *r = g_.createValue("r" + std::to_string(n_++), ValueKind::Tensor);
    r->setMeta(out);
    return g_.appendNode("n" + std::to_string(n_++), op, std::move(args), {Argument(r)});
  }
  std::string key(const Node &n, llvm::ArrayRef<std::optional<DTensorSpec>> specs, const DeviceMesh &mesh) {
    llvm::SmallString<256> k;
    ShardingDecisionCache::key(n, specs, mesh, k);
    return std::string(k.str());
  }
  const ShardingDecision *decide(const Node &n, llvm::ArrayRef<std::optional<DTensorSpec>> specs) {
    auto d = cache_.decide(ShardingRules::get(), n, specs, mesh_);
    EXPECT_TRUE(static_cast<bool>(d)) << (d ? "" : takeMessage(d.takeError()));
    return d ? *d : nullptr;
  }

  Graph g_;
  DeviceMesh mesh_;
  ShardingDecisionCache cache_;
  unsigned n_ = 0;
};

TEST_F(CacheTest, RepeatedLayersShareOneDecision) {
  // Two layers' mm(x R, W^T S(1)) on different values: one decision, equal to decide's own.
  std::vector<std::optional<DTensorSpec>> specs = {DTensorSpec{pl("R"), meta({32, 128})},
                                                   DTensorSpec{pl("S(1)"), meta({128, 64})}};
  Node *a = node("aten::mm.default", {{"self", tensor({32, 128}), false}, {"mat2", tensor({128, 64}), false}},
                 meta({32, 64}));
  Node *b = node("aten::mm.default", {{"self", tensor({32, 128}), false}, {"mat2", tensor({128, 64}), false}},
                 meta({32, 64}));
  const ShardingDecision *da = decide(*a, specs);
  const ShardingDecision *db = decide(*b, specs);
  ASSERT_TRUE(da && db);
  EXPECT_EQ(da, db);
  EXPECT_EQ(cache_.size(), 1u);
  EXPECT_EQ(cache_.hits(), 1u);
  ShardingDecision direct = llvm::cantFail(ShardingRules::get().decide(*b, specs, mesh_));
  EXPECT_EQ(db->operandPlacements, direct.operandPlacements);
  EXPECT_EQ(db->resultPlacements, direct.resultPlacements);
  EXPECT_EQ(db->why, direct.why);
}

TEST_F(CacheTest, WhatDecideReadsChangesTheKey) {
  Value *x = tensor({4, 6}), *y = tensor({4, 6});
  std::optional<DTensorSpec> s0 = DTensorSpec{pl("S(0)"), meta({4, 6})};
  std::optional<DTensorSpec> r = DTensorSpec{pl("R"), meta({4, 6})};
  Node *mulXY = node("aten::mul.Tensor", {{"self", x, false}, {"other", y, false}}, meta({4, 6}));
  Node *mulXX = node("aten::mul.Tensor", {{"self", x, false}, {"other", x, false}}, meta({4, 6}));
  Node *addXY = node("aten::add.Tensor", {{"self", x, false}, {"other", y, false}}, meta({4, 6}));
  Node *mulBf16 = node("aten::mul.Tensor", {{"self", x, false}, {"other", y, false}}, meta({4, 6}, ScalarType::BFloat16));
  std::string base = key(*mulXY, {s0, s0}, mesh_);
  EXPECT_EQ(base, key(*node("aten::mul.Tensor", {{"self", tensor({4, 6}), false}, {"other", tensor({4, 6}), false}},
                            meta({4, 6})),
                      {s0, s0}, mesh_)); // other values, same question
  EXPECT_NE(base, key(*mulXX, {s0, s0}, mesh_));   // one operand twice
  EXPECT_NE(base, key(*addXY, {s0, s0}, mesh_));   // another op
  EXPECT_NE(base, key(*mulXY, {s0, r}, mesh_));    // other placements
  // a partial p-norm's p, and a _NormPartial against the Partial(sum) its reduce_op also is
  std::optional<DTensorSpec> np2 = DTensorSpec{pl("NP(2)"), meta({4, 6})}, np3 = DTensorSpec{pl("NP(3)"), meta({4, 6})};
  std::optional<DTensorSpec> psum = DTensorSpec{pl("P(sum)"), meta({4, 6})};
  EXPECT_NE(key(*mulXY, {np2, s0}, mesh_), key(*mulXY, {np3, s0}, mesh_));
  EXPECT_NE(key(*mulXY, {np2, s0}, mesh_), key(*mulXY, {psum, s0}, mesh_));
  EXPECT_NE(base, key(*mulXY, {s0, std::nullopt}, mesh_)); // a plain operand
  EXPECT_NE(base, key(*mulBf16, {s0, s0}, mesh_)); // another result meta
  DeviceMesh other;
  other.shape = {4};
  EXPECT_NE(base, key(*mulXY, {s0, s0}, other)); // another mesh

  // Scalar arguments by value, keyword-ness and name included.
  Node *sum1 = node("aten::sum.dim_IntList", {{"self", x, false}, {"dim", IntList{1}, false}}, meta({4}));
  Node *sum0 = node("aten::sum.dim_IntList", {{"self", x, false}, {"dim", IntList{0}, false}}, meta({4}));
  Node *sum1kw = node("aten::sum.dim_IntList", {{"self", x, false}, {"dim", IntList{1}, true}}, meta({4}));
  EXPECT_NE(key(*sum1, {s0}, mesh_), key(*sum0, {s0}, mesh_));
  EXPECT_NE(key(*sum1, {s0}, mesh_), key(*sum1kw, {s0}, mesh_));
  // A symbolic value that is not a tensor operand keys by identity: such nodes share nothing.
  Value *sym = g_.createValue("s", ValueKind::SymInt), *sym2 = g_.createValue("s2", ValueKind::SymInt);
  Node *viewA = node("aten::view.default", {{"self", x, false}, {"size", SymIntList{SymIntArg{sym, 4}, SymIntArg{nullptr, 6}}, false}},
                     meta({4, 6}));
  Node *viewB = node("aten::view.default", {{"self", x, false}, {"size", SymIntList{SymIntArg{sym2, 4}, SymIntArg{nullptr, 6}}, false}},
                     meta({4, 6}));
  EXPECT_NE(key(*viewA, {s0}, mesh_), key(*viewB, {s0}, mesh_));
}

TEST_F(CacheTest, ErrorsAreNotCached) {
  Node *n = node("aten::mm.default", {{"self", tensor({32, 128}), false}, {"mat2", tensor({128, 64}), false}},
                 meta({32, 64}));
  std::vector<std::optional<DTensorSpec>> oneSpec = {DTensorSpec{pl("R"), meta({32, 128})}};
  auto d = cache_.decide(ShardingRules::get(), *n, oneSpec, mesh_); // two tensor operands, one spec
  ASSERT_FALSE(static_cast<bool>(d));
  EXPECT_EQ(takeMessage(d.takeError()), "aten::mm.default: 1 operand specs given for 2 tensor operands");
  EXPECT_EQ(cache_.size(), 0u);
}

} // namespace
