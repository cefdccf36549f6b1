"""JSON encoders and decoders of a plan's values: placements, ``ParallelStyle`` objects (read off
their instance attributes), FSDP2 units and their policies."""

import json
import re

import torch
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.parallel.style import ParallelStyle
from torch.distributed.tensor.placement_types import _StridedShard

from commlens.plan.model import FullyShard, PlanError
from commlens.plan.styles import BY_NAME, entry_of

# --------------------------------------------------------------------------
# Placements <-> strings
# --------------------------------------------------------------------------

_REDUCE_OPS = ("sum", "avg", "max", "min", "product")
_SHARD_RE = re.compile(r"^(?:Shard|S)\(\s*(?:dim\s*=\s*)?(-?\d+)\s*\)$")
# torch's repr of a _StridedShard (the placement transformers' packed_colwise gives packed gate/up
# weights): a Shard of `dim` whose shards interleave `sf` blocks
_STRIDED_SHARD_RE = re.compile(r"^(?:_StridedShard\(\s*(?:dim\s*=\s*)?(-?\d+)\s*,\s*(?:sf|split_factor)\s*=\s*(\d+)"
                               r"|_S\(\s*(-?\d+)\s*,\s*(\d+))\s*\)$")
_PARTIAL_RE = re.compile(r"^(?:Partial|P)\(\s*(?:reduce_op\s*=\s*)?['\"]?([a-z_]*)['\"]?\s*\)$")


def placement_to_str(p, where="placement"):
    """Canonical string: ``Shard(d)``, ``Replicate()``, ``Partial(op)``, ``_StridedShard(dim=d, sf=k)``."""
    if type(p) is Shard:
        return f"Shard({p.dim})"
    if type(p) is Replicate:
        return "Replicate()"
    if type(p) is Partial:
        return f"Partial({p.reduce_op})"
    if type(p) is _StridedShard:
        return f"_StridedShard(dim={p.dim}, sf={p.split_factor})"
    raise PlanError(where, f"unsupported placement {p!r} (only Shard, Replicate, Partial, _StridedShard)")


def placement_from_str(s, subject="plan", where=""):
    """Parse ``Shard(0)``/``S(0)``/``Shard(dim=0)``, ``Replicate()``/``R``,
    ``Partial()``/``Partial(sum)``/``P(max)``, ``_StridedShard(dim=d, sf=k)``/``_S(d, k)``."""
    loc = f" at {where}" if where else ""
    if not isinstance(s, str):
        raise PlanError(subject, f"bad placement {json.dumps(s)}{loc}: expected a string")
    text = s.strip()
    m = _SHARD_RE.match(text)
    if m:
        return Shard(int(m.group(1)))
    if text in ("Replicate()", "R", "Replicate"):
        return Replicate()
    m = _STRIDED_SHARD_RE.match(text)
    if m:
        dim, factor = (int(g) for g in m.groups() if g is not None)  # one of the two spellings matched
        if factor < 1:
            raise PlanError(subject, f"bad placement {s!r}{loc}: split factor {factor} (at least 1)")
        return _StridedShard(dim, split_factor=factor)
    m = _PARTIAL_RE.match(text)
    if m:
        op = m.group(1) or "sum"
        if op not in _REDUCE_OPS:
            raise PlanError(subject, f"bad placement {s!r}{loc}: unknown reduce op {op!r} "
                            f"(expected one of {', '.join(_REDUCE_OPS)})")
        return Partial(op)
    if text in ("P", "Partial"):
        return Partial()
    raise PlanError(subject, f"bad placement {s!r}{loc} (expected Shard(d), Replicate(), Partial(op) or "
                    "_StridedShard(dim=d, sf=k))")


def _opt_pl_to_json(p, where):
    return None if p is None else placement_to_str(p, where)


def _opt_pl_from_json(v, subject, where):
    return None if v is None else placement_from_str(v, subject, where)


def _tuple_to_json(t, where):
    if t is None:
        return None
    return [_opt_pl_to_json(p, where) for p in t]


def _tuple_from_json(v, subject, where, allow_none_items=True):
    if v is None:
        return None
    if isinstance(v, str):  # a single placement is accepted and wrapped
        v = [v]
    if not isinstance(v, list):
        raise PlanError(subject, f"bad placement list at {where}: expected a list")
    out = []
    for i, item in enumerate(v):
        if item is None and allow_none_items:
            out.append(None)
        else:
            out.append(placement_from_str(item, subject, f"{where}[{i}]"))
    return tuple(out)


def _dict_to_json(d, where):
    return {k: _opt_pl_to_json(p, where) for k, p in d.items()}


def _dict_from_json(v, subject, where):
    if not isinstance(v, dict):
        raise PlanError(subject, f"bad placement dict at {where}: expected an object")
    return {k: _opt_pl_from_json(p, subject, f"{where}.{k}") for k, p in v.items()}


# --------------------------------------------------------------------------
# ParallelStyle <-> JSON
# --------------------------------------------------------------------------

# Which classes are encoded, with which fields and field kinds: the table in
# commlens.plan.styles (one module per style).


def style_to_json(style, where="style"):
    """Encode a ParallelStyle by reading its instance attributes."""
    entry = entry_of(type(style))
    if entry is None:
        raise PlanError(where, f"unsupported parallel style class {type(style).__module__}."
                        f"{type(style).__qualname__}")
    out = {"style": entry.name}
    attrs = vars(style)
    for fname, kind in entry.fields:
        if kind == "pl1?":
            if fname not in attrs:
                continue
            kind = "pl1"
        val = getattr(style, fname)
        w = f"{where}.{fname}"
        if kind == "dim?":
            if val is not None:
                out[fname] = str(val)
        elif kind in ("pl1", "pltup"):
            out[fname] = _tuple_to_json(val, w)
        elif kind == "pl":
            out[fname] = [placement_to_str(val, w)]
        elif kind == "pldict":
            out[fname] = _dict_to_json(val, w)
        elif kind == "bool":
            out[fname] = bool(val)
        elif kind == "str":
            out[fname] = str(val)
        elif kind == "int":
            out[fname] = int(val)
        elif kind == "style":
            out[fname] = style_to_json(val, w)
    return out


def style_from_json(obj, subject="plan", where="style"):
    """Rebuild a ParallelStyle whose fields equal the encoded ones."""
    if not isinstance(obj, dict):
        raise PlanError(subject, f"bad style at {where}: expected an object")
    name = obj.get("style")
    entry = BY_NAME.get(name)
    if entry is None:
        raise PlanError(subject, f"unknown parallel style {name!r} at {where} "
                        f"(known: {', '.join(BY_NAME)})")
    known = {f for f, _ in entry.fields}
    unknown = sorted(set(obj) - known - {"style"})
    if unknown:
        raise PlanError(subject, f"unknown field {unknown[0]!r} for {name} at {where}")
    values = {}
    for fname, kind in entry.fields:
        if fname not in obj:
            continue
        v = obj[fname]
        w = f"{where}.{fname}"
        if kind in ("pl1", "pl1?"):
            t = _tuple_from_json(v, subject, w, allow_none_items=False)
            if t is None:
                raise PlanError(subject, f"bad placement list at {w}: must not be null")
            values[fname] = t
        elif kind == "pl":
            t = _tuple_from_json(v, subject, w, allow_none_items=False)
            if t is None or len(t) != 1:
                raise PlanError(subject, f"bad placement list at {w}: expected one placement")
            values[fname] = t[0]
        elif kind == "pltup":
            values[fname] = _tuple_from_json(v, subject, w)
        elif kind == "pldict":
            values[fname] = _dict_from_json(v, subject, w)
        elif kind == "bool":
            if not isinstance(v, bool):
                raise PlanError(subject, f"bad value at {w}: expected true or false")
            values[fname] = v
        elif kind in ("str", "dim?"):
            if not isinstance(v, str):
                raise PlanError(subject, f"bad value at {w}: expected a string")
            values[fname] = v
        elif kind == "int":
            if isinstance(v, bool) or not isinstance(v, int):
                raise PlanError(subject, f"bad value at {w}: expected an integer")
            values[fname] = v
        elif kind == "style":
            values[fname] = style_from_json(v, subject, w)
    try:
        style = entry.construct(values, subject, where)
    except (AssertionError, ValueError, TypeError) as err:
        # torch's constructors refuse bad arguments with assert, ValueError or TypeError
        raise PlanError(subject, f"invalid {name} at {where}: {err}") from None
    # Set every given field verbatim, so fields that constructors normalise
    # (e.g. desired_input_layouts, with_kwargs) come back exactly.
    for fname, val in values.items():
        setattr(style, fname, val)
    return style


def style_fields(style):
    """Instance fields of a style, nested styles expanded (for equality tests)."""
    out = {"__class__": type(style).__name__}
    for k, v in vars(style).items():
        out[k] = style_fields(v) if isinstance(v, ParallelStyle) else v
    return out


# --------------------------------------------------------------------------
# FSDP2 units (FullyShard) <-> JSON
# --------------------------------------------------------------------------

# torch dtypes a MixedPrecisionPolicy may name, by their name without "torch."
_MP_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_MP_DTYPE_NAMES = {v: k for k, v in _MP_DTYPES.items()}
_MP_FIELDS = ("param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs")
_UNIT_FIELDS = ("fqn", "mesh_dims", "reshard_after_forward", "mp_policy", "offload_policy",
                "requires_gradient_sync", "requires_all_reduce", "forward_prefetch", "backward_prefetch",
                "gradient_divide_factor", "shard_dims", "force_sum_reduction_for_comms")
_PREFETCH_FIELDS = ("forward_prefetch", "backward_prefetch")
_DTYPE_EXPECTED = '(expected "float32", "bfloat16", "float16" or null)'


def _dtype_to_json(dtype, subject, where):
    if dtype is None:
        return None
    name = _MP_DTYPE_NAMES.get(dtype)
    if name is None:
        raise PlanError(subject, f"bad dtype {dtype!r} at {where} {_DTYPE_EXPECTED}")
    return name


def _dtype_from_json(v, subject, where):
    if v is None:
        return None
    if not isinstance(v, str) or v not in _MP_DTYPES:
        raise PlanError(subject, f"bad dtype {json.dumps(v)} at {where} {_DTYPE_EXPECTED}")
    return _MP_DTYPES[v]


def mp_policy_to_json(mp, subject="plan", where="mp_policy"):
    """Encode a ``MixedPrecisionPolicy`` by reading its fields."""
    if type(mp) is not MixedPrecisionPolicy:
        raise PlanError(subject, f"{where} is {type(mp).__name__}, not torch.distributed.fsdp.MixedPrecisionPolicy")
    out = {f: _dtype_to_json(getattr(mp, f), subject, f"{where}.{f}") for f in _MP_FIELDS[:3]}
    if not isinstance(mp.cast_forward_inputs, bool):
        raise PlanError(subject, f"bad value at {where}.cast_forward_inputs: expected true or false")
    out["cast_forward_inputs"] = mp.cast_forward_inputs
    return out


def mp_policy_from_json(obj, subject="plan", where="mp_policy"):
    if not isinstance(obj, dict):
        raise PlanError(subject, f"bad {where}: expected an object")
    unknown = [k for k in obj if k not in _MP_FIELDS]
    if unknown:
        raise PlanError(subject, f"unknown field {unknown[0]!r} at {where}")
    kw = {f: _dtype_from_json(obj[f], subject, f"{where}.{f}") for f in _MP_FIELDS[:3] if f in obj}
    if "cast_forward_inputs" in obj:
        if not isinstance(obj["cast_forward_inputs"], bool):
            raise PlanError(subject, f"bad value at {where}.cast_forward_inputs: expected true or false")
        kw["cast_forward_inputs"] = obj["cast_forward_inputs"]
    return MixedPrecisionPolicy(**kw)


def offload_policy_to_json(policy, subject="plan", where="offload_policy"):
    """``{"kind": "none"}`` for ``OffloadPolicy()``, ``{"kind": "cpu",
    "pin_memory": bool}`` for ``CPUOffloadPolicy``."""
    if type(policy) is OffloadPolicy:
        return {"kind": "none"}
    if type(policy) is CPUOffloadPolicy:
        if not isinstance(policy.pin_memory, bool):
            raise PlanError(subject, f"bad value at {where}.pin_memory: expected true or false")
        return {"kind": "cpu", "pin_memory": policy.pin_memory}
    raise PlanError(subject, f"{where} is {type(policy).__name__}, not torch.distributed.fsdp."
                    "OffloadPolicy or CPUOffloadPolicy")


def offload_policy_from_json(obj, subject="plan", where="offload_policy"):
    if not isinstance(obj, dict):
        raise PlanError(subject, f"bad {where}: expected an object")
    kind = obj.get("kind")
    if kind == "none":
        known = ("kind",)
    elif kind == "cpu":
        known = ("kind", "pin_memory")
    else:
        raise PlanError(subject, f"unknown offload_policy kind {json.dumps(kind)} at {where} "
                        '(expected "none" or "cpu")')
    unknown = [k for k in obj if k not in known]
    if unknown:
        raise PlanError(subject, f"unknown field {unknown[0]!r} at {where}")
    if kind == "none":
        return OffloadPolicy()
    pin = obj.get("pin_memory", True)
    if not isinstance(pin, bool):
        raise PlanError(subject, f"bad value at {where}.pin_memory: expected true or false")
    return CPUOffloadPolicy(pin_memory=pin)


def fully_shard_to_json(unit, subject="plan", where="fully_shard[0]"):
    """Encode a :class:`FullyShard` (every key, in the canonical order; ``gradient_divide_factor``,
    ``shard_dims`` and ``force_sum_reduction_for_comms`` only when set)."""
    return {
        "fqn": list(unit.fqn) if isinstance(unit.fqn, tuple) else unit.fqn,
        "mesh_dims": list(unit.mesh_dims),
        "reshard_after_forward": unit.reshard_after_forward,
        "mp_policy": mp_policy_to_json(unit.mp_policy, subject, f"{where}.mp_policy"),
        "offload_policy": offload_policy_to_json(unit.offload_policy, subject, f"{where}.offload_policy"),
        "requires_gradient_sync": unit.requires_gradient_sync,
        "requires_all_reduce": unit.requires_all_reduce,
        "forward_prefetch": list(unit.forward_prefetch),
        "backward_prefetch": list(unit.backward_prefetch),
        # absent when None: plans without it keep their bytes
        **({} if unit.gradient_divide_factor is None else {"gradient_divide_factor": unit.gradient_divide_factor}),
        **({"shard_dims": dict(unit.shard_dims)} if unit.shard_dims else {}),
        **({"force_sum_reduction_for_comms": True} if unit.force_sum_reduction_for_comms else {}),
    }


def fully_shard_from_json(obj, subject="plan", where="fully_shard[0]"):
    """Rebuild a :class:`FullyShard` (real policy objects); missing optional
    keys take the dataclass defaults."""
    if not isinstance(obj, dict):
        raise PlanError(subject, f"bad {where}: expected an object")
    unknown = [k for k in obj if k not in _UNIT_FIELDS]
    if unknown:
        raise PlanError(subject, f"unknown field {unknown[0]!r} at {where}")
    fqn = obj.get("fqn")
    if not (isinstance(fqn, str) or (isinstance(fqn, list) and fqn and all(isinstance(f, str) for f in fqn))):
        raise PlanError(subject, f"bad {where}: expected \"fqn\", a string or a non-empty list of strings")
    dims = obj.get("mesh_dims")
    if not isinstance(dims, list) or not all(isinstance(d, str) for d in dims):
        raise PlanError(subject, f"bad mesh_dims at {where}: expected a list of mesh dim names")
    kw = {}
    if "reshard_after_forward" in obj:
        raf = obj["reshard_after_forward"]
        if not (raf is None or isinstance(raf, (bool, int))):
            raise PlanError(subject, f"bad reshard_after_forward at {where}: expected true, false, "
                            "null or a positive int")
        kw["reshard_after_forward"] = raf
    if "mp_policy" in obj:
        kw["mp_policy"] = mp_policy_from_json(obj["mp_policy"], subject, f"{where}.mp_policy")
    if "offload_policy" in obj:
        kw["offload_policy"] = offload_policy_from_json(obj["offload_policy"], subject, f"{where}.offload_policy")
    if "requires_gradient_sync" in obj:
        if not isinstance(obj["requires_gradient_sync"], bool):
            raise PlanError(subject, f"bad value at {where}.requires_gradient_sync: expected true or false")
        kw["requires_gradient_sync"] = obj["requires_gradient_sync"]
    if "requires_all_reduce" in obj:
        if not isinstance(obj["requires_all_reduce"], bool):
            raise PlanError(subject, f"bad value at {where}.requires_all_reduce: expected true or false")
        kw["requires_all_reduce"] = obj["requires_all_reduce"]
    for name in _PREFETCH_FIELDS:
        if name in obj:
            targets = obj[name]
            if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
                raise PlanError(subject, f"bad {name} at {where}: expected a list of module FQNs")
            kw[name] = tuple(targets)
    if obj.get("gradient_divide_factor") is not None:
        factor = obj["gradient_divide_factor"]
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
            raise PlanError(subject, f"bad gradient_divide_factor at {where}: expected a positive number or null")
        kw["gradient_divide_factor"] = float(factor)
    if "shard_dims" in obj:
        shard_dims = obj["shard_dims"]
        if not isinstance(shard_dims, dict) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                       for d in shard_dims.values()):
            raise PlanError(subject, f"bad shard_dims at {where}: expected an object of parameter FQN -> dim")
        kw["shard_dims"] = dict(shard_dims)
    if "force_sum_reduction_for_comms" in obj:
        if not isinstance(obj["force_sum_reduction_for_comms"], bool):
            raise PlanError(subject, f"bad value at {where}.force_sum_reduction_for_comms: expected true or false")
        kw["force_sum_reduction_for_comms"] = obj["force_sum_reduction_for_comms"]
    return FullyShard(fqn=tuple(fqn) if isinstance(fqn, list) else fqn, mesh_dims=tuple(dims), **kw)
