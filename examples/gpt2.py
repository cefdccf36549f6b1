"""GPT-2 style decoder for commlens.

``gpt2(...)`` returns ``(model, (tokens,))`` with ``tokens`` an int64 tensor of
shape ``[batch, seq]``.  Module names (root class ``GPT2``)::

    tok_embeddings            nn.Embedding(vocab, dim)
    pos_embeddings            nn.Embedding(max_seq, dim)   (learned positions)
    dropout                   nn.Dropout(dropout)
    layers.N                  Block
    layers.N.attn_norm        nn.LayerNorm(dim)
    layers.N.attn             Attention
    layers.N.attn.{wq,wk,wv}  nn.Linear(dim, dim, bias)
    layers.N.attn.wo          nn.Linear(dim, dim, bias)
    layers.N.mlp_norm         nn.LayerNorm(dim)
    layers.N.mlp              FeedForward
    layers.N.mlp.w1           nn.Linear(dim, 4*dim, bias)   then GELU (tanh approx.)
    layers.N.mlp.w2           nn.Linear(4*dim, dim, bias)
    norm                      nn.LayerNorm(dim)
    lm_head                   nn.Linear(dim, vocab, bias=False), weight tied to
                              tok_embeddings.weight

Attention reshapes with ``-1`` for the head count, so the same code runs with
local (tensor-parallel) shards of q/k/v.  ``attn="matmul"`` computes
``softmax(q @ k^T * scale + causal_mask) @ v`` explicitly; ``attn="sdpa"``
calls ``F.scaled_dot_product_attention(q, k, v, is_causal=True)``.
``dropout`` (default 0.0) is used after the embeddings, on the attention
probabilities (matmul) / ``dropout_p`` (sdpa, only in training mode), and
after ``wo`` and ``w2``.

GPT-2 XL shape: ``gpt2(n_layers=48, dim=1600, n_heads=25, vocab=50257,
max_seq=1024, seq=1024, device="meta")``.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from examples._common import check_divisible, resolve_dtype


class Attention(nn.Module):
    def __init__(self, dim, n_heads, bias, dropout, attn, device, dtype):
        super().__init__()
        if attn not in ("matmul", "sdpa"):
            raise ValueError(f"attn must be 'matmul' or 'sdpa', got {attn!r}")
        self.head_dim = dim // n_heads
        self.attn = attn
        self.dropout_p = dropout
        kw = dict(bias=bias, device=device, dtype=dtype)
        self.wq = nn.Linear(dim, dim, **kw)
        self.wk = nn.Linear(dim, dim, **kw)
        self.wv = nn.Linear(dim, dim, **kw)
        self.wo = nn.Linear(dim, dim, **kw)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        bsz, seqlen, _ = x.shape
        # -1: number of (local) heads
        q = self.wq(x).view(bsz, seqlen, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(bsz, seqlen, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(bsz, seqlen, -1, self.head_dim).transpose(1, 2)
        if self.attn == "sdpa":
            out = F.scaled_dot_product_attention(
                q, k, v, is_causal=True,
                dropout_p=self.dropout_p if self.training else 0.0,
            )
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
            mask = torch.ones(seqlen, seqlen, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
            probs = self.attn_dropout(F.softmax(scores, dim=-1))
            out = probs @ v
        out = out.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.resid_dropout(self.wo(out))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden, bias, dropout, device, dtype):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=bias, device=device, dtype=dtype)
        self.w2 = nn.Linear(hidden, dim, bias=bias, device=device, dtype=dtype)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.w2(F.gelu(self.w1(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, dim, n_heads, hidden, bias, dropout, attn, device, dtype):
        super().__init__()
        self.attn_norm = nn.LayerNorm(dim, device=device, dtype=dtype)
        self.attn = Attention(dim, n_heads, bias, dropout, attn, device, dtype)
        self.mlp_norm = nn.LayerNorm(dim, device=device, dtype=dtype)
        self.mlp = FeedForward(dim, hidden, bias, dropout, device, dtype)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class GPT2(nn.Module):
    def __init__(self, *, vocab, max_seq, dim, n_heads, n_layers, hidden,
                 bias, dropout, attn, tie_weights=True, device=None, dtype=None):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim, device=device, dtype=dtype)
        self.pos_embeddings = nn.Embedding(max_seq, dim, device=device, dtype=dtype)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            Block(dim, n_heads, hidden, bias, dropout, attn, device, dtype)
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(dim, device=device, dtype=dtype)
        self.lm_head = nn.Linear(dim, vocab, bias=False, device=device, dtype=dtype)
        if tie_weights:
            self.lm_head.weight = self.tok_embeddings.weight

    def forward(self, tokens):
        seqlen = tokens.shape[1]
        pos = torch.arange(seqlen, device=tokens.device)
        h = self.dropout(self.tok_embeddings(tokens) + self.pos_embeddings(pos))
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(self.norm(h))


def gpt2(*, batch=2, seq=16, vocab=256, max_seq=None, dim=64, n_heads=8,
         n_layers=2, hidden=None, bias=True, dropout=0.0, attn="matmul",
         tie_weights=True, device="cpu", dtype="float32", seed=0):
    dtype = resolve_dtype(dtype)
    check_divisible("dim", dim, "n_heads", n_heads)
    max_seq = seq if max_seq is None else max_seq
    if seq > max_seq:
        raise ValueError(f"seq={seq} exceeds max_seq={max_seq}")
    torch.manual_seed(seed)
    model = GPT2(vocab=vocab, max_seq=max_seq, dim=dim, n_heads=n_heads,
                 n_layers=n_layers, hidden=4 * dim if hidden is None else hidden,
                 bias=bias, dropout=dropout, attn=attn, tie_weights=tie_weights,
                 device=device, dtype=dtype)
    tokens = torch.randint(0, vocab, (batch, seq), device=device)
    return model, (tokens,)
