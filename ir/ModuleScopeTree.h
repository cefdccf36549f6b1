// The tree of module calls in forward order, built from each node's nn_module_stack and named
// the way CommDebugMode names modules: the root class name, then the attribute path.
#pragma once

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace commlens {

class ModuleScope {
public:
  /// Attribute path from the root ("layers.0.attention.wq"; empty for the root).
  const std::string &path() const { return path_; }
  /// Fully qualified class name ("torch.nn.modules.linear.Linear").
  const std::string &type() const { return type_; }
  /// CommDebugMode's name: root class name plus the attribute path.
  const std::string &displayName() const { return displayName_; }
  ModuleScope *parent() const { return parent_; }
  llvm::ArrayRef<ModuleScope *> children() const { return children_; }
  /// Position in forward (pre-)order of first execution; the root is 0.
  unsigned forwardIndex() const { return forwardIndex_; }
  /// Number of distinct calls seen in the graph (highest call index + 1).
  unsigned numCalls() const { return numCalls_; }
  unsigned depth() const;
  bool isAncestorOf(const ModuleScope *other) const;

private:
  friend class ModuleScopeTree;
  std::string path_, type_, displayName_;
  ModuleScope *parent_ = nullptr;
  llvm::SmallVector<ModuleScope *, 4> children_;
  unsigned forwardIndex_ = 0;
  unsigned numCalls_ = 0;
};

/// One level of a node's module stack.
struct ModuleStackEntry {
  std::string path;
  std::string type;
  unsigned callIndex = 0;
};

class ModuleScopeTree {
public:
  ModuleScopeTree();
  /// Sets the root module's class (e.g. "__main__.Transformer").
  void setRootType(llvm::StringRef type);
  /// Gives a module a new class, as fully_shard does (it swaps in FSDP<Class>); the root's class
  /// is the first part of every display name.
  void setType(ModuleScope *s, llvm::StringRef type);
  ModuleScope *root() const { return root_; }
  /// The scope for a module stack, outermost first, creating missing scopes in forward order.
  /// The root entry (empty path) may be present or omitted.
  ModuleScope *getOrCreate(llvm::ArrayRef<ModuleStackEntry> stack);
  ModuleScope *lookup(llvm::StringRef displayOrPath) const;
  /// Puts a wrapper module of class `wrapperType` in `s`'s place, as checkpoint_wrapper does: the
  /// wrapper takes `s`'s path, parent and forward position, and `s` becomes its child attribute
  /// `attr` (every path below gains it). Returns the wrapper.
  ModuleScope *wrap(ModuleScope *s, llvm::StringRef wrapperType, llvm::StringRef attr);
  /// Adds a module that ran no op under `parent` (nn.Identity, an empty Sequential), at forward
  /// position `forwardIndex` (shifting later scopes), called `numCalls` times.
  ModuleScope *insertWithoutOps(ModuleScope *parent, llvm::StringRef path, llvm::StringRef type,
                                unsigned forwardIndex, unsigned numCalls);
  /// All scopes in forward order, root first.
  llvm::ArrayRef<ModuleScope *> inForwardOrder() const { return order_; }
  /// A deep copy; `copyOf` receives each scope's copy (passes rename and wrap scopes, so
  /// programs predicted from one decode each need their own tree).
  std::unique_ptr<ModuleScopeTree> clone(llvm::DenseMap<const ModuleScope *, ModuleScope *> &copyOf) const;

private:
  void setName(ModuleScope *s);
  std::vector<std::unique_ptr<ModuleScope>> storage_;
  std::vector<ModuleScope *> order_;
  ModuleScope *root_;
  std::map<std::pair<const ModuleScope *, std::string>, ModuleScope *> byParentAndPath_;
};

} // namespace commlens
