"""A model that calls one submodule twice per forward (weight sharing), for commlens.

``shared_mlp(...)`` returns ``(model, (x,))`` with ``x`` a float tensor of shape
``[batch, seq, dim]``.  Module names (root class ``SharedMLPNet``)::

    proj                nn.Linear(dim, dim)
    block               examples.mlp.MLP (w1 -> relu -> w2), called twice:
                        block(proj(x)), then block(norm(h))
    block.w1, block.w2  nn.Linear
    norm                nn.LayerNorm(dim), between the two calls
    head                nn.Linear(dim, dim)

CommDebugMode names both calls ``SharedMLPNet.block`` and adds their counts;
each call runs the block's tensor-parallel hooks again.
"""

import torch
import torch.nn as nn

from examples._common import resolve_dtype
from examples.mlp import MLP


class SharedMLPNet(nn.Module):
    def __init__(self, dim, hidden, device=None, dtype=None):
        super().__init__()
        self.proj = nn.Linear(dim, dim, device=device, dtype=dtype)
        self.block = MLP(dim, hidden, device=device, dtype=dtype)
        self.norm = nn.LayerNorm(dim, device=device, dtype=dtype)
        self.head = nn.Linear(dim, dim, device=device, dtype=dtype)

    def forward(self, x):
        h = self.block(self.proj(x))
        h = self.block(self.norm(h))
        return self.head(h)


def shared_mlp(*, batch=2, seq=8, dim=16, hidden=32, device="cpu", dtype="float32", seed=0):
    dtype = resolve_dtype(dtype)
    torch.manual_seed(seed)
    model = SharedMLPNet(dim, hidden, device=device, dtype=dtype)
    if device == "meta":
        x = torch.empty(batch, seq, dim, device="meta", dtype=dtype)
    else:
        x = torch.randn(batch, seq, dim, device=device, dtype=dtype)
    return model, (x,)
