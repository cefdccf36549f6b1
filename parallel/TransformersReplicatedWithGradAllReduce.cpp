// transformers 5.23's ReplicatedWithGradAllReduce (transformers/distributed/tensor_parallel.py,
// registered as "replicated_with_grad_allreduce": Qwen3's and Gemma3's per-head q_norm / k_norm,
// between a column-wise and a row-wise layer). Its parameters stay plain tensors, whole on every
// rank, and the forward is unchanged; with grad enabled its install_forward registers a
// post-accumulate-grad hook on each of the module's own trainable parameters that sums the rank's
// partial gradient over the tensor-parallel mesh: `dist.all_reduce(param.grad)`, c10d.allreduce_
// of the gradient's bytes, in backward (autograd/Engine emits it where the gradient accumulates).
#include "parallel/StyleParts.h"

namespace commlens {
namespace {

class TransformersReplicatedWithGradAllReduce final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &) const override {
    r.rejectUnknownKeys({"fqn", "style"}); // the class takes no argument
  }

  bool allReducesParameterGradients() const override { return true; }
};

} // namespace

const StyleModel &TransformersReplicatedWithGradAllReduceModel() {
  static const TransformersReplicatedWithGradAllReduce model;
  return model;
}

} // namespace commlens
