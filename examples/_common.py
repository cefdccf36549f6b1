"""Helpers shared by the example model factories."""

import torch

_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}


def resolve_dtype(dtype):
    """Accept a torch.dtype or one of the names in ``_DTYPES``."""
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise ValueError(
            f"unknown dtype {dtype!r} (expected one of {sorted(_DTYPES)})"
        ) from None


def check_divisible(name, value, by_name, by):
    if value % by != 0:
        raise ValueError(f"{name}={value} must be divisible by {by_name}={by}")
