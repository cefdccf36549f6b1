#include "tools/CompareCommand.h"

#include "ir/Error.h"
#include "reports/CompareReport.h"

#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace commlens {

namespace {

constexpr int kExitDifferent = 1;
constexpr int kExitBadInput = 2;

int fail(const std::string &message) {
  llvm::errs() << "commlens: error: " << message << "\n";
  return kExitBadInput;
}

} // namespace

int runCompare(int argc, char **argv) {
  std::vector<std::string> positional;
  bool asJson = false;
  std::string phaseArg = "both", outPath;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const std::string &name) -> std::optional<std::string> {
      if (arg == name) {
        if (i + 1 >= argc)
          return std::nullopt;
        return std::string(argv[++i]);
      }
      return arg.substr(name.size() + 1); // --name=value
    };
    if (arg == "--json") {
      asJson = true;
    } else if (arg == "--phase" || arg.rfind("--phase=", 0) == 0) {
      auto v = value("--phase");
      if (!v)
        return fail("option --phase needs a value");
      phaseArg = *v;
    } else if (arg == "-o" || arg.rfind("-o=", 0) == 0) {
      auto v = value("-o");
      if (!v)
        return fail("option -o needs a value");
      outPath = *v;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return fail(fmt::format("unknown option '{}'", arg));
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2)
    return fail("compare takes two arguments: PREDICTED MEASURED");
  std::optional<CommPhase> phase;
  if (phaseArg == "forward")
    phase = CommPhase::Forward;
  else if (phaseArg == "backward")
    phase = CommPhase::Backward;
  else if (phaseArg != "both")
    return fail(fmt::format("unknown phase '{}' (expected forward, backward or both)", phaseArg));

  auto predicted = loadCommCounts(positional[0]);
  if (!predicted)
    return fail(takeMessage(predicted.takeError()));
  auto measured = loadCommCounts(positional[1]);
  if (!measured)
    return fail(takeMessage(measured.takeError()));

  // A file that holds one phase only (its "phase", e.g. `commlens.measure --phase forward`)
  // cannot be compared in the other phase: its empty sections would read as zero collectives.
  for (const auto &[path, counts] : {std::pair{positional[0], &*predicted}, std::pair{positional[1], &*measured}}) {
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
  else
    report.printText(os);
  os.flush();
  if (outPath.empty()) {
    llvm::outs() << text;
  } else {
    std::ofstream out(outPath, std::ios::binary);
    if (!out || !(out << text))
      return fail(fmt::format("{}: cannot write file", outPath));
  }
  return report.identical() ? 0 : kExitDifferent;
}

} // namespace commlens
