"""Small MLP examples (and a single Linear) for commlens.

Factories (all keyword-only, all return ``(model, (x,))``):

* ``linear(batch, seq, in_dim, out_dim, bias, input_dim)``: one ``nn.Linear``
  as the root; ``input_dim`` (default ``in_dim``) is the last dim of the
  example input.
* ``mlp(batch, seq, dim, hidden, bias)``: ``w1`` -> relu -> ``w2``.
* ``stacked_mlp(n_layers, ...)``: a ``layers`` ModuleList of ``MLP`` blocks,
  applied one after the other.
* ``identity_mlp(...)``: ``MLP`` with placeholders that run no op, as models
  keep them for swapped-out parts: ``pre`` (nn.Identity) before ``w1``,
  ``act`` (nn.Identity, then relu) between ``w1`` and ``w2``, ``post`` after
  ``w2``; the same plan keys as ``mlp``.
* ``normalized_mlp(...)``: ``MLP`` whose hidden features are L2-normalised
  (``F.normalize`` over the last dim, as cosine / nGPT-style layers do)
  between ``w1`` and ``w2``; the same plan keys as ``mlp``.

The input is a float tensor of shape ``[batch, seq, dim]``.  ``device="meta"``
builds the model and the input without allocating memory.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from examples._common import resolve_dtype


class MLP(nn.Module):
    def __init__(self, dim, hidden, bias=True, device=None, dtype=None):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=bias, device=device, dtype=dtype)
        self.w2 = nn.Linear(hidden, dim, bias=bias, device=device, dtype=dtype)

    def forward(self, x):
        return self.w2(F.relu(self.w1(x)))


class IdentityMLP(MLP):
    def __init__(self, dim, hidden, bias=True, device=None, dtype=None):
        super().__init__(dim, hidden, bias=bias, device=device, dtype=dtype)
        self.pre, self.act, self.post = nn.Identity(), nn.Identity(), nn.Identity()

    def forward(self, x):
        return self.post(self.w2(F.relu(self.act(self.w1(self.pre(x))))))


class NormalizedMLP(MLP):
    def forward(self, x):
        return self.w2(F.normalize(self.w1(x), dim=-1))


class StackedMLP(nn.Module):
    def __init__(self, n_layers, dim, hidden, bias=True, device=None, dtype=None):
        super().__init__()
        self.layers = nn.ModuleList(
            MLP(dim, hidden, bias=bias, device=device, dtype=dtype)
            for _ in range(n_layers)
        )

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _input(batch, seq, dim, device, dtype):
    if device == "meta":
        return torch.empty(batch, seq, dim, device="meta", dtype=dtype)
    return torch.randn(batch, seq, dim, device=device, dtype=dtype)


def linear(*, batch=2, seq=8, in_dim=16, out_dim=32, bias=True, input_dim=None,
           device="cpu", dtype="float32", seed=0):
    dtype = resolve_dtype(dtype)
    torch.manual_seed(seed)
    model = nn.Linear(in_dim, out_dim, bias=bias, device=device, dtype=dtype)
    x_dim = in_dim if input_dim is None else input_dim
    return model, (_input(batch, seq, x_dim, device, dtype),)


def mlp(*, batch=2, seq=8, dim=16, hidden=32, bias=True,
        device="cpu", dtype="float32", seed=0):
    dtype = resolve_dtype(dtype)
    torch.manual_seed(seed)
    model = MLP(dim, hidden, bias=bias, device=device, dtype=dtype)
    return model, (_input(batch, seq, dim, device, dtype),)


def identity_mlp(*, batch=2, seq=8, dim=16, hidden=32, bias=True, device="cpu", dtype="float32", seed=0):
    dtype = resolve_dtype(dtype)
    torch.manual_seed(seed)
    model = IdentityMLP(dim, hidden, bias=bias, device=device, dtype=dtype)
    return model, (_input(batch, seq, dim, device, dtype),)


def normalized_mlp(*, batch=2, seq=8, dim=16, hidden=32, bias=True, device="cpu", dtype="float32", seed=0):
    dtype = resolve_dtype(dtype)
    torch.manual_seed(seed)
    model = NormalizedMLP(dim, hidden, bias=bias, device=device, dtype=dtype)
    return model, (_input(batch, seq, dim, device, dtype),)


def stacked_mlp(*, n_layers=3, batch=2, seq=8, dim=16, hidden=32, bias=True,
                device="cpu", dtype="float32", seed=0):
    dtype = resolve_dtype(dtype)
    torch.manual_seed(seed)
    model = StackedMLP(n_layers, dim, hidden, bias=bias, device=device, dtype=dtype)
    return model, (_input(batch, seq, dim, device, dtype),)
