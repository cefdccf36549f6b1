#include "ir/GraphBuilder.h"

namespace commlens {

GraphBuilder::GraphBuilder(const Graph &src, std::shared_ptr<ModuleScopeTree> scopes)
    : src_(src), dst_(std::make_unique<Graph>(scopes ? std::move(scopes) : src.sharedScopes())) {
  dst_->reserve(src.numValues(), src.numNodes());
  map_.reserve(src.numValues());
  for (const InputSpec &in : src.inputs()) {
    InputSpec copy = in;
    if (in.value) {
      Value *v = dst_->createValue(in.value->name(), in.value->kind());
      if (in.value->meta())
        v->setMeta(*in.value->meta());
      v->setSymbol(in.value->symbol());
      map_[in.value] = v;
      copy.value = v;
    }
    dst_->inputs().push_back(std::move(copy));
  }
}

Value *GraphBuilder::map(const Value *old) const {
  if (!old)
    return nullptr;
  auto it = map_.find(old);
  assert(it != map_.end() && "value used before it was defined in the rewritten graph");
  return it->second;
}

Argument mapArgument(const Argument &arg, llvm::function_ref<Value *(const Value *)> fn) {
  Argument out = arg;
  std::visit(
      [&](auto &x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Value *>)
          x = x ? fn(x) : nullptr;
        else if constexpr (std::is_same_v<T, TensorList>)
          for (Value *&v : x)
            v = fn(v);
        else if constexpr (std::is_same_v<T, OptionalTensorList>)
          for (Value *&v : x.items)
            v = v ? fn(v) : nullptr;
        else if constexpr (std::is_same_v<T, SymIntArg> || std::is_same_v<T, SymBoolArg> ||
                           std::is_same_v<T, SymFloatArg>)
          x.value = x.value ? fn(x.value) : nullptr;
        else if constexpr (std::is_same_v<T, SymIntList>)
          for (SymIntArg &s : x)
            s.value = s.value ? fn(s.value) : nullptr;
      },
      out.storage());
  return out;
}

Node *copyNodeInto(Graph &dst, const Node &node, llvm::StringRef name,
                   llvm::function_ref<Value *(const Value *)> operand,
                   llvm::function_ref<Value *(const Value *)> result) {
  llvm::SmallVector<NamedArgument, 4> inputs;
  for (const NamedArgument &a : node.inputs())
    inputs.push_back({a.name, mapArgument(a.value, operand), a.keyword});
  llvm::SmallVector<Argument, 1> outputs;
  for (const Argument &out : node.outputs())
    outputs.push_back(mapArgument(out, result));
  Node *n = dst.appendNodeLike(name, node, std::move(inputs), std::move(outputs));
  n->setScope(node.scope(), llvm::SmallVector<unsigned, 4>(node.callPath().begin(), node.callPath().end()));
  n->setGradEnabled(node.gradEnabled());
  return n;
}

Argument GraphBuilder::map(const Argument &old) const {
  return mapArgument(old, [&](const Value *v) { return map(v); });
}

Node *GraphBuilder::copy(const Node &node) {
  return copyNodeInto(*dst_, node, node.name(), [&](const Value *v) { return map(v); },
                      [&](const Value *old) { return copyValue(old); });
}

Value *GraphBuilder::copyValue(const Value *old) {
  Value *v = dst_->createValue(old->name(), old->kind());
  if (old->meta())
    v->setMeta(*old->meta());
  v->setSymbol(old->symbol());
  map_[old] = v;
  return v;
}

Value *GraphBuilder::tensor(llvm::StringRef hint, TensorMeta meta) {
  Value *v = dst_->createUniqueValue(hint, ValueKind::Tensor);
  v->setMeta(std::move(meta));
  return v;
}

Node *GraphBuilder::emit(llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> &&inputs,
                         llvm::SmallVector<Argument, 1> &&outputs, const Node &origin) {
  std::string name;
  for (const Argument &o : outputs)
    for (Value *v : o.tensors())
      if (name.empty())
        name = v->name();
  if (name.empty())
    name = origin.name();
  Node *n = dst_->appendNode(name, op, std::move(inputs), std::move(outputs));
  n->setScope(origin.scope(), llvm::SmallVector<unsigned, 4>(origin.callPath().begin(), origin.callPath().end()));
  n->setGradEnabled(origin.gradEnabled());
  return n;
}

std::unique_ptr<Graph> GraphBuilder::finish() {
  // A call's argument that no longer exists (a pass dropped its producer) reads as None: no hook
  // can apply to it any more.
  auto mapArgument = [&](const Argument &old) {
    for (const Value *v : old.tensors())
      if (!map_.count(v))
        return Argument(NoneArg{});
    if (old.is<SymIntArg>() && old.get<SymIntArg>().value && !map_.count(old.get<SymIntArg>().value))
      return Argument(NoneArg{});
    return map(old);
  };
  for (const CallSignature &sig : src_.callSignatures()) {
    CallSignature s{sig.path, sig.call, {}, {}};
    for (const Argument &a : sig.args)
      s.args.push_back(mapArgument(a));
    for (const auto &[name, a] : sig.kwargs)
      s.kwargs.emplace_back(name, mapArgument(a));
    dst_->addCallSignature(std::move(s));
  }
  for (const OutputSpec &out : src_.outputs()) {
    OutputSpec o = out;
    o.value = map(out.value);
    dst_->outputs().push_back(std::move(o));
  }
  return std::move(dst_);
}

std::unique_ptr<ExportedProgram> cloneProgram(const ExportedProgram &src) {
  llvm::DenseMap<const ModuleScope *, ModuleScope *> scopeCopy;
  std::shared_ptr<ModuleScopeTree> scopes = src.graph().scopes().clone(scopeCopy);
  GraphBuilder b(src.graph(), scopes);
  for (const std::unique_ptr<Node> &node : src.graph().nodes()) {
    Node *n = b.copy(*node);
    n->setScope(scopeCopy.lookup(node->scope()),
                llvm::SmallVector<unsigned, 4>(node->callPath().begin(), node->callPath().end()));
  }
  auto out = std::make_unique<ExportedProgram>();
  std::unique_ptr<Graph> graph = b.finish();
  graph->uniqueCounter_ = src.graph().uniqueCounter_;
  out->replaceGraph(std::move(graph));
  out->schemaVersion = src.schemaVersion;
  out->torchVersion = src.torchVersion;
  out->verifiers = src.verifiers;
  out->weights = src.weights;
  out->tiedParametersUnknown = src.tiedParametersUnknown;
  out->autocastRegions = src.autocastRegions;
  out->decomposedForCpu = src.decomposedForCpu;
  out->modulePaths = src.modulePaths;
  out->rangeConstraints = src.rangeConstraints;
  return out;
}

} // namespace commlens
