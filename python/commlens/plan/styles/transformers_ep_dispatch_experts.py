"""``TransformersEpDispatchExpertsParallel``: the plan codec's entry for ``class EpDispatchExpertsParallel``
of transformers/distributed/expert_parallel.py (transformers 5.23), registered as
``"ep_dispatch_experts"`` and applied by ``from_pretrained(distributed_config=
DistributedConfig(ep_size=...))`` to the experts module of Qwen3-MoE, Mixtral, OLMoE, ... on the
``ep`` dim of its expert mesh. Its experts' parameters are sharded by expert (``grouped_gemm``,
Shard(0) on the same mesh), which the plan style does; the experts run on their local experts, and
the tokens reach them by ``AllToAllEP``: the per-expert counts exchanged by
``dist.all_to_all_single``, the routed rows dispatched and the outputs combined by
``all_to_all_single_autograd`` (parallel/TransformersEpDispatchExpertsParallel.cpp). Modelled with a
tensor-parallel mesh of one rank (``tp_size=1``); it has no fields."""

from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    from transformers.distributed.expert_parallel import EpDispatchExpertsParallel

    return EpDispatchExpertsParallel()


ENTRY = StyleEntry(
    name="TransformersEpDispatchExpertsParallel",
    cls="transformers.distributed.expert_parallel:EpDispatchExpertsParallel",
    fields=(),
    construct=_construct,
)
