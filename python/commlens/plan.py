"""Sharding plans: the :class:`Plan` dataclass and its JSON format.

A *plan factory* (e.g. ``examples.plans:mlp_tp(tp=4)``) returns a
:class:`Plan` holding the device mesh description and the very
``parallelize_plan`` dict of ``ParallelStyle`` objects a user would pass to
``torch.distributed.tensor.parallel.parallelize_module``.  This module turns
that into versioned JSON (``{"format": "commlens-plan", "version": 1, ...}``,
documented in ``docs/plan-format.md``) by reading the style objects' fields,
and :func:`load` rebuilds equal style objects.  A plan may also list FSDP2
units (:class:`FullyShard`: one ``fully_shard(module, mesh=..., ...)`` call
per matched module, with the real ``MixedPrecisionPolicy`` /
``OffloadPolicy`` objects), applied after the ``parallelize_module`` steps.

CLI::

    python -m commlens.plan MODULE:PLAN_FACTORY[(k=v, ...)] -o plan.json
    python -m commlens.plan --check plan.json [--model MODULE:FACTORY]

Errors raise :class:`commlens.CommlensError` (subclass :class:`PlanError`);
the CLI prints ``commlens: error: <file or spec>: <what>`` and exits 2.
"""

import argparse
import os
import dataclasses
import fnmatch
import warnings
import json
import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy
from torch.distributed.tensor import Partial, Placement, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleInputOutput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
)
from torch.distributed.tensor.parallel.style import ParallelStyle

from commlens._errors import CommlensError, cli_main

FORMAT = "commlens-plan"
VERSION = 1


class PlanError(CommlensError):
    """An invalid plan (bad JSON, unknown style, bad placement, ...)."""


# --------------------------------------------------------------------------
# Python representation
# --------------------------------------------------------------------------


@dataclass
class Loss:
    """How the scalar for ``.backward()`` is made from the model output.

    * ``kind="sum"``: the sum over all output tensors (pytree leaves) of
      ``t.sum()``.
    * ``kind="cross_entropy"``: ``F.cross_entropy(logits.flatten(0, -2),
      targets.flatten(), reduction=..., ignore_index=...)`` where ``logits``
      is the first output tensor (shape ``[..., C]``).  ``targets`` says how
      the integer targets are made:

      - ``"random"``: ``torch.randint(0, C, logits.shape[:-1])`` drawn from a
        ``torch.Generator`` seeded with ``seed`` (on CPU, then moved to the
        logits' device; on ``meta`` an empty tensor of that shape), where ``C``
        is the *global* class count;
      - ``"input:K"``: the K-th positional user input (e.g. the token ids).
    """

    kind: str = "sum"
    targets: str = "random"
    seed: int = 0
    reduction: str = "mean"
    ignore_index: int = -100

    @classmethod
    def sum(cls):
        return cls(kind="sum")

    @classmethod
    def cross_entropy(cls, targets="random", seed=0, reduction="mean", ignore_index=-100):
        return cls(kind="cross_entropy", targets=targets, seed=seed,
                   reduction=reduction, ignore_index=ignore_index)


@dataclass
class FullyShard:
    """One FSDP2 unit: ``fully_shard(module, mesh=..., ...)`` for every module
    ``fqn`` matches.

    ``fqn`` is matched exactly like a ``parallelize_module`` plan key
    (:func:`match_modules`; ``""`` is the root); ``"layers.*"`` means one
    ``fully_shard`` call per matching module, in match order.  ``mesh_dims``
    names the sub-mesh passed as ``mesh=``: one name is FSDP on that dim, two
    names ``(replicate, shard)`` are HSDP.  A single string is taken as a
    one-name tuple.  ``reshard_after_forward``, ``mp_policy`` and
    ``offload_policy`` are passed to ``fully_shard`` as they are
    (``reshard_after_forward`` only when not None, which is torch's default:
    True for non-root units, False for the root).  ``requires_gradient_sync=
    False`` calls ``module.set_requires_gradient_sync(False, recurse=False)``
    and ``requires_all_reduce=False`` calls ``module.set_requires_all_reduce(
    False, recurse=False)`` (HSDP: reduce-scatter without the all-reduce)
    right after ``fully_shard``.

    ``forward_prefetch`` / ``backward_prefetch`` are exact module FQNs
    (``"layers.1"``, ``""`` for the root), each of a module some unit's
    pattern matches; after **all** ``fully_shard`` calls every module this
    unit matched gets ``module.set_modules_to_forward_prefetch([...])`` /
    ``set_modules_to_backward_prefetch([...])`` with those modules, in the
    given order (only when the tuple is non-empty: ``()`` keeps FSDP2's
    default prefetching).  A single string or a list is taken as a tuple.
    """

    fqn: str
    mesh_dims: tuple
    reshard_after_forward: bool | int | None = None
    mp_policy: MixedPrecisionPolicy = field(default_factory=MixedPrecisionPolicy)
    offload_policy: OffloadPolicy = field(default_factory=OffloadPolicy)
    requires_gradient_sync: bool = True
    requires_all_reduce: bool = True
    forward_prefetch: tuple = ()
    backward_prefetch: tuple = ()

    def __post_init__(self):
        for name in ("mesh_dims", "forward_prefetch", "backward_prefetch"):
            value = getattr(self, name)
            if isinstance(value, str):
                setattr(self, name, (value,))
            elif isinstance(value, list):
                setattr(self, name, tuple(value))


@dataclass
class ActivationCheckpoint:
    """Activation checkpointing of every module ``fqn`` matches (matched like
    a ``parallelize_module`` plan key, on the model as ``parallelize_module``
    left it), non-reentrant (``torch.utils.checkpoint`` with
    ``use_reentrant=False``, early stop on: recomputation in backward stops
    after the last tensor the forward saved).

    ``wrapper=True`` is torchtitan's full AC: ``measure`` replaces each matched
    module by ``checkpoint_wrapper(module, CheckpointImpl.NO_REENTRANT,
    preserve_rng_state=False)`` (its parent re-registers it) after the
    ``parallelize_module`` steps and ``frozen_after_parallelize``, before
    ``fully_shard`` -- so the module's FQN gains ``._checkpoint_wrapped_module``
    and ``fully_shard`` patterns see the wrappers.  ``wrapper=False`` states
    that the model's own forward already calls ``checkpoint(module, ...,
    use_reentrant=False)`` on each call of those modules (for example a
    Hugging Face model after ``gradient_checkpointing_enable``): nothing is
    applied and names do not change.

    ``save_ops`` makes it selective (op-list policy): a tuple of op overload
    names (``"aten.mm.default"``, ``"_c10d_functional.reduce_scatter_tensor.default"``)
    whose outputs the forward keeps, as
    ``create_selective_checkpoint_contexts([ops])`` passed as ``context_fn``
    does; recomputation reuses them instead of running them again (a saved
    collective is not issued again).  Only with ``wrapper=True``.

    ``early_stop=False`` passes ``early_stop=False`` to ``checkpoint_wrapper``
    (torchtitan's default): recomputation runs the module's whole forward
    again, issuing the collectives after its last saved tensor too.  Only with
    ``wrapper=True`` (a model that checkpoints itself decides for itself).
    """

    fqn: str
    wrapper: bool = True
    save_ops: tuple = ()
    early_stop: bool = True

    def __post_init__(self):
        if isinstance(self.save_ops, (str, list)):
            self.save_ops = (self.save_ops,) if isinstance(self.save_ops, str) else tuple(self.save_ops)


@dataclass
class Plan:
    """What a plan factory returns.

    ``parallelize_plan`` is either a dict ``{fqn_pattern: ParallelStyle}``
    (applied with ``parallelize_module`` on the mesh dim ``tp_mesh_dim``, or on
    the whole mesh if that is 1-D and ``tp_mesh_dim`` is None), or a list of
    ``(mesh_dim_name, dict)`` pairs applied in order, one ``parallelize_module``
    call each.

    ``placements`` maps parameter/buffer FQN patterns (fnmatch, matched
    against ``named_parameters()`` / ``named_buffers()`` paths) to explicit
    DTensor placements, applied with ``distribute_tensor`` after
    ``parallelize_module``.  ``input_placements`` does the same for user inputs,
    keyed by position (int) or keyword name (str).  A placement value is a
    tuple with one ``Placement`` per mesh dim of the whole mesh, or a dict
    ``{mesh_dim_name: Placement}`` meaning the sub-mesh of those dims (in that
    order).

    ``inputs_requires_grad`` lists user inputs (position or keyword name)
    that get ``requires_grad_(True)``.  ``frozen`` lists parameter FQN
    patterns set to ``requires_grad=False`` before parallelisation (note that
    ``SequenceParallel`` re-creates the parameters below its module with
    ``requires_grad=True``); ``frozen_after_parallelize`` lists patterns set to
    ``requires_grad=False`` after the ``parallelize_module`` steps, before
    ``fully_shard``.
    ``loss_parallel=True`` runs forward, loss and backward inside
    ``torch.distributed.tensor.parallel.loss_parallel()``.
    ``src_data_rank`` is passed to ``parallelize_module``.  ``name`` and
    ``source`` (the factory spec the plan came from) are informational.

    ``fully_shard`` is a sequence of :class:`FullyShard` units applied in
    order after every ``parallelize_module`` step (shard children first, the
    root last, as with ``fully_shard`` itself).

    ``activation_checkpoint`` is a sequence of :class:`ActivationCheckpoint`
    entries, applied after the ``parallelize_module`` steps and before
    ``fully_shard`` (torchtitan's order).
    """

    mesh_shape: tuple
    parallelize_plan: Any = field(default_factory=dict)
    mesh_dim_names: tuple | None = None
    device_type: str = "cpu"
    tp_mesh_dim: str | None = None
    placements: dict = field(default_factory=dict)
    input_placements: dict = field(default_factory=dict)
    inputs_requires_grad: tuple = ()
    frozen: tuple = ()
    frozen_after_parallelize: tuple = ()
    loss: Loss = field(default_factory=Loss)
    loss_parallel: bool = False
    src_data_rank: int | None = 0
    name: str | None = None
    source: str | None = None
    fully_shard: tuple = ()
    activation_checkpoint: tuple = ()

    @property
    def world_size(self):
        return math.prod(self.mesh_shape)

    def parallelize_steps(self):
        """``[(mesh_dim_name_or_None, {pattern: style})]`` in application order."""
        pp = self.parallelize_plan
        if isinstance(pp, dict):
            return [(self.tp_mesh_dim, pp)] if pp else []
        return [(dim, dict(d)) for dim, d in pp]


# --------------------------------------------------------------------------
# Placements <-> strings
# --------------------------------------------------------------------------

_REDUCE_OPS = ("sum", "avg", "max", "min", "product")
_SHARD_RE = re.compile(r"^(?:Shard|S)\(\s*(?:dim\s*=\s*)?(-?\d+)\s*\)$")
_PARTIAL_RE = re.compile(r"^(?:Partial|P)\(\s*(?:reduce_op\s*=\s*)?['\"]?([a-z_]*)['\"]?\s*\)$")


def placement_to_str(p, where="placement"):
    """Canonical string: ``Shard(d)``, ``Replicate()``, ``Partial(op)``."""
    if type(p) is Shard:
        return f"Shard({p.dim})"
    if type(p) is Replicate:
        return "Replicate()"
    if type(p) is Partial:
        return f"Partial({p.reduce_op})"
    raise PlanError(where, f"unsupported placement {p!r} (only Shard, Replicate, Partial)")


def placement_from_str(s, subject="plan", where=""):
    """Parse ``Shard(0)``/``S(0)``/``Shard(dim=0)``, ``Replicate()``/``R``,
    ``Partial()``/``Partial(sum)``/``P(max)``."""
    loc = f" at {where}" if where else ""
    if not isinstance(s, str):
        raise PlanError(subject, f"bad placement {json.dumps(s)}{loc}: expected a string")
    text = s.strip()
    m = _SHARD_RE.match(text)
    if m:
        return Shard(int(m.group(1)))
    if text in ("Replicate()", "R", "Replicate"):
        return Replicate()
    m = _PARTIAL_RE.match(text)
    if m:
        op = m.group(1) or "sum"
        if op not in _REDUCE_OPS:
            raise PlanError(subject, f"bad placement {s!r}{loc}: unknown reduce op {op!r} "
                            f"(expected one of {', '.join(_REDUCE_OPS)})")
        return Partial(op)
    if text in ("P", "Partial"):
        return Partial()
    raise PlanError(subject, f"bad placement {s!r}{loc} (expected Shard(d), Replicate() or Partial(op))")


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

# For every supported class: the instance attributes (as set by the installed
# torch/distributed/tensor/parallel/style.py) and how each one is encoded.
#   "pl1"   : 1-tuple (or tuple) of Placement        -> list of strings
#   "pltup" : None or tuple of (Placement | None)     -> null or list
#   "pldict": dict str -> Placement                   -> object
#   "bool"  : bool
#   "style" : a nested style object
_STYLE_FIELDS = {
    "ColwiseParallel": (ColwiseParallel, [
        ("input_layouts", "pl1"), ("output_layouts", "pl1"),
        ("desired_input_layouts", "pl1"), ("use_local_output", "bool"),
    ]),
    "RowwiseParallel": (RowwiseParallel, [
        ("input_layouts", "pl1"), ("output_layouts", "pl1"),
        ("use_local_output", "bool"),
        # desired_input_layouts is only set by RowwiseParallel._apply
        # (Shard(-1) for Linear, Replicate() for Embedding); serialised only
        # when present on the object.
        ("desired_input_layouts", "pl1?"),
    ]),
    "SequenceParallel": (SequenceParallel, [
        ("sequence_sharding", "pl1"), ("use_local_output", "bool"),
    ]),
    "PrepareModuleInput": (PrepareModuleInput, [
        ("input_layouts", "pltup"), ("desired_input_layouts", "pltup"),
        ("input_kwarg_layouts", "pldict"), ("desired_input_kwarg_layouts", "pldict"),
        ("use_local_output", "bool"), ("with_kwargs", "bool"),
    ]),
    "PrepareModuleOutput": (PrepareModuleOutput, [
        ("output_layouts", "pltup"), ("desired_output_layouts", "pltup"),
        ("use_local_output", "bool"),
    ]),
    "PrepareModuleInputOutput": (PrepareModuleInputOutput, [
        ("prepare_module_input", "style"), ("prepare_module_output", "style"),
    ]),
}
_CLASS_TO_NAME = {cls: name for name, (cls, _) in _STYLE_FIELDS.items()}


def style_to_json(style, where="style"):
    """Encode a ParallelStyle by reading its instance attributes."""
    name = _CLASS_TO_NAME.get(type(style))
    if name is None:
        raise PlanError(where, f"unsupported parallel style class {type(style).__module__}."
                        f"{type(style).__qualname__}")
    _, fields = _STYLE_FIELDS[name]
    out = {"style": name}
    attrs = vars(style)
    for fname, kind in fields:
        if kind == "pl1?":
            if fname not in attrs:
                continue
            kind = "pl1"
        val = getattr(style, fname)
        w = f"{where}.{fname}"
        if kind in ("pl1", "pltup"):
            out[fname] = _tuple_to_json(val, w)
        elif kind == "pldict":
            out[fname] = _dict_to_json(val, w)
        elif kind == "bool":
            out[fname] = bool(val)
        elif kind == "style":
            out[fname] = style_to_json(val, w)
    # src_data_rank is a class attribute that parallelize_module overwrites;
    # it is recorded plan-wide (Plan.src_data_rank), not per style.
    return out


def style_from_json(obj, subject="plan", where="style"):
    """Rebuild a ParallelStyle whose fields equal the encoded ones."""
    if not isinstance(obj, dict):
        raise PlanError(subject, f"bad style at {where}: expected an object")
    name = obj.get("style")
    if name not in _STYLE_FIELDS:
        raise PlanError(subject, f"unknown parallel style {name!r} at {where} "
                        f"(known: {', '.join(_STYLE_FIELDS)})")
    cls, fields = _STYLE_FIELDS[name]
    known = {f for f, _ in fields}
    unknown = sorted(set(obj) - known - {"style"})
    if unknown:
        raise PlanError(subject, f"unknown field {unknown[0]!r} for {name} at {where}")
    values = {}
    for fname, kind in fields:
        if fname not in obj:
            continue
        v = obj[fname]
        w = f"{where}.{fname}"
        if kind in ("pl1", "pl1?"):
            t = _tuple_from_json(v, subject, w, allow_none_items=False)
            if t is None:
                raise PlanError(subject, f"bad placement list at {w}: must not be null")
            values[fname] = t
        elif kind == "pltup":
            values[fname] = _tuple_from_json(v, subject, w)
        elif kind == "pldict":
            values[fname] = _dict_from_json(v, subject, w)
        elif kind == "bool":
            if not isinstance(v, bool):
                raise PlanError(subject, f"bad value at {w}: expected true or false")
            values[fname] = v
        elif kind == "style":
            values[fname] = style_from_json(v, subject, w)
    style = _construct(cls, name, values, subject, where)
    # Set every given field verbatim, so fields that constructors normalise
    # (e.g. desired_input_layouts, with_kwargs) come back exactly.
    for fname, val in values.items():
        setattr(style, fname, val)
    return style


def _construct(cls, name, values, subject, where):
    one = lambda t: None if t is None else t[0]  # noqa: E731
    try:
        if name in ("ColwiseParallel", "RowwiseParallel"):
            return cls(
                input_layouts=one(values.get("input_layouts")),
                output_layouts=one(values.get("output_layouts")),
                use_local_output=values.get("use_local_output", True),
            )
        if name == "SequenceParallel":
            seq = values.get("sequence_sharding", (Shard(1),))
            if len(seq) != 1 or type(seq[0]) is not Shard:
                raise PlanError(subject, f"bad value at {where}.sequence_sharding: expected [\"Shard(d)\"]")
            return cls(sequence_dim=seq[0].dim, use_local_output=values.get("use_local_output", False))
        if name == "PrepareModuleInput":
            with_kwargs = values.get("with_kwargs", bool(values.get("input_kwarg_layouts")))
            return cls(
                input_layouts=values.get("input_layouts"),
                desired_input_layouts=values.get("desired_input_layouts"),
                input_kwarg_layouts=values.get("input_kwarg_layouts", {}) if with_kwargs else None,
                desired_input_kwarg_layouts=values.get("desired_input_kwarg_layouts"),
                use_local_output=values.get("use_local_output", False),
            )
        if name == "PrepareModuleOutput":
            if "output_layouts" not in values or "desired_output_layouts" not in values:
                raise PlanError(subject, f"{name} at {where} needs output_layouts and desired_output_layouts")
            return cls(
                output_layouts=values["output_layouts"],
                desired_output_layouts=values["desired_output_layouts"],
                use_local_output=values.get("use_local_output", True),
            )
        if name == "PrepareModuleInputOutput":
            pin = values.get("prepare_module_input")
            pout = values.get("prepare_module_output")
            if not isinstance(pin, PrepareModuleInput) or not isinstance(pout, PrepareModuleOutput):
                raise PlanError(subject, f"{name} at {where} needs prepare_module_input "
                                "(PrepareModuleInput) and prepare_module_output (PrepareModuleOutput)")
            return cls(
                input_layouts=pin.input_layouts,
                desired_input_layouts=pin.desired_input_layouts,
                input_kwarg_layouts=pin.input_kwarg_layouts if pin.with_kwargs else None,
                desired_input_kwarg_layouts=pin.desired_input_kwarg_layouts,
                use_local_input=pin.use_local_output,
                output_layouts=pout.output_layouts,
                desired_output_layouts=pout.desired_output_layouts,
                use_local_output=pout.use_local_output,
            )
    except PlanError:
        raise
    except (AssertionError, ValueError, TypeError) as err:
        raise PlanError(subject, f"invalid {name} at {where}: {err}") from None
    raise AssertionError(name)


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
                "requires_gradient_sync", "requires_all_reduce", "forward_prefetch", "backward_prefetch")
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
    """Encode a :class:`FullyShard` (every key, in the canonical order)."""
    return {
        "fqn": unit.fqn,
        "mesh_dims": list(unit.mesh_dims),
        "reshard_after_forward": unit.reshard_after_forward,
        "mp_policy": mp_policy_to_json(unit.mp_policy, subject, f"{where}.mp_policy"),
        "offload_policy": offload_policy_to_json(unit.offload_policy, subject, f"{where}.offload_policy"),
        "requires_gradient_sync": unit.requires_gradient_sync,
        "requires_all_reduce": unit.requires_all_reduce,
        "forward_prefetch": list(unit.forward_prefetch),
        "backward_prefetch": list(unit.backward_prefetch),
    }


def fully_shard_from_json(obj, subject="plan", where="fully_shard[0]"):
    """Rebuild a :class:`FullyShard` (real policy objects); missing optional
    keys take the dataclass defaults."""
    if not isinstance(obj, dict):
        raise PlanError(subject, f"bad {where}: expected an object")
    unknown = [k for k in obj if k not in _UNIT_FIELDS]
    if unknown:
        raise PlanError(subject, f"unknown field {unknown[0]!r} at {where}")
    if not isinstance(obj.get("fqn"), str):
        raise PlanError(subject, f"bad {where}: expected a string \"fqn\"")
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
    return FullyShard(fqn=obj["fqn"], mesh_dims=tuple(dims), **kw)


# --------------------------------------------------------------------------
# Plan <-> JSON
# --------------------------------------------------------------------------


def _placement_spec_to_json(value, where):
    if isinstance(value, dict):
        return {"mesh_dims": list(value.keys()),
                "placements": [placement_to_str(p, where) for p in value.values()]}
    if isinstance(value, Placement):
        value = (value,)
    return {"mesh_dims": None, "placements": [placement_to_str(p, where) for p in value]}


def _placement_spec_from_json(v, subject, where):
    if not isinstance(v, dict) or "placements" not in v:
        raise PlanError(subject, f"bad placement spec at {where}: expected {{\"mesh_dims\": ..., \"placements\": [...]}}")
    unknown = sorted(set(v) - {"mesh_dims", "placements"})
    if unknown:
        raise PlanError(subject, f"unknown field {unknown[0]!r} at {where}")
    pls = _tuple_from_json(v["placements"], subject, f"{where}.placements", allow_none_items=False)
    dims = v.get("mesh_dims")
    if dims is None:
        return pls
    if not isinstance(dims, list) or not all(isinstance(d, str) for d in dims):
        raise PlanError(subject, f"bad mesh_dims at {where}: expected a list of mesh dim names")
    if len(dims) != len(pls):
        raise PlanError(subject, f"bad placement spec at {where}: {len(dims)} mesh_dims but {len(pls)} placements")
    return dict(zip(dims, pls))


def _input_key_to_json(k):
    return str(k)


def _input_key_from_json(k):
    return int(k) if re.fullmatch(r"\d+", k) else k


def to_json(plan, source=None):
    """Encode a :class:`Plan` as a JSON-able dict (canonical key order)."""
    if not isinstance(plan, Plan):
        raise PlanError(source or "plan", f"plan factory returned {type(plan).__name__}, not commlens.plan.Plan")
    source = source or plan.source
    subject = source or "plan"
    validate(plan, subject)
    steps = []
    for dim, pp in plan.parallelize_steps():
        entries = []
        for pattern, style in pp.items():
            entries.append({"fqn": pattern, **style_to_json(style, f"{subject}: {pattern!r}")})
        steps.append({"mesh_dim": dim, "plan": entries})
    inputs = {}
    keys = list(dict.fromkeys(list(plan.input_placements) + list(plan.inputs_requires_grad)))
    for k in keys:
        inputs[_input_key_to_json(k)] = {
            "requires_grad": k in plan.inputs_requires_grad,
            "placements": (_placement_spec_to_json(plan.input_placements[k], subject)
                           if k in plan.input_placements else None),
        }
    loss = plan.loss if isinstance(plan.loss, Loss) else Loss(kind=plan.loss)
    if loss.kind == "sum":
        loss_json = {"kind": "sum"}
    else:
        loss_json = {"kind": loss.kind, "targets": loss.targets, "seed": loss.seed,
                     "reduction": loss.reduction, "ignore_index": loss.ignore_index}
    out = {
        "format": FORMAT,
        "version": VERSION,
        "name": plan.name,
        "source": source,
        "mesh": {
            "shape": list(plan.mesh_shape),
            "dim_names": None if plan.mesh_dim_names is None else list(plan.mesh_dim_names),
            "device_type": plan.device_type,
        },
        "parallelize": steps,
        "fully_shard": [fully_shard_to_json(u, subject, f"fully_shard[{i}]")
                        for i, u in enumerate(plan.fully_shard)],
        "src_data_rank": plan.src_data_rank,
        "placements": {k: _placement_spec_to_json(v, subject) for k, v in plan.placements.items()},
        "inputs": inputs,
        "frozen": list(plan.frozen),
        "frozen_after_parallelize": list(plan.frozen_after_parallelize),
        "loss": loss_json,
        "loss_parallel": bool(plan.loss_parallel),
    }
    if plan.activation_checkpoint:  # absent when empty: plans without it keep their bytes
        out["activation_checkpoint"] = [{"fqn": u.fqn, "wrapper": u.wrapper, "save_ops": list(u.save_ops),
                                         # absent when True: plans without it keep their bytes
                                         **({} if u.early_stop else {"early_stop": False})}
                                        for u in plan.activation_checkpoint]
    return out


def _format(obj, indent=0):
    """JSON text: objects one key per line (2-space indent); lists whose items
    are all scalars on one line."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{inner}{json.dumps(k)}: {_format(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list):
        if all(not isinstance(v, (dict, list)) for v in obj):
            return "[" + ", ".join(json.dumps(v) for v in obj) + "]"
        items = [f"{inner}{_format(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj)


def dumps(plan, source=None):
    """Canonical JSON text of a plan (deterministic; ends with a newline)."""
    return _format(to_json(plan, source)) + "\n"


_TOP_FIELDS = ("format", "version", "name", "source", "mesh", "parallelize", "fully_shard", "src_data_rank",
               "placements", "inputs", "frozen", "frozen_after_parallelize", "loss", "loss_parallel",
               "activation_checkpoint")


def from_json(obj, subject="plan"):
    """Decode a plan dict (as produced by :func:`to_json`) into a :class:`Plan`."""
    if not isinstance(obj, dict):
        raise PlanError(subject, "not a commlens plan (top level is not a JSON object)")
    if obj.get("format") != FORMAT:
        raise PlanError(subject, f"not a commlens plan (format is {obj.get('format')!r}, expected {FORMAT!r})")
    if obj.get("version") != VERSION:
        raise PlanError(subject, f"unsupported plan version {obj.get('version')!r} (this commlens reads version {VERSION})")
    unknown = sorted(set(obj) - set(_TOP_FIELDS))
    if unknown:
        raise PlanError(subject, f"unknown top-level field {unknown[0]!r}")
    mesh = obj.get("mesh")
    if not isinstance(mesh, dict) or "shape" not in mesh:
        raise PlanError(subject, "missing mesh.shape")
    shape = mesh["shape"]
    if (not isinstance(shape, list) or not shape
            or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape)):
        raise PlanError(subject, f"bad mesh.shape {json.dumps(shape)}: expected a non-empty list of positive ints")
    names = mesh.get("dim_names")
    steps = []
    for i, step in enumerate(obj.get("parallelize") or []):
        if not isinstance(step, dict) or not isinstance(step.get("plan", []), list):
            raise PlanError(subject, f"bad parallelize[{i}]: expected {{\"mesh_dim\": ..., \"plan\": [...]}}")
        pp = {}
        for j, entry in enumerate(step.get("plan", [])):
            where = f"parallelize[{i}].plan[{j}]"
            if not isinstance(entry, dict) or not isinstance(entry.get("fqn"), str):
                raise PlanError(subject, f"bad {where}: expected an object with a string \"fqn\"")
            body = {k: v for k, v in entry.items() if k != "fqn"}
            pp[entry["fqn"]] = style_from_json(body, subject, f"{where} ({entry['fqn']!r})")
        steps.append((step.get("mesh_dim"), pp))
    if len(steps) == 1:
        tp_dim, parallelize_plan = steps[0]
    elif not steps:
        tp_dim, parallelize_plan = None, {}
    else:
        tp_dim, parallelize_plan = None, steps
    units = obj.get("fully_shard")  # absent (older plans) or null: no units
    if units is None:
        units = []
    if not isinstance(units, list):
        raise PlanError(subject, "bad fully_shard: expected a list of units")
    fully_shard = tuple(fully_shard_from_json(u, subject, f"fully_shard[{i}]") for i, u in enumerate(units))
    ac = obj.get("activation_checkpoint") or []
    if not isinstance(ac, list):
        raise PlanError(subject, "bad activation_checkpoint: expected a list")
    checkpoints = []
    for i, u in enumerate(ac):
        where = f"activation_checkpoint[{i}]"
        if not isinstance(u, dict) or not isinstance(u.get("fqn"), str):
            raise PlanError(subject, f"bad {where}: expected an object with a string \"fqn\"")
        unknown = sorted(set(u) - {"fqn", "wrapper", "save_ops", "early_stop"})
        if unknown:
            raise PlanError(subject, f"unknown field {unknown[0]!r} at {where}")
        save_ops = u.get("save_ops", [])
        if not isinstance(save_ops, list):
            raise PlanError(subject, f"bad save_ops at {where}: expected a list of op names")
        checkpoints.append(ActivationCheckpoint(fqn=u["fqn"], wrapper=u.get("wrapper", True),
                                                save_ops=tuple(save_ops), early_stop=u.get("early_stop", True)))
    placements = {}
    for k, v in (obj.get("placements") or {}).items():
        placements[k] = _placement_spec_from_json(v, subject, f"placements[{k!r}]")
    input_placements, requires_grad = {}, []
    for k, v in (obj.get("inputs") or {}).items():
        key = _input_key_from_json(k)
        if not isinstance(v, dict):
            raise PlanError(subject, f"bad inputs[{k!r}]: expected an object")
        unknown = sorted(set(v) - {"requires_grad", "placements"})
        if unknown:
            raise PlanError(subject, f"unknown field {unknown[0]!r} at inputs[{k!r}]")
        if v.get("requires_grad"):
            requires_grad.append(key)
        if v.get("placements") is not None:
            input_placements[key] = _placement_spec_from_json(v["placements"], subject, f"inputs[{k!r}].placements")
    loss_obj = obj.get("loss") or {"kind": "sum"}
    if not isinstance(loss_obj, dict):
        raise PlanError(subject, "bad loss: expected an object")
    unknown = sorted(set(loss_obj) - {f.name for f in dataclasses.fields(Loss)})
    if unknown:
        raise PlanError(subject, f"unknown field {unknown[0]!r} in loss")
    loss = Loss(**loss_obj)
    plan = Plan(
        mesh_shape=tuple(shape),
        mesh_dim_names=None if names is None else tuple(names),
        device_type=mesh.get("device_type", "cpu"),
        parallelize_plan=parallelize_plan,
        tp_mesh_dim=tp_dim,
        placements=placements,
        input_placements=input_placements,
        inputs_requires_grad=tuple(requires_grad),
        frozen=tuple(obj.get("frozen") or ()),
        frozen_after_parallelize=tuple(obj.get("frozen_after_parallelize") or ()),
        loss=loss,
        loss_parallel=bool(obj.get("loss_parallel", False)),
        src_data_rank=obj.get("src_data_rank", 0),
        name=obj.get("name"),
        source=obj.get("source"),
        fully_shard=fully_shard,
        activation_checkpoint=tuple(checkpoints),
    )
    validate(plan, subject)
    return plan


def load(path):
    """Read a plan JSON file into a :class:`Plan` (styles rebuilt)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as err:
        raise PlanError(path, f"cannot read plan: {err.strerror or err}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise PlanError(path, f"invalid JSON: {err.msg} at line {err.lineno} column {err.colno}") from None
    return from_json(obj, str(path))


def save(plan, path, source=None):
    text = dumps(plan, source)
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as err:
        raise PlanError(path, f"cannot write plan: {err.strerror or err}") from None
    return text


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------

_LOSS_KINDS = ("sum", "cross_entropy")
_REDUCTIONS = ("mean", "sum")


def _mesh_dim_names_of(plan):
    return tuple(plan.mesh_dim_names) if plan.mesh_dim_names is not None else None


def _check_mesh_dim(plan, dim, subject, what):
    names = _mesh_dim_names_of(plan)
    if dim is None:
        if len(plan.mesh_shape) != 1:
            raise PlanError(subject, f"{what} needs a mesh dim name: the mesh is "
                            f"{len(plan.mesh_shape)}-D {tuple(plan.mesh_shape)}")
        return
    if names is None or dim not in names:
        raise PlanError(subject, f"mesh dim {dim!r} ({what}) is not in the mesh "
                        f"(dim names: {list(names) if names else 'none'})")


def validate(plan, subject="plan"):
    """Model-independent checks; raise :class:`PlanError` on the first problem."""
    shape = tuple(plan.mesh_shape)
    if not shape or not all(isinstance(s, int) and s > 0 for s in shape):
        raise PlanError(subject, f"bad mesh shape {shape}")
    names = _mesh_dim_names_of(plan)
    if names is not None:
        if len(names) != len(shape):
            raise PlanError(subject, f"mesh has {len(shape)} dims but {len(names)} dim names")
        if len(set(names)) != len(names):
            raise PlanError(subject, f"duplicate mesh dim names {list(names)}")
    if plan.device_type not in ("cpu", "cuda"):
        raise PlanError(subject, f"bad device_type {plan.device_type!r} (expected 'cpu' or 'cuda')")
    pp = plan.parallelize_plan
    if not isinstance(pp, (dict, list, tuple)):
        raise PlanError(subject, "parallelize_plan must be a dict or a list of (mesh_dim, dict)")
    for dim, d in plan.parallelize_steps():
        _check_mesh_dim(plan, dim, subject, "parallelize_plan")
        if not isinstance(d, dict):
            raise PlanError(subject, "each parallelize_plan must be a dict {fqn_pattern: ParallelStyle}")
        for pattern, style in d.items():
            if not isinstance(pattern, str):
                raise PlanError(subject, f"plan key {pattern!r} is not a string")
            if not isinstance(style, ParallelStyle):
                raise PlanError(subject, f"plan entry {pattern!r} is {type(style).__name__}, not a ParallelStyle")
            if type(style) not in _CLASS_TO_NAME:
                raise PlanError(subject, f"unsupported parallel style class {type(style).__module__}."
                                f"{type(style).__qualname__} for {pattern!r}")
    _validate_fully_shard(plan, subject)
    if not isinstance(plan.activation_checkpoint, (list, tuple)):
        raise PlanError(subject, "activation_checkpoint must be a sequence of commlens.plan.ActivationCheckpoint")
    for i, unit in enumerate(plan.activation_checkpoint):
        where = f"activation_checkpoint[{i}]"
        if not isinstance(unit, ActivationCheckpoint):
            raise PlanError(subject, f"{where} is {type(unit).__name__}, not commlens.plan.ActivationCheckpoint")
        if not isinstance(unit.fqn, str):
            raise PlanError(subject, f"{where}: fqn {unit.fqn!r} is not a string")
        if not isinstance(unit.wrapper, bool):
            raise PlanError(subject, f"{where}: wrapper must be True or False")
        for op in unit.save_ops:
            checkpoint_save_op(op, subject, where)
        if unit.save_ops and not unit.wrapper:
            raise PlanError(subject, f"{where}: save_ops needs wrapper=True (a selective policy is passed to "
                            "checkpoint_wrapper)")
        if not isinstance(unit.early_stop, bool):
            raise PlanError(subject, f"{where}: early_stop must be True or False")
        if not unit.early_stop and not unit.wrapper:
            raise PlanError(subject, f"{where}: early_stop=False needs wrapper=True (it is passed to "
                            "checkpoint_wrapper)")
    for table, label in ((plan.placements, "placements"), (plan.input_placements, "input_placements")):
        for key, spec in table.items():
            where = f"{label}[{key!r}]"
            if isinstance(spec, dict):
                for dim, p in spec.items():
                    _check_mesh_dim(plan, dim, subject, where)
                    placement_to_str(p, subject)
            else:
                spec = (spec,) if isinstance(spec, Placement) else tuple(spec)
                if len(spec) != len(shape):
                    raise PlanError(subject, f"{where} has {len(spec)} placements for a "
                                    f"{len(shape)}-D mesh")
                for p in spec:
                    placement_to_str(p, subject)
    loss = plan.loss if isinstance(plan.loss, Loss) else Loss(kind=plan.loss)
    if loss.kind not in _LOSS_KINDS:
        raise PlanError(subject, f"unknown loss kind {loss.kind!r} (expected one of {', '.join(_LOSS_KINDS)})")
    if loss.kind == "cross_entropy":
        if loss.reduction not in _REDUCTIONS:
            raise PlanError(subject, f"bad loss reduction {loss.reduction!r} (expected mean or sum)")
        if not (loss.targets == "random" or re.fullmatch(r"input:\d+", str(loss.targets))):
            raise PlanError(subject, f"bad loss targets {loss.targets!r} (expected 'random' or 'input:K')")
    if plan.loss_parallel:
        if loss.kind != "cross_entropy":
            raise PlanError(subject, "loss_parallel needs loss kind 'cross_entropy'")


def _validate_fully_shard(plan, subject):
    units = plan.fully_shard
    if not isinstance(units, (list, tuple)):
        raise PlanError(subject, "fully_shard must be a sequence of commlens.plan.FullyShard")
    names = _mesh_dim_names_of(plan)
    # Mesh dims the parallelize steps use (None on a 1-D mesh: the whole mesh).
    tp_dims = set()
    for dim, _ in plan.parallelize_steps():
        if dim is not None:
            tp_dims.add(dim)
        elif names is not None:
            tp_dims.update(names)
    for i, unit in enumerate(units):
        where = f"fully_shard[{i}]"
        if not isinstance(unit, FullyShard):
            raise PlanError(subject, f"{where} is {type(unit).__name__}, not commlens.plan.FullyShard")
        if not isinstance(unit.fqn, str):
            raise PlanError(subject, f"{where}: fqn {unit.fqn!r} is not a string")
        dims = unit.mesh_dims
        if not isinstance(dims, tuple) or not all(isinstance(d, str) for d in dims):
            raise PlanError(subject, f"{where}: mesh_dims must be a tuple of mesh dim names, got {dims!r}")
        if len(dims) not in (1, 2):
            raise PlanError(subject, f"{where}: {len(dims)} mesh dims {list(dims)} (fully_shard takes a 1-D "
                            "mesh, or a 2-D (replicate, shard) mesh for HSDP)")
        if names is None:
            raise PlanError(subject, f"{where}: the mesh has no dim names (fully_shard units name their "
                            "mesh dims)")
        for d in dims:
            _check_mesh_dim(plan, d, subject, where)
        if len(set(dims)) != len(dims):
            raise PlanError(subject, f"{where}: mesh dim {dims[0]!r} given twice")
        for d in dims:
            if d in tp_dims:
                raise PlanError(subject, f"{where}: mesh dim {d!r} is used by a parallelize step too "
                                "(FSDP and tensor parallel dims must differ)")
        raf = unit.reshard_after_forward
        if raf is not None and not isinstance(raf, bool):
            if not isinstance(raf, int):
                raise PlanError(subject, f"{where}: reshard_after_forward must be True, False, None or a "
                                f"positive int, got {raf!r}")
            shard_dim = dims[-1]
            size = plan.mesh_shape[names.index(shard_dim)]
            if raf < 1 or size % raf != 0:
                raise PlanError(subject, f"{where}: reshard_after_forward {raf} is not a factor of the shard "
                                f"group size {size} (mesh dim {shard_dim!r})")
        where_mp = f"{where}.mp_policy"
        mp_policy_to_json(unit.mp_policy, subject, where_mp)
        offload_policy_to_json(unit.offload_policy, subject, f"{where}.offload_policy")
        if not isinstance(unit.requires_gradient_sync, bool):
            raise PlanError(subject, f"{where}: requires_gradient_sync must be True or False")
        if not isinstance(unit.requires_all_reduce, bool):
            raise PlanError(subject, f"{where}: requires_all_reduce must be True or False")
        for name in _PREFETCH_FIELDS:
            targets = getattr(unit, name)
            if not isinstance(targets, tuple) or not all(isinstance(t, str) for t in targets):
                raise PlanError(subject, f"{where}: {name} must be a tuple of module FQNs, got {targets!r}")


def fully_shard_modules(plan, model, subject="plan"):
    """``[(unit_index, unit, module_path)]``: every ``fully_shard`` call the plan
    makes on ``model``, in call order.  Raises :class:`PlanError` when a
    pattern matches no module, a module is matched twice, a matched module
    lies inside a module sharded by an earlier call (children must be sharded
    first), a match is a container without ``forward`` (fully_shard rejects
    ``ModuleList``/``ModuleDict``), or a ``forward_prefetch`` /
    ``backward_prefetch`` target is not the exact FQN of a module some unit
    matched (torch's setters take FSDP modules only)."""
    root = type(model).__name__
    taken = {}  # module path -> pattern that sharded it
    calls = []
    for i, unit in enumerate(plan.fully_shard):
        paths = match_modules(model, unit.fqn)
        if not paths:
            raise PlanError(subject, f"fully_shard pattern {unit.fqn!r} matches no module of {root}")
        for path in paths:
            shown = path or root
            if path in taken:
                raise PlanError(subject, f"fully_shard pattern {unit.fqn!r} matches module {shown!r} already "
                                f"sharded by pattern {taken[path]!r}")
            for done, pattern in taken.items():
                if done == "" or path.startswith(done + "."):
                    raise PlanError(subject, f"fully_shard pattern {unit.fqn!r} matches module {shown!r} "
                                    f"inside {done or root!r}, sharded earlier by pattern {pattern!r} "
                                    "(fully_shard children before their parents)")
            mod = model.get_submodule(path) if path else model
            if (isinstance(mod, (torch.nn.ModuleList, torch.nn.ModuleDict))
                    and type(mod).forward is torch.nn.Module.forward):
                raise PlanError(subject, f"fully_shard pattern {unit.fqn!r} matches {shown!r}, a "
                                f"{type(mod).__name__} without forward (fully_shard rejects containers)")
            taken[path] = unit.fqn
            calls.append((i, unit, path))
    modules = dict(model.named_modules())
    for i, unit in enumerate(plan.fully_shard):
        for name in _PREFETCH_FIELDS:
            for target in getattr(unit, name):
                if target not in modules:
                    raise PlanError(subject, f"fully_shard[{i}]: {name} target {target!r} is not a module "
                                    f"of {root}")
                if target not in taken:
                    raise PlanError(subject, f"fully_shard[{i}]: {name} target {target!r} is not sharded "
                                    "by any fully_shard unit (prefetch targets must be FSDP modules)")
    return calls


def match_modules(model, pattern):
    """FQN paths of the submodules ``parallelize_module`` applies ``pattern`` to
    (token-by-token fnmatch against ``named_children()``; ``""`` is the root)."""
    if pattern == "":
        return [""]
    out = []

    def walk(mod, prefix, tokens):
        token, rest = tokens[0], tokens[1:]
        for name, child in mod.named_children():
            if fnmatch.fnmatch(name, token):
                path = f"{prefix}{name}"
                if rest:
                    walk(child, path + ".", rest)
                else:
                    out.append(path)

    walk(model, "", pattern.split("."))
    return out


def checkpoint_save_op(name, subject="plan", where="activation_checkpoint"):
    """The ``torch.ops`` overload a ``save_ops`` entry names (``"aten.mm.default"``)."""
    if not isinstance(name, str) or name.count(".") != 2:
        raise PlanError(subject, f"{where}: save_ops entry {name!r} is not an op overload name "
                        "(namespace.op.overload, e.g. 'aten.mm.default')")
    ns, op, overload = name.split(".")
    try:
        return getattr(getattr(getattr(torch.ops, ns), op), overload)
    except (AttributeError, RuntimeError):
        raise PlanError(subject, f"{where}: save_ops entry {name!r} is not an op torch knows") from None


def checkpointed_modules(plan, model, subject="plan"):
    """``[(unit, module_path)]``: every module an :class:`ActivationCheckpoint`
    entry checkpoints, in plan then match order.  Raises :class:`PlanError`
    when a pattern matches no module, matches the root (a wrapper needs a
    parent to re-register it), or a module is checkpointed twice or inside
    another checkpointed module (nested checkpointing is not modelled)."""
    root = type(model).__name__
    found = []
    for unit in plan.activation_checkpoint:
        paths = match_modules(model, unit.fqn)
        if not paths:
            raise PlanError(subject, f"activation_checkpoint pattern {unit.fqn!r} matches no module of {root}")
        for path in paths:
            if not path:
                raise PlanError(subject, f"activation_checkpoint pattern {unit.fqn!r} matches the root module "
                                f"{root} (checkpoint its children)")
            for _u, other in found:
                if path == other or path.startswith(other + ".") or other.startswith(path + "."):
                    raise PlanError(subject, f"activation_checkpoint pattern {unit.fqn!r}: module {path!r} "
                                    f"overlaps checkpointed module {other!r} (nested checkpointing is not "
                                    "supported)")
            found.append((unit, path))
    return found


def check_against_model(plan, model, subject="plan", args=(), kwargs=None, skip_unmatched_styles=False):
    """Checks that need the (unparallelised) model and its example inputs.

    ``skip_unmatched_styles``: a style pattern that matches no module is a warning, not an error, as
    torch's ``parallelize_module`` warns and skips such a plan entry (measure runs it so; predict
    warns the same; ``commlens check-plan`` and ``--check`` refuse it)."""
    root = type(model).__name__
    for _dim, pp in plan.parallelize_steps():
        for pattern in pp:
            if not match_modules(model, pattern):
                message = f"plan pattern {pattern!r} matches no module of {root}"
                if not skip_unmatched_styles:
                    raise PlanError(subject, message)
                warnings.warn(f"{subject}: {message}: skipped, as torch's parallelize_module skips it", stacklevel=2)
    if not any(u.wrapper for u, _path in checkpointed_modules(plan, model, subject)):
        # (with checkpoint wrappers, fully_shard patterns name the wrapped model: measure checks
        # them once the wrappers are in)
        fully_shard_modules(plan, model, subject)
    params = [n for n, _ in model.named_parameters()]
    tensors = params + [n for n, _ in model.named_buffers()]
    for pattern in plan.placements:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in tensors):
            raise PlanError(subject, f"placements pattern {pattern!r} matches no parameter or buffer of {root}")
    for field_name in ("frozen", "frozen_after_parallelize"):
        for pattern in getattr(plan, field_name):
            if not any(fnmatch.fnmatchcase(n, pattern) for n in params):
                raise PlanError(subject, f"{field_name} pattern {pattern!r} matches no parameter of {root}")
    kwargs = kwargs or {}
    for key in list(plan.input_placements) + list(plan.inputs_requires_grad):
        if isinstance(key, int):
            if key >= len(args):
                raise PlanError(subject, f"input {key} does not exist (the model takes {len(args)} positional inputs)")
        elif key not in kwargs:
            raise PlanError(subject, f"input {key!r} is not a keyword input of the model")
    loss = plan.loss
    if isinstance(loss, Loss) and loss.kind == "cross_entropy" and loss.targets.startswith("input:"):
        k = int(loss.targets.split(":")[1])
        if k >= len(args):
            raise PlanError(subject, f"loss targets {loss.targets!r}: the model takes {len(args)} positional inputs")


# --------------------------------------------------------------------------
# Resolution and CLI
# --------------------------------------------------------------------------


def resolve_plan(plan_or_path_or_spec):
    """Accept a :class:`Plan`, a JSON file path, or a plan factory spec."""
    import os

    from commlens._factory import call_factory

    p = plan_or_path_or_spec
    if isinstance(p, Plan):
        validate(p)
        return p
    if isinstance(p, (str, os.PathLike)):
        s = os.fspath(p)
        if os.path.exists(s) or s.endswith(".json") or ":" not in s:
            return load(s)
        plan = call_factory(s)
        if not isinstance(plan, Plan):
            raise PlanError(s, f"plan factory returned {type(plan).__name__}, not commlens.plan.Plan")
        validate(plan, s)
        return plan
    raise PlanError(repr(p), "expected a Plan, a plan JSON path or a MODULE:PLAN_FACTORY spec")


def factorizations(n, k):
    """Every ordered k-tuple of positive integers whose product is n ((1, 8), (2, 4), ... for
    n = 8, k = 2), in lexicographic order."""
    if k == 1:
        return [(n,)]
    return [(d,) + rest for d in range(1, n + 1) if n % d == 0 for rest in factorizations(n // d, k - 1)]


def sweep(spec, world_size, directory):
    """Writes one plan per way of filling the spec's ``{name}`` placeholders with integers whose
    product is ``world_size`` (``llama_fsdp_tp(dp={dp}, tp={tp})`` at 8: dp x tp = 1x8, 2x4, 4x2,
    8x1) into ``directory`` as ``<factory>-<name><value>-....json``; returns the paths written."""
    import os
    import re
    import string

    from commlens._factory import call_factory

    names = [f for _, f, _, _ in string.Formatter().parse(spec) if f]
    if not names or len(set(names)) != len(names):
        raise PlanError(spec, "a sweep spec needs distinct {name} placeholders, e.g. "
                        "'examples.plans:llama_fsdp_tp(dp={dp}, tp={tp})'")
    if world_size < 1:
        raise PlanError(spec, f"--world-size must be positive, got {world_size}")
    os.makedirs(directory, exist_ok=True)
    base = re.sub(r"\W+", "_", spec.split(":", 1)[-1].split("(", 1)[0])
    paths = []
    for values in factorizations(world_size, len(names)):
        filled = spec.format(**dict(zip(names, values)))
        plan = call_factory(filled)
        if not isinstance(plan, Plan):
            raise PlanError(filled, f"plan factory returned {type(plan).__name__}, not commlens.plan.Plan")
        path = os.path.join(directory, base + "".join(f"-{n}{v}" for n, v in zip(names, values)) + ".json")
        try:
            with open(path, "w") as f:
                f.write(dumps(plan, source=filled))
        except OSError as err:
            raise PlanError(path, f"cannot write plan: {err.strerror or err}") from None
        paths.append(path)
    return paths


@cli_main
def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m commlens.plan",
        description="Serialise a plan factory (returning commlens.plan.Plan) to commlens-plan JSON.",
    )
    parser.add_argument("factory", nargs="?", help="MODULE:PLAN_FACTORY or MODULE:PLAN_FACTORY(key=literal, ...)")
    parser.add_argument("-o", "--output", help="output JSON path (default: stdout); with --sweep, a directory")
    parser.add_argument("--sweep", metavar="SPEC", help="plan factory spec with {name} placeholders filled by every "
                        "factorisation of --world-size (one plan file each, into the -o directory)")
    parser.add_argument("--world-size", type=int, help="the product of a --sweep's placeholders")
    parser.add_argument("--check", metavar="PLAN_JSON", help="load and validate a plan JSON file instead")
    parser.add_argument("--model", metavar="MODULE:FACTORY",
                        help="also check the plan's patterns against this model")
    ns = parser.parse_args(argv)
    from commlens._factory import call_factory, call_model_factory

    if ns.sweep:
        if ns.factory or ns.check or ns.model:
            parser.error("--sweep takes no factory, --check or --model")
        if ns.world_size is None or not ns.output:
            parser.error("--sweep needs --world-size and -o DIRECTORY")
        paths = sweep(ns.sweep, ns.world_size, ns.output)
        print(f"commlens: wrote {len(paths)} plans to {ns.output}: "
              + ", ".join(os.path.basename(p) for p in paths))
        return 0
    if ns.check:
        plan, subject = load(ns.check), ns.check
    else:
        if not ns.factory:
            parser.error("a plan factory spec (or --check PLAN_JSON) is required")
        plan, subject = call_factory(ns.factory), ns.factory
        if not isinstance(plan, Plan):
            raise PlanError(ns.factory, f"plan factory returned {type(plan).__name__}, not commlens.plan.Plan")
    if ns.model:
        model, args, kwargs = call_model_factory(ns.model)
        check_against_model(plan, model, subject, args, kwargs)
    if ns.check:
        print(f"commlens: {ns.check}: ok")
        return 0
    text = dumps(plan, source=ns.factory)
    if ns.output:
        try:
            with open(ns.output, "w") as f:
                f.write(text)
        except OSError as err:
            raise PlanError(ns.output, f"cannot write plan: {err.strerror or err}") from None
        n = sum(len(d) for _, d in plan.parallelize_steps())
        units = len(plan.fully_shard)
        fsdp = f", {units} fully_shard unit{'' if units == 1 else 's'}" if units else ""
        print(f"commlens: wrote {ns.output} ({n} plan entries{fsdp}, mesh {tuple(plan.mesh_shape)}"
              f"{'' if plan.mesh_dim_names is None else ' ' + str(tuple(plan.mesh_dim_names))}, "
              f"{plan.device_type})")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    # run the imported module's main so classes (e.g. Plan) have one identity
    from commlens.plan import main as _main

    sys.exit(_main())
