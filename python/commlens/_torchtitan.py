"""torchtitan (0.2.2) on a machine without a GPU: what commlens needs to import and run its MoE
layers there, none of it touching what torchtitan parallelizes.

* ``torchtitan.models.moe.kernels`` imports ``triton`` at module level (torchtitan does not
  declare it) for the kernel that groups MoE tokens by expert; where triton is missing, that module
  is replaced, before torchtitan imports it, by one whose :func:`generate_permute_indices` returns
  the same indices with fixed-shape tensor ops (which ``torch.export`` can also trace; the tests
  check it equal to torchtitan's own CPU implementation);
* without an accelerator, torchtitan's MoE module sees a ``torch`` whose ``histc`` also counts
  integer tensors (its router's expert indices), as CUDA's does, and ``ParallelDims`` is pointed
  at ``"cpu"`` (``torchtitan.tools.utils.device_type`` falls back to ``"cuda"``).

:func:`install` puts them in place (idempotent); commlens.plan's entry for torchtitan's
``ExpertParallel`` and ``examples/titan.py`` call it before importing torchtitan."""

import importlib.util
import sys
import types

import torch


def generate_permute_indices(tokens_per_expert_group, experts_per_rank, num_ranks, max_len, alignment,
                             use_cpu=False):
    """What ``torchtitan.models.moe.kernels.generate_permute_indices`` returns (tokens grouped by
    local expert, each group padded to ``alignment``; -1 in the padding), computed with
    fixed-shape tensor ops instead of its triton kernel or its per-chunk ``.item()`` loop, so the
    same code runs on CPU and under ``torch.export``. ``tests/integration/test_torchtitan.py`` checks
    it equal to torchtitan's own CPU implementation."""
    counts = tokens_per_expert_group.view(num_ranks, experts_per_rank)
    starts = (torch.cumsum(tokens_per_expert_group, 0) - tokens_per_expert_group).view(num_ranks, experts_per_rank)
    totals = torch.clamp_min(counts.sum(0), alignment)
    m_sizes = ((totals + alignment - 1) // alignment * alignment).to(torch.int32)
    m_offsets = torch.cumsum(m_sizes, 0)
    # chunk (expert e, rank r), expert-major: written at e's offset after e's tokens from ranks < r
    chunk_dest = (m_offsets - m_sizes + torch.cumsum(counts, 0) - counts).t().reshape(-1)
    chunk_len, chunk_src = counts.t().reshape(-1), starts.t().reshape(-1)
    pos = torch.arange(max_len, dtype=chunk_dest.dtype)
    chunk = torch.searchsorted(chunk_dest, pos, right=True) - 1  # the last chunk starting at or before pos
    at = chunk.clamp_min(0)
    offset = pos - chunk_dest[at]
    inside = (chunk >= 0) & (offset < chunk_len[at])
    permuted = torch.where(inside, chunk_src[at] + offset, -1).to(torch.int32)
    return permuted, m_sizes, m_offsets.to(torch.int32)


class _TorchWithIntegerHistc(types.ModuleType):
    """``torch`` as torchtitan's MoE module sees it, but for ``histc`` of an integer tensor (its
    router counts expert indices with it), which CUDA has and CPU has not: counted in float32
    there and returned in the input's dtype, as CUDA returns it."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def histc(x, *args, **kwargs):
        if x.is_floating_point():
            return torch.histc(x, *args, **kwargs)
        return torch.histc(x.float(), *args, **kwargs).to(x.dtype)


def install():
    """Puts the shims in place where they are needed (see the module's docstring)."""
    if "torchtitan.models.moe.kernels" not in sys.modules and importlib.util.find_spec("triton") is None:
        kernels = types.ModuleType("torchtitan.models.moe.kernels")
        kernels.generate_permute_indices = generate_permute_indices
        sys.modules["torchtitan.models.moe.kernels"] = kernels
    import torchtitan.distributed.parallel_dims as parallel_dims
    import torchtitan.models.moe.moe as moe
    from torch._utils import _get_available_device_type

    if _get_available_device_type() is None:
        parallel_dims.device_type = "cpu"
        moe.torch = _TorchWithIntegerHistc("torch")
