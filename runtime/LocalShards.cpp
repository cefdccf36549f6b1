#include "runtime/LocalShards.h"

#include "dtensor/ShardingRules.h"
#include "ir/Error.h"
#include "ir/TensorMetaUtils.h"

#include "llvm/ADT/STLExtras.h"

namespace commlens {
namespace {

bool allReplicate(llvm::ArrayRef<Placement> ps) {
  return llvm::all_of(ps, [](const Placement &p) { return p.isReplicate(); });
}

/// DTensor.from_local without `shape` (compute_global_tensor_info): each Shard dim is the local
/// size times its mesh dim's size.
llvm::SmallVector<int64_t, 4> inferredGlobalShape(llvm::ArrayRef<int64_t> local, const Placements &to,
                                                  const DeviceMesh &mesh) {
  llvm::SmallVector<int64_t, 4> inferred(local.begin(), local.end());
  for (size_t m = 0; m < to.size() && m < mesh.ndim(); ++m)
    if (to[m].isShard() && to[m].dim >= 0 && static_cast<size_t>(to[m].dim) < inferred.size())
      inferred[to[m].dim] *= mesh.shape[m];
  return inferred;
}

} // namespace

void LocalShards::programInputs(const Graph &forward) {
  for (const InputSpec &in : forward.inputs()) {
    if (!in.value || in.value->kind() != ValueKind::Tensor)
      continue;
    if (in.kind == InputKind::UserInput)
      origins_[in.value] = Origin::ModelInput;
    else if (in.kind == InputKind::Parameter || in.kind == InputKind::Buffer || in.kind == InputKind::TensorConstant)
      origins_[in.value] = Origin::WholeOnEveryRank; // where a plan makes one a DTensor, no plain op sees it
  }
}

void LocalShards::toLocal(const Value *local, const Placements &placements, MeshId mesh) {
  if (allReplicate(placements)) // a replicated DTensor's local tensor is the whole tensor
    origins_[local] = Origin::WholeOnEveryRank;
  else
    shards_[local] = Shard{placements, mesh};
}

void LocalShards::passThrough(const Value *in, const Value *out) {
  // Copied before `out`'s entry is made: inserting may grow the map and free `in`'s entry.
  if (auto it = shards_.find(in); it != shards_.end()) {
    Shard shard = it->second;
    shards_[out] = std::move(shard);
  }
  if (auto it = origins_.find(in); it != origins_.end()) {
    Origin origin = it->second;
    origins_[out] = origin;
  }
}

void LocalShards::plainOrigins(const Node &n) {
  bool known = true, first = true, aliasOfInput = false;
  n.forEachOperand([&](Value *v) {
    if (v->kind() != ValueKind::Tensor)
      return;
    auto it = origins_.find(v);
    known &= it != origins_.end();
    if (first && it != origins_.end())
      aliasOfInput = n.resultAliasesSelf() && it->second == Origin::ModelInput;
    first = false;
  });
  if (!known)
    return;
  // A view of a model input is still the input each rank passes (torch's `_base`); anything
  // computed from it is computed from the whole example input.
  for (Value *r : n.results())
    if (r->kind() == ValueKind::Tensor)
      origins_[r] = aliasOfInput ? Origin::ModelInput : Origin::WholeOnEveryRank;
}

llvm::Error LocalShards::plainOp(const Node &n) {
  if (shards_.empty()) {
    plainOrigins(n);
    return llvm::Error::success();
  }
  llvm::SmallVector<const Value *, 4> tensors;
  llvm::SmallVector<const std::optional<Placements> *, 4> tracked;
  std::optional<MeshId> meshId;
  bool lost = false;
  n.forEachOperand([&](Value *v) {
    if (v->kind() != ValueKind::Tensor)
      return;
    tensors.push_back(v);
    auto it = shards_.find(v);
    tracked.push_back(it == shards_.end() ? nullptr : &it->second.placements);
    if (it != shards_.end()) {
      lost |= !it->second.placements || (meshId && *meshId != it->second.mesh); // shards of two meshes: not followed
      meshId = it->second.mesh;
    }
  });
  if (!meshId) { // no shard among the operands
    plainOrigins(n);
    return llvm::Error::success();
  }
  auto stopFollowing = [&] {
    for (Value *r : n.results())
      if (r->kind() == ValueKind::Tensor)
        shards_[r] = Shard{};
    return llvm::Error::success();
  };
  if (lost)
    return stopFollowing();
  const DeviceMesh &mesh = meshes_[*meshId].mesh;
  // The op as DTensor would see it: the shards with their placements, whole tensors replicated.
  llvm::SmallVector<std::optional<DTensorSpec>, 4> specs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i]->meta())
      return stopFollowing();
    specs.push_back(DTensorSpec{tracked[i] ? **tracked[i] : Placements(mesh.ndim(), Placement::replicate()),
                                *tensors[i]->meta()});
  }
  // Where DTensor would not keep a shard (it would redistribute it, or its rules refuse the
  // call), the local computation does something else: for a view that is a runtime failure
  // checkView names; for anything else the shard is no longer followed.
  auto notKept = [&](size_t i) -> llvm::Error {
    if (tracked[i])
      if (llvm::Error err = checkView(n, tensors[i], specs[i]->placements, mesh))
        return err;
    if (llvm::Error err = checkMatrixProduct(n, mesh))
      return err;
    if (llvm::Error err = checkGroupedMm(n, mesh))
      return err;
    if (llvm::Error err = checkBroadcast(n, mesh))
      return err;
    return stopFollowing();
  };
  const ShardingRules &rules = ShardingRules::get();
  if (!rules.supports(n.opString()))
    return stopFollowing();
  auto decided = decisions_.decide(rules, n, specs, mesh);
  if (!decided) {
    llvm::consumeError(decided.takeError());
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tracked[i])
        return notKept(i);
    return stopFollowing();
  }
  const ShardingDecision &decision = **decided;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (i >= decision.operandPlacements.size() || !decision.operandPlacements[i])
      return stopFollowing();
    int64_t rank = tensors[i]->meta()->rank();
    Placements have = normalized(specs[i]->placements, rank);
    if (normalized(*decision.operandPlacements[i], rank) != have)
      return notKept(i);
  }
  auto results = n.results();
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i]->kind() != ValueKind::Tensor)
      continue;
    if (i < decision.resultPlacements.size() && decision.resultPlacements[i] && results[i]->meta())
      shards_[results[i]] = Shard{normalized(*decision.resultPlacements[i], results[i]->meta()->rank()), *meshId};
    else
      shards_[results[i]] = Shard{};
  }
  return llvm::Error::success();
}

namespace {

/// The sizes a matrix product contracts: (first operand, its dim; second operand, its dim).
struct Contraction {
  const char *op, *a;
  int64_t aDim;
  const char *b;
  int64_t bDim;
};
constexpr Contraction kContractions[] = {
    {"aten::mm.default", "self", -1, "mat2", 0},
    {"aten::addmm.default", "mat1", -1, "mat2", 0},
    {"aten::bmm.default", "self", -1, "mat2", 1},
    {"aten::baddbmm.default", "batch1", -1, "batch2", 1},
};

} // namespace

/// A plain matrix product of a local shard: where DTensor would redistribute the shard first, the
/// local op multiplies the shard itself, and if the contracted sizes then differ torch raises
/// (an unparallelized Linear after a ColwiseParallel one: its weight is whole, its input a shard).
llvm::Error LocalShards::checkMatrixProduct(const Node &n, const DeviceMesh &mesh) const {
  const Contraction *c = llvm::find_if(kContractions, [&](const Contraction &c) { return n.opString() == c.op; });
  if (c == std::end(kContractions))
    return llvm::Error::success();
  const Argument *aArg = n.input(c->a), *bArg = n.input(c->b);
  const Value *a = aArg && aArg->isTensor() ? aArg->tensor() : nullptr;
  const Value *b = bArg && bArg->isTensor() ? bArg->tensor() : nullptr;
  if (!a || !b || !a->meta() || !b->meta() || a->meta()->rank() < 2 || b->meta()->rank() < 2)
    return llvm::Error::success();
  std::optional<Placements> aHave = localPlacements(a, mesh), bHave = localPlacements(b, mesh);
  if (!aHave || !bHave)
    return llvm::Error::success();
  llvm::SmallVector<int64_t, 4> aGlobal = sizesOf(*a->meta()), bGlobal = sizesOf(*b->meta());
  return forEachMeshCoordinate(mesh, [&](llvm::ArrayRef<int64_t> coord) -> llvm::Error {
    llvm::SmallVector<int64_t, 4> aLocal = localShape(aGlobal, *aHave, mesh, coord);
    llvm::SmallVector<int64_t, 4> bLocal = localShape(bGlobal, *bHave, mesh, coord);
    int64_t k1 = aLocal[c->aDim < 0 ? aLocal.size() + c->aDim : c->aDim];
    int64_t k2 = bLocal[c->bDim < 0 ? bLocal.size() + c->bDim : c->bDim];
    if (k1 == k2)
      return llvm::Error::success();
    // mm and addmm's own check (LinearAlgebra.cpp); bmm's says the sizes another way.
    std::string raises = aLocal.size() == 2 && bLocal.size() == 2
                             ? fmt::format(" (\"mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{})\")",
                                           aLocal[0], aLocal[1], bLocal[0], bLocal[1])
                             : std::string();
    return makeError("{}: on the rank at mesh coordinate [{}] this plain matrix product multiplies {} by {}, whose "
                     "contracted sizes {} and {} differ, so torch raises{}; the module that runs it needs a parallel "
                     "style too (a Rowwise one after a Colwise one)",
                     n.where(), fmt::join(coord, ", "), describeLocal(a, *aHave, aLocal, mesh),
                     describeLocal(b, *bHave, bLocal, mesh), k1, k2, raises);
  });
}

/// A plain grouped matrix product of a local shard (torchtitan's TensorParallel experts run
/// _grouped_mm on their weights' local shards, cast to bfloat16): the kernel checks each operand's
/// strides, and a shard narrow enough leaves them short of 16 bytes, where the program's global
/// operands were fine (tp=32 of a 128-wide expert: 4 bf16 features per rank, 8 bytes).
llvm::Error LocalShards::checkGroupedMm(const Node &n, const DeviceMesh &mesh) const {
  if (n.opString() != "aten::_grouped_mm.default")
    return llvm::Error::success();
  for (const char *name : {"self", "mat2"}) {
    const Argument *arg = n.input(name);
    const Value *x = arg && arg->isTensor() ? arg->tensor() : nullptr;
    std::optional<Placements> have = x && x->meta() ? localPlacements(x, mesh) : std::nullopt;
    if (!have || allReplicate(*have))
      continue;
    llvm::SmallVector<int64_t, 4> global = sizesOf(*x->meta()), globalStrides = stridesOf(*x->meta());
    if (llvm::Error err = forEachMeshCoordinate(mesh, [&](llvm::ArrayRef<int64_t> coord) -> llvm::Error {
          llvm::SmallVector<int64_t, 4> local = localShape(global, *have, mesh, coord);
          llvm::SmallVector<int64_t, 4> strides = localStrides(local, globalStrides);
          if (groupedMmTakesStrides(local, strides, x->meta()->dtype))
            return llvm::Error::success();
          return makeError("{}: on the rank at mesh coordinate [{}] this plain grouped matrix product takes {} as "
                           "{} with strides [{}] of {} ({} bytes each), which the kernel needs 16-byte aligned, so "
                           "torch raises (\"strides should be multiple of 16 bytes\")",
                           n.where(), fmt::join(coord, ", "), name, describeLocal(x, *have, local, mesh),
                           fmt::join(strides, ", "), torchName(x->meta()->dtype), elementSize(x->meta()->dtype));
        }))
      return err;
  }
  return llvm::Error::success();
}

std::string LocalShards::describeLocal(const Value *v, const Placements &have, llvm::ArrayRef<int64_t> local,
                                       const DeviceMesh &mesh) const {
  if (allReplicate(have))
    return fmt::format("'{}' [{}] (whole on every rank)", v->name(), fmt::join(local, ", "));
  return fmt::format("'{}' [{}] (a local shard: {} of [{}] on {}, handed back by a style's use_local_output)",
                     v->name(), fmt::join(local, ", "), str(have), fmt::join(sizesOf(*v->meta()), ", "), mesh.str());
}

std::optional<Placements> LocalShards::localPlacements(const Value *v, const DeviceMesh &mesh) const {
  if (auto it = shards_.find(v); it != shards_.end())
    return it->second.placements;
  if (origins_.count(v)) // a model input, too, is whole where a plain op (not a style's hook) takes it
    return Placements(mesh.ndim(), Placement::replicate());
  return std::nullopt; // where the value comes from is not known here (a forward value in backward)
}

/// A plain pointwise op on a local shard: where DTensor would redistribute the shard first, the
/// local op broadcasts the shard itself with the other operands, which fails where a sharded
/// size meets a whole one (a residual add of a whole tensor and a shard handed back with
/// use_local_output). The check is TensorIterator's: each operand's shape broadcast in turn
/// into the shape so far (ExpandUtils.cpp infer_size), with its message.
llvm::Error LocalShards::checkBroadcast(const Node &n, const DeviceMesh &mesh) const {
  // copy_ broadcasts only its source into self, and a source's runtime shape can escape what is
  // tracked here (DeepSeek-V2's k_pe expanded to sizes export baked from a use_local_output
  // shard): not checked.
  if (!ShardingRules::get().isPointwise(n.opString()) || n.opString() == "aten::copy_.default")
    return llvm::Error::success();
  llvm::SmallVector<const Value *, 4> tensors;
  llvm::SmallVector<Placements, 4> have;
  bool known = true;
  n.forEachOperand([&](Value *v) {
    if (v->kind() != ValueKind::Tensor || !known)
      return;
    std::optional<Placements> p = localPlacements(v, mesh);
    known = p && v->meta();
    if (known) {
      tensors.push_back(v);
      have.push_back(*p);
    }
  });
  if (!known || tensors.size() < 2)
    return llvm::Error::success();
  return forEachMeshCoordinate(mesh, [&](llvm::ArrayRef<int64_t> coord) -> llvm::Error {
    llvm::SmallVector<int64_t, 4> shape = localShape(sizesOf(*tensors[0]->meta()), have[0], mesh, coord);
    for (size_t k = 1; k < tensors.size(); ++k) {
      llvm::SmallVector<int64_t, 4> next = localShape(sizesOf(*tensors[k]->meta()), have[k], mesh, coord);
      size_t ndim = std::max(shape.size(), next.size());
      llvm::SmallVector<int64_t, 4> merged(ndim, 1);
      for (size_t i = 0; i < ndim; ++i) {
        size_t offset = ndim - 1 - i;
        int64_t a = offset < shape.size() ? shape[shape.size() - 1 - offset] : 1;
        int64_t b = offset < next.size() ? next[next.size() - 1 - offset] : 1;
        if (a != b && a != 1 && b != 1)
          return makeError("{}: on the rank at mesh coordinate [{}] this plain pointwise op broadcasts {} with {}, so "
                           "torch raises (\"The size of tensor a ({}) must match the size of tensor b ({}) at "
                           "non-singleton dimension {}\")",
                           n.where(), fmt::join(coord, ", "), describeLocal(tensors[0], have[0], shape, mesh),
                           describeLocal(tensors[k], have[k], next, mesh), a, b, i);
        merged[i] = a == 1 ? b : a;
      }
      shape = std::move(merged);
    }
    return llvm::Error::success();
  });
}

/// view(x, [.., -1, ..]) on a local shard infers the -1 from the shard's element count. Export
/// keeps the -1 of `Tensor.view`, so the other sizes are the ones the code wrote (reshape's are
/// resolved by then: not checked). A count that does not divide is torch's InferSize error.
llvm::Error LocalShards::checkView(const Node &n, const Value *x, const Placements &have,
                                   const DeviceMesh &mesh) const {
  if (n.opString() != "aten::view.default" && n.opString() != "aten::_unsafe_view.default")
    return llvm::Error::success();
  const Argument *sizeArg = n.input("size");
  std::optional<IntList> sizes = sizeArg ? sizeArg->asIntList() : std::nullopt;
  if (!sizes || llvm::count(*sizes, -1) != 1)
    return llvm::Error::success();
  int64_t known = 1;
  for (int64_t s : *sizes)
    if (s != -1)
      known *= s;
  if (known <= 0)
    return llvm::Error::success();
  llvm::SmallVector<int64_t, 4> global = sizesOf(*x->meta());
  return forEachMeshCoordinate(mesh, [&](llvm::ArrayRef<int64_t> coord) -> llvm::Error {
    int64_t numel = numelOf(localShape(global, have, mesh, coord));
    if (numel % known != 0)
      return makeError("{}: '{}' is a local shard ({} of [{}] on {}, handed back by a style's use_local_output); "
                       "on the rank at mesh coordinate [{}] it holds {} elements, which torch cannot view as [{}] "
                       "(it raises \"shape '[{}]' is invalid for input of size {}\")",
                       n.where(), x->name(), str(have), fmt::join(global, ", "), mesh.str(),
                       fmt::join(coord, ", "), numel, fmt::join(*sizes, ", "), fmt::join(*sizes, ", "), numel);
    return llvm::Error::success();
  });
}

llvm::Error LocalShards::fromLocal(const Node &n, const Value *x, const Placements &placements, MeshId meshId) const {
  if (!x->meta())
    return llvm::Error::success();
  const DeviceMesh &mesh = meshes_[meshId].mesh;
  llvm::SmallVector<int64_t, 4> global = sizesOf(*x->meta());
  Placements to = normalized(placements, x->meta()->rank());
  if (auto origin = origins_.find(x); origin != origins_.end() && origin->second == Origin::WholeOnEveryRank) {
    llvm::SmallVector<int64_t, 4> inferred = inferredGlobalShape(global, to, mesh);
    if (inferred != global)
      return makeError("{}: DTensor.from_local of '{}' as {} takes it as this rank's shard and infers the global "
                       "shape [{}], not the program's [{}]: '{}' is the whole tensor on every rank (computed by plain "
                       "ops from whole tensors or from a whole model input, not passed in as each rank's shard), so "
                       "the run's shapes differ from the program's and its next DTensor op raises or communicates "
                       "other bytes; give that input layout as Replicate(), or shard the tensor where it is made",
                       n.where(), x->name(), str(to), fmt::join(inferred, ", "), fmt::join(global, ", "), x->name());
    return llvm::Error::success();
  }
  auto it = shards_.find(x);
  if (it == shards_.end() || !it->second.placements)
    return llvm::Error::success();
  const Placements &have = *it->second.placements;
  if (it->second.mesh != meshId)
    return makeError("{}: DTensor.from_local of '{}' as {} on {} takes the local shard of a DTensor on another mesh "
                     "({} of [{}] on {}): not modelled",
                     n.where(), x->name(), str(to), mesh.str(), str(have), fmt::join(global, ", "),
                     meshes_[it->second.mesh].mesh.str());
  return forEachMeshCoordinate(mesh, [&](llvm::ArrayRef<int64_t> coord) -> llvm::Error {
    llvm::SmallVector<int64_t, 4> local = localShape(global, have, mesh, coord);
    llvm::SmallVector<int64_t, 4> inferred = inferredGlobalShape(local, to, mesh);
    if (inferred != global)
      return makeError("{}: DTensor.from_local of '{}' as {} infers the global shape [{}] on the rank at mesh "
                       "coordinate [{}], not the program's [{}]: '{}' is a local shard ([{}] there; {} of [{}] on {}, "
                       "handed back by a style's use_local_output), so the run's shapes differ from the program's "
                       "and its next DTensor op raises or communicates other bytes",
                       n.where(), x->name(), str(to), fmt::join(inferred, ", "), fmt::join(coord, ", "),
                       fmt::join(global, ", "), x->name(), fmt::join(local, ", "), str(have), fmt::join(global, ", "),
                       mesh.str());
    return llvm::Error::success();
  });
}

} // namespace commlens
