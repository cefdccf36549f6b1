// Reads a commlens plan (docs/plan-format.md, "commlens-plan" version 1) and checks it against
// an exported program: patterns must match modules, mesh dims must exist, placements must parse.
#pragma once

#include "ir/Graph.h"
#include "ir/ShardingPlan.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace commlens {

/// Parses the plan JSON text. Messages are "<what is wrong>" naming the JSON path.
llvm::Expected<ShardingPlan> parsePlan(llvm::StringRef text);

/// Checks the plan against the program: every style and placement pattern matches something,
/// input keys exist, and (when given) the mesh has `worldSize` devices. With `skippedStyles`, a
/// style pattern that matches no module is not an error but a warning appended there: torch's
/// parallelize_module (torch/distributed/tensor/parallel/api.py) warns and skips such a plan entry.
llvm::Error checkPlanAgainstProgram(const ShardingPlan &plan, const ExportedProgram &program,
                                    std::optional<int64_t> worldSize = std::nullopt,
                                    std::vector<std::string> *skippedStyles = nullptr);

/// Reads and parses a plan file; messages are prefixed by nothing (the caller names the file).
llvm::Expected<ShardingPlan> readPlanFile(llvm::StringRef path);

} // namespace commlens
