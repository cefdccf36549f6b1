// Checks a decoded node against its operator's schema (the operators of torch's dispatcher, in a
// table generated at build time: OpSchemaTable.h): argument names, count, required arguments and
// kinds, and the number and kind of results. Every consumer of the IR (decomposition, sharding
// rules, derivatives) reads arguments by schema name and kind, so a node that passes this check
// can be read safely.
#pragma once

#include "ir/Graph.h"

#include "llvm/Support/Error.h"

namespace commlens {

/// Success when the node matches its op's schema, or when the table does not know the op
/// (non-ATen callables; the passes refuse ops they do not model). The message names the argument
/// at fault and what the schema expects; the caller adds the node and module.
llvm::Error checkNodeAgainstOpSchema(const Node &node);

} // namespace commlens
