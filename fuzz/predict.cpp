// libFuzzer target: the whole `predict` pipeline. The input is a program's models/model.json
// (the .pt2 archive's model record), a separator line and a plan:
//
//   <model JSON>\n%%plan%%\n<plan JSON>            forward only
//   <model JSON>\n%%plan+backward%%\n<plan JSON>   forward and backward
//
// decoded with the op-schema check, the plan checked against the program, the PassManager's
// passes (unsupported ops allowed, so that the passes get further), and both reports.
#include "FuzzCommon.h"

#include "frontends/ExportedProgramReader.h"
#include "frontends/OpSchemas.h"
#include "frontends/PlanReader.h"
#include "passes/PassManager.h"
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
  if (llvm::Error err = checkPlanAgainstProgram(*plan, **program)) {
    fuzz::expectMessage(std::move(err));
    return 0;
  }
  PassManager pm;
  buildPipeline(pm, backward);
  PassOptions options;
  options.allowUnsupported = true;
  PassContext ctx{**program, &*plan, options, PredictionState()};
  if (llvm::Error err = pm.run(ctx)) {
    fuzz::expectMessage(std::move(err));
    return 0;
  }
  // A pipeline that ran lays out its report: an error here is a bug, not bad input.
  auto report = PredictionReport::build(**program, *plan, ctx.state, true, backward);
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
