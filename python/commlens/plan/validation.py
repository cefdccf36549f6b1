"""Plan checks: :func:`validate` (model-independent) and the checks against a model
(:func:`check_against_model`, the modules ``fully_shard`` and activation checkpointing take)."""

import fnmatch
import math
import re
import warnings

import torch
from torch.distributed.tensor import Placement
from torch.distributed.tensor.parallel.style import ParallelStyle

from commlens.plan.codec import (
    _PREFETCH_FIELDS,
    mp_policy_to_json,
    offload_policy_to_json,
    placement_to_str,
)
from commlens.plan.model import ActivationCheckpoint, FullyShard, Loss, PlanError
from commlens.plan.styles import EXPERT_PARALLEL, entry_of

_LOSS_KINDS = ("sum", "cross_entropy")
_REDUCTIONS = ("mean", "sum")


def _mesh_dim_names_of(plan):
    return tuple(plan.mesh_dim_names) if plan.mesh_dim_names is not None else None


def dim_group(plan, name):
    """The mesh dim names ``name`` stands for: itself, or a flattened dim's dims."""
    return tuple(plan.flattened_dims.get(name, (name,)))


def step_dims(dim):
    """The dim names of a parallelize step's ``mesh_dim``: ``(name,)``, a 2-D sub-mesh's two, or
    ``()`` for None (the whole 1-D mesh)."""
    return () if dim is None else dim if isinstance(dim, tuple) else (dim,)


def group_size(plan, name):
    """The ranks of the mesh dim (or flattened dim) ``name``."""
    names = list(plan.mesh_dim_names)
    return math.prod(plan.mesh_shape[names.index(d)] for d in dim_group(plan, name))


def _validate_flattened_dims(plan, subject):
    flattened = plan.flattened_dims
    if not isinstance(flattened, dict):
        raise PlanError(subject, f"flattened_dims must be a dict {{name: (mesh dim names)}}, got {flattened!r}")
    names = _mesh_dim_names_of(plan) or ()
    for name, dims in flattened.items():
        if not isinstance(name, str) or name in names:
            raise PlanError(subject, f"flattened dim {name!r} is not a string or has the name of a mesh dim")
        if not isinstance(dims, tuple) or len(dims) < 2 or not all(isinstance(d, str) for d in dims):
            raise PlanError(subject, f"flattened dim {name!r}: {dims!r} is not a tuple of two or more mesh dim names")
        for d in dims:
            if d not in names:
                raise PlanError(subject, f"flattened dim {name!r}: mesh dim {d!r} is not in the mesh "
                                f"(dim names: {list(names)})")
        order = [names.index(d) for d in dims]
        if order != sorted(set(order)):
            raise PlanError(subject, f"flattened dim {name!r}: mesh dims {list(dims)} are not in the mesh's order "
                            "(DeviceMesh slices them in order, each once)")


def _check_mesh_dim(plan, dim, subject, what, flattened=False):
    """``dim`` names a mesh dim (or, with ``flattened``, a flattened one too)."""
    names = _mesh_dim_names_of(plan)
    if dim is None:
        if len(plan.mesh_shape) != 1:
            raise PlanError(subject, f"{what} needs a mesh dim name: the mesh is "
                            f"{len(plan.mesh_shape)}-D {tuple(plan.mesh_shape)}")
        return
    if dim in plan.flattened_dims:
        if flattened:
            return
        raise PlanError(subject, f"{dim!r} ({what}) is a flattened dim (flattened_dims), which only fully_shard's "
                        "mesh_dims and parallelize steps may name (DTensor placements on a flattened dim are not "
                        "modelled)")
    if names is None or dim not in names:
        raise PlanError(subject, f"mesh dim {dim!r} ({what}) is not in the mesh "
                        f"(dim names: {list(names) if names else 'none'})")


# The torch classes torch's styles test with isinstance, as torch.export names them.
MODULE_BASES = ("torch.nn.modules.linear.Linear", "torch.nn.modules.sparse.Embedding")


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
    _validate_flattened_dims(plan, subject)
    for dim, d in plan.parallelize_steps():
        if isinstance(dim, tuple):  # a 2-D sub-mesh
            spanned = [d for name in dim for d in dim_group(plan, name)]
            if len(dim) != 2 or len(set(spanned)) != len(spanned):
                raise PlanError(subject, f"parallelize_plan mesh dims {dim!r}: a sub-mesh is two distinct dims")
            for name in dim:
                _check_mesh_dim(plan, name, subject, "parallelize_plan", flattened=True)
            order = [_mesh_dim_names_of(plan).index(d) for d in spanned]
            if order != sorted(order):  # DeviceMesh.__getitem__ raises KeyError
                raise PlanError(subject, f"parallelize_plan mesh dims {dim!r}: not in the mesh's order (torch raises "
                                "\"Mesh dim indices should be in ascending order\")")
        else:
            _check_mesh_dim(plan, dim, subject, "parallelize_plan", flattened=True)
        if not isinstance(d, dict):
            raise PlanError(subject, "each parallelize_plan must be a dict {fqn_pattern: ParallelStyle}")
        for pattern, style in d.items():
            if not isinstance(pattern, str):
                raise PlanError(subject, f"plan key {pattern!r} is not a string")
            if entry_of(type(style)) is None and not isinstance(style, ParallelStyle):
                raise PlanError(subject, f"plan entry {pattern!r} is {type(style).__name__}, not a ParallelStyle")
            if entry_of(type(style)) is None:
                raise PlanError(subject, f"unsupported parallel style class {type(style).__module__}."
                                f"{type(style).__qualname__} for {pattern!r}")
            for field, kind in entry_of(type(style)).fields:
                if kind == "dim?" and getattr(style, field, None) is not None:
                    _check_mesh_dim(plan, getattr(style, field), subject, f"{pattern!r}'s {field}")
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
        for op in unit.recompute_every_second:
            if op not in unit.save_ops:
                raise PlanError(subject, f"{where}: recompute_every_second entry {op!r} is not in save_ops "
                                "(it recomputes every other call of an op the policy saves)")
            if op.startswith(("_c10d_functional.", "c10d_functional.")):
                raise PlanError(subject, f"{where}: recompute_every_second entry {op!r} is a collective "
                                "(modelled for compute ops)")
        if unit.recompute_mm_rhs_shapes and "aten.mm.default" not in unit.recompute_every_second:
            raise PlanError(subject, f"{where}: recompute_mm_rhs_shapes needs 'aten.mm.default' in "
                            "recompute_every_second (torchtitan's per-op policy)")
        for shape in unit.recompute_mm_rhs_shapes:
            if (not isinstance(shape, tuple) or len(shape) != 2
                    or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)):
                raise PlanError(subject, f"{where}: recompute_mm_rhs_shapes entry {shape!r} is not a (rows, "
                                "columns) pair of positive ints")
    if not isinstance(plan.module_subclasses, dict):
        raise PlanError(subject, "module_subclasses must be a dict {class name: base class name}")
    for cls, base in plan.module_subclasses.items():
        if not isinstance(cls, str) or base not in MODULE_BASES:
            raise PlanError(subject, f"module_subclasses[{cls!r}]: {base!r} is not a base class commlens' styles "
                            f"test (expected {' or '.join(map(repr, MODULE_BASES))})")
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
        if loss.logits_dtype not in (None, "float32", "bfloat16", "float16"):
            raise PlanError(subject, f"bad loss logits_dtype {loss.logits_dtype!r} (expected float32, bfloat16, "
                            "float16 or None)")
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
    for dim, styles in plan.parallelize_steps():
        if styles and all(entry_of(type(s)) in EXPERT_PARALLEL for s in styles.values()):
            continue  # torchtitan shards the experts on a mesh of their own; the dense units may use it
        if dim is not None:
            tp_dims.update(d for name in step_dims(dim) for d in dim_group(plan, name))
        elif names is not None:
            tp_dims.update(names)
    for i, unit in enumerate(units):
        where = f"fully_shard[{i}]"
        if not isinstance(unit, FullyShard):
            raise PlanError(subject, f"{where} is {type(unit).__name__}, not commlens.plan.FullyShard")
        if not (isinstance(unit.fqn, str) or (isinstance(unit.fqn, tuple) and unit.fqn
                                              and all(isinstance(f, str) for f in unit.fqn))):
            raise PlanError(subject, f"{where}: fqn {unit.fqn!r} is not a string or a non-empty tuple of strings")
        factor = unit.gradient_divide_factor
        if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0):
            raise PlanError(subject, f"{where}: gradient_divide_factor must be a positive number or None, "
                            f"got {factor!r}")
        if not isinstance(unit.shard_dims, dict) or not all(
                isinstance(k, str) and isinstance(d, int) and not isinstance(d, bool) and d > 0
                for k, d in unit.shard_dims.items()):
            raise PlanError(subject, f"{where}: shard_dims must map parameter FQNs to positive dims (0 is FSDP's "
                            f"default), got {unit.shard_dims!r}")
        if unit.shard_dims and isinstance(unit.fqn, tuple):
            raise PlanError(subject, f"{where}: shard_dims of a list unit is not modelled")
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
            _check_mesh_dim(plan, d, subject, where, flattened=True)
        spanned = [d for name in dims for d in dim_group(plan, name)]
        if len(set(spanned)) != len(spanned):
            raise PlanError(subject, f"{where}: mesh dim {dims[0]!r} given twice")
        for d in spanned:
            if d in tp_dims:
                raise PlanError(subject, f"{where}: mesh dim {d!r} is used by a parallelize step too "
                                "(FSDP and tensor parallel dims must differ)")
        raf = unit.reshard_after_forward
        if raf is not None and not isinstance(raf, bool):
            if not isinstance(raf, int):
                raise PlanError(subject, f"{where}: reshard_after_forward must be True, False, None or a "
                                f"positive int, got {raf!r}")
            shard_dim = dims[-1]
            size = group_size(plan, shard_dim)
            if raf < 1 or size % raf != 0:
                raise PlanError(subject, f"{where}: reshard_after_forward {raf} is not a factor of the shard "
                                f"group size {size} (mesh dim {shard_dim!r})")
        where_mp = f"{where}.mp_policy"
        mp_policy_to_json(unit.mp_policy, subject, where_mp)
        offload_policy_to_json(unit.offload_policy, subject, f"{where}.offload_policy")
        if not isinstance(unit.requires_gradient_sync, bool):
            raise PlanError(subject, f"{where}: requires_gradient_sync must be True or False")
        if not isinstance(unit.force_sum_reduction_for_comms, bool):
            raise PlanError(subject, f"{where}: force_sum_reduction_for_comms must be True or False")
        if not isinstance(unit.requires_all_reduce, bool):
            raise PlanError(subject, f"{where}: requires_all_reduce must be True or False")
        for name in _PREFETCH_FIELDS:
            targets = getattr(unit, name)
            if not isinstance(targets, tuple) or not all(isinstance(t, str) for t in targets):
                raise PlanError(subject, f"{where}: {name} must be a tuple of module FQNs, got {targets!r}")


def fully_shard_modules(plan, model, subject="plan"):
    """``[(unit_index, unit, module_paths)]``: every ``fully_shard`` call the plan
    makes on ``model``, in call order, with the paths of the modules it takes
    (one for a pattern's calls, all a list unit's patterns match, in model
    order, for a list unit).  Raises :class:`PlanError` when a
    pattern matches no module, a module is matched twice, a matched module
    lies inside a module sharded by an earlier call (children must be sharded
    first), a match is a container without ``forward`` (fully_shard rejects
    ``ModuleList``/``ModuleDict``), or a ``forward_prefetch`` /
    ``backward_prefetch`` target is not the exact FQN of a module some unit
    matched (torch's setters take FSDP modules only)."""
    root = type(model).__name__
    taken = {}  # module path -> pattern that sharded it
    calls = []
    order = {path: n for n, (path, _m) in enumerate(model.named_modules())}
    for i, unit in enumerate(plan.fully_shard):
        listed = []
        for pattern in unit.fqn if isinstance(unit.fqn, tuple) else (unit.fqn,):
            paths = match_modules(model, pattern)
            if not paths:
                raise PlanError(subject, f"fully_shard pattern {pattern!r} matches no module of {root}")
            listed += paths
        for path in listed:
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
            if not isinstance(unit.fqn, tuple):
                calls.append((i, unit, (path,)))
        if isinstance(unit.fqn, tuple):
            calls.append((i, unit, tuple(sorted(listed, key=order.get))))
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
