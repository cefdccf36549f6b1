"""In-place writes into views, as models write them (``out[:, i] = x``: ``copy_`` into a
``select`` of ``out``): autograd differentiates later reads of ``out`` through the write
(CopySlices), while the exported program's later nodes read ``out`` by its value from before it.

``inplace(variant)``: a Linear ``lin`` (8 -> 8) whose output ``h`` ``[4, 3, 8]`` the body writes:

* ``copy_select``: ``out = zeros_like(h); out[:, 0] = h[:, 0] * 2``;
* ``copy_slice``: ``out[:, 1, :4] = h[:, 1, :4] + 1`` into zeros (a slice of a select);
* ``chunks``: ``out[:, i] = h[:, i] * (i + 1)`` for each of the 3 rows, then ``out * h``
  (Qwen3.5's chunked delta rule writes its output so);
* ``overwrite``: ``y = h * 1; y[:, 0] = h[:, 2]`` (the base needs a gradient too);
* ``mul_with_grad``: ``y = h * 1; y[:, 0].mul_(h[:, 1])`` (an in-place op other than copy_ whose
  other operand needs a gradient: refused by name);

``tp_local(model, tp, local=True)``: ``ColwiseParallel(output_layouts=Replicate())`` on ``lin``
(its output handed on as a plain tensor; ``local=False``: a DTensor).
"""

import torch
import torch.nn as nn


class InPlace(nn.Module):
    def __init__(self, variant, device=None):
        super().__init__()
        self.variant = variant
        self.lin = nn.Linear(8, 8, device=device)

    def forward(self, x):
        h = self.lin(x)
        if self.variant == "copy_select":
            out = torch.zeros_like(h)
            out[:, 0] = h[:, 0] * 2
            return out
        if self.variant == "copy_slice":
            out = torch.zeros_like(h)
            out[:, 1, :4] = h[:, 1, :4] + 1
            return out
        if self.variant == "chunks":
            out = torch.zeros_like(h)
            for i in range(h.shape[1]):
                out[:, i] = h[:, i] * (i + 1)
            return out * h
        if self.variant == "overwrite":
            y = h * 1
            y[:, 0] = h[:, 2]
            return y
        if self.variant == "mul_with_grad":
            y = h * 1
            y[:, 0].mul_(h[:, 1])
            return y
        raise ValueError(f"unknown variant {self.variant!r}")


def inplace(*, variant="copy_select", device="cpu", seed=0):
    torch.manual_seed(seed)
    return InPlace(variant, device=device), (torch.randn(4, 3, 8, device=device),)


def tp_local(model, *, tp=2, local=True):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    parallelize_module(model, init_device_mesh("cpu", (tp,)),
                       {"lin": ColwiseParallel(output_layouts=Replicate(), use_local_output=local)})
    return model
