// transformers 5.23's MlaKvAProjParallel (transformers/distributed/tensor_parallel.py, registered
// as "mla_kv_a_proj"), which from_pretrained(tp_plan="auto") installs on the kv_a_proj_with_mqa
// of multi-head latent attention (DeepSeek-V2, GLM-4-MoE-Lite, LongCat-Flash, MiniCPM3, ...). It
// places no parameter: the projection runs whole on every rank. Its output
// [..., kv_lora_rank + qk_rope_head_dim] is split: the first part feeds kv_b_proj (column-wise,
// whose input hook already sums its gradient), the rope part goes straight to attention, so
// transform_output_post_forward passes it through _AllReduceBackward (parallel_utils.py: identity
// forward, its gradient summed by dist.all_reduce, c10d.allreduce_) and concatenates the two
// again. CommDebugMode charges that all-reduce to the module whose backward runs then.
#include "parallel/StyleParts.h"

#include "ir/Error.h"
#include "ir/TensorMetaUtils.h"

namespace commlens {
namespace {

class TransformersMlaKvAProjParallel final : public StyleModel {
public:
  void decode(const JsonRef &r, ParallelStyle &style) const override {
    r.rejectUnknownKeys({"fqn", "style", "qk_rope_head_dim"});
    JsonRef rope = r.field("qk_rope_head_dim");
    style.qkRopeHeadDim = rope.asInt();
    if (style.qkRopeHeadDim < 1)
      rope.fail(fmt::format("qk_rope_head_dim {} (expected a positive int: the model config's)", style.qkRopeHeadDim));
  }

  llvm::Error postHook(const ParallelStyle &style, StyleHooks &hooks, std::vector<Value *> &outputs) const override {
    auto y = onlyOutput(style, hooks, outputs);
    if (!y)
      return y.takeError();
    const TensorMeta &meta = *(**y)->meta();
    int64_t width = meta.rank() ? sizesOf(meta).back() : 0;
    if (width <= style.qkRopeHeadDim)
      return makeError("{} on {}: its output {} has no more than qk_rope_head_dim ({}) features in its last dim, "
                       "which it splits into the kv part and the rope part",
                       name(style.kind).str(), hooks.module().scope.displayName(), meta.str(), style.qkRopeHeadDim);
    int64_t split = width - style.qkRopeHeadDim;
    Value *kv = hooks.sliceLastDim(**y, 0, split);
    Value *rope = hooks.allReduceInBackward(hooks.sliceLastDim(**y, split, width), "rope part of its output");
    **y = hooks.catLastDim({kv, rope});
    return llvm::Error::success();
  }
};

} // namespace

const StyleModel &TransformersMlaKvAProjParallelModel() {
  static const TransformersMlaKvAProjParallel model;
  return model;
}

} // namespace commlens
