// torchtitan 0.2.2's ExpertTensorParallel (torchtitan/distributed/expert_parallel.py), applied by
// its apply_moe_ep_tp to each MoE layer's GroupedExperts on the 2-D [ep, etp] mesh when etp > 1:
//   - _partition_fn: w1 and w3 ([experts, hidden, dim]) become new nn.Parameters [Shard(0),
//     Shard(1)] (experts over ep, column-wise over etp), w2 ([experts, dim, hidden]) [Shard(0),
//     Shard(2)] (row-wise over etp); GroupedExperts.forward computes with their to_local();
//   - _token_dispatch: the routed tokens go DTensor.from_local(device_mesh["etp"], Replicate)
//     .to_local(grad_placements=(Partial(),)) (nothing moves in forward; in backward their
//     gradient is all-reduced over etp), then ExpertParallel's dispatch on device_mesh["ep"]: the
//     per-expert counts, then the tokens, each an all_to_all_single;
//   - _token_combine: ExpertParallel's combine on device_mesh["ep"].
// The experts' outputs are partial sums over etp, which the PrepareModuleInputOutput on the MoE
// module reduces.
#include "parallel/StyleParts.h"

namespace commlens {
namespace {

constexpr unsigned kEp = 0, kEtp = 1; // the dims of its [ep, etp] mesh

class TorchtitanExpertTensorParallel final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &) const override {
    r.rejectUnknownKeys({"fqn", "style"}); // the class takes no argument
  }

  unsigned meshNdim() const override { return 2; }
  std::optional<Placements> parameterPlacements(const ParallelStyle &, const StyledModule &, llvm::StringRef name,
                                                bool direct) const override {
    std::optional<int64_t> dim = groupedExpertsTensorParallelDim(name);
    if (!direct || !dim)
      return std::nullopt;
    return Placements{Placement::shard(0), Placement::shard(*dim)}; // experts over ep, TP's dim over etp
  }
  bool retrainsParameters() const override { return true; }
  bool parametersUsedLocally() const override { return true; }

  llvm::Error preHook(const ParallelStyle &style, StyleHooks &hooks, HookArguments &arguments) const override {
    if (llvm::Error err = checkGroupedExpertsCall(style, hooks, arguments))
      return err;
    arguments.args[0] = replicatedWithPartialGradient(hooks.onMeshDim(kEtp), arguments.args[0]);
    return expertParallelDispatch(style, hooks.onMeshDim(kEp), arguments);
  }

  llvm::Error postHook(const ParallelStyle &style, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    return expertParallelCombine(style, hooks.onMeshDim(kEp), outputs);
  }
};

} // namespace

const StyleModel &TorchtitanExpertTensorParallelModel() {
  static const TorchtitanExpertTensorParallel model;
  return model;
}

} // namespace commlens
