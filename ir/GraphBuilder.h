// Builds a rewritten copy of a graph: passes copy the nodes they keep, emit replacements for
// the ones they rewrite, and bind old values to new ones. The new graph shares the module-scope
// tree, so scopes (and CommDebugMode names) survive every pass.
#pragma once

#include "ir/Graph.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <memory>

namespace commlens {

/// `arg` with every value it holds replaced by `fn(value)`.
Argument mapArgument(const Argument &arg, llvm::function_ref<Value *(const Value *)> fn);
/// Appends a copy of `node` (op, arguments, metadata, scope, call path, grad mode) to `dst`,
/// named `name`: operands read through `operand`, each result replaced by `result(old)`.
Node *copyNodeInto(Graph &dst, const Node &node, llvm::StringRef name,
                   llvm::function_ref<Value *(const Value *)> operand,
                   llvm::function_ref<Value *(const Value *)> result);

class GraphBuilder {
public:
  /// Starts a graph holding `src`'s inputs (same names and metadata), on `src`'s module-scope
  /// tree unless given another.
  explicit GraphBuilder(const Graph &src, std::shared_ptr<ModuleScopeTree> scopes = nullptr);

  /// The new value an old value maps to (itself mapped through bind()).
  Value *map(const Value *old) const;
  Argument map(const Argument &old) const;
  /// From now on, uses of `old` read `replacement`.
  void bind(const Value *old, Value *replacement) { map_[old] = replacement; }

  /// Copies `node` with mapped arguments and fresh results of the same names and metadata.
  Node *copy(const Node &node);
  /// A fresh value with `old`'s name, kind, metadata and symbol, and uses of `old` read it (what
  /// copy() makes of each result).
  Value *copyValue(const Value *old);
  /// A fresh tensor value named after `hint` (uniquified).
  Value *tensor(llvm::StringRef hint, TensorMeta meta);
  /// Appends a node in the scope, call and grad mode of `origin`.
  Node *emit(llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> &&inputs, llvm::SmallVector<Argument, 1> &&outputs,
             const Node &origin);

  Graph &graph() { return *dst_; }
  /// Maps the source's outputs and hands the graph over.
  std::unique_ptr<Graph> finish();

private:
  const Graph &src_;
  std::unique_ptr<Graph> dst_;
  llvm::DenseMap<const Value *, Value *> map_;
};

/// A deep copy of `src`: its graph, values and module-scope tree are the copy's own (passes rewrite
/// them), everything else the archive said is copied. `commlens rank` decodes a program once and
/// predicts each plan on a copy.
std::unique_ptr<ExportedProgram> cloneProgram(const ExportedProgram &src);

} // namespace commlens
