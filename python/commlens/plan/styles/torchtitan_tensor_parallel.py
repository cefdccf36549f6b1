"""``TorchtitanTensorParallel``: the plan codec's entry for ``class TensorParallel`` of
torchtitan/distributed/expert_parallel.py (torchtitan 0.2.2), which its ``apply_moe_ep_tp``
applies to each MoE layer's ``GroupedExperts`` on the tensor-parallel mesh when expert parallel is
off: w1/w3 Shard(1), w2 Shard(2), used as local shards, and the routed tokens' gradient all-reduced
(parallel/TorchtitanTensorParallel.cpp). It has no fields."""

from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    return ENTRY.resolve()()


ENTRY = StyleEntry(
    name="TorchtitanTensorParallel",
    cls="torchtitan.distributed.expert_parallel:TensorParallel",
    fields=(),
    construct=_construct,
    before_import="commlens._torchtitan:install",
)
