// A compiler pipeline using commlens as a library: predict a .pt2 under a plan (both phases) with
// a pass of its own appended to commlens' pipeline, which reads the prediction state and sums the
// collectives and bytes each mesh dim moves.
//   bytes_per_mesh_dim MODEL.pt2 PLAN.json
#include "api/Commlens.h"
#include "frontends/PlanReader.h"
#include "frontends/Pt2Loader.h"

#include <cstdio>
#include <map>
#include <memory>
#include <string>

namespace {

struct DimTotals {
  long collectives = 0, bytes = 0;
};

class BytesPerMeshDim : public commlens::Pass {
public:
  explicit BytesPerMeshDim(std::map<std::string, DimTotals> &out) : out_(out) {}
  llvm::StringRef name() const override { return "bytes-per-mesh-dim"; }
  llvm::Error run(commlens::PassContext &ctx) override {
    for (const commlens::CollectiveRecord &c : ctx.state.collectives) {
      std::string dims;
      for (unsigned d : c.meshDims)
        dims += (dims.empty() ? "" : ",") + ctx.plan->mesh.dimNames[d];
      DimTotals &t = out_[dims];
      ++t.collectives;
      t.bytes += c.bytesPerRank;
    }
    return llvm::Error::success();
  }

private:
  std::map<std::string, DimTotals> &out_;
};

int fail(const std::string &message) {
  std::fprintf(stderr, "bytes_per_mesh_dim: error: %s\n", message.c_str());
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3)
    return fail("usage: bytes_per_mesh_dim MODEL.pt2 PLAN.json");
  auto program = commlens::loadPt2(argv[1]);
  if (!program)
    return fail(std::string(argv[1]) + ": " + llvm::toString(program.takeError()));
  auto plan = commlens::readPlanFile(argv[2]);
  if (!plan)
    return fail(std::string(argv[2]) + ": " + llvm::toString(plan.takeError()));
  std::map<std::string, DimTotals> perDim;
  commlens::PredictRequest request;
  request.phase = commlens::PredictPhase::Both;
  request.customizePipeline = [&](commlens::PassManager &pm) { pm.add(std::make_unique<BytesPerMeshDim>(perDim)); };
  auto prediction = commlens::runPrediction(std::move(*program), std::move(*plan), request);
  if (!prediction)
    return fail(llvm::toString(prediction.takeError()));
  const commlens::PredictionReport &report = (*prediction)->report();
  std::printf("collectives: forward %ld, backward %ld\n", static_cast<long>(report.totals(commlens::Phase::Forward).collectives),
              static_cast<long>(report.totals(commlens::Phase::Backward).collectives));
  for (const auto &[dims, t] : perDim)
    std::printf("mesh dim %s: %ld collectives, %ld bytes per rank\n", dims.c_str(), t.collectives, t.bytes);
  return 0;
}
