"""The plan document: a :class:`Plan` to and from versioned JSON (``docs/plan-format.md``,
``plan.schema.json``), as text and files."""

import dataclasses
import json
import re

from torch.distributed.tensor import Placement

from commlens.plan.codec import (
    _tuple_from_json,
    fully_shard_from_json,
    fully_shard_to_json,
    placement_to_str,
    style_from_json,
    style_to_json,
)
from commlens.plan.model import FORMAT, VERSION, ActivationCheckpoint, Loss, Plan, PlanError
from commlens.plan.validation import validate

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
        steps.append({"mesh_dim": list(dim) if isinstance(dim, tuple) else dim, "plan": entries})
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
                     "reduction": loss.reduction, "ignore_index": loss.ignore_index,
                     # absent when None: plans without it keep their bytes
                     **({"logits_dtype": loss.logits_dtype} if loss.logits_dtype is not None else {})}
    out = {
        "format": FORMAT,
        "version": VERSION,
        "name": plan.name,
        "source": source,
        "mesh": {
            "shape": list(plan.mesh_shape),
            "dim_names": None if plan.mesh_dim_names is None else list(plan.mesh_dim_names),
            "device_type": plan.device_type,
            # absent when there are none: plans without them keep their bytes
            **({"flattened_dims": {name: list(dims) for name, dims in plan.flattened_dims.items()}}
               if plan.flattened_dims else {}),
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
                                         # absent when default: plans without them keep their bytes
                                         **({} if u.early_stop else {"early_stop": False}),
                                         **({"recompute_every_second": list(u.recompute_every_second)}
                                            if u.recompute_every_second else {}),
                                         **({"recompute_mm_rhs_shapes": [list(s) for s in u.recompute_mm_rhs_shapes]}
                                            if u.recompute_mm_rhs_shapes else {})}
                                        for u in plan.activation_checkpoint]
    if plan.module_subclasses:  # absent when empty, as above
        out["module_subclasses"] = dict(sorted(plan.module_subclasses.items()))
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


def _flattened_dims_from_json(value, subject):
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
            isinstance(dims, list) and all(isinstance(d, str) for d in dims) for dims in value.values()):
        raise PlanError(subject, f"bad mesh.flattened_dims {json.dumps(value)}: expected {{name: [mesh dim names]}}")
    return {name: tuple(dims) for name, dims in value.items()}


_TOP_FIELDS = ("format", "version", "name", "source", "mesh", "parallelize", "fully_shard", "src_data_rank",
               "placements", "inputs", "frozen", "frozen_after_parallelize", "loss", "loss_parallel",
               "activation_checkpoint", "module_subclasses")


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
    # The fields plan.schema.json requires, as the C++ reader requires them.
    for field, present in (("mesh.shape", isinstance(mesh, dict) and "shape" in mesh),
                           ("mesh.device_type", isinstance(mesh, dict) and "device_type" in mesh),
                           ("parallelize", "parallelize" in obj)):
        if not present:
            raise PlanError(subject, f"missing {field}")
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
        dim = step.get("mesh_dim")
        steps.append((tuple(dim) if isinstance(dim, list) else dim, pp))  # a list: a 2-D sub-mesh
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
        unknown = sorted(set(u) - {"fqn", "wrapper", "save_ops", "early_stop", "recompute_every_second",
                                   "recompute_mm_rhs_shapes"})
        if unknown:
            raise PlanError(subject, f"unknown field {unknown[0]!r} at {where}")
        save_ops, every_second = u.get("save_ops", []), u.get("recompute_every_second", [])
        for name, value in (("save_ops", save_ops), ("recompute_every_second", every_second)):
            if not isinstance(value, list):
                raise PlanError(subject, f"bad {name} at {where}: expected a list of op names")
        shapes = u.get("recompute_mm_rhs_shapes", [])
        if not isinstance(shapes, list) or not all(isinstance(s, list) for s in shapes):
            raise PlanError(subject, f"bad recompute_mm_rhs_shapes at {where}: expected a list of [rows, columns]")
        checkpoints.append(ActivationCheckpoint(fqn=u["fqn"], wrapper=u.get("wrapper", True),
                                                save_ops=tuple(save_ops), early_stop=u.get("early_stop", True),
                                                recompute_every_second=tuple(every_second),
                                                recompute_mm_rhs_shapes=shapes))
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
        flattened_dims=_flattened_dims_from_json(mesh.get("flattened_dims"), subject),
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
        module_subclasses=dict(obj.get("module_subclasses") or {}),
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
