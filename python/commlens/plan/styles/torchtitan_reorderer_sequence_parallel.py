"""``TorchtitanReordererSequenceParallel``: the plan codec's entry for ``class
ReordererSequenceParallel`` of torchtitan/distributed/expert_parallel.py (torchtitan 0.2.2), which
its ``apply_moe_ep_tp`` applies to each MoE layer's ``TokenReorderer`` when expert parallel borrows
the tensor-parallel ranks: each rank routes and dispatches only its slice of the tokens
(parallel/TorchtitanReordererSequenceParallel.cpp). It has no fields."""

from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    return ENTRY.resolve()()


ENTRY = StyleEntry(
    name="TorchtitanReordererSequenceParallel",
    cls="torchtitan.distributed.expert_parallel:ReordererSequenceParallel",
    fields=(),
    construct=_construct,
    before_import="commlens._torchtitan:install",
)
