// torch 2.13 SequenceParallel (torch/distributed/tensor/parallel/style.py): every parameter below
// the module replicated (re-registered, so trainable again); the input sharded on the sequence
// dim, the output left as the module computes it and kept a DTensor unless use_local_output.
#include "parallel/StyleParts.h"

namespace commlens {
namespace {

class SequenceParallel final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &s) const override {
    r.rejectUnknownKeys({"fqn", "style", "sequence_sharding", "use_local_output"});
    auto seq = singlePlacement(r, "sequence_sharding").value_or(OptionalPlacements{Placement::shard(1)});
    if (!seq[0]->isShard())
      r.field("sequence_sharding").fail("SequenceParallel shards the sequence: expected a Shard placement");
    s.sequenceSharding = *seq[0];
    s.useLocalOutput = boolOr(r, "use_local_output", false);
  }

  std::optional<Placement> parameterPlacement(const ParallelStyle &, const StyledModule &, llvm::StringRef,
                                              bool) const override {
    return Placement::replicate();
  }

  bool retrainsParameters() const override { return true; }

  bool replicatesBuffers() const override { return true; }

  llvm::Error preHook(const ParallelStyle &s, StyleHooks &hooks, HookArguments &arguments) const override {
    auto x = firstTensorArgument(s, hooks, arguments);
    if (!x)
      return x.takeError();
    **x = hooks.sequenceParallelInput(**x, s.sequenceSharding.value_or(Placement::shard(1)));
    return llvm::Error::success();
  }

  llvm::Error postHook(const ParallelStyle &s, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    return redistributeOnlyOutput(s, hooks, outputs, std::nullopt);
  }
};

} // namespace

const StyleModel &SequenceParallelModel() {
  static const SequenceParallel model;
  return model;
}

} // namespace commlens
