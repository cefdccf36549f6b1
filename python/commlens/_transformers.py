"""transformers' own tensor parallelism, as ``from_pretrained(..., tp_plan="auto")`` applies it.

transformers 5.x does not use torch's ``ParallelStyle``s: its layer classes
(``transformers/distributed/tensor_parallel.py``, registered by name in ``ALL_PARALLEL_STYLES``)
shard a module's parameters (``shard_param``) and replace its ``forward`` (``install_forward``).
In training (grad enabled) the registrations below issue, per module and in bytes, what the torch
style they map to issues: measured by ``examples.hf_real:measure_transformers`` against plans
built from this table (the accuracy corpus' ``hf_*-transformers_tp`` configurations). Under
``torch.no_grad()`` the row-wise ones do not (their Linear then calls ``dist.all_reduce`` in
place), so capture records those as transformers' own layer (:data:`OWN_STYLES`).

:func:`parallelize` is what ``python -m commlens.capture --parallelize transformers`` runs.
"""

import contextlib
import os
import types

from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

# Registrations capture records as transformers' own layer objects (plan styles Transformers*):
# RowwiseParallel rather than its torch style below, because without grad its Linear runs on local
# shards and calls dist.all_reduce in place (c10d.allreduce_), which no torch style does; and
# ReplicatedWithGradAllReduce, a gradient hook no torch style has; MoeExpertsParallel, the experts on
# their local shards between autograd all-reduces of transformers' own. (Hand-written plans,
# examples.hf:hf_tp, use the torch styles, measured as torch runs them.)
OWN_STYLES = ("rowwise", "rowwise_split_input", "replicated_with_grad_allreduce", "moe_tp_experts",
              "ep_dispatch_experts", "mla_kv_a_proj", "local_params")
# The expert-parallel layer (transformers/distributed/expert_parallel.py) whose install_forward
# takes the expert and the tensor-parallel meshes by keyword; its experts' parameters are sharded
# by "grouped_gemm" entries of their own.
EP_DISPATCH = "ep_dispatch_experts"
# The layer that reads the model config transformers sets on the module (qk_rope_head_dim).
MLA_KV_A_PROJ = "mla_kv_a_proj"

# transformers' registration name -> the torch style with the layouts transformers registers for it.
# Its EmbeddingParallel(shard_dim=0) shards the vocabulary, takes the ids replicated and sums the
# partial lookups to Replicate: torch's RowwiseParallel on an nn.Embedding with a Replicate input.
# Any other registration has no torch style to map to (replicated_with_grad_allreduce: a hook
# calling dist.all_reduce on a parameter's grad; the MoE and packed styles; ...).
TORCH_STYLES = {
    "embedding_rowwise": lambda: RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
    "colwise": lambda: ColwiseParallel(input_layouts=Replicate(), output_layouts=Shard(-1)),
    "rowwise": lambda: RowwiseParallel(input_layouts=Shard(-1), output_layouts=Replicate()),
    "colwise_gather_output": lambda: ColwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
    "rowwise_split_input": lambda: RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
}
# Registrations that change no parameter and wrap forward with identity transforms.
NO_OP_STYLES = ("replicate",)


@contextlib.contextmanager
def torchrun_env(world_size):
    """The variables torchrun sets for rank 0, for the block: transformers reads WORLD_SIZE (its
    tp_size defaults to it) and LOCAL_RANK (the device it binds)."""
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def apply_layer(model, mesh, pattern, layer):
    """What transformers' ``distribute_model`` does with ``layer`` on each module ``pattern``
    matches (as parallelize_module matches it): ``shard_param`` on each of the module's own
    parameters, then ``install_forward``."""
    from commlens.plan import match_modules

    for path in match_modules(model, pattern):
        module = model.get_submodule(path)
        if type(layer).__name__ == "EpDispatchExpertsParallel":
            _dispatch_experts(module, mesh, layer)
            continue
        for name in list(module._parameters):
            layer.shard_param(module, name, mesh)
        if type(layer).__name__ == "MlaKvAProjParallel":
            # transformers hands the module its model config (apply_tensor_parallelism); the layer
            # reads qk_rope_head_dim off it
            module.config = types.SimpleNamespace(qk_rope_head_dim=layer.qk_rope_head_dim)
        layer.install_forward(module, mesh)


def _dispatch_experts(module, ep_mesh, layer):
    """transformers' ep_plan on one experts module, as commlens models it (plan style
    ``TransformersEpDispatchExpertsParallel``): ``grouped_gemm`` (Shard(0) on the expert-parallel
    mesh) on each of its parameters, then ``ep_dispatch_experts`` with the layer's
    ``ep_implementation``, its TP mesh the expert mesh itself (``shares_batch``), the plan mesh's
    dim ``tp_mesh_dim`` or of one rank."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from transformers.distributed.expert_parallel import MoEParamShard

    by_expert = MoEParamShard(Shard(0), shards_expert_dim=True)
    for name in list(module._parameters):
        by_expert.shard_param(module, name, ep_mesh)
    if layer.shares_batch:
        tp_mesh = ep_mesh
    elif layer.tp_mesh_dim is not None:  # a TP group inside the expert group
        tp_mesh = ep_mesh._get_root_mesh()[layer.tp_mesh_dim]
    else:  # each rank its own TP group (tp_size=1), as transformers' dense mesh has it
        tp_mesh = init_device_mesh(ep_mesh.device_type, (dist.get_world_size(), 1), mesh_dim_names=("dp", "tp"))["tp"]
    layer.install_forward(module, ep_mesh=ep_mesh, tp_mesh=tp_mesh, ep_implementation=layer.ep_implementation)


def parallelize(model, **distributed_config):
    """Parallelize the first transformers ``PreTrainedModel`` in ``model`` (itself or the outermost
    one inside a wrapper) with the calls ``from_pretrained(..., distributed_config=
    DistributedConfig(tp_plan="auto", **distributed_config))`` makes (``prepare_distribute_model``,
    then ``maybe_distribute_model``), on the process group's world size."""
    import torch.distributed as dist
    from transformers import PreTrainedModel
    from transformers.distributed import DistributedConfig

    from commlens._errors import CommlensError

    inner = next((m for m in model.modules() if isinstance(m, PreTrainedModel)), None)
    if inner is None:
        raise CommlensError("transformers", f"the {type(model).__name__} holds no transformers PreTrainedModel")
    with torchrun_env(dist.get_world_size()):
        config, _device_map, mesh_manager = type(inner).prepare_distribute_model(
            DistributedConfig(tp_plan="auto", **distributed_config))
        type(inner).maybe_distribute_model(inner, config, mesh_manager)
