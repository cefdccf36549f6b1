// A small pass manager: it runs passes in order and can print the IR after any of them
// (`--print-after=NAME`); and the prediction pipeline, built from the registry (passes/Passes.def).
#pragma once

#include "passes/Pass.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace commlens {

class PassManager {
public:
  void add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  /// Prints the IR (with placements, once known) after each named pass to `os`.
  void printAfter(llvm::StringSet<> names, llvm::raw_ostream &os) {
    printAfter_ = std::move(names);
    printStream_ = &os;
  }
  /// Records each pass's wall time into `timings` as it runs (`--time-passes`).
  void timeInto(std::vector<std::pair<std::string, double>> *timings) { timings_ = timings; }
  /// Runs every pass; the first error stops the pipeline and is returned as is.
  llvm::Error run(PassContext &ctx);

private:
  std::vector<std::unique_ptr<Pass>> passes_;
  llvm::StringSet<> printAfter_;
  llvm::raw_ostream *printStream_ = nullptr;
  std::vector<std::pair<std::string, double>> *timings_ = nullptr;
};

/// The prediction pipeline: every registered pass with `backward` (decomposition, plan
/// application, the loss, sharding propagation with redistribution planning, autodiff, backward
/// propagation, time estimates); without, those of the forward pipeline.
void buildPipeline(PassManager &pm, bool backward);

} // namespace commlens
