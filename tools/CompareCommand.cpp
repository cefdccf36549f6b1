#include "tools/CompareCommand.h"

#include "ir/Error.h"
#include "reports/CompareReport.h"
#include "reports/HtmlReport.h"

#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

namespace commlens {

using namespace cli;

int runCompare(int argc, char **argv) {
  auto args = parseArgs(argc, argv, 2, {"--json", "--html"}, {"--phase", "-o"});
  if (!args)
    return fail(takeMessage(args.takeError()));
  if (args->help)
    return printUsage("compare");
  const std::vector<std::string> &positional = args->positional;
  bool asJson = args->flag("--json"), asHtml = args->flag("--html");
  if (asJson && asHtml)
    return fail("--json and --html exclude each other");
  std::string phaseArg = args->option("--phase").empty() ? "both" : args->option("--phase");
  std::string outPath = args->option("-o");
  if (positional.size() != 2)
    return fail("compare takes two arguments: PREDICTED MEASURED");
  std::optional<CommPhase> phase;
  bool inference = phaseArg == "inference";
  if (phaseArg == "forward" || inference)
    phase = CommPhase::Forward;
  else if (phaseArg == "backward")
    phase = CommPhase::Backward;
  else if (phaseArg != "both")
    return fail(fmt::format("unknown phase '{}' (expected forward, backward, both or inference)", phaseArg));

  auto predicted = loadCommCounts(positional[0]);
  if (!predicted)
    return fail(takeMessage(predicted.takeError()));
  auto measured = loadCommCounts(positional[1]);
  if (!measured)
    return fail(takeMessage(measured.takeError()));

  // A file that holds one phase only (its "phase", e.g. `commlens.measure --phase forward`)
  // cannot be compared in the other phase: its empty sections would read as zero collectives.
  // An inference forward is compared only with an inference forward (a no-grad forward issues other
  // collectives than a training one under transformers' styles); a file that states no "phase"
  // (CommDebugMode's own dump) is taken as what it is compared as.
  for (const auto &[path, counts] : {std::pair{positional[0], &*predicted}, std::pair{positional[1], &*measured}}) {
    if (counts->inference != inference && (counts->inference || counts->phaseStated)) {
      llvm::StringRef label = counts->phaseLabel();
      return fail(fmt::format("{}: holds {} counts (\"phase\": \"{}\"); compare with --phase {}", path,
                              label == "both" ? "training" : label.str(), label.str(),
                              counts->inference ? "inference" : "forward, backward or both"));
    }
    if (counts->onlyPhase && phase != counts->onlyPhase) {
      llvm::StringRef only = phaseName(*counts->onlyPhase);
      return fail(fmt::format("{}: holds {} counts only (\"phase\": \"{}\"); compare with --phase {}", path,
                              only.str(), only.str(), only.str()));
    }
  }
  CompareReport report = CompareReport::build(*predicted, *measured, phase);
  report.predictedPath = positional[0];
  report.measuredPath = positional[1];
  std::string text;
  llvm::raw_string_ostream os(text);
  if (asJson)
    os << report.toJson();
  else if (asHtml)
    os << compareHtml(report);
  else
    report.printText(os);
  os.flush();
  if (int rc = emit(text, outPath))
    return rc;
  return report.identical() ? 0 : kExitDifferent;
}

} // namespace commlens
