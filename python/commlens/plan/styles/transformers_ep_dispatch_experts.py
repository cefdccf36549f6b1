"""``TransformersEpDispatchExpertsParallel``: the plan codec's entry for ``class
EpDispatchExpertsParallel`` of transformers/distributed/expert_parallel.py (transformers 5.23),
registered as ``"ep_dispatch_experts"`` and applied by ``from_pretrained(distributed_config=
DistributedConfig(ep_size=...))`` to the experts module of Qwen3-MoE, Mixtral, OLMoE, ... on the
``ep`` dim of its expert mesh. Its experts' parameters are sharded by expert (``grouped_gemm``,
Shard(0) on the same mesh), which the plan style does; the experts run on their local experts, and
the tokens reach them by the ``EPImplementation`` its ``install_forward`` names
(parallel/TransformersEpDispatchExpertsParallel.cpp). The layer object holds no configuration:
its fields are ``install_forward``'s keywords, set on the object commlens builds (capture records
them so): its ``tp_mesh`` as ``shares_batch`` (the expert mesh itself: ``tp_size == ep_size``) or
``tp_mesh_dim`` (the plan mesh dim of a TP group inside the expert group: 1 < tp_size < ep_size;
neither: a mesh of one rank), and ``ep_implementation``."""

from commlens.plan.styles.entry import StyleEntry

EP_IMPLEMENTATIONS = ("auto", "all_to_all", "all_reduce")


def _construct(values, subject, where):
    from transformers.distributed.expert_parallel import EpDispatchExpertsParallel

    implementation = values.get("ep_implementation", "auto")
    if implementation not in EP_IMPLEMENTATIONS:
        raise ValueError(f"ep_implementation {implementation!r} is not one of {', '.join(EP_IMPLEMENTATIONS)}")
    if implementation == "all_reduce" and not values.get("shares_batch", False):
        raise ValueError("ep_implementation 'all_reduce' needs shares_batch (every rank of the expert group holding "
                         "the same batch)")
    if values.get("shares_batch", False) and values.get("tp_mesh_dim") is not None:
        raise ValueError("with shares_batch the TP group is the expert group itself; tp_mesh_dim names a TP group "
                         "inside it (1 < tp_size < ep_size): give one or the other")
    layer = EpDispatchExpertsParallel()
    layer.shares_batch, layer.ep_implementation = values.get("shares_batch", False), implementation
    layer.tp_mesh_dim = values.get("tp_mesh_dim")
    return layer


ENTRY = StyleEntry(
    name="TransformersEpDispatchExpertsParallel",
    cls="transformers.distributed.expert_parallel:EpDispatchExpertsParallel",
    fields=(("shares_batch", "bool"), ("tp_mesh_dim", "dim?"), ("ep_implementation", "str")),
    construct=_construct,
)
