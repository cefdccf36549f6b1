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
