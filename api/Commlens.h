// The commlens library API for compiler pipelines and bindings: decode a program (a .pt2 file,
// or the ExportedProgram JSON torch's serializer writes, in memory) and a plan (file or text),
// run the prediction pipeline (optionally with passes of one's own), and read the result as the
// prediction state, the report, or its JSON, table and HTML renderings.
#pragma once

#include "ir/Graph.h"
#include "ir/ShardingPlan.h"
#include "passes/PassManager.h"
#include "reports/PredictionReport.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace commlens {

/// What a prediction covers. Inference is the forward of `model.eval()` under `torch.no_grad()`
/// (the first generate() step; later ones skip an FSDP2 root unit's all-gather, README.md): no
/// loss, no backward, and a program exported in eval mode.
enum class PredictPhase : uint8_t { Forward, Backward, Both, Inference };
/// "forward", "backward", "both" or "inference".
llvm::Expected<PredictPhase> parsePredictPhase(llvm::StringRef text);

struct PredictRequest {
  PredictPhase phase = PredictPhase::Forward;
  /// CUDA target, cluster (time estimates), --allow-unsupported.
  PassOptions options;
  /// The passes to run, by their registered names (passes/Passes.def), instead of the phase's
  /// pipeline (commlens-opt --passes). The report then covers the forward phase, and the backward
  /// one once a pass built it.
  std::optional<std::vector<std::string>> passes;
  /// The device count the plan's mesh must have (--world-size).
  std::optional<int64_t> worldSize;
  /// A style pattern that matches no module: skipped with torch's warning, as parallelize_module
  /// does (true), or refused (false: commlens-opt).
  bool skipUnmatchedStyles = true;
  /// Build the report after the passes (false: the state only, as commlens-opt prints IR).
  bool buildReport = true;
  /// What errors name: a plan error reads "<planLabel>: <what>", a pass or report error
  /// "<programLabel>: <what>" (just "<what>" when empty).
  std::string planLabel = "plan";
  std::string programLabel;
  /// Called with the pipeline before it runs: add, replace or instrument passes.
  std::function<void(PassManager &)> customizePipeline;
};

class Prediction;

/// The one prediction recipe, shared by the CLI (predict, rank), commlens-opt, the Python
/// bindings and the fuzz targets: checks the plan against `program` (once, here), builds the
/// pipeline, runs it on `program` (which it rewrites) and builds the report. Without a plan only
/// passes that need none can run (commlens-opt). Errors are one line naming the node and module
/// (or the plan entry).
llvm::Expected<std::unique_ptr<Prediction>> runPrediction(std::unique_ptr<ExportedProgram> program,
                                                          std::optional<ShardingPlan> plan,
                                                          const PredictRequest &request);

/// A finished prediction: owns the program (as the passes left it), the plan, the analysis
/// state and the report built from them.
class Prediction {
public:
  const ExportedProgram &program() const { return *program_; }
  /// The plan (null for a run without one).
  const ShardingPlan *plan() const { return plan_ ? &*plan_ : nullptr; }
  const PredictionState &state() const { return ctx_->state; }
  /// The report (empty when the request built none).
  const PredictionReport &report() const { return report_; }

  /// CommDebugMode's generate_json_dump tree plus commlens' records (predict --format json).
  std::string json() const { return report_.toJson(); }
  /// CommDebugMode's tracing table at `noiseLevel` (predict's default output).
  std::string table(int noiseLevel = 0) const;
  /// The self-contained HTML page (predict --format html).
  std::string html(llvm::StringRef title) const;

private:
  friend llvm::Expected<std::unique_ptr<Prediction>> runPrediction(std::unique_ptr<ExportedProgram>,
                                                                   std::optional<ShardingPlan>, const PredictRequest &);
  Prediction() = default;
  std::unique_ptr<ExportedProgram> program_;
  std::optional<ShardingPlan> plan_;
  std::unique_ptr<PassContext> ctx_;
  PredictionReport report_;
};

/// Decodes the ExportedProgram JSON (`models/model.json` of a .pt2 archive, or the
/// `exported_program` bytes torch._export.serde.serialize.serialize returns), checking each node
/// against its operator's schema (OpSchemas.h). No weights config: parameters the archive would store
/// once are not recognised as tied.
llvm::Expected<std::unique_ptr<ExportedProgram>> decodeProgramJson(llvm::StringRef json);

} // namespace commlens
