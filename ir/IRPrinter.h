// Stable, readable text form of the IR (`--print-ir`, `--print-after`). One line per scope,
// input, node and output; nodes carry their module scope as `@Name` (`#k` for call k > 0).
#pragma once

#include "ir/Graph.h"

#include "llvm/Support/raw_ostream.h"

namespace commlens {

void printArgument(llvm::raw_ostream &os, const Argument &arg);
void printNode(llvm::raw_ostream &os, const Node &node);
void printGraph(llvm::raw_ostream &os, const Graph &graph);
void printProgram(llvm::raw_ostream &os, const ExportedProgram &program);

} // namespace commlens
