// The commlens command-line tool.
#include "api/Commlens.h"
#include "frontends/ClusterReader.h"
#include "frontends/PlanReader.h"
#include "frontends/Pt2Loader.h"
#include "ir/Error.h"
#include "ir/IRPrinter.h"
#include "comm/CommTimeModel.h"
#include "passes/PassManager.h"
#include "passes/PassRegistry.h"
#include "reports/PredictionReport.h"
#include "reports/HtmlReport.h"
#include "reports/InspectReport.h"
#include "tools/CompareCommand.h"
#include "tools/RankCommand.h"

#include "llvm/Support/BuryPointer.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>
#ifdef COMMLENS_MIMALLOC
#include <mimalloc.h>
#endif

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

using namespace commlens;

namespace {

constexpr const char *kUsage = R"(usage: commlens <command> [options]

commands:
  inspect MODEL.pt2 [--json] [--print-ir] [-o FILE]
      module tree in forward order with node counts, parameters, parameter execution order
  predict MODEL.pt2 --plan PLAN.json [--phase PHASE] [--format table|json|html] [--noise-level N]
          [-o FILE] [--print-after=PASS[,PASS]] [--allow-unsupported] [--world-size N]
          [--gpu NAME] [--gpu-arch MAJOR.MINOR] [--cudnn-version N] [--cuda-version MAJOR.MINOR]
          [--torch-version V] [--cluster NAME|TOPOLOGY.json] [--routing-skew F] [--time-passes]
      predicts the collectives DTensor issues, per module (passes: decompose, apply-plan, propagate),
      with their communication time on a cluster; PHASE forward (default), backward, both, or
      inference (model.eval() under torch.no_grad(): no loss, no backward; an eval-mode program)
  rank MODEL.pt2 --plan PLAN.json [--plan ...] [--plans DIR] [--cluster NAME|TOPOLOGY.json]
       [--phase forward|both|inference] [--format table|json] [--routing-skew F] [--jobs N] [-o FILE]
      predicts every plan in one process and ranks them by communication time per step
  collective-time --cluster NAME|TOPOLOGY.json --collective KIND --bytes N --ranks N [--nodes N]
      estimated time of one collective (KIND: all_reduce, all_gather, reduce_scatter, all_to_all)
  check-plan MODEL.pt2 --plan PLAN.json [--world-size N]
      validates a plan against the model and lists the modules each style applies to
  compare PREDICTED MEASURED [--json|--html] [--phase forward|backward|both|inference] [-o FILE]
      predicted vs measured collectives per module, collective and phase; exit 1 if any differ

inspect, predict, rank and check-plan read a TorchScript archive (torch.jit.save) only with
--torchscript, which runs its code in a worker process under limits: [--torchscript-memory BYTES[K|M|G]]
[--torchscript-cpu-seconds N] [--torchscript-open-files N] [--torchscript-wall-seconds N]
(README.md, Security and trust)
)";

/// Per-command usage, for `commlens <command> --help`.
constexpr std::pair<const char *, const char *> kCommandUsage[] = {
    {"inspect", R"(usage: commlens inspect MODEL.pt2 [--json] [--print-ir] [-o FILE]
  module tree in forward order with node counts, parameters, parameter execution order
)" COMMLENS_TORCHSCRIPT_USAGE},
    {"predict", R"(usage: commlens predict MODEL.pt2 --plan PLAN.json [--phase forward|backward|both|inference]
                        [--format table|json|html] [--noise-level N] [-o FILE] [--print-after=PASS[,PASS]]
                        [--allow-unsupported] [--world-size N]
                        [--gpu NAME] [--gpu-arch MAJOR.MINOR] [--cudnn-version N]
                        [--cuda-version MAJOR.MINOR] [--torch-version V] [--cluster NAME|TOPOLOGY.json]
                        [--routing-skew F] [--time-passes]
  predicts the collectives DTensor issues, per module (passes: decompose, apply-plan, propagate)
  --phase inference predicts the first forward of model.eval() under torch.no_grad() (the first
  generate() step): no loss, no backward; the program must be exported in eval mode
  (commlens.export --eval)
  --time-passes prints the wall time of loading, of each pass and of the report to stderr
  --cluster times every collective on a cluster preset or topology file (docs/cluster-format.md):
  per collective, module, mesh dim and step
  a device_type="cuda" plan follows the CUDA dispatch of the target GPU (default h100, cuDNN 9.10.2):
  --gpu names a preset (a100, h100, h200, b200, ...), --gpu-arch sets the compute capability,
  --cudnn-version the runtime's torch.backends.cudnn.version() (e.g. 91002), --cuda-version
  the runtime's torch.version.cuda (default 12.x; CUDA 13 builds prefer cuDNN on more GPUs),
  --torch-version the runtime's torch.__version__ (2.11 to 2.13, default 2.13; before 2.12 cuDNN
  attention takes any dropout probability)
)" COMMLENS_ROUTING_SKEW_USAGE COMMLENS_TORCHSCRIPT_USAGE},
    {"check-plan", R"(usage: commlens check-plan MODEL.pt2 --plan PLAN.json [--world-size N]
  validates a plan against the model and lists the modules each style applies to
)" COMMLENS_TORCHSCRIPT_USAGE},
    {"rank", R"(usage: commlens rank MODEL.pt2 --plan PLAN.json [--plan PLAN.json ...] [--plans DIR]
                     [--cluster NAME|TOPOLOGY.json] [--phase forward|both|inference] [--format table|json]
                     [-o FILE] [--jobs N] [--allow-unsupported] [--gpu NAME] [--gpu-arch M.m] [--cudnn-version N]
                     [--cuda-version M.m] [--torch-version V] [--routing-skew F]
  predicts every plan (--plan, repeatable; --plans: every *.json in DIR) in one process, the model read
  once, and ranks them by communication time per step on the cluster (default h100-ib-ndr), with
  collectives, bytes and time per mesh dim; plans that cannot be predicted are listed as not ranked
  (exit 2 only when none could be)
  --jobs N: plans predicted at once, each on its own thread (default: one per core); the output does
  not depend on it, but for the timings
)" COMMLENS_ROUTING_SKEW_USAGE COMMLENS_TORCHSCRIPT_USAGE},
    {"collective-time", R"(usage: commlens collective-time --cluster NAME|TOPOLOGY.json --collective KIND
                                --bytes N --ranks N [--nodes N]
  estimated time of one collective on a cluster: KIND all_reduce, all_gather, reduce_scatter or
  all_to_all; --bytes the bytes one rank hands it (all_gather: its shard); --nodes the nodes the
  group spans (default: ranks / GPUs per node, at least 1)
)"},
    {"compare", R"(usage: commlens compare PREDICTED MEASURED [--json|--html] [--phase forward|backward|both|inference]
                        [-o FILE]
  predicted vs measured collectives per module, collective and phase; exit 1 if any differ
  --phase inference compares no-grad inference forwards (files whose "phase" is "inference")
)"},
};

/// Whether fd 1 was open at start-up (`commlens ... >&-` closes it).
bool stdoutWasOpen = true;

} // namespace

namespace commlens::cli {

bool Args::flag(const char *name) const { return std::find(flags.begin(), flags.end(), name) != flags.end(); }

std::string Args::option(const char *name) const {
  std::string value;
  for (const auto &[k, v] : options)
    if (k == name)
      value = v;
  return value;
}

std::vector<std::string> Args::all(const char *name) const {
  std::vector<std::string> values;
  for (const auto &[k, v] : options)
    if (k == name)
      values.push_back(v);
  return values;
}

llvm::Expected<PassOptions> passOptionsFrom(const Args &args) {
  PassOptions options;
  options.dispatch.allowUnsupported = args.flag("--allow-unsupported");
  if (std::string gpu = args.option("--gpu"); !gpu.empty()) {
    auto target = cudaTargetByName(gpu);
    if (!target)
      return makeError("--gpu: {}", takeMessage(target.takeError()));
    options.cudaTarget = *target;
  }
  if (std::string arch = args.option("--gpu-arch"); !arch.empty())
    if (llvm::Error err = setComputeCapability(options.cudaTarget, arch))
      return makeError("--gpu-arch: {}", takeMessage(std::move(err)));
  if (std::string v = args.option("--cudnn-version"); !v.empty()) {
    int64_t version = 0;
    if (llvm::StringRef(v).getAsInteger(10, version) || version < 1000 || version > 999999)
      return makeError("--cudnn-version needs torch.backends.cudnn.version()'s integer (e.g. 91002), got '{}'", v);
    options.cudaTarget.cudnnVersion = version;
  }
  if (std::string v = args.option("--cuda-version"); !v.empty()) {
    // torch.version.cuda, e.g. "12.8": only the major version changes the dispatch.
    int major = 0;
    llvm::StringRef rest = llvm::StringRef(v);
    if (rest.consumeInteger(10, major) || (!rest.empty() && !rest.startswith(".")) || major < 9 || major > 99)
      return makeError("--cuda-version needs torch.version.cuda (e.g. 12.8), got '{}'", v);
    options.cudaTarget.cudaMajor = major;
  }
  if (std::string v = args.option("--torch-version"); !v.empty())
    if (llvm::Error err = setTorchVersion(options.cudaTarget, v))
      return makeError("--torch-version: {}", takeMessage(std::move(err)));
  if (std::string v = args.option("--routing-skew"); !v.empty()) {
    double skew = 0;
    if (llvm::StringRef(v).getAsDouble(skew))
      return makeError("--routing-skew needs a number, got '{}'", v);
    if (llvm::Error err = setRoutingSkew(options.dispatch, skew))
      return makeError("--routing-skew: {}", takeMessage(std::move(err)));
  }
  if (std::string c = args.option("--cluster"); !c.empty()) {
    auto cluster = resolveCluster(c);
    if (!cluster)
      return makeError("--cluster: {}", takeMessage(cluster.takeError()));
    options.cluster = std::move(*cluster);
  }
  return options;
}

llvm::Expected<Args> parseArgs(int argc, char **argv, int first, std::initializer_list<const char *> flags,
                               std::initializer_list<const char *> options,
                               std::initializer_list<const char *> repeatable) {
  Args a;
  auto known = [](std::initializer_list<const char *> names, const std::string &key) {
    return std::find_if(names.begin(), names.end(), [&](const char *n) { return key == n; }) != names.end();
  };
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      a.help = true;
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-') {
      std::string key = arg, value;
      bool inlineValue = false;
      if (auto eq = arg.find('='); eq != std::string::npos) {
        key = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        inlineValue = true;
      }
      if (known(flags, key) && !inlineValue) {
        if (a.flag(key.c_str()))
          return makeError("option {} given twice", key);
        a.flags.push_back(key);
        continue;
      }
      if (known(options, key) || known(repeatable, key)) {
        if (!inlineValue) {
          if (i + 1 >= argc)
            return makeError("option {} needs a value", key);
          value = argv[++i];
        }
        if (value.empty())
          return makeError("option {} has an empty value", key);
        if (!known(repeatable, key))
          for (const auto &[k, v] : a.options)
            if (k == key)
              return makeError("option {} given twice", key);
        a.options.emplace_back(key, value);
        continue;
      }
      return makeError("unknown option '{}'", arg);
    }
    a.positional.push_back(arg);
  }
  return a;
}

int fail(const std::string &message) {
  // One line, whatever the input put into names and values the message quotes.
  std::string line;
  for (unsigned char c : message) {
    if (c < 0x20 || c == 0x7f)
      line += fmt::format("\\x{:02x}", c);
    else
      line += static_cast<char>(c);
  }
  llvm::errs() << "commlens: error: " << line << "\n";
  return kExitBadInput;
}

int emit(llvm::function_ref<void(llvm::raw_ostream &)> write, const std::string &outPath) {
  if (outPath.empty()) {
    write(llvm::outs()); // checked once the command is done (checkStdout)
    return 0;
  }
  std::error_code ec;
  llvm::raw_fd_ostream out(outPath, ec, llvm::sys::fs::OF_None);
  if (ec)
    return fail(fmt::format("{}: cannot write file: {}", outPath, ec.message()));
  out.SetBufferSize(1 << 20); // a report is megabytes: the file's 4 KiB block size made 2,000 writes
  write(out);
  out.close();
  if (out.has_error()) {
    ec = out.error();
    out.clear_error(); // reported here, not by the stream's destructor
    return fail(fmt::format("{}: cannot write file: {}", outPath, ec.message()));
  }
  return 0;
}

int printUsage(const char *command) {
  for (const auto &[name, usage] : kCommandUsage)
    if (llvm::StringRef(name) == command)
      llvm::outs() << usage;
  return 0;
}

} // namespace commlens::cli

namespace {

using namespace commlens::cli;

/// Flushes stdout and turns a failed write (closed stdout, full disk, broken pipe with SIGPIPE
/// ignored) into the one-line error and exit 2, instead of LLVM's abort at exit.
int checkStdout(int rc) {
  llvm::raw_fd_ostream &out = llvm::outs();
  if (!stdoutWasOpen && out.tell() > 0)
    return fail(fmt::format("<stdout>: cannot write: {}", std::make_error_code(std::errc::bad_file_descriptor).message()));
  out.flush();
  if (out.has_error()) {
    std::error_code ec = out.error();
    out.clear_error();
    return fail(fmt::format("<stdout>: cannot write: {}", ec.message()));
  }
  return rc;
}

int runInspect(int argc, char **argv) {
  auto args = parseArgs(argc, argv, 2, {"--json", "--print-ir", COMMLENS_TORCHSCRIPT_FLAGS},
                        {"-o", COMMLENS_TORCHSCRIPT_OPTIONS});
  if (!args)
    return fail(takeMessage(args.takeError()));
  if (args->help)
    return printUsage("inspect");
  if (args->positional.size() != 1)
    return fail("inspect takes one MODEL.pt2 argument");
  auto torchScript = torchScriptOptionsFrom(*args);
  if (!torchScript)
    return fail(takeMessage(torchScript.takeError()));
  const std::string &path = args->positional[0];
  auto program = loadPt2(path, *torchScript);
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

/// The program and plan of predict / check-plan, and the --world-size their check asks for.
/// Messages name the file at fault.
struct ModelAndPlan {
  std::unique_ptr<ExportedProgram> program;
  ShardingPlan plan;
  std::optional<int64_t> worldSize;
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
  auto torchScript = torchScriptOptionsFrom(args);
  if (!torchScript)
    return torchScript.takeError();
  auto program = loadPt2(modelPath, *torchScript);
  if (!program)
    return makeError("{}: {}", modelPath, takeMessage(program.takeError()));
  auto plan = readPlanFile(planPath);
  if (!plan)
    return makeError("{}: {}", planPath, takeMessage(plan.takeError()));
  return ModelAndPlan{std::move(*program), std::move(*plan), worldSize};
}

int runPredict(int argc, char **argv) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  auto args = parseArgs(argc, argv, 2, {"--allow-unsupported", "--time-passes", COMMLENS_TORCHSCRIPT_FLAGS},
                        {"--plan", "--phase", "--format", "--noise-level", "-o", "--print-after", "--world-size",
                         "--gpu", "--gpu-arch", "--cudnn-version", "--cuda-version", "--torch-version", "--cluster",
                         "--routing-skew", COMMLENS_TORCHSCRIPT_OPTIONS});
  if (!args)
    return fail(takeMessage(args.takeError()));
  if (args->help)
    return printUsage("predict");
  auto passOptions = passOptionsFrom(*args);
  if (!passOptions)
    return fail(takeMessage(passOptions.takeError()));
  PassOptions &options = *passOptions;
  if (args->positional.size() != 1 || args->option("--plan").empty())
    return fail("predict takes MODEL.pt2 and --plan PLAN.json");
  auto phase = parsePredictPhase(args->option("--phase").empty() ? "forward" : args->option("--phase"));
  if (!phase)
    return fail(takeMessage(phase.takeError()));
  std::string format = args->option("--format").empty() ? "table" : args->option("--format");
  if (format != "table" && format != "json" && format != "html")
    return fail(fmt::format("--format must be table, json or html, got '{}'", format));
  int noise = 0;
  if (std::string n = args->option("--noise-level"); !n.empty() && (llvm::StringRef(n).getAsInteger(10, noise) || noise < 0))
    return fail(fmt::format("--noise-level needs a non-negative integer, got '{}'", n));
  const std::string &modelPath = args->positional[0];
  std::string planPath = args->option("--plan");
  auto loadStart = Clock::now();
  auto inputs = loadModelAndPlan(*args, modelPath, planPath);
  if (!inputs)
    return fail(takeMessage(inputs.takeError()));
  auto &[program, plan, worldSize] = *inputs;
  double loadSeconds = since(loadStart);

  std::vector<std::pair<std::string, double>> timings;
  PredictRequest request;
  request.phase = *phase;
  request.options = options;
  request.worldSize = worldSize;
  request.planLabel = planPath;
  request.programLabel = modelPath;
  std::optional<llvm::StringSet<>> printAfter;
  if (std::string names = args->option("--print-after"); !names.empty()) {
    std::vector<std::string> known = pipelinePassNames(*phase != PredictPhase::Forward && *phase != PredictPhase::Inference);
    llvm::SmallVector<llvm::StringRef, 4> parts;
    llvm::StringRef(names).split(parts, ',');
    printAfter.emplace();
    for (llvm::StringRef p : parts) {
      if (std::find(known.begin(), known.end(), p.str()) == known.end())
        return fail(fmt::format("--print-after: unknown pass '{}' (passes: {})", p.str(), fmt::join(known, ", ")));
      printAfter->insert(p);
    }
  }
  request.customizePipeline = [&](PassManager &pm) {
    if (printAfter)
      pm.printAfter(*printAfter, llvm::errs());
    if (args->flag("--time-passes"))
      pm.timeInto(&timings);
  };
  auto runStart = Clock::now();
  auto prediction = runPrediction(std::move(program), std::move(plan), request);
  if (!prediction)
    return fail(takeMessage(prediction.takeError()));
  auto write = [&](llvm::raw_ostream &os) {
    if (format == "json")
      (*prediction)->report().writeJson(os); // 8 MB for a 126-layer model's two phases: not kept
    else if (format == "html")
      os << (*prediction)->html(fmt::format("commlens: {} under {}", modelPath, planPath));
    else
      os << (*prediction)->table(noise);
  };
  if (int rc = emit(write, args->option("-o")))
    return rc;
  double runSeconds = since(runStart);
  // The process ends next: the graphs are left to it rather than freed node by node (a tenth of
  // a large model's run), as clang leaves its AST; buried, they are not reported as leaks.
  llvm::BuryPointer(std::move(*prediction));
  if (args->flag("--time-passes")) {
    // After the output: what each stage of this run took (the process start-up comes before main
    // and is not in it).
    double passes = 0;
    for (const auto &t : timings)
      passes += t.second;
    llvm::errs() << "===-- commlens --time-passes (wall time) --===\n";
    llvm::errs() << fmt::format("  {:9.4f} s  {}\n", loadSeconds, "load (archive, program decode, plan)");
    for (const auto &[name, seconds] : timings)
      llvm::errs() << fmt::format("  {:9.4f} s  {}\n", seconds, name);
    llvm::errs() << fmt::format("  {:9.4f} s  {}\n", runSeconds - passes, "report (build and render)");
    llvm::errs() << fmt::format("  {:9.4f} s  {}\n", loadSeconds + runSeconds, "total");
  }
  return 0;
}

int runCollectiveTime(int argc, char **argv) {
  auto args = parseArgs(argc, argv, 2, {}, {"--cluster", "--collective", "--bytes", "--ranks", "--nodes"});
  if (!args)
    return fail(takeMessage(args.takeError()));
  if (args->help)
    return printUsage("collective-time");
  for (const char *required : {"--cluster", "--collective", "--bytes", "--ranks"})
    if (args->option(required).empty())
      return fail(fmt::format("collective-time needs {}", required));
  if (!args->positional.empty())
    return fail(fmt::format("collective-time takes no positional argument, got '{}'", args->positional[0]));
  auto cluster = resolveCluster(args->option("--cluster"));
  if (!cluster)
    return fail(fmt::format("--cluster: {}", takeMessage(cluster.takeError())));
  auto kind = collectiveKindByName(args->option("--collective"));
  if (!kind)
    return fail(fmt::format("--collective must be all_reduce, all_gather, reduce_scatter or all_to_all, got '{}'",
                            args->option("--collective")));
  auto number = [&](const char *name, int64_t max, int64_t &out) -> bool {
    std::string v = args->option(name);
    return !llvm::StringRef(v).getAsInteger(10, out) && out >= 1 && out <= max;
  };
  int64_t bytes = 0, ranks = 0, nodes = 0;
  if (!number("--bytes", int64_t{1} << 50, bytes))
    return fail(fmt::format("--bytes needs an integer from 1 to 2^50, got '{}'", args->option("--bytes")));
  if (!number("--ranks", int64_t{1} << 20, ranks))
    return fail(fmt::format("--ranks needs an integer from 1 to 2^20, got '{}'", args->option("--ranks")));
  if (args->option("--nodes").empty())
    nodes = std::max<int64_t>(1, (ranks + cluster->gpusPerNode - 1) / cluster->gpusPerNode);
  else if (!number("--nodes", ranks, nodes))
    return fail(fmt::format("--nodes needs an integer from 1 to --ranks ({}), got '{}'", ranks, args->option("--nodes")));
  CollectiveTime t = estimateCollectiveTime(*cluster, *kind, bytes, {ranks, nodes});
  llvm::outs() << fmt::format("{} of {} B/rank on {} ranks over {} node{} ({}): {:.3f} us ({}; message {} B, bus "
                              "bandwidth {:.2f} GB/s)\n",
                              name(*kind).str(), bytes, ranks, nodes, nodes == 1 ? "" : "s", cluster->name, t.us,
                              t.algorithm, t.messageBytes, t.busBandwidthGBps);
  return 0;
}

int runCheckPlan(int argc, char **argv) {
  auto args = parseArgs(argc, argv, 2, {COMMLENS_TORCHSCRIPT_FLAGS}, {"--plan", "--world-size", COMMLENS_TORCHSCRIPT_OPTIONS});
  if (!args)
    return fail(takeMessage(args.takeError()));
  if (args->help)
    return printUsage("check-plan");
  if (args->positional.size() != 1 || args->option("--plan").empty())
    return fail("check-plan takes MODEL.pt2 and --plan PLAN.json");
  const std::string &modelPath = args->positional[0];
  std::string planPath = args->option("--plan");
  auto inputs = loadModelAndPlan(*args, modelPath, planPath);
  if (!inputs)
    return fail(takeMessage(inputs.takeError()));
  auto &[program, plan, worldSize] = *inputs;
  if (llvm::Error err = checkPlanAgainstProgram(plan, *program, worldSize))
    return fail(fmt::format("{}: {}", planPath, takeMessage(std::move(err))));
  llvm::outs() << "plan " << (plan.name.empty() ? planPath : plan.name) << " on " << plan.mesh.str() << "\n";
  const Graph &g = program->graph();
  for (const ParallelizeStep &step : plan.steps) {
    std::string dims; // "tp", or a 2-D sub-mesh's "ep, etp"
    for (const MeshDimGroup &group : step.meshDims)
      dims += (dims.empty() ? "" : ", ") + plan.mesh.groupName(group);
    llvm::outs() << "parallelize on mesh dim " << (dims.empty() ? std::string("(whole mesh)") : dims) << "\n";
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

#ifdef COMMLENS_MIMALLOC
// 2 MiB pages where the kernel gives them (transparent huge pages): a large model's predict
// touches ~100 MiB, and faulting it in 4 KiB at a time was a fifth of its time. Set from the
// executable's .preinit_array, which runs before any library's initializer: libstdc++'s start-up
// allocates, and the 32 MiB segment mimalloc maps then takes the option as it stands (set in
// main(), that first segment stayed on 4 KiB pages: 8.7k page faults instead of 0.65k). The
// threads `rank` predicts plans on commit their segments at once too: by default mimalloc
// delays that for a thread's first segment, which then faulted in 4 KiB at a time (8.8k page
// faults instead of 0.7k on two threads). Only option values are written here; mimalloc keeps
// them when it initialises. MIMALLOC_LARGE_OS_PAGES and MIMALLOC_EAGER_COMMIT_DELAY still rule
// when set; they are looked up in envp, since libc's getenv has no environment yet.
static void setAllocatorOptions(int, char **, char **envp) {
  bool largePagesSet = false, commitDelaySet = false;
  for (char **var = envp; *var; ++var) {
    largePagesSet |= llvm::StringRef(*var).startswith("MIMALLOC_LARGE_OS_PAGES=");
    commitDelaySet |= llvm::StringRef(*var).startswith("MIMALLOC_EAGER_COMMIT_DELAY=");
  }
  if (!largePagesSet)
    mi_option_enable(mi_option_large_os_pages);
  if (!commitDelaySet)
    mi_option_set(mi_option_eager_commit_delay, 0);
}
__attribute__((section(".preinit_array"), used)) static void (*const preinitAllocatorOptions)(
    int, char **, char **) = setAllocatorOptions;
#endif

int main(int argc, char **argv) {
  stdoutWasOpen = fcntl(STDOUT_FILENO, F_GETFD) != -1;
  // A closed fd 0, 1 or 2 gets /dev/null, so that no file the tool opens lands on it.
  (void)llvm::sys::Process::FixupStandardFileDescriptors();
  if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    (argc < 2 ? llvm::errs() : llvm::outs()) << kUsage;
    return checkStdout(argc < 2 ? kExitBadInput : 0);
  }
  std::string command = argv[1];
  int rc;
  if (command == "inspect")
    rc = runInspect(argc, argv);
  else if (command == "predict")
    rc = runPredict(argc, argv);
  else if (command == "check-plan")
    rc = runCheckPlan(argc, argv);
  else if (command == "compare")
    rc = runCompare(argc, argv);
  else if (command == "rank")
    rc = runRank(argc, argv);
  else if (command == "collective-time")
    rc = runCollectiveTime(argc, argv);
  else
    rc = fail(fmt::format("unknown command '{}' (see commlens --help)", command));
  return checkStdout(rc);
}
