#include "ir/BoundaryOps.h"

#include "ir/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

namespace commlens {
namespace {

struct Declared {
  BoundaryOp op;
  const char *name, *target, *args;
};

constexpr Declared kDeclared[] = {
#define BOUNDARY(KIND, name, ARGS) {BoundaryOp::KIND, #name, "commlens::" #name, ARGS},
#include "ir/BoundaryOps.def"
};

bool hasKind(const Argument &a, llvm::StringRef kind) {
  if (kind.consume_back("?") && a.isNone())
    return true;
  if (kind == "Tensor")
    return a.isTensor();
  if (kind == "Tensor[]")
    return a.is<TensorList>();
  if (kind == "str")
    return a.is<std::string>();
  if (kind == "str[]")
    return a.is<StringList>();
  if (kind == "bool")
    return a.is<bool>();
  if (kind == "int")
    return a.is<int64_t>();
  return false;
}

} // namespace

std::optional<BoundaryOp> boundaryOpNamed(llvm::StringRef name) {
  for (const Declared &d : kDeclared)
    if (name == d.name)
      return d.op;
  return std::nullopt;
}

llvm::StringRef boundaryOpTarget(BoundaryOp op) { return kDeclared[static_cast<size_t>(op)].target; }

void appendMeshArgument(llvm::SmallVectorImpl<NamedArgument> &args, MeshId mesh) {
  if (mesh != 0)
    args.push_back({"mesh", static_cast<int64_t>(mesh), true});
}

llvm::Error checkBoundaryArguments(BoundaryOp op, llvm::ArrayRef<NamedArgument> arguments) {
  llvm::SmallVector<llvm::StringRef, 8> schema;
  llvm::StringRef(kDeclared[static_cast<size_t>(op)].args).split(schema, ' ');
  for (llvm::StringRef &entry : schema) {
    bool optional = entry.consume_front("[") && entry.consume_back("]"); // may be left out
    auto [name, kind] = entry.split(':');
    const NamedArgument *a = llvm::find_if(arguments, [&](const NamedArgument &x) { return x.name == name; });
    if (a == arguments.end() && optional)
      continue;
    if (a == arguments.end())
      return makeError("missing argument '{}' ({})", name.str(), kind.str());
    if (!hasKind(a->value, kind))
      return makeError("argument '{}' must be {}", name.str(), kind.str());
  }
  for (const NamedArgument &a : arguments)
    if (!llvm::any_of(schema, [&](llvm::StringRef entry) { return entry.split(':').first == a.name; }))
      return makeError("unknown argument '{}'", a.name);
  return llvm::Error::success();
}

} // namespace commlens
