#include "frontends/OpSchemas.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>

#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

// Built without fmt: LibTorch's include folder carries its own fmt, which must not meet ours.
namespace commlens {
namespace {

llvm::Error schemaError(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

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

/// Whether some overload of `op` takes a Scalar as its argument `arg`. Export keeps the Tensor
/// overload of such ops with a Python number where the Tensor goes (`aten.add.Tensor(x, 1)`,
/// a wrapped number at run time); an op without a Scalar form (`aten.linear`) needs a tensor.
bool takesScalarAs(const std::string &op, const std::string &arg) {
  static const auto overloads = [] {
    std::unordered_map<std::string, std::vector<c10::OperatorName>> byName;
    for (const c10::OperatorName &name : c10::Dispatcher::singleton().getAllOpNames())
      byName[name.name].push_back(name);
    return byName;
  }();
  auto it = overloads.find(op);
  if (it == overloads.end())
    return false;
  for (const c10::OperatorName &name : it->second) {
    auto handle = c10::Dispatcher::singleton().findSchema(name);
    if (!handle)
      continue;
    for (const c10::Argument &p : handle->schema().arguments())
      if (p.name() == arg && p.real_type()->kind() == c10::TypeKind::NumberType)
        return true;
  }
  return false;
}

/// Whether a decoded argument fits a schema type (the real type: SymInt, ScalarType, ...).
/// Types the IR does not model (Generator, Dimname, ...) accept anything. `scalarForTensor`: a
/// number may stand for a Tensor (see takesScalarAs).
bool fits(const c10::TypePtr &type, const Argument &a, bool scalarForTensor) {
  using K = c10::TypeKind;
  switch (type->kind()) {
  case K::OptionalType:
    return a.isNone() || fits(type->castRaw<c10::OptionalType>()->getElementType(), a, scalarForTensor);
  case K::TensorType:
    return a.isTensor() || (scalarForTensor && (isFloat(a) || isBool(a)));
  case K::IntType:
  case K::SymIntType:
    return isInt(a);
  case K::FloatType:
  case K::SymFloatType:
    return isFloat(a);
  case K::BoolType:
  case K::SymBoolType:
    return isBool(a);
  case K::ComplexType:
  case K::NumberType:
    return isFloat(a) || isBool(a) || a.is<ComplexArg>();
  case K::StringType:
    return a.is<std::string>();
  case K::ScalarTypeType:
    return a.is<ScalarType>();
  case K::LayoutType:
    return a.is<Layout>();
  case K::MemoryFormatType:
    return a.is<MemoryFormat>();
  case K::DeviceObjType:
    return a.is<Device>();
  case K::ListType: {
    if (isEmptyList(a))
      return true;
    const c10::TypePtr &elem = type->castRaw<c10::ListType>()->getElementType();
    switch (elem->kind()) {
    case K::TensorType:
      return a.is<TensorList>();
    case K::OptionalType:
      return elem->castRaw<c10::OptionalType>()->getElementType()->kind() == K::TensorType
                 ? a.is<OptionalTensorList>() || a.is<TensorList>()
                 : true;
    case K::IntType:
    case K::SymIntType:
      return a.is<IntList>() || a.is<SymIntList>();
    case K::FloatType:
      return a.is<FloatList>();
    case K::BoolType:
      return a.is<BoolList>();
    case K::StringType:
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
bool fitsResult(const c10::TypePtr &type, const Argument &a) {
  using K = c10::TypeKind;
  switch (type->kind()) {
  case K::TensorType:
    return a.isTensor() || a.isNone();
  case K::ListType:
    return a.is<TensorList>() || a.is<OptionalTensorList>() || a.isNone();
  case K::IntType:
  case K::SymIntType:
    return isInt(a);
  default:
    return true;
  }
}

std::string plural(size_t n, const char *word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

} // namespace

llvm::Error checkNodeAgainstOpSchema(const Node &node) {
  const OpName &op = node.op();
  if (op.ns.empty())
    return llvm::Error::success();
  std::optional<c10::OperatorHandle> handle;
  try {
    handle = c10::Dispatcher::singleton().findSchema(
        {op.ns + "::" + op.name, op.overload == "default" ? std::string() : op.overload});
  } catch (const std::exception &) {
    return llvm::Error::success();
  }
  if (!handle)
    return llvm::Error::success();
  const c10::FunctionSchema &schema = handle->schema();
  const std::string opName = op.str();
  const auto &params = schema.arguments();
  std::set<std::string> given;
  for (const NamedArgument &in : node.inputs()) {
    auto it = std::find_if(params.begin(), params.end(), [&](const c10::Argument &p) { return p.name() == in.name; });
    if (it == params.end())
      return schemaError(opName + " has no argument '" + in.name + "'");
    if (!given.insert(in.name).second)
      return schemaError("argument '" + in.name + "' of " + opName + " is given twice");
    if (!fits(it->real_type(), in.value, !in.value.isTensor() && takesScalarAs(schema.name(), in.name)))
      return schemaError("argument '" + in.name + "' of " + opName + " is " + describe(in.value) + ", expected " +
                         it->real_type()->str());
  }
  for (const c10::Argument &p : params)
    if (!p.default_value() && !given.count(p.name()))
      return schemaError(opName + " needs argument '" + p.name() + "' (" + p.real_type()->str() +
                         "), the node has " + plural(node.inputs().size(), "argument"));
  const auto &returns = schema.returns();
  llvm::ArrayRef<Argument> outputs = node.outputs();
  bool allNone = std::all_of(outputs.begin(), outputs.end(), [](const Argument &a) { return a.isNone(); });
  if (returns.empty() ? !allNone : outputs.size() != returns.size())
    return schemaError(opName + " returns " + plural(returns.size(), "result") + ", the node has " +
                       plural(outputs.size(), "result"));
  for (size_t i = 0; i < returns.size(); ++i)
    if (!fitsResult(returns[i].real_type(), outputs[i]))
      return schemaError("result " + std::to_string(i) + " of " + opName + " is " + describe(outputs[i]) +
                         ", expected " + returns[i].real_type()->str());
  return llvm::Error::success();
}

} // namespace commlens
