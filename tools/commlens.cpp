// The commlens command-line tool.
#include "frontends/PlanReader.h"
#include "frontends/Pt2Loader.h"
#include "ir/Error.h"
#include "ir/IRPrinter.h"
#include "passes/PassManager.h"
#include "reports/PredictionReport.h"
#include "reports/InspectReport.h"
#include "tools/CompareCommand.h"

#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <fstream>
#include <string>
#include <vector>

using namespace commlens;

namespace {

constexpr const char *kUsage = R"(usage: commlens <command> [options]

commands:
  inspect MODEL.pt2 [--json] [--print-ir] [-o FILE]
      module tree in forward order with node counts, parameters, parameter execution order
  predict MODEL.pt2 --plan PLAN.json [--phase forward] [--format table|json] [--noise-level N]
          [-o FILE] [--print-after=PASS[,PASS]] [--allow-unsupported] [--world-size N]
      predicts the collectives DTensor issues, per module (passes: decompose, apply-plan, propagate)
  check-plan MODEL.pt2 --plan PLAN.json [--world-size N]
      validates a plan against the model and lists the modules each style applies to
  compare PREDICTED MEASURED [--json] [--phase forward|backward|both] [-o FILE]
      predicted vs measured collectives per module, collective and phase; exit 1 if any differ
)";

/// Exit codes: 0 success, 1 a comparison found differences, 2 bad input or usage.
constexpr int kExitBadInput = 2;

int fail(const std::string &message) {
  llvm::errs() << "commlens: error: " << message << "\n";
  return kExitBadInput;
}

/// Writes to -o FILE or stdout.
int emit(const std::string &text, const std::string &outPath) {
  if (outPath.empty()) {
    llvm::outs() << text;
    return 0;
  }
  std::ofstream out(outPath, std::ios::binary);
  if (!out || !(out << text))
    return fail(fmt::format("{}: cannot write file", outPath));
  return 0;
}

struct Args {
  std::vector<std::string> positional;
  std::vector<std::string> flags;
  std::vector<std::pair<std::string, std::string>> options;

  bool flag(const char *name) const { return std::find(flags.begin(), flags.end(), name) != flags.end(); }
  std::string option(const char *name) const {
    for (const auto &[k, v] : options)
      if (k == name)
        return v;
    return {};
  }
};

/// Splits argv into positionals, known flags and known options (which take a value).
llvm::Expected<Args> parseArgs(int argc, char **argv, int first, std::initializer_list<const char *> flags,
                               std::initializer_list<const char *> options) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() > 1 && arg[0] == '-') {
      std::string key = arg, value;
      bool inlineValue = false;
      if (auto eq = arg.find('='); eq != std::string::npos) {
        key = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        inlineValue = true;
      }
      if (std::find_if(flags.begin(), flags.end(), [&](const char *f) { return key == f; }) != flags.end() &&
          !inlineValue) {
        a.flags.push_back(key);
        continue;
      }
      if (std::find_if(options.begin(), options.end(), [&](const char *o) { return key == o; }) != options.end()) {
        if (!inlineValue) {
          if (i + 1 >= argc)
            return makeError("option {} needs a value", key);
          value = argv[++i];
        }
        a.options.emplace_back(key, value);
        continue;
      }
      return makeError("unknown option '{}'", arg);
    }
    a.positional.push_back(arg);
  }
  return a;
}

int runInspect(int argc, char **argv) {
  auto args = parseArgs(argc, argv, 2, {"--json", "--print-ir"}, {"-o"});
  if (!args)
    return fail(takeMessage(args.takeError()));
  if (args->positional.size() != 1)
    return fail("inspect takes one MODEL.pt2 argument");
  const std::string &path = args->positional[0];
  auto program = loadPt2(path);
  if (!program)
    return fail(fmt::format("{}: {}", path, takeMessage(program.takeError())));
  std::string text;
  llvm::raw_string_ostream os(text);
  if (args->flag("--print-ir")) {
    printProgram(os, **program);
  } else {
    InspectReport report = InspectReport::build(**program);
    if (args->flag("--json"))
      os << report.toJson(**program);
    else
      report.printText(os, **program);
  }
  return emit(os.str(), args->option("-o"));
}

/// The program and plan of predict / check-plan, the plan checked against the program (and the
/// --world-size option, when given). Messages name the file at fault.
struct ModelAndPlan {
  std::unique_ptr<ExportedProgram> program;
  ShardingPlan plan;
};

llvm::Expected<ModelAndPlan> loadModelAndPlan(const Args &args, const std::string &modelPath,
                                              const std::string &planPath) {
  std::optional<int64_t> worldSize;
  if (std::string ws = args.option("--world-size"); !ws.empty()) {
    int64_t n;
    if (llvm::StringRef(ws).getAsInteger(10, n) || n < 1)
      return makeError("--world-size needs a positive integer, got '{}'", ws);
    worldSize = n;
  }
  auto program = loadPt2(modelPath);
  if (!program)
    return makeError("{}: {}", modelPath, takeMessage(program.takeError()));
  auto plan = readPlanFile(planPath);
  if (!plan)
    return makeError("{}: {}", planPath, takeMessage(plan.takeError()));
  if (llvm::Error err = checkPlanAgainstProgram(*plan, **program, worldSize))
    return makeError("{}: {}", planPath, takeMessage(std::move(err)));
  return ModelAndPlan{std::move(*program), std::move(*plan)};
}

int runPredict(int argc, char **argv) {
  auto args = parseArgs(argc, argv, 2, {"--allow-unsupported"},
                        {"--plan", "--phase", "--format", "--noise-level", "-o", "--print-after", "--world-size"});
  if (!args)
    return fail(takeMessage(args.takeError()));
  if (args->positional.size() != 1 || args->option("--plan").empty())
    return fail("predict takes MODEL.pt2 and --plan PLAN.json");
  std::string phase = args->option("--phase").empty() ? "forward" : args->option("--phase");
  if (phase != "forward" && phase != "backward" && phase != "both")
    return fail(fmt::format("--phase must be forward, backward or both, got '{}'", phase));
  std::string format = args->option("--format").empty() ? "table" : args->option("--format");
  if (format != "table" && format != "json")
    return fail(fmt::format("--format must be table or json, got '{}'", format));
  int noise = 0;
  if (std::string n = args->option("--noise-level"); !n.empty() && (llvm::StringRef(n).getAsInteger(10, noise) || noise < 0))
    return fail(fmt::format("--noise-level needs a non-negative integer, got '{}'", n));
  const std::string &modelPath = args->positional[0];
  std::string planPath = args->option("--plan");
  auto inputs = loadModelAndPlan(*args, modelPath, planPath);
  if (!inputs)
    return fail(takeMessage(inputs.takeError()));
  auto &[program, plan] = *inputs;

  PassManager pm;
  buildPipeline(pm, phase != "forward");
  if (std::string printAfter = args->option("--print-after"); !printAfter.empty()) {
    llvm::StringSet<> names;
    llvm::SmallVector<llvm::StringRef, 4> parts;
    llvm::StringRef(printAfter).split(parts, ',');
    std::vector<std::string> known = pm.names();
    for (llvm::StringRef p : parts) {
      if (std::find(known.begin(), known.end(), p.str()) == known.end())
        return fail(fmt::format("--print-after: unknown pass '{}' (passes: {})", p.str(), fmt::join(known, ", ")));
      names.insert(p);
    }
    pm.printAfter(std::move(names), llvm::errs());
  }
  PassContext ctx{*program, &plan, PassOptions{args->flag("--allow-unsupported")}, PredictionState()};
  if (llvm::Error err = pm.run(ctx))
    return fail(fmt::format("{}: {}", modelPath, takeMessage(std::move(err))));
  PredictionReport report =
      PredictionReport::build(*program, plan, ctx.state, phase != "backward", phase != "forward");
  std::string text;
  llvm::raw_string_ostream os(text);
  if (format == "json")
    os << report.toJson();
  else
    report.printTable(os, noise);
  return emit(os.str(), args->option("-o"));
}

int runCheckPlan(int argc, char **argv) {
  auto args = parseArgs(argc, argv, 2, {}, {"--plan", "--world-size"});
  if (!args)
    return fail(takeMessage(args.takeError()));
  if (args->positional.size() != 1 || args->option("--plan").empty())
    return fail("check-plan takes MODEL.pt2 and --plan PLAN.json");
  const std::string &modelPath = args->positional[0];
  std::string planPath = args->option("--plan");
  auto inputs = loadModelAndPlan(*args, modelPath, planPath);
  if (!inputs)
    return fail(takeMessage(inputs.takeError()));
  auto &[program, plan] = *inputs;
  llvm::outs() << "plan " << (plan.name.empty() ? planPath : plan.name) << " on " << plan.mesh.str() << "\n";
  const Graph &g = program->graph();
  for (const ParallelizeStep &step : plan.steps) {
    llvm::outs() << "parallelize on mesh dim "
                 << (step.meshDim ? plan.mesh.dimNames[*step.meshDim] : std::string("(whole mesh)")) << "\n";
    for (const ParallelStyle &style : step.styles) {
      llvm::outs() << fmt::format("  {:<28} {:<26}", style.pattern, name(style.kind).str());
      for (const ModuleScope *s : g.scopes().inForwardOrder())
        if (matchesModulePath(style.pattern, s->path()))
          llvm::outs() << ' ' << s->displayName();
      llvm::outs() << "\n";
    }
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    (argc < 2 ? llvm::errs() : llvm::outs()) << kUsage;
    return argc < 2 ? kExitBadInput : 0;
  }
  std::string command = argv[1];
  if (command == "inspect")
    return runInspect(argc, argv);
  if (command == "predict")
    return runPredict(argc, argv);
  if (command == "check-plan")
    return runCheckPlan(argc, argv);
  if (command == "compare")
    return runCompare(argc, argv);
  return fail(fmt::format("unknown command '{}' (see commlens --help)", command));
}
