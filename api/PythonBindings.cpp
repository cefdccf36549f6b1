// commlens._core: the C++ prediction pipeline for Python (nanobind). Programs arrive as the
// ExportedProgram JSON written in memory (FxGraphWriter, or torch's serializer) or as a .pt2 path; plans as
// commlens-plan JSON text. Errors raise commlens._core.Error with commlens' one-line message.
#include "api/Commlens.h"
#include "api/FxGraphWriter.h"
#include "frontends/ClusterReader.h"
#include "frontends/PlanReader.h"
#include "frontends/Pt2Loader.h"
#include "ir/Error.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <stdexcept>

namespace nb = nanobind;
using namespace commlens;

namespace {

struct CoreError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T> T unwrap(llvm::Expected<T> value, const std::string &subject) {
  if (!value)
    throw CoreError(subject + ": " + takeMessage(value.takeError()));
  return std::move(*value);
}

/// The dispatch options, checked before the program is read.
DispatchOptions dispatchOptions(bool allowUnsupported, double routingSkew) {
  DispatchOptions options;
  options.allowUnsupported = allowUnsupported;
  if (llvm::Error err = setRoutingSkew(options, routingSkew))
    throw CoreError("routing_skew: " + takeMessage(std::move(err)));
  return options;
}

std::unique_ptr<Prediction> run(std::unique_ptr<ExportedProgram> program, const std::string &planJson,
                                const std::string &planName, const std::string &phase,
                                const std::optional<std::string> &cluster, const std::optional<std::string> &gpu,
                                const DispatchOptions &dispatch) {
  ShardingPlan plan = unwrap(parsePlan(planJson), planName);
  PredictRequest request;
  request.phase = unwrap(parsePredictPhase(phase), "predict");
  request.options.dispatch = dispatch;
  if (gpu)
    request.options.cudaTarget = unwrap(cudaTargetByName(*gpu), "gpu");
  if (cluster)
    request.options.cluster = unwrap(resolveCluster(*cluster), "cluster");
  return unwrap(runPrediction(std::move(program), std::move(plan), request), "predict");
}

} // namespace

NB_MODULE(_core, m) {
  m.doc() = "commlens' C++ prediction pipeline";
  nb::exception<CoreError>(m, "Error");
  // Predictions a caller still holds at interpreter exit are not leaks worth a warning.
  nb::set_leak_warnings(false);
  python::bindFxGraphWriter(m);
  nb::class_<Prediction>(m, "Prediction")
      .def("json", &Prediction::json, "CommDebugMode's JSON dump tree plus commlens' records")
      .def("table", &Prediction::table, nb::arg("noise_level") = 0, "CommDebugMode's tracing table")
      .def("html", [](const Prediction &p, const std::string &title) { return p.html(title); }, nb::arg("title"));
  m.def(
      "predict_program_json",
      [](nb::bytes programJson, const std::string &tiedParametersJson, const std::string &planJson,
         const std::string &planName, const std::string &phase, std::optional<std::string> cluster,
         std::optional<std::string> gpu, bool allowUnsupported, double routingSkew) {
        DispatchOptions dispatch = dispatchOptions(allowUnsupported, routingSkew);
        // Read in place: the bytes object outlives the call (the decoder copies into its padded buffer).
        auto program = unwrap(decodeProgramJson(llvm::StringRef(programJson.c_str(), programJson.size())),
                              "exported program");
        if (llvm::Error err = applyTiedParameters(*program, tiedParametersJson, "tied parameters"))
          throw CoreError(takeMessage(std::move(err)));
        return run(std::move(program), planJson, planName, phase, cluster, gpu, dispatch);
      },
      nb::arg("program_json"), nb::arg("tied_parameters_json"), nb::arg("plan_json"), nb::arg("plan_name"),
      nb::arg("phase"), nb::arg("cluster").none(), nb::arg("gpu").none(), nb::arg("allow_unsupported"),
      nb::arg("routing_skew") = 1.0);
  m.def(
      "predict_pt2",
      [](const std::string &path, const std::string &planJson, const std::string &planName, const std::string &phase,
         std::optional<std::string> cluster, std::optional<std::string> gpu, bool allowUnsupported, double routingSkew,
         bool torchscript,
         std::optional<uint64_t> tsMemory, std::optional<uint64_t> tsCpuSeconds, std::optional<uint64_t> tsOpenFiles,
         std::optional<uint64_t> tsWallSeconds) {
        DispatchOptions dispatch = dispatchOptions(allowUnsupported, routingSkew);
        // A TorchScript archive only on request (torchscript=True), converted by the worker under limits.
        TorchScriptOptions ts;
        ts.enabled = torchscript;
        ts.limits = {tsMemory, tsCpuSeconds, tsOpenFiles, tsWallSeconds};
        auto program = unwrap(loadPt2(path, ts), path);
        return run(std::move(program), planJson, planName, phase, cluster, gpu, dispatch);
      },
      nb::arg("path"), nb::arg("plan_json"), nb::arg("plan_name"), nb::arg("phase"), nb::arg("cluster").none(),
      nb::arg("gpu").none(), nb::arg("allow_unsupported"), nb::arg("routing_skew") = 1.0, nb::arg("torchscript") = false,
      nb::arg("torchscript_memory").none() = nb::none(), nb::arg("torchscript_cpu_seconds").none() = nb::none(),
      nb::arg("torchscript_open_files").none() = nb::none(), nb::arg("torchscript_wall_seconds").none() = nb::none());
}
