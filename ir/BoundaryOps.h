// The commlens:: boundary ops, declared once in ir/BoundaryOps.def: their kinds, their targets and
// the argument schema every such node must have.
#pragma once

#include "ir/Argument.h"
#include "ir/Mesh.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>

namespace commlens {

enum class BoundaryOp : uint8_t {
#define BOUNDARY(KIND, name, ARGS) KIND,
#include "ir/BoundaryOps.def"
};

/// The kind of the commlens:: op `name` ("annotate"), if it is one.
std::optional<BoundaryOp> boundaryOpNamed(llvm::StringRef name);
/// Its target, as nodes carry it: "commlens::annotate".
llvm::StringRef boundaryOpTarget(BoundaryOp op);
/// The `mesh` argument of a style hook's op or its backward: the DTensor mesh it runs on, left out
/// for the plan's first (mesh 0), so that a plan of one mesh prints as it always did.
void appendMeshArgument(llvm::SmallVectorImpl<NamedArgument> &args, MeshId mesh);
/// Whether `arguments` are exactly `op`'s schema (names and kinds); the error names the argument.
llvm::Error checkBoundaryArguments(BoundaryOp op, llvm::ArrayRef<NamedArgument> arguments);

} // namespace commlens
