"""``TransformersMoeExpertsParallel``: the plan codec's entry for ``class MoeExpertsParallel`` of
transformers/distributed/tensor_parallel.py (transformers 5.23), registered as
``"moe_tp_experts"`` (the experts module of Qwen3-MoE, Qwen2-MoE, Mixtral, OLMoE, ...). The
experts' 3-D parameters are placed by their own plan entries (``packed_colwise``, ``rowwise``:
the plan's ``placements``); this layer runs the experts on their local shards, takes the
hidden states and routing weights through an all-reduce in backward (``_AllReduceBackward``) and
sums the partial output with ``dist.all_reduce`` (``_AllReduceForward``)
(parallel/TransformersMoeExpertsParallel.cpp). It has no fields."""

from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    from transformers.distributed.tensor_parallel import MoeExpertsParallel

    return MoeExpertsParallel()


ENTRY = StyleEntry(
    name="TransformersMoeExpertsParallel",
    cls="transformers.distributed.tensor_parallel:MoeExpertsParallel",
    fields=(),
    construct=_construct,
)
