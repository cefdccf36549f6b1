// The registered passes (passes/Passes.def), by name and in pipeline order: what the pipeline
// builder, --print-after, commlens-opt --passes and the docs list.
#pragma once

#include "passes/Pass.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <memory>
#include <string>
#include <vector>

namespace commlens {

struct PassInfo {
  llvm::StringLiteral name;
  /// Run by the forward-only pipeline too (the backward pipeline runs every pass).
  bool inForwardPipeline;
  /// --print-after shows the backward graph after it (once there is one).
  bool printsBackwardGraph;
  std::unique_ptr<Pass> (*create)();

  /// Whether the pipeline runs it (with `backward`: every pass).
  bool inPipeline(bool backward) const { return backward || inForwardPipeline; }
};

/// Every registered pass, in pipeline order.
llvm::ArrayRef<PassInfo> registeredPasses();
/// The registered pass called `name`, or null.
const PassInfo *findPass(llvm::StringRef name);
/// The names of the passes the pipeline runs, in order (buildPipeline's).
std::vector<std::string> pipelinePassNames(bool backward);

} // namespace commlens
