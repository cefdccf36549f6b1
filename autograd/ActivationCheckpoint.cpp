#include "autograd/ActivationCheckpoint.h"

#include "ir/Error.h"
#include "ir/TensorMetaUtils.h"

namespace commlens {

namespace {
/// "aten.mm.default" -> {"aten", "mm", "default"}.
std::tuple<llvm::StringRef, llvm::StringRef, llvm::StringRef> splitOpName(llvm::StringRef name) {
  auto [ns, rest] = name.split('.');
  auto [op, overload] = rest.split('.');
  return {ns, op, overload};
}
} // namespace

namespace {
bool listed(const std::vector<std::string> &names, llvm::StringRef op) {
  return llvm::any_of(names, [&](const std::string &name) {
    auto [ns, base, overload] = splitOpName(name);
    return op == (ns + "::" + base + "." + overload).str();
  });
}
} // namespace

bool keptByCheckpoint(const ActivationCheckpointUnit &unit, const Node &n, llvm::StringMap<unsigned> &calls) {
  llvm::StringRef op = n.opString();
  if (!listed(unit.saveOps, op))
    return false;
  if (op == "aten::mm.default" && !unit.recomputeMmRhsShapes.empty()) {
    const Argument *rhs = n.input("mat2");
    if (rhs && rhs->isTensor() && rhs->tensor()->meta()) {
      auto sizes = sizesOf(*rhs->tensor()->meta());
      if (sizes.size() == 2 && llvm::is_contained(unit.recomputeMmRhsShapes, std::array<int64_t, 2>{sizes[0], sizes[1]}))
        return false; // forced to recompute, and not counted
    }
  }
  unsigned call = ++calls[op];
  return !(call % 2 == 0 && listed(unit.recomputeEverySecond, op));
}

std::string keptCollectives(const ActivationCheckpointUnit &unit) {
  std::string out;
  for (const std::string &name : unit.saveOps) {
    auto [ns, base, overload] = splitOpName(name);
    if (ns != "_c10d_functional" && ns != "c10d_functional")
      continue;
    out += (out.empty() ? "" : ",") + ("c10d_functional." + base).str(); // CommDebugMode's name
  }
  return out;
}

llvm::Error applyActivationCheckpointing(const ShardingPlan &plan, Graph &graph, PredictionState &state) {
  ModuleScopeTree &tree = graph.scopes();
  // Every pattern matches the model as parallelize_module left it, before any wrapper is in.
  std::vector<std::pair<ModuleScope *, const ActivationCheckpointUnit *>> matched;
  for (const ActivationCheckpointUnit &unit : plan.activationCheckpoint)
    for (ModuleScope *s : tree.inForwardOrder()) {
      if (s == tree.root() || !matchesModulePath(unit.pattern, s->path()))
        continue;
      for (const auto &[other, by] : matched)
        if (other == s || other->isAncestorOf(s) || s->isAncestorOf(other))
          return makeError("activation_checkpoint pattern '{}': module {} overlaps checkpointed module {} (nested "
                           "checkpointing is not supported)",
                           unit.pattern, s->displayName(), other->displayName());
      matched.emplace_back(s, &unit);
    }
  for (const auto &[s, unit] : matched) {
    state.checkpointed[s] = unit;
    if (!unit->wrapper)
      continue;
    // The wrapper takes the module's level of every call path below it; the module moves one
    // level down, with the same call index.
    unsigned level = s->depth() - 1;
    for (const auto &n : graph.nodes()) {
      if (n->scope() != s && !s->isAncestorOf(n->scope()))
        continue;
      llvm::SmallVector<unsigned, 4> path(n->callPath().begin(), n->callPath().end());
      if (level < path.size())
        path.insert(path.begin() + level + 1, path[level]);
      n->setScope(n->scope(), std::move(path));
    }
    tree.wrap(s, "torch.distributed.algorithms._checkpoint.checkpoint_wrapper.CheckpointWrapper",
              "_checkpoint_wrapped_module");
  }
  return llvm::Error::success();
}

} // namespace commlens
