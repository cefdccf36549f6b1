"""Llama style decoder (torchtitan naming) for commlens.

``llama(...)`` returns ``(model, (tokens,))`` with ``tokens`` an int64 tensor of
shape ``[batch, seq]``.  Module names (root class ``Transformer``)::

    tok_embeddings                        nn.Embedding(vocab, dim)
    layers.N                              TransformerBlock
    layers.N.attention_norm               nn.RMSNorm(dim)
    layers.N.attention                    Attention, called as attention(x, rope)
    layers.N.attention.{wq,wk,wv,wo}      nn.Linear(bias=False)
    layers.N.ffn_norm                     nn.RMSNorm(dim)
    layers.N.feed_forward                 FeedForward (SwiGLU)
    layers.N.feed_forward.{w1,w2,w3}      nn.Linear(bias=False): w2(silu(w1 x) * w3 x)
    norm                                  nn.RMSNorm(dim)
    output                                nn.Linear(dim, vocab, bias=False)

The root holds a non-persistent buffer ``rope`` of shape
``[max_seq, head_dim // 2, 2]`` (cos, sin), or with ``complex_rope=True``
torchtitan's complex64 ``freqs_cis`` ``[max_seq, head_dim // 2]``, applied
as torchtitan's ``apply_rotary_emb`` does (``view_as_complex``, a complex
multiply, ``view_as_real``).  The root slices it to
``[seq, head_dim // 2, 2]`` and passes it to every block and attention module as
a second positional argument (so ``PrepareModuleInput`` plans use
``input_layouts=(Shard(1), None)``).  RoPE rotates interleaved pairs of q/k
features.  Grouped-query attention: ``n_kv_heads`` divides ``n_heads``;
k/v heads are repeated ``n_heads // n_kv_heads`` times (repeat_kv).
Attention uses ``F.scaled_dot_product_attention(is_causal=True)``.  All
reshapes use ``-1`` for head counts so local tensor-parallel shards work.

FFN hidden size follows torchtitan/Meta: ``hidden = int(2 * 4 * dim / 3)``,
scaled by ``ffn_dim_multiplier`` if given, rounded up to ``multiple_of``.

Llama-3 70B shape: ``llama(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8,
vocab=128256, ffn_dim_multiplier=1.3, multiple_of=4096, device="meta")``.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from examples._common import check_divisible, resolve_dtype


def rope_angles(head_dim, max_seq, theta, device, dtype=torch.float32):
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=dtype) / head_dim))
    t = torch.arange(max_seq, device=device, dtype=dtype)
    return torch.outer(t, freqs)  # [max_seq, head_dim // 2]


def precompute_rope(head_dim, max_seq, theta, device, dtype=torch.float32):
    angles = rope_angles(head_dim, max_seq, theta, device, dtype)
    return torch.stack([angles.cos(), angles.sin()], dim=-1)


def apply_rope(x, rope):
    """x: [bsz, seq, heads, head_dim]; rope: [seq, head_dim // 2, 2]."""
    xp = x.reshape(*x.shape[:-1], -1, 2)
    x0, x1 = xp[..., 0], xp[..., 1]
    cos = rope[..., 0].view(1, rope.shape[0], 1, rope.shape[1])
    sin = rope[..., 1].view(1, rope.shape[0], 1, rope.shape[1])
    out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
    return out.flatten(3).type_as(x)


def precompute_freqs_cis(head_dim, max_seq, theta, device):
    """torchtitan's complex RoPE table: [max_seq, head_dim // 2] complex64 (cos + i sin)."""
    angles = rope_angles(head_dim, max_seq, theta, device)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rope_complex(x, freqs_cis):
    """torchtitan's apply_rotary_emb for one tensor: pairs as complex numbers times freqs_cis."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    freqs = freqs_cis.view(1, xc.shape[1], 1, xc.shape[-1])
    return torch.view_as_real(xc * freqs).flatten(3).type_as(x)


def repeat_kv(x, n_rep):
    """[bsz, seq, kv_heads, head_dim] -> [bsz, seq, kv_heads * n_rep, head_dim]."""
    if n_rep == 1:
        return x
    bsz, seqlen, kv_heads, head_dim = x.shape
    return (
        x[:, :, :, None, :]
        .expand(bsz, seqlen, kv_heads, n_rep, head_dim)
        .reshape(bsz, seqlen, kv_heads * n_rep, head_dim)
    )


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, device, dtype):
        super().__init__()
        self.head_dim = dim // n_heads
        self.n_rep = n_heads // n_kv_heads
        kw = dict(bias=False, device=device, dtype=dtype)
        self.wq = nn.Linear(dim, n_heads * self.head_dim, **kw)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, **kw)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, **kw)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, **kw)

    def forward(self, x, rope):
        bsz, seqlen, _ = x.shape
        q = self.wq(x).view(bsz, seqlen, -1, self.head_dim)
        k = self.wk(x).view(bsz, seqlen, -1, self.head_dim)
        v = self.wv(x).view(bsz, seqlen, -1, self.head_dim)
        rotate = apply_rope_complex if rope.is_complex() else apply_rope
        q = rotate(q, rope)
        k = rotate(k, rope)
        k = repeat_kv(k, self.n_rep)
        v = repeat_kv(v, self.n_rep)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        out = out.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden, device, dtype):
        super().__init__()
        kw = dict(bias=False, device=device, dtype=dtype)
        self.w1 = nn.Linear(dim, hidden, **kw)
        self.w2 = nn.Linear(hidden, dim, **kw)
        self.w3 = nn.Linear(dim, hidden, **kw)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, hidden, eps, device, dtype):
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim, eps=eps, device=device, dtype=dtype)
        self.attention = Attention(dim, n_heads, n_kv_heads, device, dtype)
        self.ffn_norm = nn.RMSNorm(dim, eps=eps, device=device, dtype=dtype)
        self.feed_forward = FeedForward(dim, hidden, device, dtype)

    def forward(self, x, rope):
        h = x + self.attention(self.attention_norm(x), rope)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, *, vocab, dim, n_layers, n_heads, n_kv_heads, hidden,
                 max_seq, rope_theta, eps, device=None, dtype=None, complex_rope=False):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim, device=device, dtype=dtype)
        precompute = precompute_freqs_cis if complex_rope else precompute_rope
        self.register_buffer("rope", precompute(dim // n_heads, max_seq, rope_theta, device), persistent=False)
        self.layers = nn.ModuleList(
            TransformerBlock(dim, n_heads, n_kv_heads, hidden, eps, device, dtype)
            for _ in range(n_layers)
        )
        self.norm = nn.RMSNorm(dim, eps=eps, device=device, dtype=dtype)
        self.output = nn.Linear(dim, vocab, bias=False, device=device, dtype=dtype)

    def forward(self, tokens):
        seqlen = tokens.shape[1]
        rope = self.rope[:seqlen]
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, rope)
        return self.output(self.norm(h))


def ffn_hidden(dim, multiple_of, ffn_dim_multiplier):
    hidden = int(2 * 4 * dim / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def llama(*, batch=2, seq=16, vocab=256, dim=128, n_layers=2, n_heads=16,
          n_kv_heads=8, multiple_of=32, ffn_dim_multiplier=None, max_seq=None,
          rope_theta=10000.0, eps=1e-5, device="cpu", dtype="float32", seed=0, complex_rope=False):
    dtype = resolve_dtype(dtype)
    check_divisible("dim", dim, "n_heads", n_heads)
    check_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
    if (dim // n_heads) % 2:
        raise ValueError(f"head_dim={dim // n_heads} must be even for RoPE")
    max_seq = seq if max_seq is None else max_seq
    if seq > max_seq:
        raise ValueError(f"seq={seq} exceeds max_seq={max_seq}")
    torch.manual_seed(seed)
    model = Transformer(
        vocab=vocab, dim=dim, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=n_kv_heads, hidden=ffn_hidden(dim, multiple_of, ffn_dim_multiplier),
        max_seq=max_seq, rope_theta=rope_theta, eps=eps, device=device, dtype=dtype, complex_rope=complex_rope,
    )
    tokens = torch.randint(0, vocab, (batch, seq), device=device)
    return model, (tokens,)
