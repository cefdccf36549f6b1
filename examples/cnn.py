"""A small convolutional network on DTensors: ``convolution`` and ``convolution_backward`` run
DTensor's custom handlers (torch 2.13 ``distributed/tensor/_tp_conv.py``): their strategies shard
only the batch dim, and the kernel runs on the local shards as they are.

``cnn()``: ``conv1`` (3 -> 8 channels, 3x3, padding 1), ReLU, ``conv2`` (8 -> 8, 3x3, stride 2,
padding 1), ReLU, flattened into ``head`` (Linear 128 -> 10); input ``[8, 3, 8, 8]``.

``batch_parallel(model, dp, head_tp, conv_weight)``: the input replicated then sharded by batch
(``PrepareModuleInput``, a DTensor handed on), the convolutions' parameters ``distribute_tensor``-ed
as ``conv_weight`` (``"replicate"``; ``"shard_out"``: their weights ``Shard(0)``, which the
handler would run unredistributed: refused by name), and the head replicated too, or
``ColwiseParallel`` with ``head_tp`` (its input all-gathered from the batch shards).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    def __init__(self, device=None):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, device=device)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, device=device)
        self.head = nn.Linear(8 * 4 * 4, 10, device=device)

    def forward(self, x):
        h = F.relu(self.conv1(x))
        h = F.relu(self.conv2(h))
        return self.head(h.flatten(1))


def cnn(*, device="cpu", seed=0):
    torch.manual_seed(seed)
    return SmallCNN(device=device), (torch.randn(8, 3, 8, 8, device=device),)


def batch_parallel(model, *, dp=2, head_tp=False, conv_weight="replicate"):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, parallelize_module

    mesh = init_device_mesh("cpu", (dp,), mesh_dim_names=("dp",))
    parallelize_module(model, mesh, PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Shard(0),),
                                                       use_local_output=False))
    placed = {(model.conv1, "weight"): Shard(0) if conv_weight == "shard_out" else Replicate(),
              (model.conv1, "bias"): Shard(0) if conv_weight == "shard_out" else Replicate(),
              (model.conv2, "weight"): Replicate(), (model.conv2, "bias"): Replicate()}
    if head_tp:
        parallelize_module(model.head, mesh, ColwiseParallel())
    else:
        placed.update({(model.head, "weight"): Replicate(), (model.head, "bias"): Replicate()})
    for (module, name), placement in placed.items():
        param = getattr(module, name)
        module.register_parameter(name, nn.Parameter(distribute_tensor(param.detach(), mesh, [placement])))
    return model
