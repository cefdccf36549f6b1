"""``TorchtitanExpertTensorParallel``: the plan codec's entry for ``class ExpertTensorParallel`` of
torchtitan/distributed/expert_parallel.py (torchtitan 0.2.2), which its ``apply_moe_ep_tp`` applies
to each MoE layer's ``GroupedExperts`` on the 2-D ``[ep, etp]`` mesh when etp > 1: w1 and w3
[Shard(0), Shard(1)], w2 [Shard(0), Shard(2)]; the routed tokens taken Replicate on etp with a
Partial gradient, then ExpertParallel's dispatch and combine on ep
(parallel/TorchtitanExpertTensorParallel.cpp). It has no fields; its instance attributes are
ExpertParallel's per-call state."""

from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    return ENTRY.resolve()()


ENTRY = StyleEntry(
    name="TorchtitanExpertTensorParallel",
    cls="torchtitan.distributed.expert_parallel:ExpertTensorParallel",
    fields=(),
    construct=_construct,
    before_import="commlens._torchtitan:install",
)
