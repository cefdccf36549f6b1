#include "ir/Graph.h"

#include "ir/OpSchemaTable.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringMap.h"

#include <fmt/format.h>

#include <charconv>
#include <mutex>
#include <tuple>

namespace commlens {

OpName OpName::parse(llvm::StringRef target) {
  OpName op;
  llvm::StringRef rest = target;
  if (rest.consume_front("torch.ops.")) {
    auto [ns, tail] = rest.split('.');
    auto [name, overload] = tail.rsplit('.');
    if (!ns.empty() && !name.empty() && !overload.empty()) {
      op.ns = ns.str();
      op.name = name.str();
      op.overload = overload.str();
      return op;
    }
  } else if (rest.contains("::")) {
    auto [ns, tail] = rest.split("::");
    auto [name, overload] = tail.split('.');
    op.ns = ns.str();
    op.name = name.str();
    op.overload = overload.empty() ? "default" : overload.str();
    return op;
  }
  op.name = target.str();
  return op;
}

std::string OpName::str() const {
  if (ns.empty())
    return name;
  std::string s; // every node's op string: plain appends, no format parsing
  s.reserve(ns.size() + name.size() + overload.size() + 3);
  s.append(ns).append("::").append(name).append(".").append(overload);
  return s;
}

const InternedOp &InternedOp::get(llvm::StringRef target) {
  static std::mutex lock;
  static llvm::StringMap<InternedOp> ops; // entries never move: references stay valid
  std::lock_guard<std::mutex> guard(lock);
  auto [it, added] = ops.try_emplace(target);
  if (added) {
    it->second.name = OpName::parse(target);
    it->second.text = it->second.name.str();
    const OpName &op = it->second.name;
    if (op.ns == "commlens")
      it->second.boundary = boundaryOpNamed(op.name);
    else if (const opschema::Schema *schema = opschema::find(op.ns + "::" + op.name, op.overload))
      it->second.resultAliasesSelf = schema->resultAliasesSelf;
  }
  return it->second;
}

const InternedOp *InternedOp::none() {
  static const InternedOp *empty = &get("");
  return empty;
}

std::string Node::moduleName() const { return scope_ ? scope_->displayName() : "Global"; }

std::string Node::where() const { return fmt::format("node '{}' {} in {}", name_, opString(), moduleName()); }

const Argument *Node::input(llvm::StringRef argName) const {
  for (const NamedArgument &a : inputs_)
    if (a.name == argName)
      return &a.value;
  return nullptr;
}

bool Node::boolInput(llvm::StringRef argName) const {
  const Argument *a = input(argName);
  return a && a->is<bool>() && a->get<bool>();
}

llvm::SmallVector<Value *, 4> Node::results() const {
  llvm::SmallVector<Value *, 4> out;
  for (const Argument &a : outputs_) {
    if (a.is<SymIntArg>() && a.get<SymIntArg>().value)
      out.push_back(a.get<SymIntArg>().value);
    else if (a.is<SymBoolArg>() && a.get<SymBoolArg>().value)
      out.push_back(a.get<SymBoolArg>().value);
    else if (a.is<SymFloatArg>() && a.get<SymFloatArg>().value)
      out.push_back(a.get<SymFloatArg>().value);
    else
      a.forEachTensor([&](Value *v) { out.push_back(v); });
  }
  return out;
}

llvm::SmallVector<Value *, 4> Node::operands() const {
  llvm::SmallVector<Value *, 4> out;
  forEachOperand([&](Value *v) { out.push_back(v); });
  return out;
}

llvm::SmallVector<Value *, 4> Node::tensorOperands() const {
  llvm::SmallVector<Value *, 4> out;
  forEachOperand([&](Value *v) {
    if (v->kind() == ValueKind::Tensor)
      out.push_back(v);
  });
  return out;
}

Value *Graph::define(llvm::StringMapEntry<Value *> &entry, ValueKind kind) {
  values_.push_back(std::make_unique<Value>());
  Value *v = values_.back().get();
  v->name_ = entry.getKey().str();
  v->kind_ = kind;
  entry.second = v;
  return v;
}

void Graph::reserve(size_t values, size_t nodes) {
  if (valuesByName_.empty())
    valuesByName_ = llvm::StringMap<Value *>(static_cast<unsigned>(values));
  values_.reserve(values);
  nodes_.reserve(nodes);
}

Value *Graph::createValue(llvm::StringRef name, ValueKind kind) {
  assert(!valuesByName_.count(name) && "value names are unique");
  return define(*valuesByName_.try_emplace(name).first, kind);
}

Value *Graph::createUniqueValue(llvm::StringRef hint, ValueKind kind) {
  // Each name tried is looked up once: try_emplace finds it taken or claims it.
  auto [it, fresh] = valuesByName_.try_emplace(hint);
  if (fresh)
    return define(*it, kind);
  // `hint_N`, made in place (autodiff names 20k values from a few hints: a Twine was most of it).
  llvm::SmallString<64> name(hint);
  name.push_back('_');
  size_t stem = name.size();
  while (!fresh) {
    name.resize(stem);
    char digits[24];
    auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), ++uniqueCounter_);
    name.append(digits, end);
    std::tie(it, fresh) = valuesByName_.try_emplace(name);
  }
  return define(*it, kind);
}

Value *Graph::lookupValue(llvm::StringRef name) const {
  auto it = valuesByName_.find(name);
  return it == valuesByName_.end() ? nullptr : it->second;
}

const llvm::StringMap<std::string> &Node::metadata() const {
  static const llvm::StringMap<std::string> none;
  return metadata_ ? *metadata_ : none;
}

void Node::setMetadata(llvm::StringRef key, std::string value) {
  auto own = metadata_ ? std::make_shared<llvm::StringMap<std::string>>(*metadata_)
                       : std::make_shared<llvm::StringMap<std::string>>();
  (*own)[key] = std::move(value);
  metadata_ = std::move(own);
}

Node *Graph::appendNode(llvm::StringRef name, llvm::StringRef target, llvm::SmallVector<NamedArgument, 4> &&inputs,
                        llvm::SmallVector<Argument, 1> &&outputs, llvm::StringMap<std::string> metadata) {
  Node *n = append(name, std::move(inputs), std::move(outputs));
  n->op_ = &InternedOp::get(target);
  if (!metadata.empty())
    n->metadata_ = std::make_shared<const llvm::StringMap<std::string>>(std::move(metadata));
  return n;
}

Node *Graph::appendNodeLike(llvm::StringRef name, const Node &like, llvm::SmallVector<NamedArgument, 4> &&inputs,
                            llvm::SmallVector<Argument, 1> &&outputs) {
  Node *n = append(name, std::move(inputs), std::move(outputs));
  n->op_ = like.op_;
  n->metadata_ = like.metadata_;
  return n;
}

Node *Graph::append(llvm::StringRef name, llvm::SmallVector<NamedArgument, 4> &&inputs,
                    llvm::SmallVector<Argument, 1> &&outputs) {
  nodes_.push_back(std::make_unique<Node>());
  Node *n = nodes_.back().get();
  n->name_ = name.str();
  n->inputs_ = std::move(inputs);
  n->outputs_ = std::move(outputs);
  n->index_ = static_cast<unsigned>(nodes_.size() - 1);
  n->scope_ = scopes_->root();
  for (Value *v : n->results())
    v->producer_ = n;
  return n;
}

const InputSpec *Graph::parameter(llvm::StringRef fqn) const {
  for (const InputSpec &s : inputs_)
    if (s.kind == InputKind::Parameter && s.target == fqn)
      return &s;
  return nullptr;
}

void Graph::addCallSignature(CallSignature sig) {
  callSignatureIndex_[sig.path].try_emplace(sig.call, callSignatures_.size());
  callSignatures_.push_back(std::move(sig));
}

const CallSignature *Graph::callSignature(llvm::StringRef path, unsigned call) const {
  auto calls = callSignatureIndex_.find(path);
  if (calls == callSignatureIndex_.end())
    return nullptr;
  auto it = calls->second.find(call);
  return it == calls->second.end() ? nullptr : &callSignatures_[it->second];
}

std::optional<Argument> Graph::userInput(llvm::StringRef key) const {
  unsigned index = 0;
  bool positional = !key.getAsInteger(10, index);
  if (const CallSignature *root = callSignature("", 0)) {
    if (positional)
      return index < root->args.size() ? std::optional<Argument>(root->args[index]) : std::nullopt;
    for (const auto &[name, arg] : root->kwargs)
      if (name == key)
        return arg;
    return std::nullopt;
  }
  unsigned userIndex = 0;
  for (const InputSpec &in : inputs_) {
    if (in.kind != InputKind::UserInput)
      continue;
    if ((positional && userIndex == index) || (!positional && in.target == key))
      return in.value ? Argument(in.value) : Argument(NoneArg{});
    ++userIndex;
  }
  return std::nullopt;
}

llvm::StringRef name(InputKind k) {
  static constexpr const char *kNames[] = {"user_input", "parameter", "buffer", "tensor_constant",
                                           "custom_obj", "token", "constant_input"};
  return kNames[static_cast<size_t>(k)];
}

llvm::StringRef name(OutputKind k) {
  static constexpr const char *kNames[] = {"user_output", "loss_output", "buffer_mutation",
                                           "gradient_to_parameter", "gradient_to_user_input",
                                           "user_input_mutation", "token", "parameter_mutation"};
  return kNames[static_cast<size_t>(k)];
}

void addCalledModulesWithoutOps(Graph &graph) {
  ModuleScopeTree &tree = graph.scopes();
  llvm::DenseMap<const ModuleScope *, unsigned> firstNode;
  for (const auto &n : graph.nodes())
    for (const ModuleScope *s = n->scope(); s; s = s->parent())
      firstNode.try_emplace(s, n->index());
  llvm::StringMap<ModuleScope *> byPath;
  for (ModuleScope *s : tree.inForwardOrder())
    byPath[s->path()] = s;
  // Shallower first, so a module's recorded parent is in the tree before it.
  std::vector<const CallSignature *> missing;
  llvm::StringMap<unsigned> numCalls;
  for (const CallSignature &sig : graph.callSignatures())
    if (!byPath.count(sig.path) && numCalls[sig.path]++ == 0)
      missing.push_back(&sig);
  llvm::stable_sort(missing, [](const CallSignature *a, const CallSignature *b) {
    return llvm::count(a->path, '.') < llvm::count(b->path, '.');
  });
  for (const CallSignature *sig : missing) {
    ModuleScope *parent = tree.root();
    for (llvm::StringRef p = sig->path; p.contains('.');) {
      p = p.rsplit('.').first;
      if (ModuleScope *s = byPath.lookup(p)) {
        parent = s;
        break;
      }
    }
    // The call ran once its inputs existed: before the first later scope whose first node comes
    // after the last of them.
    int64_t anchor = -1;
    auto after = [&](const Argument &a) {
      for (const Value *v : a.tensors())
        if (v->producer())
          anchor = std::max<int64_t>(anchor, v->producer()->index());
    };
    llvm::for_each(sig->args, after);
    for (const auto &kw : sig->kwargs)
      after(kw.second);
    llvm::ArrayRef<ModuleScope *> order = tree.inForwardOrder();
    unsigned at = parent->forwardIndex() + 1;
    while (at < order.size() && !(firstNode.count(order[at]) && firstNode.lookup(order[at]) > anchor))
      ++at;
    byPath[sig->path] = tree.insertWithoutOps(parent, sig->path, "", at, numCalls.lookup(sig->path));
  }
}

} // namespace commlens
