// Decodes the serialized ExportedProgram JSON (torch/_export/serde schema, major version 8)
// and the archive's weights config into the commlens IR. Pure JSON: no LibTorch, no unpickling.
#pragma once

#include "ir/Graph.h"

#include "llvm/Support/Error.h"

#include <functional>
#include <memory>

namespace commlens {

/// The export schema major version this reader understands.
inline constexpr int kSupportedSchemaMajor = 8;

/// A check of each decoded node (e.g. against its op's schema): an error names what is wrong; the
/// reader adds the JSON path, the node and its module.
using NodeCheck = std::function<llvm::Error(const Node &)>;

/// Parses `models/<name>.json`. Errors name the record and the JSON path at fault. Node names are
/// unique, every reference to a tensor names a tensor, and `check` (when given) accepts each node.
/// `padded`: as for parseJsonText.
llvm::Expected<std::unique_ptr<ExportedProgram>> parseExportedProgram(llvm::StringRef modelJson,
                                                                      llvm::StringRef recordName = "models/model.json",
                                                                      const NodeCheck &check = nullptr,
                                                                      bool padded = false);

/// Parses a `data/weights/<name>_weights_config.json` PayloadConfig into `program.weights`.
llvm::Error parseWeightsConfig(llvm::StringRef configJson, ExportedProgram &program,
                               llvm::StringRef recordName = "data/weights/model_weights_config.json");

/// Splits an nn_module_stack string ("key,path,type;key,path,type", outermost first).
/// The call index is the key's "@N" suffix.
llvm::Expected<llvm::SmallVector<ModuleStackEntry, 4>> parseModuleStack(llvm::StringRef text);

} // namespace commlens
