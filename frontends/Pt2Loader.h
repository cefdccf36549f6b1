// Loads a `torch.export.save` archive into the IR: finds the model record and weights config,
// checks the archive format, and parses them. Messages are "<what is wrong>" (the caller adds
// the file name).
#pragma once

#include "ir/Graph.h"

#include "llvm/Support/Error.h"

#include <memory>

namespace commlens {

llvm::Expected<std::unique_ptr<ExportedProgram>> loadPt2(llvm::StringRef path);
/// The same from the archive's bytes in memory (no file).
llvm::Expected<std::unique_ptr<ExportedProgram>> loadPt2Buffer(llvm::StringRef bytes);

} // namespace commlens
