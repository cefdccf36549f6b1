#include "ir/ModuleScopeTree.h"

#include "llvm/ADT/STLExtras.h"

namespace commlens {

unsigned ModuleScope::depth() const {
  unsigned d = 0;
  for (const ModuleScope *p = parent_; p; p = p->parent_)
    ++d;
  return d;
}

bool ModuleScope::isAncestorOf(const ModuleScope *other) const {
  for (const ModuleScope *p = other ? other->parent_ : nullptr; p; p = p->parent_)
    if (p == this)
      return true;
  return false;
}

ModuleScopeTree::ModuleScopeTree() {
  storage_.push_back(std::make_unique<ModuleScope>());
  root_ = storage_.back().get();
  root_->numCalls_ = 1;
  order_.push_back(root_);
  setName(root_);
}

std::unique_ptr<ModuleScopeTree>
ModuleScopeTree::clone(llvm::DenseMap<const ModuleScope *, ModuleScope *> &copyOf) const {
  auto out = std::make_unique<ModuleScopeTree>();
  out->storage_.clear();
  out->order_.clear();
  for (const std::unique_ptr<ModuleScope> &s : storage_) {
    out->storage_.push_back(std::make_unique<ModuleScope>(*s));
    copyOf[s.get()] = out->storage_.back().get();
  }
  for (const std::unique_ptr<ModuleScope> &s : out->storage_) {
    s->parent_ = s->parent_ ? copyOf[s->parent_] : nullptr;
    for (ModuleScope *&child : s->children_)
      child = copyOf[child];
  }
  for (ModuleScope *s : order_)
    out->order_.push_back(copyOf[s]);
  out->root_ = copyOf[root_];
  for (const auto &[key, s] : byParentAndPath_)
    out->byParentAndPath_.emplace(std::make_pair(copyOf[key.first], key.second), copyOf[s]);
  return out;
}

void ModuleScopeTree::setRootType(llvm::StringRef type) {
  root_->type_ = type.str();
  // Every display name starts with the root's class name.
  for (ModuleScope *s : order_)
    setName(s);
}

void ModuleScopeTree::setType(ModuleScope *s, llvm::StringRef type) {
  if (s == root_)
    setRootType(type);
  else
    s->type_ = type.str();
}

void ModuleScopeTree::setName(ModuleScope *s) {
  llvm::StringRef rootType = root_->type_;
  llvm::StringRef rootClass = rootType.rsplit('.').second.empty() ? rootType : rootType.rsplit('.').second;
  if (rootClass.empty())
    rootClass = "Module";
  s->displayName_ = s->path_.empty() ? rootClass.str() : rootClass.str() + "." + s->path_;
}

ModuleScope *ModuleScopeTree::getOrCreate(llvm::ArrayRef<ModuleStackEntry> stack) {
  ModuleScope *cur = root_;
  for (const ModuleStackEntry &e : stack) {
    if (e.path.empty()) { // the root itself
      if (root_->type_.empty() && !e.type.empty())
        setRootType(e.type);
      continue;
    }
    auto key = std::make_pair(static_cast<const ModuleScope *>(cur), e.path);
    auto it = byParentAndPath_.find(key);
    ModuleScope *next;
    if (it != byParentAndPath_.end()) {
      next = it->second;
    } else {
      storage_.push_back(std::make_unique<ModuleScope>());
      next = storage_.back().get();
      next->path_ = e.path;
      next->type_ = e.type;
      next->parent_ = cur;
      next->forwardIndex_ = static_cast<unsigned>(order_.size());
      cur->children_.push_back(next);
      order_.push_back(next);
      byParentAndPath_.emplace(key, next);
      setName(next);
    }
    next->numCalls_ = std::max(next->numCalls_, e.callIndex + 1);
    cur = next;
  }
  return cur;
}

ModuleScope *ModuleScopeTree::insertWithoutOps(ModuleScope *parent, llvm::StringRef path, llvm::StringRef type,
                                               unsigned forwardIndex, unsigned numCalls) {
  storage_.push_back(std::make_unique<ModuleScope>());
  ModuleScope *s = storage_.back().get();
  s->path_ = path.str();
  s->type_ = type.str();
  s->parent_ = parent;
  s->numCalls_ = numCalls;
  order_.insert(order_.begin() + std::min<size_t>(forwardIndex, order_.size()), s);
  for (unsigned i = 0; i < order_.size(); ++i)
    order_[i]->forwardIndex_ = i;
  auto sibling = llvm::find_if(parent->children_, [&](ModuleScope *c) { return c->forwardIndex_ > s->forwardIndex_; });
  parent->children_.insert(sibling, s);
  byParentAndPath_.emplace(std::make_pair(static_cast<const ModuleScope *>(parent), s->path_), s);
  setName(s);
  return s;
}

ModuleScope *ModuleScopeTree::wrap(ModuleScope *s, llvm::StringRef wrapperType, llvm::StringRef attr) {
  storage_.push_back(std::make_unique<ModuleScope>());
  ModuleScope *w = storage_.back().get();
  w->path_ = s->path_;
  w->type_ = wrapperType.str();
  w->parent_ = s->parent_;
  w->numCalls_ = s->numCalls_;
  w->children_.push_back(s);
  if (ModuleScope *p = s->parent_)
    *llvm::find(p->children_, s) = w;
  s->parent_ = w;
  order_.insert(llvm::find(order_, s), w);
  for (unsigned i = 0; i < order_.size(); ++i)
    order_[i]->forwardIndex_ = i;
  // Paths below the wrapper gain the attribute.
  std::string oldPrefix = s->path_, newPrefix = s->path_ + "." + attr.str();
  for (ModuleScope *x : order_)
    if (x == s || s->isAncestorOf(x)) {
      x->path_ = newPrefix + x->path_.substr(oldPrefix.size());
      setName(x);
    }
  setName(w);
  byParentAndPath_.clear();
  for (ModuleScope *x : order_)
    if (x->parent_)
      byParentAndPath_.emplace(std::make_pair(static_cast<const ModuleScope *>(x->parent_), x->path_), x);
  return w;
}

ModuleScope *ModuleScopeTree::lookup(llvm::StringRef displayOrPath) const {
  for (ModuleScope *s : order_)
    if (s->displayName_ == displayOrPath || (!s->path_.empty() && s->path_ == displayOrPath))
      return s;
  return nullptr;
}

} // namespace commlens
