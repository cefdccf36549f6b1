"""Single-op programs for the per-op backward oracle (test_backward_op_oracle.py).

Each case is a tiny module whose forward calls one op on its inputs; the plan turns the inputs into
DTensors on a 1-D mesh of 2 (fake process group) with the given placements, marks the floating
ones `requires_grad`, and the loss is `sum`. The oracle compares, per module, the backward ATen
ops with a DTensor argument and the backward collectives of `commlens predict --phase backward`
with what CommDebugMode records for `loss.backward()`.

  python tests/backward/op_cases.py OUTDIR [CASE_ID ...]

writes OUTDIR/<id>.pt2, <id>.plan.json, <id>.dump.json (CommDebugMode's generate_json_dump) and
OUTDIR/manifest.json, all in this one process.

Adding a derivative formula: one entry in autograd/derivatives.yaml and one case here.
"""
import json
import pathlib
import sys

import torch
import torch.nn.functional as F

R, S0, S1, S2 = "R", "S0", "S1", "S2"
aten = torch.ops.aten


def f32(*shape, lo=None):
    g = torch.Generator().manual_seed(hash(shape) % 1000)
    t = torch.randn(shape, generator=g)
    return t.abs() + 0.5 if lo == "pos" else t


def c64(*shape):
    """A complex64 tensor (needs no gradient: only floating inputs require grad)."""
    return torch.polar(torch.ones(*shape), f32(*shape))


def bf16(*shape):
    """A bfloat16 tensor (the CPU _grouped_mm kernel's one dtype)."""
    return f32(*shape).bfloat16()


def idx(high, *shape):
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, high, shape, generator=g)


def mask(*shape):
    g = torch.Generator().manual_seed(3)
    return torch.rand(*shape, generator=g) > 0.5


def spd(n):
    """A well-conditioned symmetric positive definite matrix (the linalg cases)."""
    a = f32(n, n)
    return a @ a.T + n * torch.eye(n)


def tri(n, upper=False):
    """A well-conditioned triangular matrix: spd(n)'s Cholesky factor (or its transpose)."""
    factor = torch.linalg.cholesky(spd(n))
    return factor.T.contiguous() if upper else factor


def lu_factor(*shape):
    """The LU factorisation (LU, pivots) of a well-conditioned matrix of this shape."""
    return torch.linalg.lu_factor(spd(shape[0]) if shape[0] == shape[1] else f32(*shape))


LU4, PIV4 = lu_factor(4, 4)
LU46, PIV46 = lu_factor(4, 6)
LU64, PIV64 = lu_factor(6, 4)

# Where max_pool2d took each maximum of a [1, 2, 4, 4] input (2x2 windows): indices max_unpool2d can scatter to.
POOLED_INDICES = F.max_pool2d(f32(1, 2, 4, 4), 2, return_indices=True)[1]

# (id, fn, [(tensor, placement)]): floating inputs require grad; every input becomes a DTensor.
def _write_into_view(base, src, index):
    """`out[:, index] = src` on a copy of base: copy_ into a select view (CopySlices in backward)."""
    out = base * 1.0
    out[:, index] = src
    return out


CASES = [
    # matrix family
    ("mm", lambda a, b: torch.mm(a, b), [(f32(8, 6), R), (f32(6, 4), R)]),
    ("mm-shard-row", lambda a, b: torch.mm(a, b), [(f32(8, 6), S0), (f32(6, 4), R)]),
    ("mm-shard-col", lambda a, b: torch.mm(a, b), [(f32(8, 6), R), (f32(6, 4), S1)]),
    ("addmm", lambda c, a, b: torch.addmm(c, a, b), [(f32(4), R), (f32(8, 6), R), (f32(6, 4), R)]),
    ("addmm-alpha-beta", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
     [(f32(8, 4), R), (f32(8, 6), R), (f32(6, 4), R)]),
    ("bmm", lambda a, b: torch.bmm(a, b), [(f32(2, 4, 6), R), (f32(2, 6, 3), R)]),
    ("bmm-shard-batch", lambda a, b: torch.bmm(a, b), [(f32(2, 4, 6), S0), (f32(2, 6, 3), S0)]),
    ("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.5), [(f32(2, 4, 3), R), (f32(2, 4, 6), R), (f32(2, 6, 3), R)]),
    # views and shape ops
    ("t", lambda a: a.t() * 1.0, [(f32(4, 6), R)]),
    ("transpose", lambda a: a.transpose(0, 2) * 1.0, [(f32(2, 4, 6), R)]),
    ("permute", lambda a: a.permute(2, 0, 1) * 1.0, [(f32(2, 4, 6), R)]),
    ("view", lambda a: a.view(8, 6), [(f32(2, 4, 6), R)]),
    ("view-shard", lambda a: a.view(8, 6), [(f32(2, 4, 6), S0)]),
    ("flatten", lambda a: a.flatten(1), [(f32(2, 4, 6), R)]),
    ("expand-copy", lambda a: torch.expand_copy(a, (2, 3, 6)), [(f32(3, 1), S0)]),
    ("expand", lambda a: a.expand(4, 3, 6), [(f32(3, 1), R)]),
    ("unsqueeze", lambda a: a.unsqueeze(1), [(f32(4, 6), R)]),
    ("squeeze-dim", lambda a: a.squeeze(1), [(f32(4, 1, 6), R)]),
    ("squeeze-all", lambda a: a.squeeze(), [(f32(4, 1, 6, 1), R)]),
    ("cat", lambda a, b: torch.cat([a, b], 1), [(f32(4, 6), R), (f32(4, 2), R)]),
    ("stack", lambda a, b: torch.stack([a, b], 0), [(f32(4, 6), R), (f32(4, 6), R)]),
    # hstack / dstack / column_stack / vstack: atleast_Nd views (column_stack: 1-D to a column) and one cat
    ("hstack-rows", lambda a, b: torch.hstack([a, b]) * 2.0, [(f32(4), S0), (f32(6), R)]),
    ("hstack-matrices", lambda a, b: torch.hstack([a, b]) * 2.0, [(f32(4, 6), S0), (f32(4, 2), R)]),
    ("dstack", lambda a, b: torch.dstack([a, b]) * 2.0, [(f32(4, 6), S1), (f32(4, 6), R)]),
    ("column-stack", lambda a, b: torch.column_stack([a, b]) * 2.0, [(f32(4), S0), (f32(4, 2), R)]),
    ("vstack-vector", lambda a, b: torch.vstack([a, b]) * 2.0, [(f32(6), S0), (f32(2, 6), R)]),
    # linalg.multi_dot: mm in the matrix-chain order (three: the cheaper of (AB)C and A(BC))
    ("multi-dot-three", lambda a, b, c: torch.linalg.multi_dot([a, b, c]),
     [(f32(8, 4), S0), (f32(4, 6), R), (f32(6, 2), S1)]),
    ("multi-dot-four-vectors", lambda a, b, c, d: torch.linalg.multi_dot([a, b, c, d]),
     [(f32(4), R), (f32(4, 6), S1), (f32(6, 8), S0), (f32(8), R)]),
    ("split", lambda a: sum(x.sum() for x in a.split(2, 1)), [(f32(4, 6), S0)]),
    ("split-shard", lambda a: torch.cat([x * 2.0 for x in a.split(2, 1)], 0), [(f32(4, 6), S1)]),
    ("split-with-sizes", lambda a: torch.cat([x * 2.0 for x in a.split([1, 3], 0)], 0), [(f32(4, 6), S1)]),
    ("split-with-sizes-copy", lambda a: torch.cat([x * 2.0 for x in torch.split_with_sizes_copy(a, [2, 4], 1)], 1),
     [(f32(4, 6), R)]),
    ("unbind", lambda a: sum(x.sum() for x in a.unbind(1)), [(f32(4, 6), S0)]),
    ("select", lambda a: a[1] * 1.0, [(f32(4, 6), R)]),
    ("select-shard", lambda a: a[1] * 1.0, [(f32(4, 6), S0)]),
    ("select-shard-after", lambda a: a[:, 1] * 1.0, [(f32(4, 6, 2), S2)]),
    ("slice", lambda a: a[:, 1:3] * 1.0, [(f32(4, 6), S0)]),
    ("slice-shard", lambda a: a[:, 1:3] * 1.0, [(f32(4, 6), S1)]),
    ("flip", lambda a: a.flip(1), [(f32(4, 6), S0)]),
    ("roll", lambda a: a.roll((1, 2), (0, 1)), [(f32(4, 6), R)]),
    ("roll-flat", lambda a: a.roll(3), [(f32(4, 6), R)]),
    ("pad", lambda a: torch.constant_pad_nd(a, (1, 2, 0, 1)), [(f32(4, 6), S0)]),
    ("to-bf16", lambda a: a.to(torch.bfloat16), [(f32(4, 6), R)]),
    ("clone", lambda a: a.clone(), [(f32(4, 6), R)]),
    ("contiguous", lambda a: a.t().contiguous(), [(f32(4, 6), R)]),
    ("tril", lambda a: a.tril(), [(f32(4, 4), R)]),
    ("triu", lambda a: a.triu(1), [(f32(4, 4), R)]),
    # pointwise
    ("neg", lambda a: -a, [(f32(4, 6), R)]),
    ("exp", torch.exp, [(f32(4, 6), R)]),
    ("tanh", torch.tanh, [(f32(4, 6), R)]),
    ("sigmoid", torch.sigmoid, [(f32(4, 6), S0)]),
    ("sqrt", torch.sqrt, [(f32(4, 6, lo="pos"), R)]),
    ("rsqrt", torch.rsqrt, [(f32(4, 6, lo="pos"), R)]),
    ("log", torch.log, [(f32(4, 6, lo="pos"), R)]),
    ("abs", torch.abs, [(f32(4, 6), R)]),
    ("sin", torch.sin, [(f32(4, 6), R)]),
    ("cos", torch.cos, [(f32(4, 6), R)]),
    ("reciprocal", torch.reciprocal, [(f32(4, 6, lo="pos"), R)]),
    ("log1p", torch.log1p, [(f32(4, 6, lo="pos"), R)]),
    ("expm1", torch.expm1, [(f32(4, 6), R)]),
    ("erf", torch.erf, [(f32(4, 6), R)]),
    ("floor", torch.floor, [(f32(4, 6), R)]),
    ("relu", torch.relu, [(f32(4, 6), S1)]),
    ("threshold", lambda a: F.threshold(a, 0.1, 2.0), [(f32(4, 6), S0)]),
    ("gelu", F.gelu, [(f32(4, 6), R)]),
    ("gelu-tanh", lambda a: F.gelu(a, approximate="tanh"), [(f32(4, 6), R)]),
    ("silu", F.silu, [(f32(4, 6), R)]),
    ("add", lambda a, b: a + b, [(f32(4, 6), R), (f32(4, 6), R)]),
    ("add-broadcast", lambda a, b: a + b, [(f32(4, 6), S0), (f32(6), R)]),
    ("add-alpha", lambda a, b: torch.add(a, b, alpha=3.0), [(f32(4, 6), R), (f32(4, 6), R)]),
    ("add-scalar", lambda a: a + 2.0, [(f32(4, 6), R)]),
    ("sub", lambda a, b: a - b, [(f32(4, 6), R), (f32(4, 6), R)]),
    ("sub-alpha", lambda a, b: torch.sub(a, b, alpha=2.0), [(f32(4, 6), R), (f32(4, 6), R)]),
    ("rsub", lambda a: 1.0 - a, [(f32(4, 6), R)]),
    ("mul", lambda a, b: a * b, [(f32(4, 6), R), (f32(4, 6), R)]),
    ("mul-scalar", lambda a: a * 3.0, [(f32(4, 6), R)]),
    # composite ops export keeps and the dispatcher decomposes before DTensor sees them
    ("movedim", lambda a: torch.movedim(a, 2, 0) * 1.0, [(f32(2, 4, 6), S1)]),
    ("std-dim", lambda a: torch.std(a, dim=1), [(f32(2, 4, 6), S1)]),
    ("var-dim-biased-keepdim", lambda a: torch.var(a, dim=-1, unbiased=False, keepdim=True), [(f32(2, 4, 6), S0)]),
    # vector norms of each order branch of norm_backward (torch's FunctionsManual): 1, inf, -inf,
    # p < 1, 1 < p < 2, p > 2; the row-sharded input keeps each norm on its rank
    ("vector-norm-1", lambda a: torch.linalg.vector_norm(a, 1, dim=1), [(f32(4, 6), S0)]),
    ("vector-norm-inf", lambda a: torch.linalg.vector_norm(a, float("inf"), dim=1), [(f32(4, 6), S0)]),
    ("vector-norm-neg-inf-all", lambda a: torch.linalg.vector_norm(a, float("-inf")), [(f32(4, 6), S1)]),
    ("vector-norm-half", lambda a: torch.linalg.vector_norm(a, 0.5, dim=1, keepdim=True), [(f32(4, 6), S0)]),
    ("vector-norm-1.5", lambda a: torch.linalg.vector_norm(a, 1.5, dim=0), [(f32(4, 6), S1)]),
    ("vector-norm-3", lambda a: torch.linalg.vector_norm(a, 3, dim=1), [(f32(4, 6), S0)]),
    # a shard on the reduced dim: the norm is a _NormPartial(p) (the loss's sum keeps it), and its
    # derivative's pointwise ops with the sharded input redistribute it (p = 1 never reads it)
    ("vector-norm-2-partial", lambda a: torch.linalg.vector_norm(a, 2, dim=1), [(f32(4, 6), S1)]),
    ("vector-norm-1-partial", lambda a: torch.linalg.vector_norm(a, 1, dim=0), [(f32(4, 6), S0)]),
    ("vector-norm-1.5-partial-keepdim", lambda a: torch.linalg.vector_norm(a, 1.5, dim=0, keepdim=True),
     [(f32(4, 6), S0)]),
    ("vector-norm-3-partial-all", lambda a: torch.linalg.vector_norm(a, 3), [(f32(4, 6), S1)]),
    ("normalize-partial", lambda a: F.normalize(a, dim=1), [(f32(4, 6), S1)]),
    # gradient (slices, differences, a cat per dim) and vander (cumprod over one column: its
    # gradient passes through)
    ("gradient-dim1", lambda a: torch.gradient(a, dim=1)[0], [(f32(4, 6), S1)]),
    ("gradient-edge2", lambda a: sum(torch.gradient(a, spacing=2.0, edge_order=2)), [(f32(4, 6), S0)]),
    ("vander-2", lambda a: torch.linalg.vander(a, N=2), [(f32(4, 6), S0)]),
    # rrelu: rrelu_with_noise on an empty_like noise buffer (pointwise for DTensor); its backward
    # as torch._decomp runs it (grad * noise in training, leaky_relu_backward's where otherwise)
    ("rrelu-train", lambda a: F.rrelu(a, training=True), [(f32(4, 6), S0)]),
    ("rrelu-eval", lambda a: F.rrelu(a, 0.1, 0.3), [(f32(4, 6), S1)]),
    ("rrelu-of-partial", lambda a, w: F.rrelu(a @ w, training=True), [(f32(4, 6), S1), (f32(6, 3), S0)]),
    # cat's backward slices the gradient for every input, one that needs none too: the gradient
    # sharded on the cat dim is gathered once per slice
    ("cat-detached-sharded-grad", lambda a, b, w: torch.cat([a, b.detach()], dim=1) * w,
     [(f32(4, 6), S1), (f32(4, 2), S1), (f32(4, 8), S1)]),
    ("pad-constant", lambda a: F.pad(a, (1, 2), value=0.5), [(f32(2, 4, 6), S0)]),
    # circular: the Replicate new_empty output takes the input by copy_ (an all-gather of a shard),
    # then copies between its own slices; backward through the copies into views (CopySlices)
    ("pad-circular-shard-batch", lambda a: F.pad(a, (1, 2), mode="circular"), [(f32(2, 4, 6), S0)]),
    ("pad-circular-shard-padded", lambda a: F.pad(a, (2, 1), mode="circular"), [(f32(2, 4, 6), S2)]),
    ("pad-circular-2d", lambda a: F.pad(a, (1, 2, 2, 1), mode="circular"), [(f32(2, 3, 6, 5), S1)]),
    ("pad-circular-replicate", lambda a: F.pad(a, (0, 3), mode="circular"), [(f32(2, 4, 6), R)]),
    # copy_ into a view of a DTensor: CopySlices replays the view (select) on the gradient's copy
    ("write-into-view-shard-rows", lambda a, b: _write_into_view(a, b, 1), [(f32(4, 6), S0), (f32(4), S0)]),
    ("write-into-view-shard-cols", lambda a, b: _write_into_view(a, b, 2), [(f32(4, 6), S1), (f32(4), R)]),
    ("write-into-view-replicate", lambda a, b: _write_into_view(a, b, 0), [(f32(4, 6), R), (f32(4), S0)]),
    ("cross-entropy", lambda a, t: F.cross_entropy(a, t), [(f32(8, 5), S0), (idx(5, 8), S0)]),
    ("cross-entropy-sum-ignore", lambda a, t: F.cross_entropy(a, t, reduction="sum", ignore_index=1),
     [(f32(8, 5), R), (idx(5, 8), R)]),
    ("upsample-bilinear-scale", lambda a: F.interpolate(a, scale_factor=2, mode="bilinear"), [(f32(2, 3, 4, 4), S0)]),
    ("upsample-bilinear-size-shard-h", lambda a: F.interpolate(a, size=(6, 8), mode="bilinear", align_corners=True),
     [(f32(2, 3, 4, 4), S2)]),
    ("upsample-bilinear-aa-shard-c", lambda a: F.interpolate(a, size=(6, 3), mode="bilinear", antialias=True),
     [(f32(2, 4, 4, 4), S1)]),
    # tensordot / inner (Linear.cpp): permutes, reshapes to matrices (a clone + _unsafe_view when
    # the permuted operand is not viewable), mm and a view back; two vectors: dot
    ("tensordot-shard-free-dim", lambda a, b: torch.tensordot(a, b, dims=([1, 2], [1, 0])),
     [(f32(4, 3, 6), S0), (f32(6, 3, 5), R)]),
    ("tensordot-contract-sharded", lambda a, b: torch.tensordot(a, b, dims=2), [(f32(2, 4, 6), S1), (f32(4, 6, 3), S0)]),
    # a contracted dim of size 1 on one side sums the other side over it first (sum keepdim)
    ("tensordot-broadcast-size-1", lambda a, b: torch.tensordot(a, b, dims=([1, 2], [2, 0])),
     [(f32(6, 1, 4), S0), (f32(4, 3, 2), R)]),
    # free sizes of 1 on both sides: dot of the two flattened operands, reshaped to [1, 1]
    ("tensordot-dot-of-matrices", lambda a, b: torch.tensordot(a, b, dims=([1], [0])),
     [(f32(1, 6), S1), (f32(6, 1), S0)]),
    # free sizes of 1 and a permuted side no view flattens: the sum of the squeezed product
    ("tensordot-squeezed-product", lambda a, b: torch.tensordot(a, b, dims=([0, 1], [1, 0])),
     [(f32(4, 6), S0), (f32(6, 4), R)]),
    ("tensordot-squeezed-product-partial-grad", lambda a, b: torch.tensordot(a, b, dims=([0, 1], [2, 0])),
     [(f32(4, 2, 1), R), (f32(2, 1, 4), S0)]),
    ("inner-vectors", lambda a, b: torch.inner(a, b), [(f32(6), S0), (f32(6), S0)]),
    ("inner-matrices", lambda a, b: torch.inner(a, b), [(f32(4, 6), S0), (f32(3, 6), R)]),
    # channel_shuffle (DTensor's decomposition strategy: view, transpose, contiguous clone,
    # _unsafe_view); its gradient shuffled back into channels / groups groups
    ("channel-shuffle-shard-batch", lambda a: F.channel_shuffle(a, 2), [(f32(4, 6, 3, 3), S0)]),
    ("channel-shuffle-shard-h", lambda a: F.channel_shuffle(a, 3), [(f32(2, 6, 4, 3), S2)]),
    # convolutions (DTensor's _tp_conv.py handlers): batch-sharded input, replicated weight and
    # bias: the weight and bias gradients Partial; the backward handler first redistributes
    # grad_output to the input's placements
    ("conv2d-shard-batch", lambda x, w, b: F.conv2d(x, w, b, padding=1), [(f32(4, 3, 5, 5), S0), (f32(6, 3, 3, 3), R),
                                                                          (f32(6), R)]),
    ("conv-transpose1d-shard-batch", lambda x, w: F.conv_transpose1d(x, w, stride=2, output_padding=1),
     [(f32(4, 6, 5), S0), (f32(6, 8, 3), R)]),
    # an unbatched input is batched (unsqueeze) around the convolution and squeezed back
    ("conv1d-unbatched", lambda x, w: F.conv1d(x, w), [(f32(6, 5), R), (f32(8, 6, 3), R)]),
    # addmv's gradients: self grad * beta, mat alpha * grad.ger(vec) (outer: a view and a mul),
    # vec alpha * mat.t().mv(grad); the row-sharded matrix gives a Partial vector gradient
    ("addmv", lambda s, m, v: torch.addmv(s, m, v, beta=0.5, alpha=2), [(f32(6), R), (f32(6, 4), S0), (f32(4), R)]),
    ("addmv-shard-cols", lambda s, m, v: torch.addmv(s, m, v), [(f32(6), R), (f32(6, 4), S1), (f32(4), S0)]),
    ("upsample-nearest-scale", lambda a: F.interpolate(a, scale_factor=2, mode="nearest"), [(f32(2, 3, 4, 4), S1)]),
    # complex RoPE as torchtitan applies it: view_as_complex, a complex mul, view_as_real (their
    # backward: view_as_real / view_as_complex of the contiguous gradient, grad * other.conj())
    ("complex-rope", lambda x, f: torch.view_as_real(torch.view_as_complex(x.reshape(2, 4, 3, 2)) * f).flatten(2),
     [(f32(2, 4, 6), R), (c64(4, 3), R)]),
    ("complex-rope-shard-batch", lambda x, f: torch.view_as_real(torch.view_as_complex(x.reshape(2, 4, 3, 2)) * f)
     .flatten(2), [(f32(2, 4, 6), S0), (c64(4, 3), R)]),
    ("complex-rope-shard-pairs", lambda x, f: torch.view_as_real(torch.view_as_complex(x.reshape(2, 4, 3, 2)) * f)
     .flatten(2), [(f32(2, 4, 6), S1), (c64(4, 3), S0)]),
    # inverse real FFTs of a real input: _to_copy to complex, _fft_c2r (backward: the one-sided
    # _fft_r2c of the gradient, the reflected bins doubled in place; then the real part)
    ("fft-irfft", lambda a: torch.fft.irfft(a), [(f32(4, 6), S0)]),
    ("fft-irfft2-odd", lambda a: torch.fft.irfft2(a, s=(4, 9)), [(f32(4, 6), R)]),
    # hfft conjugates (_conj, then clone) before _fft_c2r; hfft2 also runs _fft_c2c
    ("fft-hfft", lambda a: torch.fft.hfft(a), [(f32(4, 6), S0)]),
    ("fft-hfft2", lambda a: torch.fft.hfft2(a), [(f32(4, 6), R)]),

    ("div", lambda a, b: a / b, [(f32(4, 6), R), (f32(4, 6, lo="pos"), R)]),
    # Mixtral's router normalises its top-k weights in place (weights /= weights.sum(-1, keepdim=True))
    ("div-inplace-by-row-sums", lambda a: (a * 2).div_((a * 2).sum(-1, keepdim=True)),
     [(f32(4, 6, lo="pos"), S0)]),
    ("div-scalar", lambda a: a / 3.0, [(f32(4, 6), R)]),
    ("pow2", lambda a: a.pow(2), [(f32(4, 6), R)]),
    ("pow3", lambda a: a ** 3, [(f32(4, 6), R)]),
    ("tan", torch.tan, [(f32(4, 6), S0)]),
    ("sinh", torch.sinh, [(f32(4, 6), R)]),
    ("cosh", torch.cosh, [(f32(4, 6), S1)]),
    ("asin", lambda a: torch.asin(a * 0.3), [(f32(4, 6), R)]),
    ("acos", lambda a: torch.acos(a * 0.3), [(f32(4, 6), S0)]),
    ("atan", torch.atan, [(f32(4, 6), R)]),
    ("asinh", torch.asinh, [(f32(4, 6), R)]),
    ("acosh", lambda a: torch.acosh(a + 1.0), [(f32(4, 6, lo="pos"), R)]),
    ("erfc", torch.erfc, [(f32(4, 6), S0)]),
    ("erfinv", lambda a: torch.erfinv(a * 0.3), [(f32(4, 6), R)]),
    ("exp2", torch.exp2, [(f32(4, 6), R)]),
    ("log2", torch.log2, [(f32(4, 6, lo="pos"), R)]),
    ("log10", torch.log10, [(f32(4, 6, lo="pos"), S1)]),
    ("lgamma", torch.lgamma, [(f32(4, 6, lo="pos"), R)]),
    ("digamma", torch.digamma, [(f32(4, 6, lo="pos"), R)]),
    ("polygamma", lambda a: torch.polygamma(2, a), [(f32(4, 6, lo="pos"), S0)]),
    ("entr", torch.special.entr, [(f32(4, 6, lo="pos"), S0)]),
    ("erfcx", torch.special.erfcx, [(f32(4, 6), R)]),
    ("log-ndtr", torch.special.log_ndtr, [(f32(4, 6), S1)]),
    ("ndtri", lambda a: torch.special.ndtri(a * 0.3 + 0.5), [(f32(4, 6), R)]),
    ("i0", torch.i0, [(f32(4, 6), R)]),
    ("deg2rad", torch.deg2rad, [(f32(4, 6), R)]),
    ("rad2deg", torch.rad2deg, [(f32(4, 6), S0)]),
    ("logit", lambda a: torch.logit(a * 0.3 + 0.5), [(f32(4, 6), R)]),
    ("logit-eps", lambda a: torch.logit(a * 0.3 + 0.5, eps=1e-3), [(f32(4, 6), S0)]),
    ("frac", torch.frac, [(f32(4, 6), R)]),
    ("clamp", lambda a: a.clamp(-0.5, 0.5), [(f32(4, 6), S0)]),
    ("clamp-min", lambda a: a.clamp(min=-0.5), [(f32(4, 6), R)]),
    ("clamp-max", lambda a: a.clamp(max=0.5), [(f32(4, 6), R)]),
    ("clamp-min-tensor", lambda a, b: torch.clamp_min(a, b), [(f32(4, 6), S0), (f32(6), R)]),
    ("clamp-max-tensor", lambda a, b: torch.clamp_max(a, b), [(f32(4, 6), R), (f32(4, 6), S1)]),
    ("clamp-tensor", lambda a, b, c: a.clamp(b, c), [(f32(4, 6), S0), (f32(4, 6), R), (f32(6), R)]),
    ("clamp-tensor-min", lambda a, b: a.clamp(min=b), [(f32(4, 6), R), (f32(4, 6), S1)]),
    ("clip", lambda a: a.clip(-0.5, 0.5), [(f32(4, 6), S1)]),
    ("clip-tensor", lambda a, b, c: torch.clip(a, b, c), [(f32(4, 6), R), (f32(4, 6), S0), (f32(4, 6), R)]),
    ("square", torch.square, [(f32(4, 6), S0)]),
    ("true-divide", torch.true_divide, [(f32(4, 6), R), (f32(4, 6, lo="pos"), S0)]),
    ("clamp-min-fn", lambda a: torch.clamp_min(a, -0.5), [(f32(4, 6), S0)]),
    ("clamp-max-fn", lambda a: torch.clamp_max(a, 0.5), [(f32(4, 6), R)]),
    ("min-other", torch.min, [(f32(4, 6), R), (f32(4, 6), S1)]),
    ("maximum", torch.maximum, [(f32(4, 6), R), (f32(4, 6), R)]),
    ("maximum-broadcast", torch.maximum, [(f32(4, 6), S0), (f32(6), R)]),
    ("minimum", torch.minimum, [(f32(4, 6), S1), (f32(4, 6), S0)]),
    ("addcmul", lambda a, b, c: torch.addcmul(a, b, c, value=0.5), [(f32(4, 6), R), (f32(4, 6), S0), (f32(6), R)]),
    ("lerp", lambda a, b: torch.lerp(a, b, 0.3), [(f32(4, 6), R), (f32(4, 6), S1)]),
    ("hypot", torch.hypot, [(f32(4, 6), R), (f32(4, 6), R)]),
    ("logaddexp", torch.logaddexp, [(f32(4, 6), S0), (f32(4, 6), R)]),
    ("fmax", torch.fmax, [(f32(4, 6), S0), (f32(4, 6), R)]),
    ("fmin", torch.fmin, [(f32(4, 6), R), (f32(6), R)]),
    ("logaddexp2", torch.logaddexp2, [(f32(4, 6), R), (f32(4, 6), S1)]),
    ("pow-scalar-base", lambda a: torch.pow(2.0, a), [(f32(4, 6), R)]),
    ("atanh", lambda a: torch.atanh(a * 0.3), [(f32(4, 6), S0)]),
    ("lerp-tensor", torch.lerp, [(f32(4, 6), R), (f32(4, 6), S0), (f32(4, 6), R)]),
    ("addcdiv", lambda a, b, c: torch.addcdiv(a, b, c, value=0.5), [(f32(4, 6), R), (f32(4, 6), R), (f32(4, 6, lo="pos"), S1)]),
    ("atan2", torch.atan2, [(f32(4, 6), R), (f32(4, 6), S0)]),
    ("xlogy", torch.xlogy, [(f32(4, 6, lo="pos"), S0), (f32(4, 6, lo="pos"), R)]),
    ("pow-tensor-tensor", torch.pow, [(f32(4, 6, lo="pos"), R), (f32(4, 6), S1)]),
    ("max-other", torch.max, [(f32(4, 6), S0), (f32(6), R)]),
    ("round-decimals", lambda a: torch.round(a, decimals=2), [(f32(4, 6), S0)]),
    ("div-floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), [(f32(4, 6), R), (f32(4, 6, lo="pos"), S1)]),
    ("div-scalar-trunc", lambda a: torch.div(a, 2.0, rounding_mode="trunc"), [(f32(4, 6), R)]),
    ("nan-to-num", torch.nan_to_num, [(f32(4, 6), S1)]),
    ("masked-fill", lambda a, m: a.masked_fill(m, 0.0), [(f32(4, 6), R), (mask(4, 6), R)]),
    ("where", lambda m, a, b: torch.where(m, a, b), [(mask(4, 6), R), (f32(4, 6), R), (f32(4, 6), R)]),
    # reductions and softmax
    ("sum", lambda a: a.sum(), [(f32(4, 6), R)]),
    ("sum-dim", lambda a: a.sum(1), [(f32(4, 6), R)]),
    ("sum-dim-keepdim-shard", lambda a: a.sum(0, keepdim=True), [(f32(4, 6), S0)]),
    ("mean", lambda a: a.mean(), [(f32(4, 6), R)]),
    ("mean-dim", lambda a: a.mean(-1), [(f32(4, 6), R)]),
    ("amax", lambda a: a.amax(1), [(f32(4, 6), R)]),
    # amax over every dim of a sharded tensor: its backward counts the mask with sum(dim=[]), which
    # DTensor reads as reducing no dim (the count keeps the shard, then an all-gather)
    ("amax-all-dims-sharded", lambda a: a.amax(), [(f32(4, 6), S0)]),
    ("amin-all-dims-keepdim-sharded", lambda a: a.amin(keepdim=True), [(f32(4, 6), S1)]),
    ("amin-keepdim", lambda a: a.amin(0, keepdim=True), [(f32(4, 6), R)]),
    ("logsumexp", lambda a: torch.logsumexp(a, 1), [(f32(4, 6), R)]),
    ("max-all", lambda a: a.max(), [(f32(4, 6), S0)]),
    ("min-all", lambda a: a.min(), [(f32(4, 6), R)]),
    ("max-dim", lambda a: a.max(1)[0], [(f32(4, 6), S0)]),
    ("min-dim-keepdim", lambda a: a.min(0, keepdim=True)[0], [(f32(4, 6), S1)]),
    ("topk", lambda a: a.topk(2, 1)[0], [(f32(4, 6), S0)]),
    ("sort", lambda a: a.sort(0)[0], [(f32(4, 6), S1)]),
    ("sort-shard", lambda a: a.sort(1)[0], [(f32(4, 6), S1)]),
    ("median-dim", lambda a: a.median(1)[0], [(f32(4, 6), R)]),
    ("nanmedian-dim", lambda a: a.nanmedian(1)[0], [(f32(4, 6), S0)]),
    ("mode", lambda a: a.mode(1)[0], [(f32(4, 6), R)]),
    ("sort-stable", lambda a: torch.sort(a, dim=1, stable=True)[0], [(f32(4, 6), S0)]),
    ("kthvalue", lambda a: a.kthvalue(2, 1)[0], [(f32(4, 6), R)]),
    ("gather", lambda a, i: a.gather(1, i), [(f32(4, 6), R), (idx(6, 4, 3), R)]),
    ("gather-shard", lambda a, i: a.gather(1, i), [(f32(4, 6), S0), (idx(6, 4, 3), S0)]),
    ("nansum", lambda a: a.nansum(), [(f32(4, 6), S0)]),
    ("nansum-dim", lambda a: a.nansum(1), [(f32(4, 6), S1)]),
    ("cumsum", lambda a: a.cumsum(1), [(f32(4, 6), R)]),
    ("cumsum-shard", lambda a: a.cumsum(1), [(f32(4, 6), S1)]),
    ("var", lambda a: torch.var(a, 1, correction=1), [(f32(4, 6), R)]),
    ("var-shard", lambda a: torch.var(a, 1, correction=1), [(f32(4, 6), S1)]),
    ("var-mean", lambda a: sum(torch.var_mean(a, 1, correction=1)), [(f32(4, 6), S1)]),
    ("var-all", lambda a: torch.var(a, correction=0), [(f32(4, 6), S0)]),
    ("std-keepdim", lambda a: torch.std(a, 1, correction=1, keepdim=True), [(f32(4, 6), S0)]),
    ("std-shard", lambda a: torch.std(a, 0, correction=1), [(f32(4, 6), S0)]),
    ("norm", lambda a: a.norm(), [(f32(4, 6), R)]),
    ("norm-scalar", lambda a: aten.norm.Scalar(a, 2), [(f32(4, 6), R)]),
    ("vector-norm-dim", lambda a: torch.linalg.vector_norm(a, 2, 1), [(f32(4, 6), S0)]),
    ("softmax", lambda a: torch.softmax(a, -1), [(f32(4, 6), R)]),
    ("softmax-shard", lambda a: torch.softmax(a, -1), [(f32(4, 6), S1)]),
    ("log-softmax", lambda a: torch.log_softmax(a, -1), [(f32(4, 6), R)]),
    # with a dtype: the input cast first (_to_copy), so the softmax dim's all-gather moves float64
    ("softmax-dtype-shard", lambda a: torch.softmax(a, -1, dtype=torch.float64), [(f32(4, 6), S1)]),
    ("log-softmax-dtype-shard", lambda a: torch.log_softmax(a, 0, dtype=torch.float64), [(f32(4, 6), S0)]),
    ("safe-softmax", lambda a: torch.ops.aten._safe_softmax(a, -1), [(f32(4, 6), S0)]),
    # pooling, upsampling: the runtime overloads called directly (F.interpolate, F.max_pool2d and
    # F.adaptive_avg_pool2d export as .vec / composite overloads that commlens does not decompose yet)
    ("upsample-nearest2d", lambda a: aten.upsample_nearest2d.default(a, [8, 8]), [(f32(2, 3, 4, 4), S1)]),
    ("upsample-nearest2d-scales", lambda a: aten.upsample_nearest2d.default(a, [8, 8], 2.0, 2.0), [(f32(2, 3, 4, 4), S0)]),
    ("upsample-bilinear2d", lambda a: aten.upsample_bilinear2d.default(a, [8, 8], False), [(f32(2, 3, 4, 4), S0)]),
    ("upsample-bilinear2d-corners", lambda a: aten.upsample_bilinear2d.default(a, [6, 6], True), [(f32(2, 3, 4, 4), S2)]),
    ("upsample-bicubic2d", lambda a: aten.upsample_bicubic2d.default(a, [8, 8], False), [(f32(2, 3, 4, 4), R)]),
    ("upsample-nearest-exact1d", lambda a: aten._upsample_nearest_exact1d.default(a, [8]), [(f32(2, 3, 4), S1)]),
    ("upsample-linear1d", lambda a: aten.upsample_linear1d.default(a, [7], False), [(f32(2, 3, 4), R)]),
    ("upsample-trilinear3d", lambda a: aten.upsample_trilinear3d.default(a, [4, 4, 4], False), [(f32(2, 2, 2, 2, 2), S0)]),
    ("upsample-bilinear2d-aa", lambda a: aten._upsample_bilinear2d_aa.default(a, [6, 6], False), [(f32(2, 3, 4, 4), S1)]),
    ("upsample-nearest1d", lambda a: aten.upsample_nearest1d.default(a, [8]), [(f32(2, 3, 4), R)]),
    ("upsample-nearest3d", lambda a: aten.upsample_nearest3d.default(a, [4, 4, 4]), [(f32(2, 2, 2, 2, 2), S1)]),
    ("upsample-nearest-exact2d", lambda a: aten._upsample_nearest_exact2d.default(a, [8, 8]), [(f32(2, 3, 4, 4), R)]),
    ("upsample-nearest-exact3d", lambda a: aten._upsample_nearest_exact3d.default(a, [4, 4, 4]), [(f32(2, 2, 2, 2, 2), R)]),
    ("upsample-bicubic2d-aa", lambda a: aten._upsample_bicubic2d_aa.default(a, [6, 6], True), [(f32(2, 3, 4, 4), R)]),
    ("upsample-lanczos2d-aa", lambda a: aten._upsample_lanczos2d_aa.default(a, [6, 6], False), [(f32(2, 3, 4, 4), S0)]),
    ("adaptive-avg-pool2d", lambda a: aten._adaptive_avg_pool2d.default(a, [2, 2]), [(f32(2, 3, 4, 4), S1)]),
    ("max-pool2d", lambda a: aten.max_pool2d_with_indices.default(a, [2, 2])[0], [(f32(2, 3, 4, 4), S0)]),
    ("max-pool2d-stride", lambda a: aten.max_pool2d_with_indices.default(a, [3, 3], [1, 1], [1, 1])[0],
     [(f32(2, 3, 4, 4), S2)]),
    # norms, embedding, index
    ("layer-norm", lambda a, w, b: F.layer_norm(a, (6,), w, b), [(f32(4, 6), R), (f32(6), R), (f32(6), R)]),
    ("rms-norm", lambda a, w: F.rms_norm(a, (6,), w), [(f32(4, 6), R), (f32(6), R)]),
    # group_norm lowers to native_group_norm; its backward (native_group_norm_backward of the cloned
    # expand gradient) runs whole on Replicate operands with all three gradients asked for (otherwise
    # DTensor raises: test_backward_op_oracle.py's group_norm refusals)
    ("group-norm", lambda a, w, b: F.group_norm(a, 2, w, b), [(f32(2, 4, 3), R), (f32(4), R), (f32(4), R)]),
    ("group-norm-4d", lambda a, w, b: F.group_norm(a, 2, w, b), [(f32(2, 4, 3, 2), R), (f32(4), R), (f32(4), R)]),
    ("batch-norm", lambda a, w, b: aten.native_batch_norm.default(a, w, b, None, None, True, 0.1, 1e-5)[0],
     [(f32(2, 4, 3), S0), (f32(4), R), (f32(4), R)]),
    ("batch-norm-running", lambda a, w, b, m, v: aten._native_batch_norm_legit_functional.default(
        a, w, b, m.detach(), v.detach(), True, 0.1, 1e-5)[0],
     [(f32(2, 4, 3), S1), (f32(4), R), (f32(4), R), (f32(4), R), (f32(4, lo="pos"), R)]),
    ("batch-norm-no-stats", lambda a, w, b: aten._native_batch_norm_legit.no_stats(a, w, b, True, 0.1, 1e-5)[0],
     [(f32(2, 4, 3), R), (f32(4), R), (f32(4), R)]),
    ("batch-norm-eval", lambda a, w, b, m, v: aten._native_batch_norm_legit_no_training.default(
        a, w, b, m.detach(), v.detach(), 0.1, 1e-5)[0],
     [(f32(2, 4, 3), S0), (f32(4), R), (f32(4), R), (f32(4), R), (f32(4, lo="pos"), R)]),
    ("batch-norm-legit", lambda a, w, b, m, v: aten._native_batch_norm_legit.default(
        a, w, b, m.detach(), v.detach(), True, 0.1, 1e-5)[0],
     [(f32(2, 4, 3), S1), (f32(4), R), (f32(4), R), (f32(4), R), (f32(4, lo="pos"), R)]),
    # F.batch_norm / F.instance_norm as exported (batch_norm / instance_norm), decomposed as the
    # CPU dispatcher runs them: native_batch_norm; repeat, view, native_batch_norm, view
    ("batch-norm-functional", lambda a, w, b, m, v: F.batch_norm(a, m.detach(), v.detach(), w, b, training=True),
     [(f32(2, 4, 3), S0), (f32(4), R), (f32(4), R), (f32(4), R), (f32(4, lo="pos"), R)]),
    ("batch-norm-functional-eval", lambda a, w, b, m, v: F.batch_norm(a, m.detach(), v.detach(), w, b),
     [(f32(2, 4, 3), S1), (f32(4), R), (f32(4), R), (f32(4), R), (f32(4, lo="pos"), R)]),
    ("instance-norm", lambda a, w, b, m, v: F.instance_norm(a, m.detach(), v.detach(), w, b),
     [(f32(2, 4, 3), S0), (f32(4), R), (f32(4), R), (f32(4), R), (f32(4, lo="pos"), R)]),
    # composite losses and cosine_similarity, decomposed as Loss.cpp / Distance.cpp run them
    # (cosine_similarity's in-place clamp_min_ of the norms runs under no_grad: the gradient passes it)
    ("cosine-similarity", lambda a, b: F.cosine_similarity(a, b, dim=1), [(f32(4, 6), S0), (f32(4, 6), S0)]),
    ("cosine-similarity-dim0", lambda a, b: F.cosine_similarity(a, b, dim=0), [(f32(4, 6), S1), (f32(4, 6), R)]),
    ("margin-ranking-loss", lambda a, b, t: F.margin_ranking_loss(a, b, t.sign(), margin=0.1),
     [(f32(8), S0), (f32(8), S0), (f32(8), R)]),
    ("hinge-embedding-loss", lambda a, t: F.hinge_embedding_loss(a, t.sign(), margin=0.5, reduction="sum"),
     [(f32(8), S0), (f32(8), S0)]),
    ("cosine-embedding-loss", lambda a, b, t: F.cosine_embedding_loss(a, b, t.sign(), margin=0.2),
     [(f32(8, 6), S0), (f32(8, 6), S0), (f32(8), S0)]),
    ("cosine-embedding-loss-cols", lambda a, b, t: F.cosine_embedding_loss(a, b, t.sign(), reduction="sum"),
     [(f32(8, 6), S1), (f32(8, 6), R), (f32(8), R)]),
    ("poisson-nll-loss-full", lambda a, t: F.poisson_nll_loss(a, t, full=True), [(f32(8), S0), (f32(8, lo="pos"), S0)]),
    ("poisson-nll-loss-linear", lambda a, t: F.poisson_nll_loss(a, t, log_input=False, reduction="none"),
     [(f32(4, 6, lo="pos"), S1), (f32(4, 6, lo="pos"), R)]),
    # linalg_vecdot: vdot for two vectors, else mul and a sum over dim
    ("vecdot", lambda a, b: torch.linalg.vecdot(a, b, dim=0), [(f32(4, 6), S1), (f32(4, 6), S0)]),
    ("vecdot-vectors", lambda a, b: torch.linalg.vecdot(a, b), [(f32(8), S0), (f32(8), S0)]),
    # prod over every element: prod_safe_zeros_backward (DTensor is subclass-like): exclusive
    # cumprods of the flattened input from both ends, the input's shard moved off the cumulated dim
    ("prod", lambda a: torch.prod(a), [(f32(4, 3), R)]),
    ("prod-sharded", lambda a: torch.prod(a), [(f32(4, 3), S0)]),
    # meshgrid: views and expands (xy swaps the first two); linalg_matrix_power: a contiguous clone
    # (n = 0 overwritten by a plain eye through copy_, whose self gradient is zeros), mm chains
    ("meshgrid-ij", lambda a, b: torch.meshgrid(a, b, indexing="ij")[0] * 2, [(f32(4), S0), (f32(6), R)]),
    ("meshgrid-xy", lambda a, b: torch.meshgrid(a, b, indexing="xy")[1] * 2, [(f32(4), S0), (f32(6), S0)]),
    # a 0-dim input reduced over dim -1: sum_backward expands the gradient without unsqueezing
    ("sum-0d-dim", lambda a: (a * 2).sum(-1), [(f32(), R)]),
    ("mean-0d-dim", lambda a: (a * 2).mean(0, keepdim=False), [(f32(), R)]),
    ("vector-norm-0d-dim", lambda a: torch.linalg.vector_norm(a * 2, 3, dim=-1), [(f32(), R)]),
    ("diff-n0", lambda a: torch.diff(a, n=0) * 2, [(f32(4, 6), S0)]),
    ("repeat-zero", lambda a: a.repeat(2, 0), [(f32(4, 3), S0)]),
    ("cartesian-prod", lambda a, b: torch.cartesian_prod(a, b) * 2, [(f32(4), S0), (f32(6), R)]),
    ("matrix-power-0", lambda a: torch.linalg.matrix_power(a, 0), [(f32(1, 1), R)]),
    ("matrix-power-1", lambda a: torch.linalg.matrix_power(a, 1), [(f32(4, 4), S0)]),
    ("matrix-power-3", lambda a: torch.linalg.matrix_power(a, 3), [(f32(4, 4), S0)]),
    ("matrix-power-6", lambda a: torch.linalg.matrix_power(a, 6), [(f32(4, 4), S1)]),
    ("copy-into-clone", lambda a, b: a.clone().copy_(b) * a, [(f32(4, 6), S0), (f32(6), R)]),
    # the torch.linalg wrappers as exported, decomposed to their kernels (svdvals / eigvalsh / cond
    # compute the vectors because their input requires grad), then differentiated
    ("svdvals-wrapper", lambda a: torch.linalg.svdvals(a), [(f32(5, 4), R)]),
    ("matrix-norm-nuc", lambda a: torch.linalg.matrix_norm(a, "nuc"), [(f32(5, 4), S0)]),
    ("matrix-norm-nuc-dims", lambda a: torch.linalg.matrix_norm(a, "nuc", dim=(1, 0)), [(f32(5, 4), R)]),
    ("eigvalsh-wrapper", lambda a: torch.linalg.eigvalsh(a + a.mT), [(f32(4, 4), S0)]),
    ("cond-wrapper", lambda a: torch.linalg.cond(a), [(f32(4, 4), R)]),
    ("inv-wrapper", lambda a: torch.linalg.inv(a), [(f32(4, 4), S1)]),
    ("det-wrapper", lambda a: torch.linalg.det(a), [(f32(4, 4), R)]),
    # _grouped_mm on DTensors (an MoE's experts under TP): DTensor's grouped_mm_strategy, the
    # candidates whose local strides break the kernel's 16-byte alignment dropped; its derivative
    # (squared: the sum loss's expanded, stride-0 gradient is a layout the kernel rejects)
    ("grouped-mm-3x3-colwise", lambda a, b: torch._grouped_mm(a, b).square(),
     [(bf16(4, 16, 16), R), (bf16(4, 16, 32), S2)]),
    ("grouped-mm-3x3-rowwise", lambda a, b: torch._grouped_mm(a, b).square(),
     [(bf16(4, 16, 32), S2), (bf16(4, 32, 16), S1)]),
    ("grouped-mm-2x3-offs", lambda a, b, o: torch._grouped_mm(a, b, o).square(),
     [(bf16(32, 16), R), (bf16(4, 16, 16), S2), (torch.tensor([8, 16, 24, 32], dtype=torch.int32), R)]),
    # dist: norm_backward of self - other for each operand (other's negated)
    ("dist", lambda a, b: torch.dist(a, b), [(f32(4, 6), R), (f32(4, 6), R)]),
    ("dist-p1", lambda a, b: torch.dist(a, b, 1), [(f32(4, 6), R), (f32(4, 6), R)]),
    ("dist-inf", lambda a, b: torch.dist(a, b, float("inf")), [(f32(4, 6), R), (f32(4, 6), R)]),
    # broadcast operands: self - other takes the broadcast shape, other's gradient summed back to it
    ("dist-broadcast", lambda a, b: torch.dist(a, b), [(f32(4, 6), S0), (f32(6), R)]),
    ("dist-broadcast-rows", lambda a, b: torch.dist(a, b, 1), [(f32(1, 6), R), (f32(4, 6), S0)]),
    # cross_entropy with class probabilities: -(log_softmax * target) summed (over the class dim for
    # 'none'), the mean over numel / classes
    ("cross-entropy-probs", lambda a, t: F.cross_entropy(a, t.softmax(1)), [(f32(8, 5), S0), (f32(8, 5), S0)]),
    ("cross-entropy-probs-sum", lambda a, t: F.cross_entropy(a, t.softmax(1), reduction="sum"),
     [(f32(8, 5), S1), (f32(8, 5), R)]),
    ("cross-entropy-probs-none", lambda a, t: F.cross_entropy(a, t.softmax(1), reduction="none"),
     [(f32(2, 5, 4), S0), (f32(2, 5, 4), S0)]),
    # label smoothing: nll_loss plus -log_softmax summed over classes, zeroed at ignore_index,
    # reduced (mean over the targets kept)
    ("cross-entropy-smoothed", lambda a, t: F.cross_entropy(a, t, label_smoothing=0.1), [(f32(8, 5), S0), (idx(5, 8), S0)]),
    ("cross-entropy-smoothed-sum-ignore", lambda a, t: F.cross_entropy(a, t, label_smoothing=0.2, reduction="sum",
                                                                       ignore_index=1),
     [(f32(8, 5), S1), (idx(5, 8), R)]),
    ("cross-entropy-smoothed-none", lambda a, t: F.cross_entropy(a, t, label_smoothing=0.1, reduction="none"),
     [(f32(8, 5), S0), (idx(5, 8), S0)]),
    ("grid-sampler-2d", lambda a, g: aten.grid_sampler_2d.default(a, g, 0, 0, False), [(f32(2, 3, 4, 4), S0), (f32(2, 5, 5, 2), R)]),
    ("grid-sampler-3d", lambda a, g: aten.grid_sampler_3d.default(a, g, 0, 0, True), [(f32(2, 2, 3, 3, 3), R), (f32(2, 2, 2, 2, 3), S0)]),
    ("nll-loss2d", lambda a, t: aten.nll_loss2d_forward.default(a, t, None, 1, -100)[0],
     [(f32(2, 3, 4, 4), S0), (idx(3, 2, 4, 4), S0)]),
    ("embedding", lambda i, w: F.embedding(i, w), [(idx(10, 4, 3), R), (f32(10, 6), R)]),
    ("embedding-shard", lambda i, w: F.embedding(i, w), [(idx(10, 4, 3), R), (f32(10, 6), S1)]),
    # formulas from derivatives.yaml's data (autograd/derivatives.yaml)
    ("median-all", lambda a: a.median(), [(f32(4, 6), R)]),
    ("nanmedian-all", lambda a: a.nanmedian(), [(f32(4, 6), S0)]),
    ("angle", torch.angle, [(f32(4, 6), S0)]),
    ("conj-physical", torch.conj_physical, [(f32(4, 6), R)]),
    ("scatter", lambda a, i, b: a.scatter(1, i, b), [(f32(4, 6), R), (idx(6, 4, 3), R), (f32(4, 3), R)]),
    ("scatter-add", lambda a, i, b: a.scatter_add(1, i, b), [(f32(4, 6), S0), (idx(6, 4, 3), S0), (f32(4, 3), S0)]),
    ("remainder", torch.remainder, [(f32(4, 6), R), (f32(4, 6, lo="pos"), S1)]),
    ("fmod", torch.fmod, [(f32(4, 6), S0), (f32(4, 6, lo="pos"), R)]),
    ("max-unpool2d", lambda a, i: F.max_unpool2d(a, i, 2), [(f32(1, 2, 2, 2), S1), (POOLED_INDICES, S1)]),
    ("adaptive-avg-pool1d", lambda a: F.adaptive_avg_pool1d(a, 3), [(f32(2, 3, 6), S0)]),
    # a view's _copy variant differentiates as the view (sharded through its decomposition)
    ("t-copy", torch.t_copy, [(f32(4, 6), S0)]),
    ("transpose-copy", lambda a: torch.transpose_copy(a, 0, 2), [(f32(2, 4, 6), S1)]),
    ("permute-copy", lambda a: torch.permute_copy(a, (2, 0, 1)), [(f32(2, 4, 6), S0)]),
    ("squeeze-copy", lambda a: torch.squeeze_copy(a, 1), [(f32(4, 1, 6), S0)]),
    ("unsqueeze-copy", lambda a: torch.unsqueeze_copy(a, 1), [(f32(4, 6), S1)]),
    ("alias-copy", torch.alias_copy, [(f32(4, 6), S0)]),
    ("unbind-copy", lambda a: sum(torch.unbind_copy(a, 1)), [(f32(4, 3), S0)]),
    ("unsafe-split", lambda a: sum(torch.unsafe_split(a, 2, 1)), [(f32(4, 6), S0)]),
    ("addr", lambda c, a, b: torch.addr(c, a, b, alpha=0.5), [(f32(4, 6), R), (f32(4), S0), (f32(6), R)]),
    ("index-fill", lambda a, i: a.index_fill(1, i, 2.0), [(f32(4, 6), S0), (idx(6, 2), R)]),
    ("pixel-shuffle", lambda a: F.pixel_shuffle(a, 2), [(f32(2, 8, 3, 3), S0)]),
    ("pixel-unshuffle", lambda a: F.pixel_unshuffle(a, 2), [(f32(2, 2, 4, 4), S1)]),
    ("repeat", lambda a: a.repeat(2, 1, 3), [(f32(4, 6), S0)]),
    ("repeat-once", lambda a: a.repeat(1, 1) * 2.0, [(f32(4, 6), S1)]),
    ("repeat-vector", lambda a: a.repeat(2, 2), [(f32(3), R)]),
    # repeat_interleave with an int: unsqueeze, expand, clone, view (of the flattened self without a dim)
    ("repeat_interleave-dim", lambda a: a.repeat_interleave(2, dim=1), [(f32(4, 3, 2), S0)]),
    ("repeat_interleave-sharded-dim", lambda a: a.repeat_interleave(3, dim=0), [(f32(4, 6), S0)]),
    ("repeat_interleave-flat", lambda a: torch.repeat_interleave(a, 3), [(f32(4, 3), R)]),
    ("rot90", lambda a: torch.rot90(a, 1, (0, 2)), [(f32(2, 4, 6), S1)]),
    ("rot90-k3", lambda a: torch.rot90(a, -1, (1, 0)), [(f32(4, 6), S0)]),
    ("fill", lambda a: torch.fill(a, 2.0) * a, [(f32(4, 6), S0)]),
    ("mse-loss", F.mse_loss, [(f32(4, 6), S0), (f32(4, 6), S0)]),
    ("mse-loss-sum", lambda a, b: F.mse_loss(a, b, reduction="sum"), [(f32(4, 6), S1), (f32(4, 6), R)]),
    ("smooth-l1-loss", lambda a, b: F.smooth_l1_loss(a, b, beta=0.5), [(f32(4, 6), S0), (f32(4, 6), S0)]),
    # binary_cross_entropy takes probabilities (sigmoid inside the program keeps them in (0, 1)).
    ("bce", lambda a, b: F.binary_cross_entropy(torch.sigmoid(a), torch.sigmoid(b)), [(f32(4, 6), S0), (f32(4, 6), S0)]),
    ("bce-weight-sum", lambda a, b, w: F.binary_cross_entropy(torch.sigmoid(a), torch.sigmoid(b).detach(),
                                                              weight=w.detach(), reduction="sum"),
     [(f32(4, 6), S1), (f32(4, 6), R), (f32(6), R)]),
    ("bce-with-logits", F.binary_cross_entropy_with_logits, [(f32(4, 6), S0), (f32(4, 6), S0)]),
    # weight and pos_weight are not differentiable (torch raises when they require grad).
    ("bce-with-logits-weight", lambda a, b, w: F.binary_cross_entropy_with_logits(a, b, weight=w.detach()),
     [(f32(4, 6), S1), (f32(4, 6), R), (f32(6), R)]),
    ("bce-with-logits-pos-weight-sum",
     lambda a, b, w, pw: F.binary_cross_entropy_with_logits(a, b.detach(), weight=w.detach(), pos_weight=pw.detach(),
                                                            reduction="sum"),
     [(f32(4, 6), S0), (f32(4, 6), S0), (f32(6), R), (f32(6), R)]),
    # The target is a label (torch raises when it requires grad).
    ("soft-margin-loss", lambda a, b: F.soft_margin_loss(a, b.detach()), [(f32(4, 6), S0), (f32(4, 6), S0)]),
    ("soft-margin-loss-sum", lambda a, b: F.soft_margin_loss(a, b.detach(), reduction="sum"),
     [(f32(4, 6), S1), (f32(4, 6), R)]),
    ("huber-loss", lambda a, b: F.huber_loss(a, b, reduction="sum", delta=0.5), [(f32(4, 6), S1), (f32(4, 6), R)]),
    # activations whose backward ops DTensor shards through their decompositions
    ("elu", lambda a: F.elu(a, alpha=0.5), [(f32(4, 6), S0)]),
    ("celu", lambda a: F.celu(a, alpha=2.0), [(f32(4, 6), S1)]),
    ("selu", F.selu, [(f32(4, 6), S0)]),
    ("leaky-relu", lambda a: F.leaky_relu(a, 0.2), [(f32(4, 6), S0)]),
    ("mish", F.mish, [(f32(4, 6), R)]),
    ("glu", lambda a: F.glu(a, 1), [(f32(4, 6), S0)]),
    ("glu-sharded-dim", lambda a: F.glu(a, 0), [(f32(4, 6), S0)]),
    ("softplus", lambda a: F.softplus(a, beta=2.0, threshold=1.0), [(f32(4, 6), S1)]),
    # pointwise special functions and the FunctionsManual helpers behind them
    ("copysign", torch.copysign, [(f32(4, 6), S0), (f32(4, 6), R)]),
    ("ldexp", torch.ldexp, [(f32(4, 6), S0), (f32(4, 6), S0)]),
    ("nextafter", torch.nextafter, [(f32(4, 6), S1), (f32(4, 6), R)]),
    ("sinc", torch.sinc, [(f32(4, 6), S1)]),
    ("special-i0e", torch.special.i0e, [(f32(4, 6), S0)]),
    ("special-i1", torch.special.i1, [(f32(4, 6), S0)]),
    ("special-i1e", torch.special.i1e, [(f32(4, 6), R)]),
    ("xlog1py", torch.special.xlog1py, [(f32(4, 6), S0), (f32(4, 6, lo="pos"), R)]),
    ("float-power", torch.float_power, [(f32(4, 6, lo="pos"), S0), (f32(4, 6), R)]),
    ("float-power-scalar", lambda a: torch.float_power(a, 3), [(f32(4, 6), S1)]),
    ("sgn", lambda a: torch.sgn(a) * 2.0, [(f32(4, 6), S0)]),
    ("frexp", lambda a: torch.frexp(a)[0], [(f32(4, 6), S1)]),
    ("bernoulli", torch.bernoulli, [(f32(4, 6, lo="pos") / 4.0, S0)]),
    ("logcumsumexp", lambda a: torch.logcumsumexp(a, 1), [(f32(4, 6), S0)]),
    ("dot", torch.dot, [(f32(6), S0), (f32(6), S0)]),
    ("vdot", torch.vdot, [(f32(6), S0), (f32(6), R)]),
    ("mv", torch.mv, [(f32(4, 6), S0), (f32(6), R)]),
    ("diag-2d", torch.diag, [(f32(4, 4), S0)]),
    ("diag-1d", torch.diag, [(f32(4), S0)]),
    ("diag-embed", torch.diag_embed, [(f32(2, 4), S0)]),
    ("diagonal", lambda a: torch.diagonal(a, 1), [(f32(4, 6), S0)]),
    ("diagonal-copy", lambda a: torch.diagonal_copy(a, 0, 1, 2), [(f32(2, 4, 4), S0)]),
    ("narrow-copy", lambda a: torch.narrow_copy(a, 0, 1, 2), [(f32(4, 6), S1)]),
    ("std-mean", lambda a: sum(torch.std_mean(a, 1)), [(f32(4, 6), S0)]),
    ("aminmax", lambda a: sum(torch.aminmax(a)), [(f32(4, 6), S0)]),
    # CompositeImplicit ops the dispatcher decomposes (aten/Decomposer.cpp)
    ("trapezoid", lambda y, x: torch.trapezoid(y, x, dim=1), [(f32(4, 6), S0), (f32(4, 6), R)]),
    ("cumulative-trapezoid", lambda y, x: torch.cumulative_trapezoid(y, x, dim=1), [(f32(4, 6), S1), (f32(4, 6), R)]),
    ("diagflat", torch.diagflat, [(f32(2, 3), S0)]),
    ("linalg-cross", lambda a, b: torch.linalg.cross(a, b, dim=1), [(f32(4, 3), S0), (f32(4, 3), R)]),
    ("max-pool1d", lambda a: F.max_pool1d(a, 2, return_indices=True)[0], [(f32(2, 4, 6), S1)]),
    ("zero", lambda a: a.clone().zero_() + a, [(f32(4, 6), S0)]),
    ("take-along-dim", lambda a, i: torch.take_along_dim(a, i, 1), [(f32(4, 6), S0), (idx(6, 4, 3), S0)]),
    ("nanmean", lambda a: torch.nanmean(a, 1), [(f32(4, 6), S0)]),
    # advanced indexing (index_put's rule, index_add / index_copy through their decompositions)
    ("index-select", lambda a, i: torch.index_select(a, 1, i), [(f32(4, 6), S0), (idx(6, 3), R)]),
    ("index-add", lambda a, i, b: a.index_add(0, i, b, alpha=2.0), [(f32(4, 6), S1), (idx(4, 3), R), (f32(3, 6), S1)]),
    ("index-copy", lambda a, i, b: a.index_copy(1, i, b), [(f32(4, 6), S0), (idx(6, 3), R), (f32(4, 3), S0)]),
    # index_reduce's backward (index_reduce_backward): masks of the entries equal to the result,
    # counts per row, and prod's zero handling, on inputs sharded beside the reduced dim, and a
    # self sharded on it (its strategy replicates it); include_self both ways
    *[(f"index-reduce-{reduce}{'' if include else '-exclude-self'}",
       lambda a, i, b, reduce=reduce, include=include: a.index_reduce(0, i, b, reduce, include_self=include),
       [(f32(4, 6), S1), (idx(4, 3), R), (f32(3, 6), S1)])
      for reduce in ("prod", "mean", "amax", "amin") for include in (True, False)],
    ("index-reduce-mean-self-on-dim", lambda a, i, b: a.index_reduce(0, i, b, "mean"),
     [(f32(4, 6), S0), (idx(4, 3), R), (f32(3, 6), R)]),
    # 0-d self and source: treated as elements of R^1 (unsqueezed, indexed, squeezed back); a 0-d
    # source's gradient is selected at index.squeeze(0)
    ("index-add-scalars", lambda a, i, b: a.index_add(0, i, b, alpha=-1), [(f32(), R), (idx(1, 1), R), (f32(), R)]),
    ("index-copy-scalars", lambda a, i, b: a.index_copy(0, i, b), [(f32(), R), (idx(1, 1), R), (f32(), R)]),
    ("index-select-scalar", lambda a, i: torch.index_select(a, 0, i), [(f32(), R), (idx(1, 1), R)]),
    ("index-tensor", lambda a, i: a[:, i], [(f32(4, 6), S0), (idx(6, 3), R)]),
    ("kl-div-log-target", lambda a, b: F.kl_div(a, b, reduction="sum", log_target=True), [(f32(4, 6), S0), (f32(4, 6), R)]),
    # double backward ops: a gradient's own gradient
    ("softmax-backward-data", lambda g, o: aten._softmax_backward_data(g, o, 1, torch.float32),
     [(f32(4, 6), S0), (f32(4, 6, lo="pos"), S0)]),
    ("native-dropout-backward", lambda g, m: aten.native_dropout_backward(g, m, 2.0), [(f32(4, 6), S1), (mask(4, 6), S1)]),
    ("max-pool2d-backward", lambda g, x, i: aten.max_pool2d_with_indices_backward(g, x, [2, 2], [2, 2], [0, 0], [1, 1],
                                                                                  False, i),
     [(f32(1, 2, 2, 2), S1), (f32(1, 2, 4, 4), S1), (POOLED_INDICES, S1)]),
    # at::matmul's vector paths: dot, mv, unsqueeze + mm + squeeze_, the folded mv
    ("matmul-vv", torch.matmul, [(f32(6), S0), (f32(6), S0)]),
    ("matmul-mv", torch.matmul, [(f32(4, 6), S1), (f32(6), R)]),
    ("matmul-vm", torch.matmul, [(f32(4), R), (f32(4, 6), S1)]),
    ("matmul-3dv", torch.matmul, [(f32(2, 4, 6), S0), (f32(6), R)]),
    ("pairwise-distance", F.pairwise_distance, [(f32(4, 6), S0), (f32(4, 6), R)]),
    ("diff-n2", lambda a: torch.diff(a, n=2, dim=1), [(f32(4, 6), S0)]),
    ("diff-prepend-append", lambda a, p: torch.diff(a, dim=0, prepend=p, append=p), [(f32(4, 6), S1), (f32(1, 6), S1)]),
    ("diff-sharded-dim", lambda a: torch.diff(a, n=2, dim=0), [(f32(8, 6), S0)]),
    ("triplet-margin-loss", lambda a, p, n: F.triplet_margin_loss(a, p, n, margin=0.5),
     [(f32(4, 6), S0), (f32(4, 6), R), (f32(4, 6), S0)]),
    # linear algebra, real 2-D matrices: the ATen ops themselves (a sharded input is replicated by
    # DTensor's strategy before the op, so its backward runs replicated)
    ("linalg-inv-ex", lambda a: aten.linalg_inv_ex(a)[0], [(spd(4), R)]),
    ("linalg-inv-ex-shard", lambda a: aten.linalg_inv_ex(a)[0], [(spd(4), S0)]),
    ("linalg-cholesky-ex", lambda a: aten.linalg_cholesky_ex(a)[0], [(spd(4), R)]),
    ("linalg-cholesky-ex-upper", lambda a: aten.linalg_cholesky_ex(a, upper=True)[0], [(spd(4), S0)]),
    ("cholesky", lambda a: aten.cholesky(a), [(spd(4), R)]),
    ("cholesky-upper", lambda a: aten.cholesky(a, True), [(spd(4), R)]),
    ("linalg-solve-triangular", lambda a, b: aten.linalg_solve_triangular(a, b, upper=False),
     [(tri(4), R), (f32(4, 3), R)]),
    ("linalg-solve-triangular-upper-right-unit",
     lambda a, b: aten.linalg_solve_triangular(a, b, upper=True, left=False, unitriangular=True),
     [(tri(4, upper=True), R), (f32(3, 4), S0)]),
    ("linalg-solve-triangular-b-only", lambda a, b: aten.linalg_solve_triangular(a.detach(), b, upper=True),
     [(tri(4, upper=True), R), (f32(4, 3), R)]),
    ("triangular-solve", lambda b, a: aten.triangular_solve(b, a)[0], [(f32(4, 3), R), (tri(4, upper=True), R)]),
    ("triangular-solve-lower-transpose-unit", lambda b, a: aten.triangular_solve(b, a, False, True, True)[0],
     [(f32(4, 3), S1), (tri(4), R)]),
    ("triangular-solve-both-outputs", lambda b, a: sum(x.sum() for x in aten.triangular_solve(b, a)),
     [(f32(4, 3), R), (tri(4, upper=True), R)]),
    ("triangular-solve-b-only", lambda b, a: aten.triangular_solve(b, a.detach(), False)[0],
     [(f32(4, 3), R), (tri(4), R)]),
    ("cholesky-solve", lambda b, l: aten.cholesky_solve(b, l), [(f32(4, 3), R), (tri(4), R)]),
    ("cholesky-solve-upper", lambda b, u: aten.cholesky_solve(b, u, True), [(f32(4, 3), S0), (tri(4, upper=True), R)]),
    ("cholesky-solve-b-only", lambda b, l: aten.cholesky_solve(b, l.detach()), [(f32(4, 3), R), (tri(4), R)]),
    ("cholesky-inverse", lambda l: aten.cholesky_inverse(l), [(tri(4), R)]),
    ("cholesky-inverse-upper", lambda u: aten.cholesky_inverse(u, True), [(tri(4, upper=True), S0)]),
    ("linalg-solve-ex", lambda a, b: aten._linalg_solve_ex(a, b)[0], [(spd(4), R), (f32(4, 3), R)]),
    ("linalg-solve-ex-right", lambda a, b: aten._linalg_solve_ex(a, b, left=False)[0], [(spd(4), S0), (f32(3, 4), S1)]),
    ("linalg-solve-ex-vector", lambda a, b: aten._linalg_solve_ex(a, b)[0], [(spd(4), R), (f32(4), R)]),
    ("linalg-solve-ex-transposed-a", lambda a, b: aten._linalg_solve_ex(a.t(), b)[0], [(spd(4), R), (f32(4, 3), R)]),
    ("linalg-det", lambda a: aten._linalg_det(a)[0], [(spd(4), R)]),
    ("linalg-det-transposed", lambda a: aten._linalg_det(a.t())[0], [(spd(4), S0)]),
    ("linalg-slogdet", lambda a: aten._linalg_slogdet(a)[1], [(spd(4), R)]),
    ("linalg-slogdet-transposed-both-outputs", lambda a: sum(x.sum() for x in aten._linalg_slogdet(a.t())[:2]),
     [(spd(4), R)]),
    ("linalg-eigh-eigenvalues", lambda a: aten._linalg_eigh(a)[0], [(spd(4), R)]),
    ("linalg-eigh-both", lambda a: sum(x.sum() for x in aten._linalg_eigh(a)), [(spd(4), S0)]),
    ("linalg-eigh-eigenvectors-upper", lambda a: aten._linalg_eigh(a, "U")[1], [(spd(4), R)]),
    # _linalg_svd (what torch.linalg.svd runs): by shape (tall, wide, square), full_matrices and
    # which of U, S, Vh get a gradient
    ("linalg-svd-s-tall", lambda a: aten._linalg_svd(a)[1], [(f32(6, 4), R)]),
    ("linalg-svd-s-wide", lambda a: aten._linalg_svd(a)[1], [(f32(4, 6), S0)]),
    ("linalg-svd-all-tall", lambda a: sum(x.sum() for x in aten._linalg_svd(a)), [(f32(6, 4), R)]),
    ("linalg-svd-all-wide", lambda a: sum(x.sum() for x in aten._linalg_svd(a)), [(f32(4, 6), R)]),
    ("linalg-svd-all-square", lambda a: sum(x.sum() for x in aten._linalg_svd(a)), [(f32(4, 4), S1)]),
    ("linalg-svd-u-tall", lambda a: aten._linalg_svd(a)[0], [(f32(6, 4), R)]),
    ("linalg-svd-u-wide", lambda a: aten._linalg_svd(a)[0], [(f32(4, 6), R)]),
    ("linalg-svd-vh-tall", lambda a: aten._linalg_svd(a)[2], [(f32(6, 4), R)]),
    ("linalg-svd-vh-wide", lambda a: aten._linalg_svd(a)[2], [(f32(4, 6), R)]),
    ("linalg-svd-full-u-tall", lambda a: aten._linalg_svd(a, True)[0], [(f32(6, 4), R)]),
    ("linalg-svd-full-all-wide", lambda a: sum(x.sum() for x in aten._linalg_svd(a, True)), [(f32(4, 6), R)]),
    ("linalg-svd-full-s", lambda a: aten._linalg_svd(a, True)[1], [(f32(6, 4), R)]),
    ("linalg-matrix-exp", lambda a: aten.linalg_matrix_exp(a), [(f32(4, 4), R)]),
    ("linalg-matrix-exp-shard", lambda a: aten.linalg_matrix_exp(a), [(f32(4, 4), S1)]),
    # linalg_qr: tall (m >= n) and wide (m < n), each subset of Q/R gradients, mode='complete' (wide)
    ("linalg-qr-q-tall", lambda a: aten.linalg_qr(a)[0], [(f32(6, 4), R)]),
    ("linalg-qr-r-tall", lambda a: aten.linalg_qr(a)[1], [(f32(6, 4), S0)]),
    ("linalg-qr-both-tall", lambda a: sum(x.sum() for x in aten.linalg_qr(a)), [(f32(6, 4), R)]),
    ("linalg-qr-q-wide", lambda a: aten.linalg_qr(a)[0], [(f32(4, 6), R)]),
    ("linalg-qr-r-wide", lambda a: aten.linalg_qr(a)[1], [(f32(4, 6), R)]),
    ("linalg-qr-both-wide-complete", lambda a: sum(x.sum() for x in aten.linalg_qr(a, "complete")), [(f32(4, 6), R)]),
    ("linalg-pinv-tall", lambda a: aten.linalg_pinv.atol_rtol_tensor(a), [(f32(6, 4), R)]),
    ("linalg-pinv-wide", lambda a: aten.linalg_pinv.atol_rtol_tensor(a), [(f32(4, 6), S0)]),
    ("linalg-pinv-hermitian", lambda a: aten.linalg_pinv.atol_rtol_tensor(a, hermitian=True), [(spd(4), R)]),
    # linalg_lu: square, wide and tall, each subset of the L/U gradients, pivot=False
    ("linalg-lu-square", lambda a: sum(x.sum() for x in aten.linalg_lu(a)[1:]), [(spd(4), R)]),
    ("linalg-lu-square-l", lambda a: aten.linalg_lu(a)[1], [(spd(4), S0)]),
    ("linalg-lu-square-u", lambda a: aten.linalg_lu(a)[2], [(spd(4), R)]),
    ("linalg-lu-wide", lambda a: sum(x.sum() for x in aten.linalg_lu(a)[1:]), [(f32(4, 6), R)]),
    ("linalg-lu-wide-l", lambda a: aten.linalg_lu(a)[1], [(f32(4, 6), R)]),
    ("linalg-lu-wide-u", lambda a: aten.linalg_lu(a)[2], [(f32(4, 6), R)]),
    ("linalg-lu-tall", lambda a: sum(x.sum() for x in aten.linalg_lu(a)[1:]), [(f32(6, 4), R)]),
    ("linalg-lu-tall-l", lambda a: aten.linalg_lu(a)[1], [(f32(6, 4), R)]),
    ("linalg-lu-tall-u", lambda a: aten.linalg_lu(a)[2], [(f32(6, 4), R)]),
    ("linalg-lu-factor-ex", lambda a: aten.linalg_lu_factor_ex(a)[0], [(spd(4), R)]),
    ("linalg-lu-factor-ex-wide", lambda a: aten.linalg_lu_factor_ex(a)[0], [(f32(4, 6), S0)]),
    ("linalg-lu-factor-ex-tall", lambda a: aten.linalg_lu_factor_ex(a)[0], [(f32(6, 4), R)]),
    # lu_unpack: the pivots are an integer input (no gradient)
    ("lu-unpack", lambda lu, p: sum(x.sum() for x in aten.lu_unpack(lu, p)[1:]), [(LU4, R), (PIV4, R)]),
    ("lu-unpack-l", lambda lu, p: aten.lu_unpack(lu, p)[1], [(LU4, R), (PIV4, R)]),
    ("lu-unpack-wide", lambda lu, p: sum(x.sum() for x in aten.lu_unpack(lu, p)[1:]), [(LU46, R), (PIV46, R)]),
    ("lu-unpack-wide-u", lambda lu, p: aten.lu_unpack(lu, p)[2], [(LU46, R), (PIV46, R)]),
    ("lu-unpack-tall", lambda lu, p: sum(x.sum() for x in aten.lu_unpack(lu, p)[1:]), [(LU64, R), (PIV64, R)]),
    ("lu-unpack-tall-l", lambda lu, p: aten.lu_unpack(lu, p)[1], [(LU64, R), (PIV64, R)]),
    # linalg_lu_solve: each (left, adjoint) branch, and B alone
    ("linalg-lu-solve", lambda lu, p, b: aten.linalg_lu_solve(lu, p, b), [(LU4, R), (PIV4, R), (f32(4, 3), R)]),
    ("linalg-lu-solve-adjoint", lambda lu, p, b: aten.linalg_lu_solve(lu, p, b, adjoint=True),
     [(LU4, R), (PIV4, R), (f32(4, 3), S1)]),
    ("linalg-lu-solve-right", lambda lu, p, b: aten.linalg_lu_solve(lu, p, b, left=False),
     [(LU4, R), (PIV4, R), (f32(3, 4), R)]),
    ("linalg-lu-solve-right-adjoint", lambda lu, p, b: aten.linalg_lu_solve(lu, p, b, left=False, adjoint=True),
     [(LU4, R), (PIV4, R), (f32(3, 4), R)]),
    ("linalg-lu-solve-b-only", lambda lu, p, b: aten.linalg_lu_solve(lu.detach(), p, b), [(LU4, R), (PIV4, R), (f32(4, 3), R)]),
]


class Op(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _placement(p):
    from torch.distributed.tensor import Replicate, Shard
    return Replicate() if p == R else Shard(int(p[1:]))


def plan_of(inputs):
    from commlens.plan import Loss, Plan

    return Plan(mesh_shape=(2,), input_placements={i: (_placement(p),) for i, (_, p) in enumerate(inputs)},
                inputs_requires_grad=tuple(i for i, (t, _) in enumerate(inputs) if t.is_floating_point()),
                loss=Loss.sum())


def main(argv):
    import warnings

    from commlens.export import export_model
    from commlens.measure import measure_many
    from commlens.plan import save

    warnings.simplefilter("ignore")
    out = pathlib.Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    want = set(argv[1:])
    cases = [c for c in CASES if not want or c[0] in want]
    manifest, jobs = [], []
    for cid, fn, inputs in cases:
        tensors = [t for t, _ in inputs]
        ep = export_model(Op(fn), tensors)
        torch.export.save(ep, str(out / f"{cid}.pt2"))
        plan = plan_of(inputs)
        save(plan, out / f"{cid}.plan.json")

        def factory(fn=fn, tensors=tensors):
            return Op(fn), [t.clone() for t in tensors]

        jobs.append((factory, plan, "backward", str(out / f"{cid}.dump.json")))
        manifest.append(cid)
    measure_many(jobs, backend="fake", phase="backward")
    (out / "manifest.json").write_text(json.dumps(manifest))


if __name__ == "__main__":
    main(sys.argv[1:])
