// transformers 5.23's LocalParamsParallel (transformers/distributed/tensor_parallel.py, registered
// as "local_params"), which from_pretrained(tp_plan="auto") installs on the attention module of
// models with attention sinks (GraniteSWA, MiMo-V2-Flash, ...): a bare nn.Parameter has no forward
// to hook, so its own plan entry shards it (the plan's `placements`) and this layer runs its owner's
// forward with the module's own DTensor parameters as their local shards
// (_use_local_dtensor_params). It changes nothing else and issues no collective.
#include "parallel/StyleParts.h"

namespace commlens {
namespace {

class TransformersLocalParamsParallel final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &) const override {
    r.rejectUnknownKeys({"fqn", "style"}); // the class takes no argument
  }
  bool parametersUsedLocally() const override { return true; }
};

} // namespace

const StyleModel &TransformersLocalParamsParallelModel() {
  static const TransformersLocalParamsParallel model;
  return model;
}

} // namespace commlens
