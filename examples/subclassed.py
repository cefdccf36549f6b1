"""Modules that subclass ``nn.Linear`` and ``nn.Embedding``, as adapters and scaled embeddings do:
torch's ``ColwiseParallel`` / ``RowwiseParallel`` partition them by ``isinstance``, which an
exported program, keeping only class names, cannot tell (``commlens.capture`` records it).

* ``subclassed(batch, seq, vocab, dim, hidden)``: ``emb`` (``ScaledEmbedding``: lookups times a
  0-dim buffer), ``w1`` (``GatedLinear``: times a per-output parameter ``gate``), relu, ``w2``
  (``ShiftedLinear``: times a buffer ``gain``, plus a parameter ``shift``); input token ids
  ``[batch, seq]``.
* ``lora(batch, seq, dim, rank)``: one ``LoRALinear`` (an ``nn.Linear`` with two child Linears
  added to its output), input ``[batch, seq, dim]``.
"""

import torch
import torch.nn as nn


class ScaledEmbedding(nn.Embedding):
    def __init__(self, vocab, dim, **kw):
        super().__init__(vocab, dim, **kw)
        self.register_buffer("scale", torch.tensor(dim ** 0.5, device=kw.get("device")), persistent=False)

    def forward(self, ids):
        return super().forward(ids) * self.scale


class GatedLinear(nn.Linear):
    def __init__(self, in_features, out_features, **kw):
        super().__init__(in_features, out_features, **kw)
        self.gate = nn.Parameter(torch.ones(out_features, device=kw.get("device")))

    def forward(self, x):
        return super().forward(x) * self.gate


class ShiftedLinear(nn.Linear):
    def __init__(self, in_features, out_features, **kw):
        super().__init__(in_features, out_features, **kw)
        self.shift = nn.Parameter(torch.zeros(out_features, device=kw.get("device")))
        self.register_buffer("gain", torch.ones(out_features, device=kw.get("device")))

    def forward(self, x):
        return super().forward(x) * self.gain + self.shift


class SubclassedNet(nn.Module):
    def __init__(self, vocab, dim, hidden, device=None):
        super().__init__()
        self.emb = ScaledEmbedding(vocab, dim, device=device)
        self.w1 = GatedLinear(dim, hidden, device=device)
        self.w2 = ShiftedLinear(hidden, dim, device=device)

    def forward(self, ids):
        return self.w2(torch.relu(self.w1(self.emb(ids))))


class LoRALinear(nn.Linear):
    def __init__(self, in_features, out_features, rank, **kw):
        super().__init__(in_features, out_features, **kw)
        self.lora_a = nn.Linear(in_features, rank, bias=False, device=kw.get("device"))
        self.lora_b = nn.Linear(rank, out_features, bias=False, device=kw.get("device"))

    def forward(self, x):
        return super().forward(x) + self.lora_b(self.lora_a(x))


def subclassed(*, batch=2, seq=8, vocab=64, dim=16, hidden=32, device="cpu", seed=0):
    torch.manual_seed(seed)
    model = SubclassedNet(vocab, dim, hidden, device=device)
    if device == "meta":
        return model, (torch.empty(batch, seq, dtype=torch.long, device="meta"),)
    return model, (torch.randint(0, vocab, (batch, seq), device=device),)


def lora(*, batch=2, seq=8, dim=16, rank=4, device="cpu", seed=0):
    torch.manual_seed(seed)
    model = LoRALinear(dim, dim, rank, device=device)
    return model, (torch.randn(batch, seq, dim, device=device),)
