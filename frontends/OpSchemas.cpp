#include "frontends/OpSchemas.h"

#include "ir/OpSchemaTable.h"
#include "ir/Error.h"

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>

namespace commlens {
namespace {

using K = opschema::TypeKind;

/// "an int", "a Tensor list", ...: the kind of a decoded argument, for messages.
std::string describe(const Argument &a) {
  return std::visit(
      [](const auto &v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, NoneArg>) return "None";
        else if constexpr (std::is_same_v<T, Value *>) return "a Tensor";
        else if constexpr (std::is_same_v<T, TensorList>) return "a Tensor list";
        else if constexpr (std::is_same_v<T, OptionalTensorList>) return "an optional Tensor list";
        else if constexpr (std::is_same_v<T, int64_t>) return "an int";
        else if constexpr (std::is_same_v<T, IntList>) return "an int list";
        else if constexpr (std::is_same_v<T, double>) return "a float";
        else if constexpr (std::is_same_v<T, FloatList>) return "a float list";
        else if constexpr (std::is_same_v<T, bool>) return "a bool";
        else if constexpr (std::is_same_v<T, BoolList>) return "a bool list";
        else if constexpr (std::is_same_v<T, std::string>) return "a string";
        else if constexpr (std::is_same_v<T, StringList>) return "a string list";
        else if constexpr (std::is_same_v<T, SymIntArg>) return "a SymInt";
        else if constexpr (std::is_same_v<T, SymIntList>) return "a SymInt list";
        else if constexpr (std::is_same_v<T, SymBoolArg>) return "a SymBool";
        else if constexpr (std::is_same_v<T, SymFloatArg>) return "a SymFloat";
        else if constexpr (std::is_same_v<T, ScalarType>) return "a dtype";
        else if constexpr (std::is_same_v<T, MemoryFormat>) return "a memory format";
        else if constexpr (std::is_same_v<T, Layout>) return "a layout";
        else if constexpr (std::is_same_v<T, Device>) return "a device";
        else if constexpr (std::is_same_v<T, ComplexArg>) return "a complex";
        else return "an argument";
      },
      a.storage());
}

bool isInt(const Argument &a) { return a.is<int64_t>() || a.is<SymIntArg>(); }
bool isFloat(const Argument &a) { return a.is<double>() || a.is<SymFloatArg>() || isInt(a); }
bool isBool(const Argument &a) { return a.is<bool>() || a.is<SymBoolArg>(); }

/// An empty list decodes as whichever list variant export wrote; any of them fits any list type.
bool isEmptyList(const Argument &a) {
  return (a.is<TensorList>() && a.get<TensorList>().empty()) ||
         (a.is<OptionalTensorList>() && a.get<OptionalTensorList>().items.empty()) ||
         (a.is<IntList>() && a.get<IntList>().empty()) || (a.is<FloatList>() && a.get<FloatList>().empty()) ||
         (a.is<BoolList>() && a.get<BoolList>().empty()) || (a.is<StringList>() && a.get<StringList>().empty()) ||
         (a.is<SymIntList>() && a.get<SymIntList>().empty());
}

/// Whether one of an op's `overloads` takes a Scalar as its argument `arg`. Export keeps the
/// Tensor overload of such ops with a Python number where the Tensor goes (`aten.add.Tensor(x, 1)`,
/// a wrapped number at run time); an op without a Scalar form (`aten.linear`) needs a tensor.
bool takesScalarAs(llvm::ArrayRef<opschema::Schema> overloads, const std::string &arg) {
  for (const opschema::Schema &schema : overloads)
    for (const opschema::Arg &p : opschema::arguments(schema))
      if (p.name == arg && opschema::type(p.type).kinds[0] == K::Number)
        return true;
  return false;
}

/// Whether a decoded argument fits a schema type (the real type: SymInt, ScalarType, ...), given
/// as its kinds (opschema::Type::kinds). Types the IR does not model (Generator, Dimname, ...)
/// accept anything. `scalarForTensor`: a number may stand for a Tensor (see takesScalarAs).
bool fits(const K *kind, const Argument &a, bool scalarForTensor) {
  switch (kind[0]) {
  case K::Optional:
    return a.isNone() || fits(kind + 1, a, scalarForTensor);
  case K::Tensor:
    return a.isTensor() || (scalarForTensor && (isFloat(a) || isBool(a)));
  case K::Int:
  case K::SymInt:
    return isInt(a);
  case K::Float:
  case K::SymFloat:
    return isFloat(a);
  case K::Bool:
  case K::SymBool:
    return isBool(a);
  case K::Complex:
  case K::Number:
    return isFloat(a) || isBool(a) || a.is<ComplexArg>();
  case K::String:
    return a.is<std::string>();
  case K::ScalarType:
    return a.is<ScalarType>();
  case K::Layout:
    return a.is<Layout>();
  case K::MemoryFormat:
    return a.is<MemoryFormat>();
  case K::Device:
    return a.is<Device>();
  case K::List: {
    if (isEmptyList(a))
      return true;
    switch (kind[1]) {
    case K::Tensor:
      return a.is<TensorList>();
    case K::Optional:
      return kind[2] == K::Tensor ? a.is<OptionalTensorList>() || a.is<TensorList>() : true;
    case K::Int:
    case K::SymInt:
      return a.is<IntList>() || a.is<SymIntList>();
    case K::Float:
      return a.is<FloatList>();
    case K::Bool:
      return a.is<BoolList>();
    case K::String:
      return a.is<StringList>();
    default:
      return true;
    }
  }
  default:
    return true;
  }
}

/// Whether a node result fits a schema return type. An unused tensor result may be None.
bool fitsResult(K kind, const Argument &a) {
  switch (kind) {
  case K::Tensor:
    return a.isTensor() || a.isNone();
  case K::List:
    return a.is<TensorList>() || a.is<OptionalTensorList>() || a.isNone();
  case K::Int:
  case K::SymInt:
    return isInt(a);
  default:
    return true;
  }
}

std::string plural(size_t n, const char *word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

} // namespace

llvm::Error checkNodeAgainstOpSchema(const Node &node) {
  const OpName &op = node.op();
  if (op.ns.empty())
    return llvm::Error::success();
  const std::string qualified = op.ns + "::" + op.name;
  const opschema::Schema *schema = opschema::find(qualified, op.overload);
  if (!schema)
    return llvm::Error::success();
  llvm::ArrayRef<opschema::Schema> overloads = opschema::overloadsOf(qualified);
  const std::string opName = op.str();
  llvm::ArrayRef<opschema::Arg> params = opschema::arguments(*schema);
  std::set<std::string> given;
  for (const NamedArgument &in : node.inputs()) {
    auto it = llvm::find_if(params, [&](const opschema::Arg &p) { return p.name == in.name; });
    if (it == params.end())
      return makeError("{} has no argument '{}'", opName, in.name);
    if (!given.insert(in.name).second)
      return makeError("argument '{}' of {} is given twice", in.name, opName);
    const opschema::Type &type = opschema::type(it->type);
    if (!fits(type.kinds, in.value, !in.value.isTensor() && takesScalarAs(overloads, in.name)))
      return makeError("argument '{}' of {} is {}, expected {}", in.name, opName, describe(in.value), type.text);
  }
  for (const opschema::Arg &p : params)
    if (!p.hasDefault && !given.count(p.name))
      return makeError("{} needs argument '{}' ({}), the node has {}", opName, p.name, opschema::type(p.type).text,
                       plural(node.inputs().size(), "argument"));
  llvm::ArrayRef<uint16_t> returns = opschema::returns(*schema);
  llvm::ArrayRef<Argument> outputs = node.outputs();
  bool allNone = llvm::all_of(outputs, [](const Argument &a) { return a.isNone(); });
  if (returns.empty() ? !allNone : outputs.size() != returns.size())
    return makeError("{} returns {}, the node has {}", opName, plural(returns.size(), "result"),
                     plural(outputs.size(), "result"));
  for (size_t i = 0; i < returns.size(); ++i) {
    const opschema::Type &type = opschema::type(returns[i]);
    if (!fitsResult(type.kinds[0], outputs[i]))
      return makeError("result {} of {} is {}, expected {}", i, opName, describe(outputs[i]), type.text);
  }
  return llvm::Error::success();
}

} // namespace commlens
