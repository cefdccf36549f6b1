// libFuzzer target: the counts reader `compare` uses (reports/CommCounts: CommDebugMode's
// generate_json_dump tree or a commlens-counts file), then everything compare does with a file
// it read: both writers, and the comparison against itself (table and JSON).
#include "FuzzCommon.h"

#include "reports/CommCounts.h"
#include "reports/CompareReport.h"

#include "llvm/Support/raw_ostream.h"

using namespace commlens;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto counts = parseCommCounts(fuzz::asText(data, size));
  if (!fuzz::expectMessage(counts))
    return 0;
  std::string text = counts->toCountsJson();
  text += counts->toTreeJson();
  CompareReport report = CompareReport::build(*counts, *counts, counts->onlyPhase);
  llvm::raw_string_ostream os(text);
  report.printText(os);
  os << report.toJson();
  if (!report.identical()) {
    std::fprintf(stderr, "fuzz: a counts file differs from itself\n");
    std::abort();
  }
  // What compare writes must read back.
  auto again = parseCommCounts(counts->toCountsJson());
  if (!again) {
    std::fprintf(stderr, "fuzz: toCountsJson output does not parse: %s\n", llvm::toString(again.takeError()).c_str());
    std::abort();
  }
  return 0;
}
