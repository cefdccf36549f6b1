// commlens-opt: runs named prediction passes on a program given as IR text (ir/IRParser.h) and
// prints the IR after them, or the prediction table `commlens predict` prints. The driver of the
// lit tests (tests/lit), in the manner of mlir-opt.
//
//   commlens-opt FILE.ir [--plan PLAN.json] [--world-size N] [--passes=decompose,apply-plan,...]
//                [--report [--noise-level N]] [--allow-unsupported] [--cluster NAME|FILE]
//
// Bad input prints one line `commlens-opt: error: <file>: <what>` and exits 2.
#include "frontends/ClusterReader.h"
#include "frontends/PlanReader.h"
#include "ir/Error.h"
#include "ir/IRParser.h"
#include "passes/ApplyShardingPlan.h"
#include "passes/Autodiff.h"
#include "passes/CommTimeModel.h"
#include "passes/DecomposeToRuntimeOps.h"
#include "passes/PassManager.h"
#include "passes/ShardingPropagation.h"
#include "reports/PredictionReport.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <functional>
#include <map>

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
llvm::cl::opt<bool> allowUnsupported("allow-unsupported", llvm::cl::desc("continue past unsupported ops"),
                                     llvm::cl::cat(category));

constexpr int kExitBadInput = 2;

int fail(const std::string &message) {
  llvm::errs() << "commlens-opt: error: " << message << "\n";
  return kExitBadInput;
}

/// Every pass the prediction pipeline runs, by the name it reports.
std::map<std::string, std::function<std::unique_ptr<Pass>()>> passRegistry() {
  return {
      {"decompose", [] { return std::make_unique<DecomposeToRuntimeOps>(); }},
      {"apply-plan", [] { return std::make_unique<ApplyShardingPlan>(); }},
      {"loss", [] { return std::make_unique<AppendLoss>(); }},
      {"propagate", [] { return std::make_unique<ShardingPropagation>(); }},
      {"autodiff", [] { return std::make_unique<Autodiff>(); }},
      {"propagate-backward", [] { return std::make_unique<BackwardPropagation>(); }},
      {"estimate-time", [] { return std::make_unique<EstimateCommTime>(); }},
  };
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

  // The passes, checked against the prediction pipeline's own list before any input is read.
  PassManager pipeline;
  buildPipeline(pipeline, /*backward=*/true);
  std::vector<std::string> known = pipeline.names();
  auto registry = passRegistry();
  PassManager pm;
  for (const std::string &name : passNames) {
    auto it = registry.find(name);
    if (!llvm::is_contained(known, name) || it == registry.end())
      return fail(fmt::format("--passes: unknown pass '{}' (passes: {})", name, fmt::join(known, ", ")));
    pm.add(it->second());
  }
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
    std::optional<int64_t> ws;
    if (worldSize.getNumOccurrences())
      ws = worldSize.getValue();
    if (llvm::Error err = checkPlanAgainstProgram(*parsed, **program, ws))
      return fail(fmt::format("{}: {}", planFile.getValue(), takeMessage(std::move(err))));
    plan = std::move(*parsed);
  } else if (worldSize.getNumOccurrences()) {
    return fail("--world-size needs --plan");
  }

  // The IR after the last pass (the backward graph after autodiff / propagate-backward).
  if (!report && !passNames.empty()) {
    llvm::StringSet<> last;
    last.insert(passNames[passNames.size() - 1]);
    pm.printAfter(std::move(last), llvm::outs());
  }
  PassOptions options;
  options.allowUnsupported = allowUnsupported;
  if (!clusterName.empty()) {
    auto cluster = resolveCluster(clusterName);
    if (!cluster)
      return fail(fmt::format("--cluster: {}", takeMessage(cluster.takeError())));
    options.cluster = std::move(*cluster);
  }
  PassContext ctx{**program, plan ? &*plan : nullptr, options, PredictionState()};
  if (llvm::Error err = pm.run(ctx))
    return fail(fmt::format("{}: {}", inputFile.getValue(), takeMessage(std::move(err))));
  if (report) {
    auto r = PredictionReport::build(**program, *plan, ctx.state, /*forward=*/true,
                                     /*backward=*/ctx.state.backward != nullptr,
                                     options.cluster ? &*options.cluster : nullptr);
    if (!r)
      return fail(fmt::format("{}: {}", inputFile.getValue(), takeMessage(r.takeError())));
    r->printTable(llvm::outs(), static_cast<int>(noiseLevel));
  } else if (passNames.empty()) {
    printAnnotatedGraph(llvm::outs(), (*program)->graph(), ctx.state);
  }
  return 0;
}
