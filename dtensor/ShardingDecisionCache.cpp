#include "dtensor/ShardingDecisionCache.h"

#include "ir/Graph.h"

#include <cstring>
#include <type_traits>
#include <variant>

namespace commlens {
namespace {

/// Appends fields as raw bytes; every variable-length field is preceded by its length, so two
/// different sequences of fields never give the same bytes.
class KeyWriter {
public:
  KeyWriter(llvm::SmallVectorImpl<char> &out, llvm::ArrayRef<const Value *> tensors) : out_(out), tensors_(tensors) {}

  template <typename T> void pod(const T &v) {
    static_assert(std::is_trivially_copyable_v<T>);
    char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    out_.append(bytes, bytes + sizeof(T));
  }
  void text(llvm::StringRef s) {
    pod(s.size());
    out_.append(s.begin(), s.end());
  }
  void symInt(const SymInt &s) {
    pod(s.hint);
    pod(s.hasHint);
    pod(s.expr().data()); // interned: equal texts share one pointer
  }
  void meta(const TensorMeta &m) {
    pod(m.dtype);
    pod(m.sizes.size());
    for (const SymInt &s : m.sizes)
      symInt(s);
    pod(m.strides.size());
    for (const SymInt &s : m.strides)
      symInt(s);
    symInt(m.storageOffset);
    device(m.device);
    pod(m.layout);
    pod(m.requiresGrad);
  }
  void device(const Device &d) {
    text(d.type);
    pod(d.index.has_value());
    pod(d.index.value_or(0));
  }
  void placements(llvm::ArrayRef<Placement> ps) {
    pod(ps.size());
    for (const Placement &p : ps) {
      pod(p.kind);
      pod(p.dim);
      pod(p.splitFactor);
      pod(p.reduceOp);
      pod(p.normType);
    }
  }
  /// A tensor operand by its position among the node's tensor operands; any other value by identity.
  void value(const Value *v) {
    if (!v) {
      pod(char(0));
      return;
    }
    const Value *const *it = llvm::find(tensors_, v);
    if (it != tensors_.end()) {
      pod(char(1));
      pod(size_t(it - tensors_.begin()));
    } else {
      pod(char(2));
      pod(v);
    }
  }
  void argument(const Argument &a) {
    pod(a.storage().index());
    std::visit(
        [&](const auto &x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, NoneArg>) {
          } else if constexpr (std::is_same_v<T, Value *>) {
            value(x);
          } else if constexpr (std::is_same_v<T, TensorList>) {
            pod(x.size());
            for (const Value *v : x)
              value(v);
          } else if constexpr (std::is_same_v<T, OptionalTensorList>) {
            pod(x.items.size());
            for (const Value *v : x.items)
              value(v);
          } else if constexpr (std::is_same_v<T, std::string>) {
            text(x);
          } else if constexpr (std::is_same_v<T, StringList>) {
            pod(x.size());
            for (const std::string &s : x)
              text(s);
          } else if constexpr (std::is_same_v<T, SymIntArg>) {
            x.value ? value(x.value) : pod(x.constant);
          } else if constexpr (std::is_same_v<T, SymIntList>) {
            pod(x.size());
            for (const SymIntArg &s : x)
              s.value ? value(s.value) : pod(s.constant);
          } else if constexpr (std::is_same_v<T, SymBoolArg> || std::is_same_v<T, SymFloatArg>) {
            x.value ? value(x.value) : pod(x.constant);
          } else if constexpr (std::is_same_v<T, Device>) {
            device(x);
          } else if constexpr (std::is_same_v<T, ComplexArg>) {
            pod(x.real);
            pod(x.imag);
          } else if constexpr (std::is_trivially_copyable_v<T>) { // int64_t, double, bool, the enums
            pod(x);
          } else { // IntList, FloatList, BoolList
            pod(x.size());
            for (const auto &e : x)
              pod(e);
          }
        },
        a.storage());
  }

private:
  llvm::SmallVectorImpl<char> &out_;
  llvm::ArrayRef<const Value *> tensors_;
};

} // namespace

void ShardingDecisionCache::key(const Node &node, llvm::ArrayRef<std::optional<DTensorSpec>> operands,
                                const DeviceMesh &mesh, llvm::SmallVectorImpl<char> &out) {
  llvm::SmallVector<Value *, 4> tensors = node.tensorOperands();
  KeyWriter w(out, tensors);
  w.text(node.opString());
  w.pod(&mesh);
  w.pod(node.inputs().size());
  for (const NamedArgument &na : node.inputs()) {
    w.text(na.name);
    w.pod(na.keyword);
    w.argument(na.value);
  }
  w.pod(operands.size());
  for (size_t i = 0; i < operands.size(); ++i) {
    w.pod(operands[i].has_value());
    if (operands[i]) {
      w.placements(operands[i]->placements);
      w.meta(operands[i]->meta);
    } else {
      w.pod(i < tensors.size() && tensors[i]->meta().has_value());
      if (i < tensors.size() && tensors[i]->meta())
        w.meta(*tensors[i]->meta());
    }
  }
  auto results = node.results();
  w.pod(results.size());
  for (const Value *r : results) {
    w.pod(r->kind());
    w.pod(r->meta().has_value());
    if (r->meta())
      w.meta(*r->meta());
  }
}

llvm::Expected<const ShardingDecision *>
ShardingDecisionCache::decide(const ShardingRules &rules, const Node &node,
                              llvm::ArrayRef<std::optional<DTensorSpec>> operands, const DeviceMesh &mesh) {
  scratch_.clear();
  key(node, operands, mesh, scratch_);
  auto it = index_.find(scratch_.str());
  if (it != index_.end()) {
    ++hits_;
    return it->second;
  }
  llvm::Expected<ShardingDecision> d = rules.decide(node, operands, mesh);
  if (!d)
    return d.takeError();
  const ShardingDecision *stored = &decisions_.emplace_back(std::move(*d));
  index_[keys_.save(scratch_.str())] = stored;
  return stored;
}

} // namespace commlens
