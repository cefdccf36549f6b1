#include "fsdp/FullyShard.h"

#include "ir/Error.h"
#include "ir/TensorMetaUtils.h"
#include "dtensor/RedistributePlanner.h"

#include "llvm/ADT/StringSet.h"

#include <map>

namespace commlens {
namespace {

/// The class fully_shard swaps in (torch 2.13 _fsdp_init.py builds it with type()).
std::string fsdpClassOf(llvm::StringRef type) {
  llvm::StringRef cls = type.rsplit('.').second.empty() ? type : type.rsplit('.').second;
  return ("torch.distributed.fsdp._fully_shard._fsdp_init.FSDP" + cls).str();
}

bool under(llvm::StringRef path, llvm::StringRef modulePath) {
  return modulePath.empty() || path.startswith((modulePath + ".").str());
}

const char *kAllGather = "c10d._allgather_base_";
const char *kReduceScatter = "c10d._reduce_scatter_base_";
const char *kAllReduce = "c10d.allreduce_";

} // namespace

llvm::Expected<std::vector<FsdpUnit>>
resolveFsdpUnits(const ShardingPlan &plan, Graph &graph,
                 const llvm::DenseMap<const Value *, DTensorLayout> &tpPlacements,
                 llvm::ArrayRef<DTensorMesh> dtensorMeshes) {
  std::vector<FsdpUnit> units;
  std::map<const ModuleScope *, std::string> taken;
  for (const FullyShardUnit &spec : plan.fullyShard) {
    auto unitOf = [&](std::vector<const ModuleScope *> members) {
      FsdpUnit u;
      u.members = std::move(members);
      u.spec = &spec;
      u.shardDims = spec.meshDims.back();
      u.shardSize = plan.mesh.groupSize(u.shardDims);
      if (spec.meshDims.size() == 2)
        u.replicateDims = spec.meshDims.front();
      u.regatherGroupSize = spec.reshard == FullyShardUnit::Reshard::ToGroup ? spec.reshardGroupSize : u.shardSize;
      return u;
    };
    // A pattern is one call per module it matches; a list is one call on all of them.
    std::vector<const ModuleScope *> listMembers;
    for (const std::string &pattern : spec.patterns()) {
      bool matched = false;
      for (ModuleScope *s : graph.scopes().inForwardOrder()) {
        if (!matchesModulePath(pattern, s->path()))
          continue;
        matched = true;
        if (auto [it, fresh] = taken.emplace(s, spec.pattern); !fresh)
          return makeError("fully_shard '{}' on {}: the module is already sharded by '{}'", spec.pattern,
                           s->displayName(), it->second);
        // A list unit's hooks count its modules' calls to find the group's first and last.
        if (s->numCalls() > 1 && !spec.listPatterns.empty())
          return makeError("fully_shard '{}' on {}: the module is called {} times (a list unit whose modules are "
                           "called more than once is not supported yet)",
                           spec.pattern, s->displayName(), s->numCalls());
        if (spec.listPatterns.empty())
          units.push_back(unitOf({s}));
        else
          listMembers.push_back(s);
      }
      if (!matched)
        return makeError("fully_shard pattern '{}' matches no module that runs in the exported program", pattern);
    }
    if (!listMembers.empty()) {
      llvm::stable_sort(listMembers, [](const ModuleScope *a, const ModuleScope *b) {
        return a->forwardIndex() < b->forwardIndex();
      });
      units.push_back(unitOf(std::move(listMembers)));
    }
  }
  // Roots (FSDPState._lazy_init): a unit no other unit encloses is the root of its own state
  // context: every unit it encloses shares its post-forward order and its final callback, and by
  // default it does not reshard after forward. Units beside each other with no common enclosing
  // unit (every Linear its own fully_shard) are separate roots.
  for (FsdpUnit &u : units) {
    u.root = static_cast<unsigned>(&u - units.data());
    for (const ModuleScope *s = u.scope()->parent(); s; s = s->parent())
      if (auto it = llvm::find_if(units, [&](const FsdpUnit &t) { return t.isMember(s); }); it != units.end())
        u.root = static_cast<unsigned>(it - units.begin()); // the outermost enclosing unit wins
    bool isRoot = u.root == static_cast<unsigned>(&u - units.data());
    u.reshardAfterForward = u.spec->reshard == FullyShardUnit::Reshard::Default
                                ? !isRoot
                                : u.spec->reshard != FullyShardUnit::Reshard::No;
  }
  // Parameters: those below the unit's module that no nested unit manages. Tied parameters are
  // one nn.Parameter (managed once, by the first unit that reaches them in named_parameters
  // order) unless tensor parallelism re-registered them as DTensors.
  llvm::StringSet<> seenTied;
  std::vector<llvm::StringSet<>> shardDimsFound(units.size()); // per unit: the shard_dims keys it has
  for (const InputSpec &in : graph.inputs()) {
    if (in.kind != InputKind::Parameter || !in.value)
      continue;
    // The unit of the innermost module holding it (units match the wrapped tree).
    FsdpUnit *owner = nullptr;
    const ModuleScope *ownerModule = nullptr;
    std::string path = pathAfterCheckpointWrappers(plan, in.target);
    for (FsdpUnit &u : units)
      for (const ModuleScope *m : u.members)
        if (under(path, m->path()) && (!owner || m->path().size() > ownerModule->path().size())) {
          owner = &u;
          ownerModule = m;
        }
    if (!owner)
      continue;
    if (!tpPlacements.count(in.value)) {
      std::string canonical = in.aliasOf.empty() ? in.target : in.aliasOf;
      if (!seenTied.insert(canonical).second)
        continue;
    }
    owner->params.push_back(in.value);
    llvm::StringRef local = llvm::StringRef(path).drop_front(ownerModule->path().empty() ? 0 : ownerModule->path().size() + 1);
    if (auto dim = owner->spec->shardDims.find(local); dim != owner->spec->shardDims.end()) {
      // FSDPParam._init_sharded_param (torch 2.13 _fsdp_param.py)
      const TensorMeta &meta = *in.value->meta();
      if (dim->second >= static_cast<int64_t>(meta.sizes.size()))
        return makeError("fully_shard '{}' on {}: shard dim {} of parameter '{}' is invalid for its {}-D shape {} "
                         "(FSDP raises)",
                         owner->spec->pattern, owner->label(), dim->second, in.target, meta.sizes.size(), meta.str());
      if (tpPlacements.count(in.value))
        return makeError("fully_shard '{}' on {}: shard dim {} of parameter '{}', a tensor-parallel DTensor, is not "
                         "modelled",
                         owner->spec->pattern, owner->label(), dim->second, in.target);
      if (sizesOf(meta)[dim->second] % owner->shardSize != 0)
        return makeError("fully_shard '{}' on {}: parameter '{}' {} does not split evenly on dim {} over {} ranks "
                         "(FSDP raises: it does not support uneven sharding on a dim other than 0)",
                         owner->spec->pattern, owner->label(), in.target, meta.str(), dim->second, owner->shardSize);
      owner->shardDimOf[in.value] = dim->second;
      shardDimsFound[owner - units.data()].insert(local);
    }
  }
  for (const FsdpUnit &u : units)
    for (const auto &entry : u.spec->shardDims)
      if (!shardDimsFound[&u - units.data()].contains(entry.first))
        return makeError("fully_shard '{}' on {}: shard_dims names '{}', which is not a parameter the unit manages",
                         u.spec->pattern, u.label(), entry.first);
  // Prefetch targets name modules that fully_shard wrapped.
  for (FsdpUnit &u : units)
    for (auto [key, paths, out] : {std::tuple{"forward_prefetch", &u.spec->forwardPrefetch, &u.forwardPrefetch},
                                   std::tuple{"backward_prefetch", &u.spec->backwardPrefetch, &u.backwardPrefetch}})
      for (const std::string &path : *paths) {
        auto target = llvm::find_if(units, [&](const FsdpUnit &t) {
          return llvm::any_of(t.members, [&](const ModuleScope *m) { return m->path() == path; });
        });
        if (target == units.end())
          return makeError("fully_shard '{}' on {}: {} target '{}' is not a module fully_shard wrapped", u.spec->pattern,
                           u.label(), key, path);
        out->push_back(static_cast<unsigned>(target - units.begin()));
      }
  for (FsdpUnit &u : units) {
    // A plan may give FSDP the mesh dim of an expert-parallel style (frontends/PlanReader), whose
    // parameters then need a unit on another mesh: FSDP cannot shard a DTensor on its own dim.
    // (Explicit placements come after fully_shard, with their own error.)
    for (const Value *p : u.params)
      if (auto it = tpPlacements.find(p); it != tpPlacements.end()) {
        const auto &dims = dtensorMeshes[it->second.mesh].planDims;
        if (llvm::none_of(plan.steps, [&](const ParallelizeStep &step) { return llvm::equal(step.subMeshDims(), dims); }))
          continue; // explicitly placed
        for (const MeshDimGroup &group : dims)
          if (llvm::any_of(group, [&](unsigned d) {
                return llvm::is_contained(u.shardDims, d) || llvm::is_contained(u.replicateDims, d);
              }))
            return makeError("fully_shard '{}' on {}: parameter '{}' is a DTensor on mesh dim '{}', the unit's own "
                             "(give its module a fully_shard unit on another mesh dim)",
                             u.spec->pattern, u.label(), p->name(), plan.mesh.groupName(group));
      }
    // FSDPParam refuses it (torch 2.13 _fsdp_param.py, NotImplementedError).
    if (u.spec->reshard == FullyShardUnit::Reshard::ToGroup)
      for (const Value *p : u.params)
        if (tpPlacements.count(p))
          return makeError("fully_shard '{}' on {}: reshard_after_forward={} with tensor-parallel (DTensor) "
                           "parameters is not supported by torch 2.13 (\"Resharding to smaller mesh is not supported "
                           "for DTensor parameters yet\")",
                           u.spec->pattern, u.label(), u.spec->reshardGroupSize);
    for (const ModuleScope *m : u.members)
      graph.scopes().setType(const_cast<ModuleScope *>(m), fsdpClassOf(m->type()));
  }
  return units;
}

llvm::SmallVector<int64_t, 4> FsdpRuntime::localSizes(const Value *param) const {
  llvm::SmallVector<int64_t, 4> sizes = sizesOf(*param->meta());
  if (const DTensorLayout *l = prediction_.layout(param))
    return rank0LocalShape(prediction_.dtensorMeshes[l->mesh].mesh, sizes, normalized(l->placements, sizes.size()));
  return sizes;
}

int64_t FsdpRuntime::shardNumel(const FsdpUnit &unit, const Value *param, int64_t parts) const {
  auto sizes = localSizes(param);
  if (sizes.empty())
    return 1;
  size_t dim = static_cast<size_t>(unit.shardDimOf.lookup(param));
  int64_t numel = (sizes[dim] + parts - 1) / parts; // dim 0 padded; any other splits evenly
  for (size_t i = 0; i < sizes.size(); ++i)
    if (i != dim)
      numel *= sizes[i];
  return numel;
}

void FsdpRuntime::unshard(unsigned index, const Node &at, Phase phase, const std::string &why) {
  const FsdpUnit &u = state_.units[index];
  if (!u.hasGroup() || progress(index).unsharded)
    return;
  progress(index).unsharded = true;
  // A unit resharded after forward gathers on its post-forward group (reshard_after_forward=int):
  // in backward, or at the next call of a unit called twice.
  int64_t group = progress(index).shardedPostForward ? u.regatherGroupSize : u.shardSize;
  if (group == 1)
    return; // unshard() skips the all-gather for a world of one
  int64_t bytes = 0;
  for (const Value *p : u.params)
    bytes += shardNumel(u, p, group) * elementSize(u.spec->paramDtype.value_or(p->meta()->dtype));
  CollectiveRecord r;
  r.opKey = kAllGather;
  r.phase = phase;
  r.module = at.scope();
  r.node = &at;
  r.argument = fmt::format("{} parameters of {}", u.params.size(), u.label());
  r.meshDims = u.shardDims;
  r.src = Placement::shard(0);
  r.dst = Placement::replicate();
  r.fromPlacements = {Placement::shard(0)};
  r.toPlacements = {Placement::replicate()};
  r.bytesPerRank = bytes;
  r.why = why;
  record(std::move(r));
}

void FsdpRuntime::preForward(unsigned unit, const Node &at) {
  // A list unit's pre-hook runs on each of its modules (unsharding once); forward prefetch is
  // one-shot, on the first (torch 2.13 FSDPState._pre_forward).
  bool firstInPass = progress(unit).membersEntered++ == 0;
  std::string name = state_.units[unit].label();
  unshard(unit, at, Phase::Forward, fmt::format("FSDP pre-forward of {} all-gathers its parameters", name));
  if (firstInPass)
    for (unsigned target : state_.units[unit].forwardPrefetch)
      unshard(target, at, Phase::Forward,
              fmt::format("FSDP pre-forward of {} prefetches {}'s parameters (set_modules_to_forward_prefetch)",
                          name, state_.units[target].label()));
}

void FsdpRuntime::postForward(unsigned unit) {
  const FsdpUnit &u = state_.units[unit];
  // A list unit's post-forward runs once, when its last module completes the group.
  if (++progress(unit).membersForwarded < u.members.size())
    return;
  progress(unit).membersEntered = progress(unit).membersForwarded = 0;
  if (!u.hasGroup())
    return;
  if (u.reshardAfterForward) {
    progress(unit).unsharded = false;
    progress(unit).shardedPostForward = true;
  }
  std::vector<unsigned> &order = state_.postForwardOrder[u.root];
  progress(unit).postForwardIndices.push_back(static_cast<unsigned>(order.size()));
  order.push_back(unit);
}

void FsdpRuntime::preBackward(unsigned unit, const Node &at) {
  const FsdpUnit &u = state_.units[unit];
  if (!u.hasGroup())
    return;
  std::string name = u.label();
  unshard(unit, at, Phase::Backward, fmt::format("FSDP pre-backward of {} re-gathers its parameters", name));
  if (!u.backwardPrefetch.empty()) { // set_modules_to_backward_prefetch replaces the default
    for (unsigned target : u.backwardPrefetch)
      unshard(target, at, Phase::Backward,
              fmt::format("FSDP pre-backward of {} prefetches {}'s parameters (set_modules_to_backward_prefetch)",
                          name, state_.units[target].label()));
    return;
  }
  // The default backward prefetch: the unit before this call in its root's post-forward order
  // (each root's FSDPCommContext keeps its own).
  if (progress(unit).postForwardIndices.empty())
    return;
  unsigned current = progress(unit).postForwardIndices.pop_back_val();
  if (current == 0)
    return;
  unsigned target = state_.postForwardOrder[u.root][current - 1];
  unshard(target, at, Phase::Backward,
          fmt::format("FSDP pre-backward of {} prefetches {}'s parameters", name, state_.units[target].label()));
}

bool FsdpRuntime::reducesGradients(unsigned unit) const {
  const FsdpUnit &u = state_.units[unit];
  return u.hasGroup() && u.spec->requiresGradientSync;
}

void FsdpRuntime::reduceGradients(unsigned unit, const Node &at, llvm::ArrayRef<const Value *> params) {
  const FsdpUnit &u = state_.units[unit];
  bool reduce = reducesGradients(unit);
  if (!u.hasGroup())
    return;
  progress(unit).unsharded = false; // reshard_after_backward, onto the whole group
  progress(unit).shardedPostForward = false;
  if (params.empty() || !reduce)
    return;
  std::string name = u.label();
  // foreach_reduce packs only the gradients the parameters received (a frozen one has none)
  int64_t inputBytes = 0, outputBytes = 0;
  for (const Value *p : params) {
    int64_t elem = elementSize(u.spec->reduceDtype.value_or(u.spec->paramDtype.value_or(p->meta()->dtype)));
    int64_t shard = shardNumel(u, p, u.shardSize);
    inputBytes += shard * u.shardSize * elem;
    outputBytes += shard * elem;
  }
  auto make = [&](const char *op, const MeshDimGroup &dims, Placement src, Placement dst, int64_t bytes, std::string why) {
    CollectiveRecord r;
    r.opKey = op;
    r.phase = Phase::Backward;
    r.module = at.scope();
    r.node = &at;
    r.argument = fmt::format("{} gradients of {}", params.size(), name);
    r.meshDims = dims;
    r.src = src;
    r.dst = dst;
    r.fromPlacements = {src};
    r.toPlacements = {dst};
    r.bytesPerRank = bytes;
    r.why = std::move(why);
    record(std::move(r));
  };
  if (u.shardSize > 1) // foreach_reduce skips the reduce-scatter for a world of one
    make(kReduceScatter, u.shardDims, Placement::partial(), Placement::shard(0), inputBytes,
         fmt::format("FSDP post-backward of {} reduce-scatters its gradients", name));
  if (!u.replicateDims.empty() && u.spec->requiresAllReduce)
    make(kAllReduce, u.replicateDims, Placement::partial(), Placement::replicate(), outputBytes,
         fmt::format("HSDP post-backward of {} all-reduces its gradient shards over the replicate group", name));
}

} // namespace commlens
