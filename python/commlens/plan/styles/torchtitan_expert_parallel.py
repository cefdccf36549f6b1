"""``TorchtitanExpertParallel``: the plan codec's entry for ``class ExpertParallel`` of
torchtitan/distributed/expert_parallel.py (torchtitan 0.2.2), which its ``apply_moe_ep_tp`` applies
to each MoE layer's ``GroupedExperts`` on the expert-parallel mesh dim: the experts' parameters
Shard(0), the routed tokens dispatched to their experts' ranks and the outputs combined back by
all-to-alls (parallel/TorchtitanExpertParallel.cpp). It has no fields."""

from commlens.plan.styles.entry import StyleEntry

# Instance attributes that are not configuration: the state its dispatch hook leaves for its
# combine hook at every call (split sizes, the token permutation), None until the first forward.
RUNTIME_STATE = ("input_splits", "output_splits", "input_shape", "permuted_indices")


def _construct(values, subject, where):
    return ENTRY.resolve()()


ENTRY = StyleEntry(
    name="TorchtitanExpertParallel",
    cls="torchtitan.distributed.expert_parallel:ExpertParallel",
    fields=(),
    construct=_construct,
    before_import="commlens._torchtitan:install",
)
