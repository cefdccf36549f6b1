// A small pass manager: each pass has a name and a `run` over the program; the manager runs
// them in order and can print the IR after any of them (`--print-after=NAME`).
#pragma once

#include "passes/PredictionState.h"
#include "passes/SdpaBackendSelection.h"

#include "ir/Cluster.h"
#include "ir/Graph.h"
#include "ir/ShardingPlan.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace commlens {

struct PassOptions {
  /// Continue past unsupported ops, treating their DTensor operands as replicated and marking
  /// every count that depends on them approximate.
  bool allowUnsupported = false;
  /// The GPU whose dispatch a device_type="cuda" plan follows (SDPA backend choice).
  CudaTarget cudaTarget;
  /// Where the plan runs, for communication time estimates (none: no times).
  std::optional<Cluster> cluster;
};

/// What the passes share: the program they rewrite, the plan, and the analysis results.
struct PassContext {
  ExportedProgram &program;
  const ShardingPlan *plan = nullptr;
  PassOptions options;
  PredictionState state;
};

class Pass {
public:
  virtual ~Pass() = default;
  virtual llvm::StringRef name() const = 0;
  virtual llvm::Error run(PassContext &ctx) = 0;
};

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
  /// Names of the passes, in order (for `--print-after` validation and help).
  std::vector<std::string> names() const;
  /// Runs every pass; the first error stops the pipeline and is returned as is.
  llvm::Error run(PassContext &ctx);

private:
  std::vector<std::unique_ptr<Pass>> passes_;
  llvm::StringSet<> printAfter_;
  llvm::raw_ostream *printStream_ = nullptr;
  std::vector<std::pair<std::string, double>> *timings_ = nullptr;
};

/// The prediction pipeline for the forward pass: decomposition, plan application, sharding
/// propagation with redistribution planning, time estimates (with a cluster).
void buildForwardPipeline(PassManager &pm);

/// With `backward`: the forward pipeline plus the loss (appended to the forward graph before
/// propagation), autodiff and backward propagation, then time estimates. Without:
/// buildForwardPipeline.
void buildPipeline(PassManager &pm, bool backward);

} // namespace commlens
