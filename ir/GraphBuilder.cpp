#include "ir/GraphBuilder.h"

namespace commlens {

GraphBuilder::GraphBuilder(const Graph &src) : src_(src), dst_(std::make_unique<Graph>(src.sharedScopes())) {
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

Argument GraphBuilder::map(const Argument &old) const {
  Argument out = old;
  std::visit(
      [&](auto &x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Value *>)
          x = map(x);
        else if constexpr (std::is_same_v<T, TensorList>)
          for (Value *&v : x)
            v = map(v);
        else if constexpr (std::is_same_v<T, OptionalTensorList>)
          for (Value *&v : x.items)
            v = map(v);
        else if constexpr (std::is_same_v<T, SymIntArg> || std::is_same_v<T, SymBoolArg> ||
                           std::is_same_v<T, SymFloatArg>)
          x.value = map(x.value);
        else if constexpr (std::is_same_v<T, SymIntList>)
          for (SymIntArg &s : x)
            s.value = map(s.value);
      },
      out.storage());
  return out;
}

Node *GraphBuilder::copy(const Node &node) {
  llvm::SmallVector<NamedArgument, 4> inputs;
  for (const NamedArgument &a : node.inputs())
    inputs.push_back({a.name, map(a.value), a.keyword});
  auto fresh = [&](const Value *old) {
    Value *v = dst_->createValue(old->name(), old->kind());
    if (old->meta())
      v->setMeta(*old->meta());
    v->setSymbol(old->symbol());
    map_[old] = v;
    return v;
  };
  llvm::SmallVector<Argument, 1> outputs;
  for (const Argument &out : node.outputs()) {
    Argument o = out;
    std::visit(
        [&](auto &x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, Value *>)
            x = fresh(x);
          else if constexpr (std::is_same_v<T, TensorList>)
            for (Value *&v : x)
              v = fresh(v);
          else if constexpr (std::is_same_v<T, OptionalTensorList>)
            for (Value *&v : x.items)
              v = v ? fresh(v) : nullptr;
          else if constexpr (std::is_same_v<T, SymIntArg> || std::is_same_v<T, SymBoolArg> ||
                             std::is_same_v<T, SymFloatArg>)
            x.value = x.value ? fresh(x.value) : nullptr;
        },
        o.storage());
    outputs.push_back(std::move(o));
  }
  llvm::StringMap<std::string> metadata;
  for (const auto &kv : node.metadata())
    metadata[kv.getKey()] = kv.getValue();
  Node *n = dst_->appendNode(node.name(), node.opString(), std::move(inputs), std::move(outputs), std::move(metadata));
  n->setScope(node.scope(), llvm::SmallVector<unsigned, 4>(node.callPath().begin(), node.callPath().end()));
  n->setGradEnabled(node.gradEnabled());
  return n;
}

Value *GraphBuilder::tensor(llvm::StringRef hint, TensorMeta meta) {
  Value *v = dst_->createUniqueValue(hint, ValueKind::Tensor);
  v->setMeta(std::move(meta));
  return v;
}

Node *GraphBuilder::emit(llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> inputs,
                         llvm::SmallVector<Argument, 1> outputs, const Node &origin) {
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
    dst_->callSignatures().push_back(std::move(s));
  }
  for (const OutputSpec &out : src_.outputs()) {
    OutputSpec o = out;
    o.value = map(out.value);
    dst_->outputs().push_back(std::move(o));
  }
  return std::move(dst_);
}

} // namespace commlens
