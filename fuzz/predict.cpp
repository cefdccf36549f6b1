// libFuzzer target: the whole `predict` pipeline. The input is a program's models/model.json
// (the .pt2 archive's model record), a separator line and a plan:
//
//   <model JSON>\n%%plan%%\n<plan JSON>            forward only
//   <model JSON>\n%%plan+backward%%\n<plan JSON>   forward and backward
//
// decoded with the op-schema check, then runPrediction (the plan check, the passes, unsupported
// ops allowed so that the passes get further) and both reports.
#include "FuzzCommon.h"

#include "api/Commlens.h"
#include "frontends/ExportedProgramReader.h"
#include "frontends/OpSchemas.h"
#include "frontends/PlanReader.h"
#include "reports/PredictionReport.h"

#include "llvm/Support/raw_ostream.h"

using namespace commlens;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef input = fuzz::asText(data, size);
  bool backward = false;
  size_t sep = input.find("\n%%plan%%\n");
  size_t sepSize = sizeof("\n%%plan%%\n") - 1;
  if (size_t both = input.find("\n%%plan+backward%%\n"); both < sep) {
    sep = both;
    sepSize = sizeof("\n%%plan+backward%%\n") - 1;
    backward = true;
  }
  if (sep == llvm::StringRef::npos)
    return -1; // not a corpus input: keep it out of the corpus
  auto program = parseExportedProgram(input.take_front(sep), "models/model.json", checkNodeAgainstOpSchema);
  if (!fuzz::expectMessage(program))
    return 0;
  auto plan = parsePlan(input.drop_front(sep + sepSize));
  if (!fuzz::expectMessage(plan))
    return 0;
  PredictRequest request;
  request.phase = backward ? PredictPhase::Both : PredictPhase::Forward;
  request.options.dispatch.allowUnsupported = true;
  request.buildReport = false;
  auto prediction = runPrediction(std::move(*program), std::move(*plan), request);
  if (!fuzz::expectMessage(prediction))
    return 0;
  // A pipeline that ran lays out its report: an error here is a bug, not bad input.
  const Prediction &p = **prediction;
  auto report = PredictionReport::build(p.program(), *p.plan(), p.state(), true, backward);
  if (!report) {
    std::fprintf(stderr, "fuzz: the report of a prediction fails: %s\n", llvm::toString(report.takeError()).c_str());
    std::abort();
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  report->printTable(os, 1);
  os << report->toJson();
  return 0;
}
