"""Parallelize functions written the way users write them (torchtitan's ``parallelize_llama``,
PyTorch's FSDP tests), for ``commlens.capture``: each takes the model, builds its own
``DeviceMesh`` on the process group it finds, and calls torch's APIs directly::

    python -m commlens.capture --model examples.llama:llama \\
        --parallelize 'examples.parallelize:llama_fsdp_tp(dp=2, tp=4)' --world-size 8 -o plan.json

* ``llama_tp_sp(tp)``: examples.llama, tensor + sequence parallel on a 1-D ``("tp",)`` mesh, one
  ``parallelize_module`` call for the root modules and one per block (torchtitan's loop);
* ``llama_fsdp_tp(dp, tp, ac=False, prefetch=False)``: the same styles on ``tp`` of a
  ``("dp", "tp")`` mesh, then ``fully_shard`` of every block and of the root on ``dp``; ``ac``
  wraps every block in a non-reentrant ``checkpoint_wrapper`` first (``ac="sac"``: with an op-list
  selective policy; ``early_stop=False``: torchtitan's full AC, recomputing whole blocks);
  ``prefetch`` sets torchtitan's explicit prefetch lists; ``embedding_unit`` makes
  ``tok_embeddings`` a unit of its own first (torchtitan's ``apply_fsdp``);
* ``stacked_mlp_fsdp()``: examples.mlp:stacked_mlp, ``fully_shard`` with its default mesh on
  every block and the root, no gradient sync for the last block;
* ``subclassed_tp(tp)``: examples.subclassed, its ``nn.Embedding`` subclass row-wise (vocab
  parallel), its two ``nn.Linear`` subclasses column-wise then row-wise;
* ``captured(model, parallelize, world_size, loss)``: the plan ``commlens.capture`` reads off one of
  these functions (a plan factory, for the accuracy corpus); ``measure_natively(...)``: the truth,
  one step of the model as the function parallelizes it, counted by CommDebugMode on real CPU tensors;
* ``mlp_placed(dp, tp)``: examples.mlp:mlp, its input made a replicated DTensor by
  ``PrepareModuleInput`` on the root and its parameters placed by ``distribute_tensor`` on ``tp``
  of a ``("dp", "tp")`` mesh, ``w2.bias`` frozen.
"""

import functools

import torch
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.utils.checkpoint import create_selective_checkpoint_contexts


def _apply_tp(model, tp_mesh):
    """torchtitan's ``apply_tp`` for the Llama example: the root's modules, then each block."""
    parallelize_module(model, tp_mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    for block in model.layers:
        parallelize_module(block, tp_mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        })


def llama_tp_sp(model, *, tp=4):
    _apply_tp(model, init_device_mesh("cpu", (tp,), mesh_dim_names=("tp",)))
    return model


def llama_fsdp_tp(model, *, dp=2, tp=4, ac=False, prefetch=False, early_stop=True, embedding_unit=False):
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    _apply_tp(model, mesh["tp"])
    if ac:
        kwargs = {} if early_stop else {"early_stop": False}
        if ac == "sac":
            ops = [torch.ops.aten.mm.default, torch.ops._c10d_functional.reduce_scatter_tensor.default]
            kwargs["context_fn"] = functools.partial(create_selective_checkpoint_contexts, ops)
        for name, block in model.layers.named_children():
            model.layers.register_module(name, checkpoint_wrapper(
                block, checkpoint_impl=CheckpointImpl.NO_REENTRANT, preserve_rng_state=False, **kwargs))
    if embedding_unit:
        fully_shard(model.tok_embeddings, mesh=mesh["dp"])
    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    if prefetch:
        blocks = list(model.layers)
        for i, block in enumerate(blocks):
            if i + 1 < len(blocks):
                block.set_modules_to_forward_prefetch([blocks[i + 1]])
            if i > 0:
                block.set_modules_to_backward_prefetch([blocks[i - 1]])
    return model


def stacked_mlp_fsdp(model):
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    model.layers[-1].set_requires_gradient_sync(False, recurse=False)


def mlp_placed(model, *, dp=2, tp=2):
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    tp_mesh = mesh["tp"]
    # the input becomes a replicated DTensor, so the placed parameters' ops run as DTensor ops
    parallelize_module(model, tp_mesh, PrepareModuleInput(input_layouts=(Replicate(),),
                                                          desired_input_layouts=(Replicate(),),
                                                          use_local_output=False))
    placements = {
        model.w1: {"weight": (Shard(0),), "bias": (Shard(0),)},
        model.w2: {"weight": (Shard(1),), "bias": (Replicate(),)},
    }
    for module, params in placements.items():
        for name, pls in params.items():
            param = getattr(module, name)
            module.register_parameter(name, nn.Parameter(distribute_tensor(param.detach(), tp_mesh, pls)))
    model.w2.bias.requires_grad_(False)


def subclassed_tp(model, *, tp=4):
    mesh = init_device_mesh("cpu", (tp,), mesh_dim_names=("tp",))
    parallelize_module(model, mesh, {"emb": RowwiseParallel(input_layouts=Replicate()), "w1": ColwiseParallel(),
                                     "w2": RowwiseParallel()})
    return model


def captured(*, model, parallelize, world_size, loss="sum", inputs_requires_grad=()):
    """The plan ``commlens.capture`` reads off ``parallelize`` (a ``MODULE:FN(...)`` spec) run on
    ``model`` (a factory spec) over ``world_size`` ranks, with a ``loss`` ("sum" or "cross_entropy")."""
    import commlens.capture

    plan = commlens.capture.capture(model, parallelize, world_size, loss=loss,
                                    inputs_requires_grad=inputs_requires_grad)
    plan.name = f"{parallelize.split(':')[1].split('(')[0]}_captured"
    return plan


def measure_natively(*, model, parallelize, world_size, phase="both", loss="sum", loss_parallel=False,
                     inputs_requires_grad=()):
    """The commlens-counts document of one step (``phase``) of ``model`` parallelized by
    ``parallelize`` itself on real CPU tensors, rank 0 of a fake process group of ``world_size``
    ranks, counted by CommDebugMode; the loss and the inputs requiring grad as a plan states them."""
    from commlens._factory import call_model_factory, resolve
    from commlens.measure import count_collectives, counts_document, device_info, fake_process_group
    from commlens.plan import Loss

    fn, kwargs = resolve(parallelize)
    with fake_process_group(world_size, parallelize):
        model_obj, args, model_kwargs = call_model_factory(model)
        fn(model_obj, **kwargs)
        args = tuple(a.detach().requires_grad_(True) if i in inputs_requires_grad else a for i, a in enumerate(args))
        modules = count_collectives(model_obj, args, model_kwargs, phase, Loss(kind=loss) if isinstance(loss, str)
                                    else loss, loss_parallel=loss_parallel)
        mesh = next((p.device_mesh._get_root_mesh() for p in model_obj.parameters() if hasattr(p, "device_mesh")),
                    None)
    doc_mesh = None if mesh is None else {"shape": list(mesh.shape), "device_type": mesh.device_type,
                                          "dim_names": None if mesh.mesh_dim_names is None else list(mesh.mesh_dim_names)}
    return counts_document(modules, backend="fake", world_size=world_size, phase=phase, model=model, mesh=doc_mesh,
                           plan_source=parallelize, device=device_info(args[0].device))


def stacked_mlp_fsdp_dim1(model, *, dp=8):
    """fully_shard of every block and of the root on a 1-D ``("dp",)`` mesh, each 2-D weight whose
    dim 0 does not split evenly over ``dp`` sharded on dim 1 instead (``shard_placement_fn``, as
    torchtitan shards MoE experts when dim 0 is too short)."""
    mesh = init_device_mesh("cpu", (dp,), mesh_dim_names=("dp",))

    def placement(param):
        return Shard(1) if param.ndim == 2 and param.shape[0] % dp else None

    for block in model.layers:
        fully_shard(block, mesh=mesh, shard_placement_fn=placement)
    fully_shard(model, mesh=mesh)
    return model
