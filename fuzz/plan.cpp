// libFuzzer target: the plan reader (frontends/PlanReader: docs/plan-format.md into ir/ShardingPlan),
// and the whole prediction on a fixed program (a two-layer MLP, tests/lit/Inputs/mlp.ir):
// runPrediction's plan check, forward and backward passes, both reports.
#include "FuzzCommon.h"

#include "api/Commlens.h"
#include "frontends/PlanReader.h"
#include "ir/IRParser.h"
#include "reports/PredictionReport.h"

#include "llvm/Support/raw_ostream.h"

using namespace commlens;

namespace {

// tests/lit/Inputs/mlp.ir: y = w2(relu(w1(x))).
constexpr const char *kProgram = R"(
scope MLP : examples.mlp.MLP
scope MLP.w1 : torch.nn.modules.linear.Linear
scope MLP.w2 : torch.nn.modules.linear.Linear
input %p_w1_weight : f32[32, 16] parameter "w1.weight"
input %p_w1_bias : f32[32] parameter "w1.bias"
input %p_w2_weight : f32[16, 32] parameter "w2.weight"
input %x : f32[8, 16] user_input "x"
%linear : f32[8, 32] = aten::linear.default(input=%x, weight=%p_w1_weight, bias=%p_w1_bias) @MLP.w1
%relu : f32[8, 32] = aten::relu.default(self=%linear) @MLP
%linear_1 : f32[8, 16] = aten::linear.default(input=%relu, weight=%p_w2_weight) @MLP.w2
output user_output %linear_1
)";

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto plan = parsePlan(fuzz::asText(data, size));
  if (!fuzz::expectMessage(plan))
    return 0;
  auto program = parseProgram(kProgram); // the passes rewrite it: a fresh one per input
  if (!program) {
    std::fprintf(stderr, "fuzz: the fixed program does not parse: %s\n", llvm::toString(program.takeError()).c_str());
    std::abort();
  }
  PredictRequest request;
  request.phase = PredictPhase::Both;
  request.buildReport = false;
  auto prediction = runPrediction(std::move(*program), std::move(*plan), request);
  if (!fuzz::expectMessage(prediction))
    return 0;
  // A pipeline that ran lays out its report: an error here is a bug, not bad input.
  const Prediction &p = **prediction;
  auto report = PredictionReport::build(p.program(), *p.plan(), p.state(), true, true);
  if (!report) {
    std::fprintf(stderr, "fuzz: the report of a prediction fails: %s\n", llvm::toString(report.takeError()).c_str());
    std::abort();
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  report->printTable(os, 1);
  os << report->toJson();
  return 0;
}
