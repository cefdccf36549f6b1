// What a pass is: a name (passes/Passes.def, the registry) and a `run` over the PassContext, the
// program it rewrites, the plan, the options and the analysis state the passes share.
#pragma once

#include "aten/SdpaBackendSelection.h"
#include "ir/Cluster.h"
#include "ir/Graph.h"
#include "ir/ShardingPlan.h"
#include "runtime/OpDispatch.h"
#include "state/PredictionState.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>

namespace commlens {

struct PassOptions {
  /// What the dispatch of runtime ops assumes: whether to continue past unsupported ops (their
  /// DTensor operands taken as replicated, every count depending on them approximate), and the
  /// routing model of MoE tokens.
  DispatchOptions dispatch;
  /// The GPU whose dispatch a device_type="cuda" plan follows (SDPA backend choice).
  CudaTarget cudaTarget;
  /// Where the plan runs, for communication time estimates (none: no times).
  std::optional<Cluster> cluster;
  /// The forward runs under torch.no_grad() (predict --phase inference): styles whose hooks
  /// depend on the grad mode take their no-grad path.
  bool inference = false;
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

} // namespace commlens
