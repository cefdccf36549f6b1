// commlens-opt: runs named prediction passes on a program given as IR text (ir/IRParser.h) and
// prints the IR after them, or the prediction table `commlens predict` prints. The driver of the
// lit tests (tests/lit), in the manner of mlir-opt.
//
//   commlens-opt FILE.ir [--plan PLAN.json] [--world-size N] [--passes=decompose,apply-plan,...]
//                [--report [--noise-level N]] [--allow-unsupported] [--cluster NAME|FILE]
//
// Bad input prints one line `commlens-opt: error: <file>: <what>` and exits 2.
#include "api/Commlens.h"
#include "frontends/ClusterReader.h"
#include "frontends/PlanReader.h"
#include "ir/Error.h"
#include "ir/IRParser.h"
#include "passes/PassRegistry.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>


using namespace commlens;

namespace {

llvm::cl::OptionCategory category("commlens-opt options");
llvm::cl::opt<std::string> inputFile(llvm::cl::Positional, llvm::cl::desc("<IR file, - for stdin>"), llvm::cl::init("-"),
                                     llvm::cl::cat(category));
llvm::cl::opt<std::string> planFile("plan", llvm::cl::desc("sharding plan JSON (docs/plan-format.md)"),
                                    llvm::cl::value_desc("file"), llvm::cl::cat(category));
llvm::cl::opt<int64_t> worldSize("world-size", llvm::cl::desc("check that the plan's mesh has this many devices"),
                                 llvm::cl::init(0), llvm::cl::cat(category));
llvm::cl::list<std::string> passNames("passes", llvm::cl::desc("passes to run, in order"), llvm::cl::CommaSeparated,
                                      llvm::cl::value_desc("pass,pass,..."), llvm::cl::cat(category));
llvm::cl::opt<bool> report("report", llvm::cl::desc("print the prediction table instead of the IR"),
                           llvm::cl::cat(category));
llvm::cl::opt<unsigned> noiseLevel("noise-level", llvm::cl::desc("the table's noise level (with --report)"),
                                   llvm::cl::init(0), llvm::cl::cat(category));
llvm::cl::opt<std::string> clusterName("cluster", llvm::cl::desc("cluster preset or topology file (estimate-time)"),
                                       llvm::cl::value_desc("name|file"), llvm::cl::cat(category));
llvm::cl::opt<bool> noGrad("no-grad",
                           llvm::cl::desc("the forward runs under torch.no_grad(), as in predict --phase inference"),
                           llvm::cl::cat(category));
llvm::cl::opt<double> routingSkew("routing-skew",
                                  llvm::cl::desc("the busiest expert-parallel rank's routed rows over the balanced "
                                                 "number (default 1)"),
                                  llvm::cl::init(1.0), llvm::cl::cat(category));
llvm::cl::opt<bool> allowUnsupported("allow-unsupported", llvm::cl::desc("continue past unsupported ops"),
                                     llvm::cl::cat(category));

constexpr int kExitBadInput = 2;

int fail(const std::string &message) {
  llvm::errs() << "commlens-opt: error: " << message << "\n";
  return kExitBadInput;
}

} // namespace

int main(int argc, char **argv) {
  llvm::cl::HideUnrelatedOptions(category);
  std::string clErrors;
  llvm::raw_string_ostream clStream(clErrors);
  if (!llvm::cl::ParseCommandLineOptions(argc, argv, "commlens pass driver\n", &clStream)) {
    // llvm::cl writes "commlens-opt: <what>"; keep its first line, in this tool's error format.
    llvm::StringRef first = llvm::StringRef(clStream.str()).split('\n').first.trim();
    first.consume_front("commlens-opt: ");
    return fail(first.str());
  }

  // The passes, checked against the registry before any input is read.
  for (const std::string &name : passNames)
    if (!findPass(name))
      return fail(fmt::format("--passes: unknown pass '{}' (passes: {})", name,
                              fmt::join(pipelinePassNames(/*backward=*/true), ", ")));
  if (report && planFile.empty())
    return fail("--report needs --plan");

  auto program = parseProgramFile(inputFile);
  if (!program)
    return fail(fmt::format("{}: {}", inputFile.getValue(), takeMessage(program.takeError())));
  std::optional<ShardingPlan> plan;
  if (!planFile.empty()) {
    auto parsed = readPlanFile(planFile);
    if (!parsed)
      return fail(fmt::format("{}: {}", planFile.getValue(), takeMessage(parsed.takeError())));
    plan = std::move(*parsed);
  } else if (worldSize.getNumOccurrences()) {
    return fail("--world-size needs --plan");
  }

  PredictRequest request;
  request.passes = std::vector<std::string>(passNames.begin(), passNames.end());
  if (worldSize.getNumOccurrences())
    request.worldSize = worldSize.getValue();
  request.skipUnmatchedStyles = false;
  request.buildReport = report;
  request.planLabel = planFile.getValue();
  request.programLabel = inputFile.getValue();
  request.options.dispatch.allowUnsupported = allowUnsupported;
  if (llvm::Error err = setRoutingSkew(request.options.dispatch, routingSkew))
    return fail(fmt::format("--routing-skew: {}", takeMessage(std::move(err))));
  request.options.inference = noGrad;
  if (!clusterName.empty()) {
    auto cluster = resolveCluster(clusterName);
    if (!cluster)
      return fail(fmt::format("--cluster: {}", takeMessage(cluster.takeError())));
    request.options.cluster = std::move(*cluster);
  }
  // The IR after the last pass (the backward graph after autodiff / propagate-backward).
  if (!report && !passNames.empty())
    request.customizePipeline = [&](PassManager &pm) {
      llvm::StringSet<> last;
      last.insert(passNames[passNames.size() - 1]);
      pm.printAfter(std::move(last), llvm::outs());
    };
  auto prediction = runPrediction(std::move(*program), std::move(plan), request);
  if (!prediction)
    return fail(takeMessage(prediction.takeError()));
  if (report)
    (*prediction)->report().printTable(llvm::outs(), static_cast<int>(noiseLevel));
  else if (passNames.empty())
    printAnnotatedGraph(llvm::outs(), (*prediction)->program().graph(), (*prediction)->state());
  return 0;
}
