#include "api/Commlens.h"

#include "frontends/ExportedProgramReader.h"
#include "frontends/OpSchemas.h"
#include "frontends/PlanReader.h"
#include "ir/Error.h"
#include "passes/PassRegistry.h"
#include "reports/HtmlReport.h"

#include "llvm/Support/raw_ostream.h"

namespace commlens {

llvm::Expected<PredictPhase> parsePredictPhase(llvm::StringRef text) {
  if (text == "forward")
    return PredictPhase::Forward;
  if (text == "backward")
    return PredictPhase::Backward;
  if (text == "both")
    return PredictPhase::Both;
  if (text == "inference")
    return PredictPhase::Inference;
  return makeError("--phase must be forward, backward, both or inference, got '{}'", text);
}

namespace {
/// An inference prediction models what `model.eval()` runs; a program exported in training mode
/// runs other ops there (dropout masks, batch statistics), so it is refused by its first node whose
/// schema argument `train`/`training` (dropout, batch_norm, rrelu, ...) is true.
llvm::Error checkExportedInEvalMode(const ExportedProgram &program) {
  for (const std::unique_ptr<Node> &node : program.graph().nodes())
    for (llvm::StringRef arg : {"train", "training"})
      if (node->boolInput(arg))
        return makeError("{} runs in training mode ({}=True); --phase inference predicts what model.eval() runs "
                         "under torch.no_grad(): export the model in eval mode (python -m commlens.export --eval)",
                         node->where(), arg);
  return llvm::Error::success();
}
} // namespace

llvm::Expected<std::unique_ptr<Prediction>> runPrediction(std::unique_ptr<ExportedProgram> program,
                                                          std::optional<ShardingPlan> plan,
                                                          const PredictRequest &request) {
  auto labelled = [](const std::string &label, llvm::Error err) -> llvm::Error {
    if (label.empty())
      return err;
    return makeError("{}: {}", label, takeMessage(std::move(err)));
  };
  std::vector<std::string> skippedStyles;
  if (plan)
    if (llvm::Error err = checkPlanAgainstProgram(*plan, *program, request.worldSize,
                                                  request.skipUnmatchedStyles ? &skippedStyles : nullptr))
      return labelled(request.planLabel, std::move(err));
  std::unique_ptr<Prediction> p(new Prediction());
  p->program_ = std::move(program);
  p->plan_ = std::move(plan);
  bool inference = request.phase == PredictPhase::Inference;
  bool backward = request.phase != PredictPhase::Forward && !inference;
  if (inference && !request.passes)
    if (llvm::Error err = checkExportedInEvalMode(*p->program_))
      return labelled(request.programLabel, std::move(err));
  PassManager pm;
  if (request.passes) {
    for (const std::string &name : *request.passes) {
      const PassInfo *info = findPass(name);
      if (!info)
        return makeError("unknown pass '{}'", name);
      pm.add(info->create());
    }
  } else {
    buildPipeline(pm, backward);
  }
  if (request.customizePipeline)
    request.customizePipeline(pm);
  p->ctx_ = std::make_unique<PassContext>(PassContext{*p->program_, p->plan(), request.options, PredictionState()});
  p->ctx_->options.inference |= inference;
  p->ctx_->state.warnings = std::move(skippedStyles);
  // Ties decide which FSDP unit manages a parameter and what a frozen pattern reaches.
  if (p->plan_ && p->program_->tiedParametersUnknown &&
      (!p->plan_->fullyShard.empty() || !p->plan_->frozen.empty() || !p->plan_->frozenAfterParallelize.empty()))
    p->ctx_->state.warnings.push_back(
        "the parameters are on the meta device and the archive has no commlens tie record: tied parameters "
        "cannot be told apart and are taken as untied (export with commlens.export to record ties)");
  if (llvm::Error err = pm.run(*p->ctx_))
    return labelled(request.programLabel, std::move(err));
  if (!request.buildReport)
    return p;
  if (!p->plan_)
    return makeError("a report needs a plan");
  bool forward = request.passes || request.phase != PredictPhase::Backward;
  if (request.passes)
    backward = p->ctx_->state.backward != nullptr;
  const PassOptions &opts = p->ctx_->options;
  auto report = PredictionReport::build(*p->program_, *p->plan_, p->ctx_->state, forward, backward,
                                       opts.cluster ? &*opts.cluster : nullptr);
  if (!report)
    return labelled(request.programLabel, report.takeError());
  report->inference = inference;
  p->report_ = std::move(*report);
  return p;
}

std::string Prediction::table(int noiseLevel) const {
  std::string text;
  llvm::raw_string_ostream os(text);
  report_.printTable(os, noiseLevel);
  return os.str();
}

std::string Prediction::html(llvm::StringRef title) const { return predictionHtml(report_, title); }

llvm::Expected<std::unique_ptr<ExportedProgram>> decodeProgramJson(llvm::StringRef json) {
  return parseExportedProgram(json, "exported program", checkNodeAgainstOpSchema);
}

} // namespace commlens
