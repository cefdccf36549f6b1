// The commlens:: boundary ops, declared once in ir/BoundaryOps.def: their kinds, their targets and
// the argument schema every such node must have.
#pragma once

#include "ir/Argument.h"

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
/// Whether `arguments` are exactly `op`'s schema (names and kinds); the error names the argument.
llvm::Error checkBoundaryArguments(BoundaryOp op, llvm::ArrayRef<NamedArgument> arguments);

} // namespace commlens
