// libFuzzer target: the ExportedProgram JSON decoder (frontends/ExportedProgramReader) with the
// op-schema check loadPt2 runs, then what `inspect` builds from a decoded program (the report,
// its JSON, the IR printer).
#include "FuzzCommon.h"

#include "frontends/ExportedProgramReader.h"
#include "frontends/OpSchemas.h"
#include "ir/IRPrinter.h"
#include "reports/InspectReport.h"

#include "llvm/Support/raw_ostream.h"

using namespace commlens;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto program = parseExportedProgram(fuzz::asText(data, size), "models/model.json", checkNodeAgainstOpSchema);
  if (!fuzz::expectMessage(program))
    return 0;
  std::string text;
  llvm::raw_string_ostream os(text);
  InspectReport report = InspectReport::build(**program);
  report.printText(os, **program);
  os << report.toJson(**program);
  printProgram(os, **program);
  return 0;
}
