#pragma once
// ModuleCalls: the calls of modules in a forward graph (which nodes each call ran, in which order,
// which tensors it read from outside and which it produced for outside). Plan application and
// autodiff both need it, on the program and on the parallelised graph.

#include "ir/Graph.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <vector>

namespace commlens {

/// One call of a module: the nodes it and its submodules ran, in graph order.
struct ModuleCall {
  const ModuleScope *scope = nullptr;
  unsigned scopeDepth = 0; ///< scope->depth()
  /// Call numbers of the module and its ancestors, outermost first (a prefix of its nodes' call
  /// paths); empty for the root, which is called once.
  llvm::SmallVector<unsigned, 4> callPath;
  unsigned first = 0, last = 0; ///< graph indices of its first and last node
  /// Tensors computed inside and read outside the call (or returned by the graph), in graph order.
  std::vector<const Value *> outputs;

  /// The module's N-th call (`fqn@N` in the program's call signatures).
  unsigned number() const { return callPath.empty() ? 0 : callPath.back(); }
  /// Whether the node (of the call's graph) ran in this call, in the module or a submodule: its
  /// scope is at or below the module and its call path goes through this call. A test rather
  /// than a set of the nodes: every node is in the calls of all its modules.
  bool contains(const Node &n) const {
    if (n.index() < first || n.index() > last)
      return false;
    const ModuleScope *s = n.scope();
    while (s && s != scope)
      s = s->parent();
    llvm::ArrayRef<unsigned> path = n.callPath();
    return s && path.take_front(std::min<size_t>(scopeDepth, path.size())) == llvm::ArrayRef<unsigned>(callPath);
  }
};

class ModuleCalls {
public:
  /// The calls of every module `wanted` accepts, in the order of their first node.
  ModuleCalls(const Graph &graph, llvm::function_ref<bool(const ModuleScope *)> wanted);

  std::vector<ModuleCall> &calls() { return calls_; }

  /// Tensors the call's nodes from graph index `from` on read and that nothing in the call at or
  /// after `from` computed, in order of first use, leaving out those `skip` accepts.
  std::vector<const Value *> externalTensors(const ModuleCall &call, unsigned from,
                                             llvm::function_ref<bool(const Value *)> skip) const;

private:
  const Graph &graph_;
  std::vector<ModuleCall> calls_;
};

} // namespace commlens
