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

#include <functional>
#include <memory>
#include <string>

namespace commlens {

enum class PredictPhase : uint8_t { Forward, Backward, Both };
/// "forward", "backward" or "both".
llvm::Expected<PredictPhase> parsePredictPhase(llvm::StringRef text);

struct PredictRequest {
  PredictPhase phase = PredictPhase::Forward;
  /// CUDA target, cluster (time estimates), --allow-unsupported.
  PassOptions options;
  /// Called with the standard pipeline before it runs: add, replace or instrument passes.
  std::function<void(PassManager &)> customizePipeline;
};

/// A finished prediction: owns the program (as the passes left it), the plan, the analysis
/// state and the report built from them.
class Prediction {
public:
  /// Runs the pipeline on `program` (which it rewrites) under `plan`, after checking the plan
  /// against the program. Errors are one line naming the node and module (or the plan entry).
  static llvm::Expected<std::unique_ptr<Prediction>> run(std::unique_ptr<ExportedProgram> program, ShardingPlan plan,
                                                         const PredictRequest &request);

  const ExportedProgram &program() const { return *program_; }
  const ShardingPlan &plan() const { return plan_; }
  const PredictionState &state() const { return ctx_->state; }
  const PredictionReport &report() const { return report_; }

  /// CommDebugMode's generate_json_dump tree plus commlens' records (predict --format json).
  std::string json() const { return report_.toJson(); }
  /// CommDebugMode's tracing table at `noiseLevel` (predict's default output).
  std::string table(int noiseLevel = 0) const;
  /// The self-contained HTML page (predict --format html).
  std::string html(llvm::StringRef title) const;

private:
  Prediction() = default;
  std::unique_ptr<ExportedProgram> program_;
  ShardingPlan plan_;
  std::unique_ptr<PassContext> ctx_;
  PredictionReport report_;
};

/// Decodes the ExportedProgram JSON (`models/model.json` of a .pt2 archive, or the
/// `exported_program` bytes torch._export.serde.serialize.serialize returns), checking each node
/// against its operator's schema (OpSchemas.h). No weights config: parameters the archive would store
/// once are not recognised as tied.
llvm::Expected<std::unique_ptr<ExportedProgram>> decodeProgramJson(llvm::StringRef json);

} // namespace commlens
