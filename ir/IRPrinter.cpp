#include "ir/IRPrinter.h"

#include <fmt/format.h>

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>

namespace commlens {
namespace {

std::string formatFloat(double d) {
  if (std::isinf(d))
    return d > 0 ? "inf" : "-inf";
  if (std::isnan(d))
    return "nan";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

std::string quote(llvm::StringRef s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

template <typename Range, typename Fn> void printList(llvm::raw_ostream &os, const Range &r, Fn fn) {
  os << '[';
  bool first = true;
  for (const auto &x : r) {
    if (!first)
      os << ", ";
    first = false;
    fn(x);
  }
  os << ']';
}

void printValueRef(llvm::raw_ostream &os, const Value *v) { os << '%' << (v ? v->name() : "<null>"); }

void printSymInt(llvm::raw_ostream &os, const SymIntArg &s) {
  if (s.value)
    printValueRef(os, s.value);
  else
    os << s.constant;
}

/// Row-major strides of `sizes` (by hint): what a meta without printed strides gets.
llvm::SmallVector<SymInt, 4> defaultStrides(llvm::ArrayRef<SymInt> sizes) {
  llvm::SmallVector<SymInt, 4> strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = SymInt::concrete(stride);
    stride *= std::max<int64_t>(sizes[i].hint, 1);
  }
  return strides;
}

void printResult(llvm::raw_ostream &os, const Value *v, const ValueAnnotator &annotate) {
  printValueRef(os, v);
  if (const auto &m = v->meta()) {
    os << " : " << m->str();
    // Only what differs from the defaults the parser assumes (contiguous, cpu); no strides at
    // all read as contiguous too.
    if (!m->strides.empty() && llvm::ArrayRef<SymInt>(m->strides) != llvm::ArrayRef<SymInt>(defaultStrides(m->sizes))) {
      os << " strides [";
      for (size_t i = 0; i < m->strides.size(); ++i)
        os << (i ? ", " : "") << m->strides[i].str();
      os << ']';
    }
    if (m->device != Device{})
      os << " device " << quote(m->device.str());
  } else if (v->kind() == ValueKind::SymInt)
    os << " : SymInt(" << v->symbol().str() << ')';
  else if (v->kind() == ValueKind::SymBool)
    os << " : SymBool";
  else if (v->kind() == ValueKind::SymFloat)
    os << " : SymFloat";
  else if (v->kind() == ValueKind::Token)
    os << " : Token";
  else if (v->kind() == ValueKind::CustomObj)
    os << " : CustomObj";
  if (annotate)
    os << annotate(*v);
}

} // namespace

void printArgument(llvm::raw_ostream &os, const Argument &arg) {
  std::visit(
      [&](const auto &x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, NoneArg>)
          os << "None";
        else if constexpr (std::is_same_v<T, Value *>)
          printValueRef(os, x);
        else if constexpr (std::is_same_v<T, TensorList>)
          printList(os, x, [&](Value *v) { printValueRef(os, v); });
        else if constexpr (std::is_same_v<T, OptionalTensorList>)
          printList(os, x.items, [&](Value *v) { v ? printValueRef(os, v) : void(os << "None"); });
        else if constexpr (std::is_same_v<T, int64_t>)
          os << x;
        else if constexpr (std::is_same_v<T, IntList>)
          printList(os, x, [&](int64_t i) { os << i; });
        else if constexpr (std::is_same_v<T, double>)
          os << formatFloat(x);
        else if constexpr (std::is_same_v<T, FloatList>)
          printList(os, x, [&](double d) { os << formatFloat(d); });
        else if constexpr (std::is_same_v<T, bool>)
          os << (x ? "True" : "False");
        else if constexpr (std::is_same_v<T, BoolList>)
          printList(os, x, [&](bool b) { os << (b ? "True" : "False"); });
        else if constexpr (std::is_same_v<T, std::string>)
          os << quote(x);
        else if constexpr (std::is_same_v<T, StringList>)
          printList(os, x, [&](const std::string &s) { os << quote(s); });
        else if constexpr (std::is_same_v<T, SymIntArg>)
          printSymInt(os, x);
        else if constexpr (std::is_same_v<T, SymIntList>)
          printList(os, x, [&](const SymIntArg &s) { printSymInt(os, s); });
        else if constexpr (std::is_same_v<T, SymBoolArg>)
          x.value ? printValueRef(os, x.value) : void(os << (x.constant ? "True" : "False"));
        else if constexpr (std::is_same_v<T, SymFloatArg>)
          x.value ? printValueRef(os, x.value) : void(os << formatFloat(x.constant));
        else if constexpr (std::is_same_v<T, ScalarType>)
          os << torchName(x);
        else if constexpr (std::is_same_v<T, MemoryFormat>)
          os << "torch." << name(x);
        else if constexpr (std::is_same_v<T, Layout>)
          os << "torch." << name(x);
        else if constexpr (std::is_same_v<T, Device>)
          os << "device(" << quote(x.str()) << ')';
        else if constexpr (std::is_same_v<T, ComplexArg>)
          os << "complex(" << formatFloat(x.real) << ", " << formatFloat(x.imag) << ')';
      },
      arg.storage());
}

void printNode(llvm::raw_ostream &os, const Node &node, const ValueAnnotator &annotate) {
  bool first = true;
  for (const Argument &out : node.outputs()) {
    if (!first)
      os << ", ";
    first = false;
    if (out.is<Value *>())
      printResult(os, out.tensor(), annotate);
    else if (out.is<TensorList>())
      printList(os, out.get<TensorList>(), [&](Value *v) { printResult(os, v, annotate); });
    else if (out.is<SymIntArg>() && out.get<SymIntArg>().value)
      printResult(os, out.get<SymIntArg>().value, annotate);
    else if (out.is<SymBoolArg>() && out.get<SymBoolArg>().value)
      printResult(os, out.get<SymBoolArg>().value, annotate);
    else if (out.is<SymFloatArg>() && out.get<SymFloatArg>().value)
      printResult(os, out.get<SymFloatArg>().value, annotate);
    else
      printArgument(os, out);
  }
  if (node.outputs().empty())
    os << "()";
  os << " = " << node.opString() << '(';
  first = true;
  for (const NamedArgument &a : node.inputs()) {
    if (!first)
      os << ", ";
    first = false;
    if (!a.name.empty())
      os << a.name << '=';
    printArgument(os, a.value);
  }
  os << ')';
  if (!node.gradEnabled())
    os << " no_grad";
  if (const ModuleScope *s = node.scope()) {
    os << " @" << s->displayName();
    // `#K`: the innermost module's K-th call, outer calls the first; any other call path in full.
    llvm::ArrayRef<unsigned> calls = node.callPath();
    // (No call path at all, as backward nodes have, reads as the first calls too.)
    bool outerFirst = calls.empty() || (calls.size() == s->depth() &&
                                        llvm::all_of(calls.drop_back(), [](unsigned c) { return c == 0; }));
    if (!outerFirst) {
      os << '#';
      for (size_t i = 0; i < calls.size(); ++i)
        os << (i ? "." : "") << calls[i];
    } else if (!calls.empty() && calls.back() > 0)
      os << '#' << calls.back();
  }
  // The name only where it is not the first result's.
  llvm::SmallVector<Value *, 4> results = node.results();
  if (node.name() != (results.empty() ? std::string() : results.front()->name()))
    os << " name " << quote(node.name());
}

void printGraph(llvm::raw_ostream &os, const Graph &graph, const ValueAnnotator &annotate) {
  llvm::ArrayRef<ModuleScope *> scopes = graph.scopes().inForwardOrder();
  for (size_t i = 0; i < scopes.size(); ++i) {
    const ModuleScope *s = scopes[i];
    os << "scope " << s->displayName() << " : " << (s->type().empty() ? "?" : s->type());
    // The parent only where it is not the earlier scope with the longest prefix of the path.
    if (s->parent()) {
      const ModuleScope *implied = graph.scopes().root();
      size_t best = 0;
      for (const ModuleScope *e : scopes.take_front(i))
        if (!e->path().empty() && e->path().size() > best && llvm::StringRef(s->path()).startswith(e->path() + ".")) {
          implied = e;
          best = e->path().size();
        }
      if (implied != s->parent())
        os << " in @" << s->parent()->displayName();
    }
    os << '\n';
  }
  for (const InputSpec &in : graph.inputs()) {
    os << "input ";
    if (in.value)
      printResult(os, in.value, annotate);
    os << ' ' << name(in.kind) << ' ' << quote(in.target);
    if (!in.aliasOf.empty())
      os << " alias " << quote(in.aliasOf);
    if (in.kind == InputKind::Buffer && !in.persistent)
      os << " non_persistent";
    os << '\n';
  }
  for (const auto &n : graph.nodes()) {
    printNode(os, *n, annotate);
    os << '\n';
  }
  for (const OutputSpec &out : graph.outputs()) {
    os << "output " << name(out.kind) << ' ';
    printArgument(os, out.value);
    if (!out.target.empty())
      os << ' ' << quote(out.target);
    os << '\n';
  }
  const std::string &root = graph.scopes().root()->displayName();
  for (const CallSignature &sig : graph.callSignatures()) {
    os << "call @" << (sig.path.empty() ? root : root + "." + sig.path);
    if (sig.call > 0)
      os << '#' << sig.call;
    os << '(';
    bool first = true;
    for (const Argument &a : sig.args) {
      os << (first ? "" : ", ");
      first = false;
      printArgument(os, a);
    }
    for (const auto &[key, a] : sig.kwargs) {
      os << (first ? "" : ", ") << key << '=';
      first = false;
      printArgument(os, a);
    }
    os << ")\n";
  }
}

void printProgram(llvm::raw_ostream &os, const ExportedProgram &program) {
  os << "program torch " << program.torchVersion << " schema " << program.schemaVersion.major << '.'
     << program.schemaVersion.minor;
  for (const std::string &v : program.verifiers)
    os << " dialect " << v;
  os << '\n';
  printGraph(os, program.graph());
}

} // namespace commlens
