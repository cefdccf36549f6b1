#include "ir/IRPrinter.h"

#include <fmt/format.h>

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

void printResult(llvm::raw_ostream &os, const Value *v, const ValueAnnotator &annotate) {
  printValueRef(os, v);
  if (v->meta())
    os << " : " << v->meta()->str();
  else if (v->kind() == ValueKind::SymInt)
    os << " : SymInt(" << v->symbol().str() << ')';
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
    if (!node.callPath().empty() && node.callPath().back() > 0)
      os << '#' << node.callPath().back();
  }
}

void printGraph(llvm::raw_ostream &os, const Graph &graph, const ValueAnnotator &annotate) {
  for (const ModuleScope *s : graph.scopes().inForwardOrder())
    os << "scope " << s->displayName() << " : " << (s->type().empty() ? "?" : s->type()) << '\n';
  for (const InputSpec &in : graph.inputs()) {
    os << "input ";
    if (in.value)
      printResult(os, in.value, annotate);
    os << ' ' << name(in.kind) << ' ' << quote(in.target) << '\n';
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
