"""A model whose forward, and whose blocks, take keyword inputs (for commlens).

``gated(...)`` returns ``(model, (x,), {"context": context})``: ``x`` and
``context`` are float tensors of shape ``[batch, seq, dim]``.  Module names
(root class ``GatedNet``)::

    ctx_proj                  nn.Linear(dim, dim): context -> gate
    layers.N                  GatedBlock, called as layers.N(x, gate=gate)
    layers.N.norm             nn.LayerNorm(dim)
    layers.N.mixer            GatedMixer, called as mixer(h, gate=gate, scale=0.5)
    layers.N.mixer.{w_in,w_gate,w_out}
                              nn.Linear: w_out(w_in(h) * sigmoid(w_gate(gate))) * scale
    layers.N.skip             nn.Identity (no ATen op)
    layers.N.drop             nn.Dropout(p) (``aten.dropout`` in training mode)
    layers.N.act              nn.GELU, applied to the block output
    norm                      nn.LayerNorm(dim)
    out                       nn.Linear(dim, dim)

The root's ``forward(self, x, *, context)`` takes ``context`` by keyword only,
and every ``layers.N.mixer`` takes ``gate`` by keyword, so a
``PrepareModuleInput`` plan for it needs ``input_kwarg_layouts``.
"""

import torch
import torch.nn as nn

from examples._common import resolve_dtype


class GatedMixer(nn.Module):
    def __init__(self, dim, hidden, device=None, dtype=None):
        super().__init__()
        self.w_in = nn.Linear(dim, hidden, device=device, dtype=dtype)
        self.w_gate = nn.Linear(dim, hidden, device=device, dtype=dtype)
        self.w_out = nn.Linear(hidden, dim, device=device, dtype=dtype)

    def forward(self, h, *, gate, scale=1.0):
        return self.w_out(self.w_in(h) * torch.sigmoid(self.w_gate(gate))) * scale


class GatedBlock(nn.Module):
    def __init__(self, dim, hidden, dropout, device=None, dtype=None):
        super().__init__()
        self.norm = nn.LayerNorm(dim, device=device, dtype=dtype)
        self.mixer = GatedMixer(dim, hidden, device=device, dtype=dtype)
        self.skip = nn.Identity()
        self.drop = nn.Dropout(dropout)
        self.act = nn.GELU()

    def forward(self, x, *, gate):
        return self.act(self.skip(x) + self.drop(self.mixer(self.norm(x), gate=gate, scale=0.5)))


class GatedNet(nn.Module):
    def __init__(self, dim, hidden, n_layers, dropout, device=None, dtype=None):
        super().__init__()
        self.ctx_proj = nn.Linear(dim, dim, device=device, dtype=dtype)
        self.layers = nn.ModuleList(GatedBlock(dim, hidden, dropout, device=device, dtype=dtype)
                                    for _ in range(n_layers))
        self.norm = nn.LayerNorm(dim, device=device, dtype=dtype)
        self.out = nn.Linear(dim, dim, device=device, dtype=dtype)

    def forward(self, x, *, context):
        gate = self.ctx_proj(context)
        for layer in self.layers:
            x = layer(x, gate=gate)
        return self.out(self.norm(x))


def _input(batch, seq, dim, device, dtype):
    if device == "meta":
        return torch.empty(batch, seq, dim, device="meta", dtype=dtype)
    return torch.randn(batch, seq, dim, device=device, dtype=dtype)


def gated(*, batch=2, seq=8, dim=16, hidden=32, n_layers=2, dropout=0.0,
          device="cpu", dtype="float32", seed=0):
    dtype = resolve_dtype(dtype)
    torch.manual_seed(seed)
    model = GatedNet(dim, hidden, n_layers, dropout, device=device, dtype=dtype)
    x = _input(batch, seq, dim, device, dtype)
    return model, (x,), {"context": _input(batch, seq, dim, device, dtype)}
