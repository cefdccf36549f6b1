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

} // namespace

void LocalShards::toLocal(const Value *local, const Placements &placements) {
  if (!allReplicate(placements)) // a replicated DTensor's local tensor is the whole tensor
    shards_[local] = placements;
}

void LocalShards::passThrough(const Value *in, const Value *out) {
  auto it = shards_.find(in);
  if (it != shards_.end())
    shards_[out] = it->second;
}

llvm::Error LocalShards::plainOp(const Node &n) {
  if (shards_.empty())
    return llvm::Error::success();
  llvm::SmallVector<const Value *, 4> tensors;
  llvm::SmallVector<const std::optional<Placements> *, 4> tracked;
  bool anyShard = false, lost = false;
  n.forEachOperand([&](Value *v) {
    if (v->kind() != ValueKind::Tensor)
      return;
    tensors.push_back(v);
    auto it = shards_.find(v);
    tracked.push_back(it == shards_.end() ? nullptr : &it->second);
    if (it != shards_.end()) {
      anyShard = true;
      lost |= !it->second;
    }
  });
  if (!anyShard)
    return llvm::Error::success();
  auto stopFollowing = [&] {
    for (Value *r : n.results())
      if (r->kind() == ValueKind::Tensor)
        shards_[r] = std::nullopt;
    return llvm::Error::success();
  };
  if (lost)
    return stopFollowing();
  // The op as DTensor would see it: the shards with their placements, whole tensors replicated.
  llvm::SmallVector<std::optional<DTensorSpec>, 4> specs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i]->meta())
      return stopFollowing();
    specs.push_back(DTensorSpec{tracked[i] ? **tracked[i] : Placements(mesh_.ndim(), Placement::replicate()),
                                *tensors[i]->meta()});
  }
  // Where DTensor would not keep a shard (it would redistribute it, or its rules refuse the
  // call), the local computation does something else: for a view that is a runtime failure
  // checkView names; for anything else the shard is no longer followed.
  auto notKept = [&](size_t i) -> llvm::Error {
    if (tracked[i])
      if (llvm::Error err = checkView(n, tensors[i], specs[i]->placements))
        return err;
    return stopFollowing();
  };
  const ShardingRules &rules = ShardingRules::get();
  if (!rules.supports(n.opString()))
    return stopFollowing();
  auto decided = decisions_.decide(rules, n, specs, mesh_);
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
      shards_[results[i]] = normalized(*decision.resultPlacements[i], results[i]->meta()->rank());
    else
      shards_[results[i]] = std::nullopt;
  }
  return llvm::Error::success();
}

/// view(x, [.., -1, ..]) on a local shard infers the -1 from the shard's element count. Export
/// keeps the -1 of `Tensor.view`, so the other sizes are the ones the code wrote (reshape's are
/// resolved by then: not checked). A count that does not divide is torch's InferSize error.
llvm::Error LocalShards::checkView(const Node &n, const Value *x, const Placements &have) const {
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
  return forEachMeshCoordinate(mesh_, [&](llvm::ArrayRef<int64_t> coord) -> llvm::Error {
    int64_t numel = numelOf(localShape(global, have, mesh_, coord));
    if (numel % known != 0)
      return makeError("{}: '{}' is a local shard ({} of [{}] on {}, handed back by a style's use_local_output); "
                       "on the rank at mesh coordinate [{}] it holds {} elements, which torch cannot view as [{}] "
                       "(it raises \"shape '[{}]' is invalid for input of size {}\")",
                       n.where(), x->name(), str(have), fmt::join(global, ", "), mesh_.str(),
                       fmt::join(coord, ", "), numel, fmt::join(*sizes, ", "), fmt::join(*sizes, ", "), numel);
    return llvm::Error::success();
  });
}

llvm::Error LocalShards::fromLocal(const Node &n, const Value *x, const Placements &placements) const {
  auto it = shards_.find(x);
  if (it == shards_.end() || !it->second || !x->meta())
    return llvm::Error::success();
  const Placements &have = *it->second;
  llvm::SmallVector<int64_t, 4> global = sizesOf(*x->meta());
  Placements to = normalized(placements, x->meta()->rank());
  return forEachMeshCoordinate(mesh_, [&](llvm::ArrayRef<int64_t> coord) -> llvm::Error {
    llvm::SmallVector<int64_t, 4> local = localShape(global, have, mesh_, coord), inferred = local;
    // DTensor.from_local without `shape` (compute_global_tensor_info): each Shard dim is the
    // local size times its mesh dim's size.
    for (size_t m = 0; m < to.size() && m < mesh_.ndim(); ++m)
      if (to[m].isShard() && to[m].dim >= 0 && static_cast<size_t>(to[m].dim) < inferred.size())
        inferred[to[m].dim] *= mesh_.shape[m];
    if (inferred != global)
      return makeError("{}: DTensor.from_local of '{}' as {} infers the global shape [{}] on the rank at mesh "
                       "coordinate [{}], not the program's [{}]: '{}' is a local shard ([{}] there; {} of [{}] on {}, "
                       "handed back by a style's use_local_output), so the run's shapes differ from the program's "
                       "and its next DTensor op raises or communicates other bytes",
                       n.where(), x->name(), str(to), fmt::join(inferred, ", "), fmt::join(coord, ", "),
                       fmt::join(global, ", "), x->name(), fmt::join(local, ", "), str(have), fmt::join(global, ", "),
                       mesh_.str());
    return llvm::Error::success();
  });
}

} // namespace commlens
