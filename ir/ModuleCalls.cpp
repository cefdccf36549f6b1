#include "ir/ModuleCalls.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <algorithm>
#include <map>

namespace commlens {

ModuleCalls::ModuleCalls(const Graph &graph, llvm::function_ref<bool(const ModuleScope *)> wanted) : graph_(graph) {
  std::map<std::pair<const ModuleScope *, llvm::SmallVector<unsigned, 4>>, size_t> index;
  // Consecutive nodes mostly run in the same calls: a node with its predecessor's scope and
  // call path joins the calls the predecessor joined, without finding them again.
  const Node *previous = nullptr;
  llvm::SmallVector<size_t, 8> joined;
  for (const auto &n : graph.nodes()) {
    if (!previous || n->scope() != previous->scope() || n->callPath() != previous->callPath()) {
      joined.clear();
      for (const ModuleScope *s = n->scope(); s; s = s->parent()) {
        if (!wanted(s))
          continue;
        llvm::ArrayRef<unsigned> path = n->callPath();
        llvm::ArrayRef<unsigned> own = path.take_front(std::min<size_t>(s->depth(), path.size()));
        auto [it, fresh] = index.try_emplace({s, llvm::SmallVector<unsigned, 4>(own.begin(), own.end())}, calls_.size());
        if (fresh) {
          calls_.emplace_back();
          calls_.back().scope = s;
          calls_.back().scopeDepth = s->depth();
          calls_.back().callPath.assign(own.begin(), own.end());
          calls_.back().first = n->index();
        }
        joined.push_back(it->second);
      }
      previous = n.get();
    }
    for (size_t call : joined)
      calls_[call].last = n->index();
  }
  llvm::DenseMap<const Value *, llvm::SmallVector<const Node *, 2>> users;
  for (const auto &n : graph.nodes())
    n->forEachOperand([&](Value *v) { users[v].push_back(n.get()); });
  llvm::DenseSet<const Value *> graphOutputs;
  for (const OutputSpec &o : graph.outputs())
    for (Value *v : o.value.tensors())
      graphOutputs.insert(v);
  for (ModuleCall &c : calls_)
    for (unsigned i = c.first; i <= c.last; ++i) {
      const Node &n = *graph.nodes()[i];
      if (!c.contains(n))
        continue;
      for (Value *v : n.results()) {
        if (v->kind() != ValueKind::Tensor)
          continue;
        bool escapes = graphOutputs.count(v);
        if (auto it = users.find(v); it != users.end())
          escapes |= llvm::any_of(it->second, [&](const Node *u) { return !c.contains(*u); });
        if (escapes)
          c.outputs.push_back(v);
      }
    }
}

std::vector<const Value *> ModuleCalls::externalTensors(const ModuleCall &c, unsigned from,
                                                        llvm::function_ref<bool(const Value *)> skip) const {
  std::vector<const Value *> tensors;
  llvm::DenseSet<const Value *> seen;
  for (unsigned i = std::max(from, c.first); i <= c.last; ++i) {
    const Node &n = *graph_.nodes()[i];
    if (!c.contains(n))
      continue;
    n.forEachOperand([&](Value *v) {
      if (v->kind() != ValueKind::Tensor || seen.count(v))
        return;
      const Node *p = v->producer();
      if ((p && c.contains(*p) && p->index() >= from) || skip(v))
        return;
      seen.insert(v);
      tensors.push_back(v);
    });
  }
  return tensors;
}

} // namespace commlens
