"""``TransformersReplicatedWithGradAllReduce``: the plan codec's entry for ``class
ReplicatedWithGradAllReduce`` of transformers/distributed/tensor_parallel.py (transformers 5.23),
registered as ``"replicated_with_grad_allreduce"`` (Qwen3's and Gemma3's per-head q/k norms). Its
parameters stay whole on every rank; with grad its forward hooks each trainable parameter so that
``dist.all_reduce`` sums its gradient once accumulated
(parallel/TransformersReplicatedWithGradAllReduce.cpp). It has no fields."""

from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    from transformers.distributed.tensor_parallel import ReplicatedWithGradAllReduce

    return ReplicatedWithGradAllReduce()


ENTRY = StyleEntry(
    name="TransformersReplicatedWithGradAllReduce",
    cls="transformers.distributed.tensor_parallel:ReplicatedWithGradAllReduce",
    fields=(),
    construct=_construct,
)
