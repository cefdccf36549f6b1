// Stable, readable text form of the IR (`--print-ir`, `--print-after`). One line per scope,
// input, node and output; nodes carry their module scope as `@Name` (`#k` for call k > 0).
// ir/IRParser.h reads it back and documents the grammar.
#pragma once

#include "ir/Graph.h"

#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>

namespace commlens {

/// Extra text printed after a defined value's type, e.g. its placements (" {S(0)}").
using ValueAnnotator = std::function<std::string(const Value &)>;

void printArgument(llvm::raw_ostream &os, const Argument &arg);
void printNode(llvm::raw_ostream &os, const Node &node, const ValueAnnotator &annotate = {});
void printGraph(llvm::raw_ostream &os, const Graph &graph, const ValueAnnotator &annotate = {});
void printProgram(llvm::raw_ostream &os, const ExportedProgram &program);

} // namespace commlens
