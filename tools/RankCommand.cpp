#include "tools/RankCommand.h"

#include "api/Commlens.h"
#include "frontends/PlanReader.h"
#include "frontends/Pt2Loader.h"
#include "ir/GraphBuilder.h"
#include "passes/DecomposeToRuntimeOps.h"
#include "ir/Error.h"
#include "reports/PredictionReport.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace commlens {
namespace {

using namespace cli;
using nlohmann::json;

/// One plan's prediction, reduced to what the ranking shows.
struct RankedPlan {
  std::string path, name, mesh;
  CommTotals forward, backward;
  std::vector<MeshDimTotals> dims;
  std::map<std::string, int64_t> byCollective; // op key -> count, both phases
  double seconds = 0;                          // copy + passes + report, on its thread
  CommTotals step() const { return forward + backward; }
};

struct FailedPlan {
  std::string path, error;
};

/// The plan files of --plan options and --plans directories (their *.json, sorted by name).
llvm::Expected<std::vector<std::string>> planPaths(const Args &args) {
  std::vector<std::string> paths = args.all("--plan");
  for (const std::string &dir : args.all("--plans")) {
    std::error_code ec;
    std::vector<std::string> found;
    for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec))
      if (llvm::StringRef(it->path()).endswith(".json"))
        found.push_back(it->path());
    if (ec)
      return makeError("--plans: {}: {}", dir, ec.message());
    if (found.empty())
      return makeError("--plans: {}: no *.json plan files", dir);
    std::sort(found.begin(), found.end());
    paths.insert(paths.end(), found.begin(), found.end());
  }
  if (paths.empty())
    return makeError("rank takes MODEL.pt2 and at least one --plan PLAN.json or --plans DIR");
  return paths;
}

/// The decoded program, and the same program once through the `decompose` pass for CPU dispatch,
/// which no CPU plan changes: each plan is predicted on a copy of one of them. Plans are predicted
/// on several threads: the programs are only read once decoded, and the decomposition is made
/// once, by the first CPU plan to need it.
struct DecodedProgram {
  std::unique_ptr<ExportedProgram> exported;
  /// Null until a CPU plan needs it, or when the decomposition fails (each plan's pipeline then
  /// reports the error, after the plan's own checks, as `predict` does).
  std::unique_ptr<ExportedProgram> decomposedForCpu;
  std::once_flag decomposeOnce;

  /// The program a plan's pipeline starts from. An inference prediction first checks the
  /// exported ops for training mode, so it starts from them.
  std::unique_ptr<ExportedProgram> copyFor(const ShardingPlan &plan, const PassOptions &options, PredictPhase phase) {
    if (plan.mesh.deviceType != MeshDeviceType::Cpu || phase == PredictPhase::Inference)
      return cloneProgram(*exported);
    std::call_once(decomposeOnce, [&] {
      auto program = cloneProgram(*exported);
      PassContext ctx{*program, nullptr, options, PredictionState()};
      if (llvm::Error err = DecomposeToRuntimeOps().run(ctx))
        llvm::consumeError(std::move(err));
      else
        decomposedForCpu = std::move(program);
    });
    return cloneProgram(decomposedForCpu ? *decomposedForCpu : *exported);
  }
};

/// Predicts one plan; an error names the plan file.
llvm::Expected<RankedPlan> predictOne(DecodedProgram &decoded, const std::string &planPath,
                                      const PassOptions &options, PredictPhase phase) {
  auto start = std::chrono::steady_clock::now();
  auto plan = readPlanFile(planPath);
  if (!plan)
    return makeError("{}: {}", planPath, takeMessage(plan.takeError()));
  PredictRequest request;
  request.phase = phase;
  request.options = options;
  request.planLabel = request.programLabel = planPath;
  auto program = decoded.copyFor(*plan, options, phase);
  auto prediction = runPrediction(std::move(program), std::move(*plan), request);
  if (!prediction)
    return prediction.takeError();
  const PredictionReport &report = (*prediction)->report();
  const ShardingPlan &ranked = *(*prediction)->plan();
  RankedPlan r;
  r.path = planPath;
  r.name = llvm::sys::path::stem(planPath).str();
  r.mesh = ranked.mesh.str();
  r.forward = report.totals(Phase::Forward);
  r.backward = report.totals(Phase::Backward);
  r.dims = report.meshDimTotals();
  for (const CollectiveRecord &c : (*prediction)->state().collectives)
    if (report.includes(c))
      ++r.byCollective[c.opKey];
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}


std::string dimsSummary(const RankedPlan &r) {
  std::string out;
  for (const MeshDimTotals &d : r.dims) {
    if (!out.empty())
      out += "; ";
    CommTotals both = d.both();
    out += fmt::format("{} ({}x{}n): {} coll, {} B, {}", d.dims, d.ranks, d.nodes, both.collectives, both.bytesPerRank,
                       formatMicroseconds(both.timeUs));
  }
  return out;
}

json totalsJson(const CommTotals &t) {
  return {{"collectives", t.collectives}, {"bytes_per_rank", t.bytesPerRank}, {"time_us", t.timeUs}};
}

} // namespace

int runRank(int argc, char **argv) {
  auto args = parseArgs(argc, argv, 2, {"--allow-unsupported", COMMLENS_TORCHSCRIPT_FLAGS},
                        {"--phase", "--format", "-o", "--jobs", "--gpu", "--gpu-arch", "--cudnn-version", "--cuda-version",
                         "--torch-version", "--cluster", "--routing-skew", COMMLENS_TORCHSCRIPT_OPTIONS},
                        {"--plan", "--plans"});
  if (!args)
    return fail(takeMessage(args.takeError()));
  if (args->help)
    return printUsage("rank");
  if (args->positional.size() != 1)
    return fail("rank takes one MODEL.pt2 and --plan PLAN.json (repeatable) or --plans DIR");
  std::string phase = args->option("--phase").empty() ? "both" : args->option("--phase");
  if (phase != "forward" && phase != "both" && phase != "inference")
    return fail(fmt::format("--phase must be forward, both or inference, got '{}'", phase));
  PredictPhase predictPhase = llvm::cantFail(parsePredictPhase(phase));
  std::string format = args->option("--format").empty() ? "table" : args->option("--format");
  if (format != "table" && format != "json")
    return fail(fmt::format("--format must be table or json, got '{}'", format));
  auto options = passOptionsFrom(*args);
  if (!options)
    return fail(takeMessage(options.takeError()));
  if (!options->cluster)
    options->cluster = llvm::cantFail(clusterByName("h100-ib-ndr"));
  auto paths = planPaths(*args);
  if (!paths)
    return fail(takeMessage(paths.takeError()));
  // Threads predicting plans: one per core by default.
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  if (!args->option("--jobs").empty() &&
      (llvm::StringRef(args->option("--jobs")).getAsInteger(10, jobs) || jobs < 1 || jobs > 1024))
    return fail(fmt::format("--jobs needs an integer from 1 to 1024, got '{}'", args->option("--jobs")));

  auto start = std::chrono::steady_clock::now();
  const std::string &modelPath = args->positional[0];
  auto torchScript = torchScriptOptionsFrom(*args);
  if (!torchScript)
    return fail(takeMessage(torchScript.takeError()));
  auto records = readPt2Records(modelPath, *torchScript);
  if (!records)
    return fail(fmt::format("{}: {}", modelPath, takeMessage(records.takeError())));
  // The archive is read, decoded and its nodes checked against the op schemas once; every plan
  // is then predicted on its own copy of the program (the passes rewrite it).
  auto exported = decodePt2(*records, /*checkSchemas=*/true);
  if (!exported)
    return fail(fmt::format("{}: {}", modelPath, takeMessage(exported.takeError())));
  DecodedProgram decoded;
  decoded.exported = std::move(*exported);
  auto predicting = std::chrono::steady_clock::now();
  double loadSeconds = std::chrono::duration<double>(predicting - start).count();

  // Each plan on its own copy of the program, `jobs` at a time; the outcomes are kept in the
  // plans' order, so the ranking and the errors do not depend on which thread finished first.
  size_t threadCount = std::min<size_t>(jobs, paths->size());
  std::vector<std::optional<llvm::Expected<RankedPlan>>> outcomes(paths->size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < paths->size(); i = next++)
      outcomes[i].emplace(predictOne(decoded, (*paths)[i], *options, predictPhase));
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < threadCount; ++t)
    threads.emplace_back(work);
  work();
  for (std::thread &t : threads)
    t.join();
  double predictSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - predicting).count();

  std::vector<RankedPlan> ranked;
  std::vector<FailedPlan> failed;
  for (size_t i = 0; i < paths->size(); ++i) {
    if (*outcomes[i])
      ranked.push_back(std::move(**outcomes[i]));
    else
      failed.push_back({(*paths)[i], takeMessage(outcomes[i]->takeError())});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const RankedPlan &a, const RankedPlan &b) { return a.step().timeUs < b.step().timeUs; });
  double planSeconds = 0;
  for (const RankedPlan &r : ranked)
    planSeconds += r.seconds;

  std::string text;
  llvm::raw_string_ostream os(text);
  if (format == "json") {
    json plans = json::array(), errors = json::array();
    for (size_t i = 0; i < ranked.size(); ++i) {
      const RankedPlan &r = ranked[i];
      json dims = json::array();
      for (const MeshDimTotals &d : r.dims)
        dims.push_back({{"dims", d.dims},
                        {"ranks", d.ranks},
                        {"nodes", d.nodes},
                        {"forward", totalsJson(d.forward)},
                        {"backward", totalsJson(d.backward)}});
      plans.push_back({{"rank", i + 1},
                       {"plan", r.path},
                       {"name", r.name},
                       {"mesh", r.mesh},
                       {"time_us", r.step().timeUs},
                       {"forward", totalsJson(r.forward)},
                       {"backward", totalsJson(r.backward)},
                       {"mesh_dims", dims},
                       {"collectives", r.byCollective},
                       {"predict_seconds", r.seconds}});
    }
    for (const FailedPlan &f : failed)
      errors.push_back({{"plan", f.path}, {"error", f.error}});
    json doc = {{"format", "commlens-rank"},   {"version", 1},          {"model", modelPath},
                {"cluster", options->cluster->str()}, {"phase", phase}, {"plans", plans},
                {"errors", errors},            {"load_seconds", loadSeconds},
                {"predict_seconds", predictSeconds}, {"jobs", threadCount}};
    if (options->dispatch.routingSkew != 1.0)
      doc["routing_skew"] = options->dispatch.routingSkew;
    os << doc.dump(2) << "\n";
  } else {
    std::string routing = options->dispatch.routingSkew == 1.0
                              ? ""
                              : fmt::format(", MoE routing skew {:g} (the busiest expert-parallel rank)",
                                            options->dispatch.routingSkew);
    os << fmt::format("{} plans for {} on {}, phase {}{}, by communication time per step (collectives back to "
                      "back)\n",
                      ranked.size(), modelPath, options->cluster->str(), phase, routing);
    size_t width = 4;
    for (const RankedPlan &r : ranked)
      width = std::max(width, r.name.size());
    os << fmt::format("{:>4}  {:<{}}  {:>12}  {:>11}  {:>14}  {}\n", "rank", "plan", width, "time/step", "collectives",
                      "bytes/rank", "per mesh dim (ranks x nodes)");
    for (size_t i = 0; i < ranked.size(); ++i) {
      const RankedPlan &r = ranked[i];
      os << fmt::format("{:>4}  {:<{}}  {:>12}  {:>11}  {:>14}  {}\n", i + 1, r.name, width, formatMicroseconds(r.step().timeUs),
                        r.step().collectives, r.step().bytesPerRank, dimsSummary(r));
    }
    for (const FailedPlan &f : failed)
      os << "not ranked: " << f.error << "\n";
    os << fmt::format("read and checked the model in {:.3f} s; {} plan{} in {:.3f} s on {} thread{} ({} ranked, "
                      "{:.3f} s per ranked plan on its thread)\n",
                      loadSeconds, paths->size(), paths->size() == 1 ? "" : "s", predictSeconds, threadCount,
                      threadCount == 1 ? "" : "s", ranked.size(),
                      ranked.empty() ? 0.0 : planSeconds / static_cast<double>(ranked.size()));
  }
  int rc = emit(os.str(), args->option("-o"));
  if (rc != 0)
    return rc;
  // Plans that could not be predicted are listed; with none ranked the run is a failure.
  if (ranked.empty()) {
    llvm::errs() << "commlens: error: no plan could be ranked (first: " << failed.front().error << ")\n";
    return kExitBadInput;
  }
  return 0;
}

} // namespace commlens
