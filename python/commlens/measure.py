"""Measure the collectives DTensor issues, per module, with ``CommDebugMode``.

CLI::

    python -m commlens.measure MODULE:FACTORY --plan PLAN [--backend fake|gloo|nccl]
        [--phase forward|backward|both|inference] [--world-size N] [--noise-level K]
        [--device meta|cuda] -o measured.json [--counts counts.json]

``PLAN`` is a commlens-plan JSON file or a plan factory spec
(``examples.plans:mlp_tp(tp=4)``).  ``-o`` receives CommDebugMode's own
``generate_json_dump(file_name=..., noise_level=K)`` output (default K=3);
``--counts`` (default ``<stem of -o>.counts.json``) receives the flat
commlens-counts file described in ``docs/plan-format.md``.

What one measurement does (every rank, identically):

1. build a **fresh** model with the factory (never reuse a model that ran
   under CommDebugMode), check the plan's patterns against it (a style
   pattern that matches no module is skipped with a warning, as
   ``parallelize_module`` skips it);
2. ``init_device_mesh(device_type, mesh_shape, mesh_dim_names=...)``;
3. set ``requires_grad=False`` on ``frozen`` parameters (``frozen_after_parallelize``:
   after step 4's ``parallelize_module`` calls, before ``fully_shard``);
4. ``parallelize_module(model, mesh[dim] or mesh, styles, src_data_rank=...)``
   for every parallelize step, in order (a transformers layer, plan style
   ``Transformers*``, applied as transformers applies it: ``shard_param`` on each
   of the module's parameters, then ``install_forward``); where a style's pre-hook makes a
   model input a DTensor with a ``Shard`` layout (``DTensor.from_local``), the
   style gets this rank's chunk of it: the example inputs are the global
   tensors (docs/plan-format.md, "Inputs and local shards");
5. the ``fully_shard`` units, in order, and for each unit every module its
   pattern matches, in match order: ``fully_shard(module, mesh=sub,
   mp_policy=..., offload_policy=...)`` where ``sub`` is ``mesh[name]`` (FSDP)
   or ``mesh[(replicate, shard)]`` (HSDP), with ``reshard_after_forward=``
   only when the unit gives one (None keeps fully_shard's default: True,
   False for the root);
   then ``module.set_requires_gradient_sync(False, recurse=False)`` when the
   unit says ``requires_gradient_sync=False`` and
   ``module.set_requires_all_reduce(False, recurse=False)`` when it says
   ``requires_all_reduce=False``; after **all** units,
   ``module.set_modules_to_forward_prefetch([...])`` /
   ``set_modules_to_backward_prefetch([...])`` on every matched module of a
   unit with a non-empty ``forward_prefetch`` / ``backward_prefetch``;
6. replace parameters/buffers named in ``placements`` by
   ``distribute_tensor(t, mesh_or_submesh, placements)``; same for user inputs
   in ``inputs`` (then ``requires_grad_`` where asked);
7. in **one fresh** ``CommDebugMode`` (inside ``loss_parallel()`` when the plan
   says so): ``out = model(*args, **kwargs)``; for phase ``backward``/``both``
   also ``loss = <plan loss>(out)`` and ``loss.backward()``; for phase
   ``inference``, ``model.eval()`` first and the forward under ``torch.no_grad()``
   (no loss, no backward), as the first ``generate()`` step runs it.

CommDebugMode names the root ``FSDP<Class>`` when the root is a
``fully_shard`` unit (fully_shard swaps the module's class); the counts keep
its names as they are.  FSDP2's own collectives are c10d ops
(``c10d._allgather_base_``, ``c10d._reduce_scatter_base_``,
``c10d.allreduce_`` for HSDP); see ``docs/plan-format.md`` for where
CommDebugMode charges them.  Plans with ``fully_shard`` units need a real
(non-meta) model, because FSDP2 refuses meta-device parameters in its first
forward, and a ``cuda`` plan needs a GPU, because FSDP2 moves the parameters
to the current CUDA device.

Phase ``forward`` never runs backward (backward sections are empty), nor does
phase ``inference`` (its counts file says ``"phase": "inference"``); phase
``backward`` runs everything but empties the forward sections of the counts
file (the JSON dump stays CommDebugMode's unfiltered output).

Backends:

* ``fake`` (default): one process, ``dist.init_process_group("fake",
  store=FakeStore(), rank=0, world_size=N)``; any world size, no GPU.
  Collectives are not executed but are counted exactly like real ones.
  Meta-device models work (DTensor + CommDebugMode only need shapes), so a
  70B-shaped Llama needs no real memory: use the factory's ``device="meta"``
  or ``--device meta``.  A plan with ``device_type="cuda"`` builds a CUDA
  DeviceMesh on the fake process group even without a GPU; the model and
  inputs are then moved to ``meta`` (CPU tensors cannot live on a CUDA mesh),
  which reproduces the CUDA-only behaviour (``_dtensor.shard_dim_alltoall``
  for Shard->Shard instead of the CPU all-gather fallback).
* ``gloo``: real collectives between N local CPU processes (spawned with
  ``torch.multiprocessing``, rendezvous through a FileStore in a temp dir), or
  the processes of an enclosing ``torchrun`` when ``RANK``/``WORLD_SIZE`` are
  set.  Every rank measures; rank 0 writes the files after checking that all
  ranks counted the same.  Needs a real (non-meta) model and
  ``device_type="cpu"``.  ``fully_shard`` units work on gloo (torch 2.13,
  checked with FSDP, HSDP, bf16 mixed precision, an int
  ``reshard_after_forward`` and FSDP+TP on 2 and 4 ranks, explicit
  prefetching and HSDP with ``requires_all_reduce=False`` on 4 ranks: the
  same counts as ``fake``).
* ``nccl``: run under torchrun, one process per GPU; ``LOCAL_RANK`` selects
  the GPU, the model and inputs are moved there.  Single node, 8 GPUs::

      torchrun --standalone --nproc-per-node 8 -m commlens.measure \\
          'examples.llama:llama' --plan llama_tp8.json --backend nccl -o measured.json

  Multi-node (run on every node, same ``--rdzv-endpoint``)::

      torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\
          --rdzv-endpoint HOST0:29500 --rdzv-id commlens -m commlens.measure \\
          'examples.llama:llama' --plan llama_2x8.json --backend nccl -o measured.json

  The plan's mesh shape product must equal ``WORLD_SIZE``.

Python API: :func:`measure` (in-process for ``fake``; it calls
``dist.destroy_process_group()`` afterwards so several measurements can run in
one process).
"""

import argparse
import contextlib
import json
import functools
import math
import os
import sys
import tempfile
import warnings

from commlens._errors import CommlensError, cli_main, exit_without_teardown
from commlens.plan import Loss, PlanError, check_against_model, resolve_plan, to_json
from commlens.plan.validation import group_size, step_dims

BACKENDS = ("fake", "gloo", "nccl")
PHASES = ("forward", "backward", "both", "inference")
COUNTS_FORMAT = "commlens-counts"
COUNTS_VERSION = 1


# --------------------------------------------------------------------------
# one measurement inside an initialised process group
# --------------------------------------------------------------------------


def _model_from(model_spec):
    from commlens._factory import call_model_factory

    return call_model_factory(model_spec)


def _spec_name(model_spec):
    if isinstance(model_spec, str):
        return model_spec
    return getattr(model_spec, "__module__", "?") + ":" + getattr(model_spec, "__qualname__", repr(model_spec))


def _submesh(mesh, dims):
    if dims is None:
        return mesh
    dims = tuple(dims)
    if tuple(mesh.mesh_dim_names or ()) == dims:
        return mesh
    return mesh[dims[0]] if len(dims) == 1 else mesh[dims]


def _placement_target(mesh, spec):
    """(mesh_or_submesh, placements) for a Plan placement spec."""
    if isinstance(spec, dict):
        return _submesh(mesh, tuple(spec)), tuple(spec.values())
    return mesh, tuple(spec)


def _to_device(obj, device):
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, obj)


def _make_targets(loss, logits, args):
    import torch

    if loss.targets.startswith("input:"):
        t = args[int(loss.targets.split(":")[1])]
        if isinstance(t, torch.distributed.tensor.DTensor):
            t = t.full_tensor()
        return t
    shape = tuple(logits.shape[:-1])
    classes = logits.shape[-1]
    device = logits.device
    if device.type == "meta":
        return torch.empty(shape, dtype=torch.long, device="meta")
    gen = torch.Generator().manual_seed(loss.seed)
    return torch.randint(0, classes, shape, generator=gen).to(device)


def _compute_loss(loss, loss_parallel, out, args):
    import torch
    import torch.nn.functional as F
    from torch.distributed.tensor import DTensor, Replicate
    from torch.utils._pytree import tree_leaves

    if callable(loss):  # the user's own loss function (e.g. torchtitan's), called as loss(out, args)
        return loss(out, args)
    loss = loss if isinstance(loss, Loss) else Loss(kind=loss)
    leaves = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    if not leaves:
        raise CommlensError("plan", "the model output contains no tensor to compute a loss from")
    if loss.kind == "sum":
        total = None
        for t in leaves:
            s = t.sum()
            total = s if total is None else total + s
        return total
    logits = leaves[0]
    targets = _make_targets(loss, logits, args)
    if isinstance(logits, DTensor) and not loss_parallel and not isinstance(targets, DTensor):
        targets = DTensor.from_local(targets, logits.device_mesh,
                                     [Replicate()] * logits.device_mesh.ndim, run_check=False)
    flat = logits.flatten(0, -2)
    if loss.logits_dtype is not None:
        flat = flat.to(getattr(torch, loss.logits_dtype))
    return F.cross_entropy(flat, targets.flatten(),
                           reduction=loss.reduction, ignore_index=loss.ignore_index)


def counts_from_comm_mode(comm_mode, phase):
    """Flat per-module counts, modules in CommDebugMode order.

    Order: ``Global``, then every module in the order its first forward
    pre-hook ran (``advanced_module_tracker.module_helper_dict``), then any
    other key of ``comm_module_counts``.  Every module that ran forward is
    listed, with empty dicts when it issued nothing.  Counts include
    descendants (CommDebugMode's own aggregation); op names are
    ``str(OpOverloadPacket)`` (e.g. ``c10d_functional.all_reduce``), keys sorted.
    """
    tracker = comm_mode.advanced_module_tracker
    order = list(tracker.module_helper_dict)
    for fqn in comm_mode.comm_module_counts:
        if fqn not in order:
            order.append(fqn)
    modules = []
    for fqn in order:
        entry = comm_mode.comm_module_counts.get(fqn, {})
        fw = {str(op): n for op, n in entry.get("forward", {}).items() if n}
        bw = {str(op): n for op, n in entry.get("backward", {}).items() if n}
        if phase in ("forward", "inference"):
            bw = {}
        elif phase == "backward":
            fw = {}
        entry = {"fqn": fqn, "forward": dict(sorted(fw.items())), "backward": dict(sorted(bw.items()))}
        sent = getattr(comm_mode, "comm_module_bytes", None)
        if sent is not None:
            for p, cells in (("forward", fw), ("backward", bw)):
                entry[p + "_bytes"] = {op: sent.get(fqn, {}).get(p, {}).get(op, 0) for op in sorted(cells)}
        modules.append(entry)
    return modules


def _unwrapped_path(path):
    """A module path without checkpoint wrappers' ``_checkpoint_wrapped_module`` (how plans name it)."""
    return ".".join(p for p in path.split(".") if p != "_checkpoint_wrapped_module")


def _state_owners(model):
    """``(parameters, buffers, owners)``: the model's parameters and buffers by FQN as plans name
    them (without checkpoint wrappers' attribute, as ``CheckpointWrapper.named_parameters`` does),
    and each one's owning module and attribute name."""
    params, bufs, owners = {}, {}, {}
    for path, module in model.named_modules():
        for table, out in ((module._parameters, params), (module._buffers, bufs)):
            for leaf, t in table.items():
                if t is None:
                    continue
                fqn = _unwrapped_path(f"{path}.{leaf}" if path else leaf)
                if fqn not in owners:  # shared modules: the first path, as named_parameters()
                    out[fqn] = t
                    owners[fqn] = (module, leaf)
    return params, bufs, owners


def _apply_activation_checkpoint(plan, model, plan_subject):
    """torchtitan's full AC: each module a ``wrapper=True`` entry matches is
    replaced in its parent by a non-reentrant ``checkpoint_wrapper``."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    from commlens.plan import checkpoint_save_op, checkpointed_modules

    for unit, path in checkpointed_modules(plan, model, plan_subject):
        if not unit.wrapper:
            continue  # the model's forward checkpoints it itself
        parent_path, _, leaf = path.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        kwargs = {"early_stop": unit.early_stop}
        if unit.save_ops:
            ops = [checkpoint_save_op(op, plan_subject) for op in unit.save_ops]
            every_second = {checkpoint_save_op(op, plan_subject) for op in unit.recompute_every_second}
            kwargs["context_fn"] = (_every_second_recomputed(ops, every_second, unit.recompute_mm_rhs_shapes)
                                    if every_second else
                                    functools.partial(create_selective_checkpoint_contexts, ops))
        wrapped = checkpoint_wrapper(parent.get_submodule(leaf), checkpoint_impl=CheckpointImpl.NO_REENTRANT,
                                     preserve_rng_state=False, **kwargs)
        parent.register_module(leaf, wrapped)


def _every_second_recomputed(save_ops, every_second, mm_rhs_shapes=()):
    """A ``context_fn`` whose policy saves the outputs of ``save_ops`` except the 2nd, 4th, ...
    call of an op in ``every_second`` in each run of the module (counted apart in the forward and
    in the recomputation, which must agree), and recomputes, uncounted, an ``aten.mm`` whose second
    operand's shape is in ``mm_rhs_shapes``, as :class:`commlens.plan.ActivationCheckpoint` says."""
    import torch
    import collections

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def context_fn():
        calls = collections.Counter()

        def policy(ctx, func, *args, **kwargs):
            if func is torch.ops.aten.mm.default and tuple(args[1].shape) in mm_rhs_shapes:
                return CheckpointPolicy.PREFER_RECOMPUTE
            if func in every_second:
                key = ("recompute" if ctx.is_recompute else "forward", func)
                calls[key] += 1
                if calls[key] % 2 == 0:
                    return CheckpointPolicy.PREFER_RECOMPUTE
            return CheckpointPolicy.MUST_SAVE if func in save_ops else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return context_fn


def _apply_fully_shard(plan, model, mesh, plan_subject):
    """The plan's FSDP2 units, in order: one ``fully_shard`` call per matched
    module, or on the list of modules a list unit matches (sub-mesh
    ``mesh[name]`` or ``mesh[(replicate, shard)]``).  Returns the paths of the
    sharded modules."""
    from torch.distributed.fsdp import fully_shard

    from commlens.plan import fully_shard_modules

    from torch.distributed.tensor import DTensor

    def get(path):
        return model.get_submodule(path) if path else model

    calls = fully_shard_modules(plan, model, plan_subject)
    managed = set()  # ids of parameters an earlier call took
    for _i, unit, paths in calls:
        modules = [get(path) for path in paths]
        own = [p for module in modules for p in module.parameters() if id(p) not in managed]
        raf = unit.reshard_after_forward
        shard_size = group_size(plan, unit.mesh_dims[-1])
        if (not isinstance(raf, bool) and isinstance(raf, int) and 1 < raf < shard_size
                and any(isinstance(p, DTensor) for p in own)):
            # FSDPParam.to_sharded_post_forward raises NotImplementedError in
            # the forward (torch 2.13 _fsdp_param.py)
            shown = ", ".join(f"{type(model).__name__}.{path}" if path else type(model).__name__ for path in paths)
            raise PlanError(plan_subject, f"fully_shard {unit.fqn!r} on {shown}: reshard_after_forward={raf} "
                            "with tensor-parallel (DTensor) parameters is not supported by torch 2.13 "
                            "(\"Resharding to smaller mesh is not supported for DTensor parameters yet\")")
        kwargs = {"mesh": _submesh(mesh, unit.mesh_dims), "mp_policy": unit.mp_policy,
                  "offload_policy": unit.offload_policy}
        if unit.reshard_after_forward is not None:
            # None is fully_shard's own default (True, False for the root)
            kwargs["reshard_after_forward"] = unit.reshard_after_forward
        if unit.shard_dims:
            from torch.distributed.tensor import Shard

            dims = {id(p): unit.shard_dims[name] for name, p in modules[0].named_parameters()
                    if name in unit.shard_dims}
            kwargs["shard_placement_fn"] = lambda param, dims=dims: Shard(dims[id(param)]) if id(param) in dims else None
        fully_shard(modules if isinstance(unit.fqn, tuple) else modules[0], **kwargs)
        module = modules[0]  # a list unit's setters reach its one state through any of its modules
        managed.update(id(p) for m in modules for p in m.parameters())
        if unit.gradient_divide_factor is not None:
            module.set_gradient_divide_factor(unit.gradient_divide_factor)
        if unit.force_sum_reduction_for_comms:
            module.set_force_sum_reduction_for_comms(True)
        if not unit.requires_gradient_sync:
            module.set_requires_gradient_sync(False, recurse=False)
        if not unit.requires_all_reduce:
            module.set_requires_all_reduce(False, recurse=False)
    # Explicit prefetching once every unit exists: the setters take FSDP
    # modules only, and a target may be sharded by a later unit.
    for _i, unit, paths in calls:
        if unit.forward_prefetch:
            get(paths[0]).set_modules_to_forward_prefetch([get(t) for t in unit.forward_prefetch])
        if unit.backward_prefetch:
            get(paths[0]).set_modules_to_backward_prefetch([get(t) for t in unit.backward_prefetch])
    return [path for _i, _unit, paths in calls for path in paths]


def _run_measurement(model_spec, plan, phase, backend, device=None, json_dump=None,
                     noise_level=3, plan_subject="plan", model_device=None):
    """Run one measurement in the current (initialised) process group.

    Returns ``{"modules": per-module counts, "device": device_info(where the model ran)}``.
    ``model_device`` overrides the device the model and inputs are moved to (``None``: leave them).
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, distribute_tensor
    import fnmatch

    world = dist.get_world_size()
    if math.prod(plan.mesh_shape) != world:
        raise PlanError(plan_subject, f"mesh shape {tuple(plan.mesh_shape)} has "
                        f"{math.prod(plan.mesh_shape)} devices but the world size is {world}")
    model, args, kwargs = _model_from(model_spec)
    model_name = _spec_name(model_spec)
    check_against_model(plan, model, plan_subject, args, kwargs, skip_unmatched_styles=True)

    if backend != "fake":
        devs = {p.device.type for p in model.parameters()}
        if "meta" in devs:
            raise CommlensError(model_name, f"meta-device models need --backend fake (not {backend})")
    if plan.fully_shard and plan.device_type == "cuda" and not torch.cuda.is_available():
        raise PlanError(plan_subject, "fully_shard units on a 'cuda' mesh need a GPU (FSDP2 moves the "
                        "parameters to the current CUDA device); use device_type 'cpu' here")
    if model_device is not None:
        model = model.to(model_device)
        args = _to_device(args, model_device)
        kwargs = _to_device(kwargs, model_device)
    ran_on = next((t.device for t in list(model.parameters()) + torch.utils._pytree.tree_leaves((args, kwargs))
                   if isinstance(t, torch.Tensor)), torch.device("cpu"))
    if plan.fully_shard and any(p.device.type == "meta" for p in model.parameters()):
        raise CommlensError(model_name, "fully_shard units need a real (non-meta) model: FSDP2 refuses "
                            "meta-device parameters in its first forward")

    mesh = init_device_mesh(plan.device_type, tuple(plan.mesh_shape),
                            mesh_dim_names=None if plan.mesh_dim_names is None
                            else tuple(plan.mesh_dim_names))
    for name, dims in plan.flattened_dims.items():
        mesh[dims]._flatten(name)  # mesh[name] is then the flattened dim

    for name, p in model.named_parameters():
        if any(fnmatch.fnmatchcase(name, pat) for pat in plan.frozen):
            p.requires_grad_(False)

    input_tensors = []  # the tensors the model is called with, filled in below
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for dim, styles in plan.parallelize_steps():
            target = mesh if dim is None else _submesh(mesh, step_dims(dim))
            _parallelize(model, target, styles, plan.src_data_rank)
            _pass_local_shards_of_inputs(model, target, styles, input_tensors)
        for name, p in model.named_parameters():
            if any(fnmatch.fnmatchcase(name, pat) for pat in plan.frozen_after_parallelize):
                p.requires_grad_(False)
        _apply_activation_checkpoint(plan, model, plan_subject)
        sharded = _apply_fully_shard(plan, model, mesh, plan_subject)

    if plan.placements:
        named, named_bufs, owners = _state_owners(model)
        sharded = [_unwrapped_path(u) for u in sharded]
        for pattern, spec in plan.placements.items():
            sub, pls = _placement_target(mesh, spec)
            for fqn in list(named) + list(named_bufs):
                if not fnmatch.fnmatchcase(fqn, pattern):
                    continue
                owner, leaf = owners[fqn]
                t = named.get(fqn, named_bufs.get(fqn))
                if isinstance(t, DTensor):
                    by = "parallelize_module"
                    if fqn in named and any(u == "" or fqn.startswith(u + ".") for u in sharded):
                        by = "fully_shard"
                    raise PlanError(plan_subject, f"placements[{pattern!r}]: {fqn} is already a "
                                    f"DTensor {t.placements} after {by}")
                dt = distribute_tensor(t.detach(), sub, pls, src_data_rank=plan.src_data_rank)
                if fqn in named:
                    owner.register_parameter(leaf, torch.nn.Parameter(dt, requires_grad=t.requires_grad))
                else:
                    owner.register_buffer(leaf, dt)

    args = list(args)
    keys = list(dict.fromkeys(list(plan.input_placements) + list(plan.inputs_requires_grad)))
    for key in keys:
        t = args[key] if isinstance(key, int) else kwargs[key]
        if not isinstance(t, torch.Tensor):
            raise PlanError(plan_subject, f"input {key!r} is not a tensor")
        if key in plan.input_placements:
            sub, pls = _placement_target(mesh, plan.input_placements[key])
            t = distribute_tensor(t.detach(), sub, pls, src_data_rank=plan.src_data_rank)
        if key in plan.inputs_requires_grad:
            if not (t.is_floating_point() or t.is_complex()):
                raise PlanError(plan_subject, f"input {key!r} has dtype {t.dtype} and cannot require grad")
            t = t.detach().requires_grad_(True)
        if isinstance(key, int):
            args[key] = t
        else:
            kwargs[key] = t
    args = tuple(args)
    input_tensors[:] = [t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]

    modules = count_collectives(model, args, kwargs, phase, plan.loss, loss_parallel=plan.loss_parallel,
                                json_dump=json_dump, noise_level=noise_level)
    return {"modules": modules, "device": device_info(ran_on)}


def _parallelize(model, mesh, styles, src_data_rank):
    """One parallelize step: torch's styles by ``parallelize_module``, transformers' layers as
    transformers applies them (:func:`commlens._transformers.apply_layer`), in the plan's order."""
    import itertools

    from torch.distributed.tensor.parallel import parallelize_module
    from torch.distributed.tensor.parallel.style import ParallelStyle

    from commlens._transformers import apply_layer

    for torch_styles, entries in itertools.groupby(styles.items(), key=lambda e: isinstance(e[1], ParallelStyle)):
        if torch_styles:
            parallelize_module(model, mesh, dict(entries), src_data_rank=src_data_rank)
        else:
            for pattern, layer in entries:
                apply_layer(model, mesh, pattern, layer)


def count_collectives(model, args, kwargs, phase, loss, *, loss_parallel=False, json_dump=None, noise_level=3):
    """Step 7 on a model parallelised by whatever means: in one fresh CommDebugMode (inside
    ``loss_parallel()`` when asked), ``out = model(*args, **kwargs)`` and, for phase
    ``backward``/``both``, ``loss`` (a :class:`commlens.plan.Loss`, its kind, or a function
    ``loss(out, args)`` returning the scalar) of ``out`` and
    its backward; for phase ``inference``, ``model.eval()`` and the forward alone under
    ``torch.no_grad()``. Returns the per-module counts (:func:`counts_from_comm_mode`)."""
    import torch
    from torch.distributed.tensor.parallel import loss_parallel as loss_parallel_context

    comm_mode = _bytes_recording_comm_debug_mode()
    _fix_repeated_call_tracking(comm_mode)
    ctx = loss_parallel_context() if loss_parallel and phase != "inference" else contextlib.nullcontext()
    if phase == "inference":
        model.eval()
    grad = torch.no_grad() if phase == "inference" else contextlib.nullcontext()
    with ctx, grad, comm_mode, warnings.catch_warnings():
        # "Full backward hook is firing when gradients are computed with
        # respect to module outputs since no inputs require gradients" comes
        # from CommDebugMode's global backward pre-hook; it is expected here.
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        # fully_shard warns when a unit returns a view (in-place ops on it
        # would skip its pre-backward hook); measure does no in-place op.
        warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
        out = model(*args, **(kwargs or {}))
        if phase not in ("forward", "inference"):
            _compute_loss(loss, loss_parallel, out, args).backward()
    if json_dump is not None:
        comm_mode.generate_json_dump(file_name=json_dump, noise_level=noise_level)
    return counts_from_comm_mode(comm_mode, phase)


def _sharded_input_layouts(style):
    """``(positional {index: placement}, keyword {name: placement})``: the arguments ``style``'s
    pre-hook wraps with ``DTensor.from_local`` when they are plain tensors (torch 2.13's
    torch/distributed/tensor/parallel/style.py), where the placement is a ``Shard``."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   PrepareModuleInputOutput, RowwiseParallel, SequenceParallel)

    if isinstance(style, PrepareModuleInputOutput):
        style = style.prepare_module_input
    if isinstance(style, (ColwiseParallel, RowwiseParallel)):
        positional, keyword = dict(enumerate(style.input_layouts[:1])), {}
    elif isinstance(style, SequenceParallel):
        positional, keyword = {0: style.sequence_sharding[0]}, {}
    elif isinstance(style, PrepareModuleInput):
        positional, keyword = dict(enumerate(style.input_layouts or ())), dict(style.input_kwarg_layouts or {})
    else:
        return {}, {}
    return ({i: p for i, p in positional.items() if isinstance(p, Shard)},
            {k: p for k, p in keyword.items() if isinstance(p, Shard)})


def _pass_local_shards_of_inputs(model, mesh, styles, input_tensors):
    """Where a style's pre-hook makes a model input a DTensor with ``DTensor.from_local(x, mesh,
    Shard(d))``, each rank passes its own shard of the input: the factory's example inputs are the
    global tensors, as the exported program's shapes are (docs/plan-format.md).  A forward pre-hook,
    run before the style's, hands this rank's chunk of such an input (the tensor itself or a view
    of it) to the style; a plain tensor computed from other values (a ``to_local`` output) is local
    already and passes as it is.  ``input_tensors``: the tensors the model is called with, filled in
    by the caller once the plan's inputs are placed."""
    import torch
    from torch.distributed.tensor import DTensor

    from commlens.plan import match_modules

    def is_input(t):
        return (isinstance(t, torch.Tensor) and not isinstance(t, DTensor)
                and any(t is x or t._base is x for x in input_tensors))

    def local_shard(t, placement):
        return t.chunk(mesh.size(), dim=placement.dim)[mesh.get_local_rank()]

    for pattern, style in styles.items():
        positional, keyword = _sharded_input_layouts(style)
        if not positional and not keyword:
            continue

        def hook(module, args, kwargs, positional=positional, keyword=keyword):
            args = tuple(local_shard(a, positional[i]) if i in positional and is_input(a) else a
                         for i, a in enumerate(args))
            kwargs = {k: local_shard(v, keyword[k]) if k in keyword and is_input(v) else v for k, v in kwargs.items()}
            return args, kwargs

        for path in match_modules(model, pattern):
            model.get_submodule(path).register_forward_pre_hook(hook, prepend=True, with_kwargs=True)


# Where each c10d op (the ops FSDP2 calls) takes the tensors it sends: the input list or tensor
# after the outputs it writes.  Every other collective (c10d_functional, and c10d ops that reduce
# or send in place) sends its first argument.
_C10D_SENT_ARG = {"_allgather_base_": 1, "_reduce_scatter_base_": 1, "allgather_": 1, "allgather_coalesced_": 1,
                  "allgather_into_tensor_coalesced_": 1, "reduce_scatter_": 1, "reduce_scatter_tensor_coalesced_": 1,
                  "alltoall_": 1, "alltoall_base_": 1, "gather_": 1, "scatter_": 1}


def _sent_bytes(func, args):
    """Bytes rank 0 hands to a collective: the sizes of the tensors it sends, dtype-aware."""
    import torch

    packet = func._overloadpacket
    arg = args[_C10D_SENT_ARG.get(packet.__name__, 0) if packet._qualified_op_name.startswith("c10d::") else 0]
    tensors = [t for t in torch.utils._pytree.tree_leaves(arg) if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


def _bytes_recording_comm_debug_mode():
    """CommDebugMode that also sums, per module, phase and collective, the bytes each collective
    sends on this rank, charged to exactly the modules CommDebugMode charges the count to (it reads
    the module tracker's state at the same moment)."""
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.debug._comm_mode import NATIVE_TO_PY_MAPPING, c10d_collective_ops

    class BytesRecordingCommDebugMode(CommDebugMode):
        def __init__(self):
            super().__init__()
            self.comm_module_bytes = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            tracker = self.advanced_module_tracker
            name, phase = tracker.name, "backward" if tracker.is_bw else "forward"
            out = super().__torch_dispatch__(func, types, args, kwargs)
            packet = getattr(func, "_overloadpacket", None)
            if out is not NotImplemented and (packet in self.comm_registry or packet in c10d_collective_ops):
                key = str(NATIVE_TO_PY_MAPPING.get(packet, packet))
                sent = _sent_bytes(func, args)
                for fqn in {name, *tracker.module_parents_dict[name]}:
                    cells = self.comm_module_bytes.setdefault(fqn, {"forward": {}, "backward": {}})[phase]
                    cells[key] = cells.get(key, 0) + sent
            return out

    return BytesRecordingCommDebugMode()


def _fix_repeated_call_tracking(comm_mode):
    """Let CommDebugMode count a model that calls a module more than once per forward.

    Its module tracker (torch 2.13, ``_CommModeModuleTracker._fw_pre_hook``) registers a
    forward hook on the module at every call and never removes the earlier one, so at a
    module's second call two hooks each pop the parent list and the root's pop raises
    IndexError.  Removing the module's earlier hook before the tracker registers the next
    one leaves exactly one hook per call, which is what the tracker does for a module
    called once; it changes no count and no module name (tests/python/test_measure_repeated_calls.py).
    """
    tracker = comm_mode.advanced_module_tracker
    handles = getattr(tracker, "register_forward_hook_handles", None)
    if handles is None:  # a torch whose tracker keeps no handles has changed this code
        return
    register_hook = tracker._fw_pre_hook

    def pre_hook(mod, input):
        stale = handles.pop(tracker._get_mod_name(mod), None)
        if stale is not None:
            stale.remove()
        return register_hook(mod, input)

    tracker._fw_pre_hook = pre_hook


def plan_mesh(plan):
    """The ``mesh`` field of a counts document for a plan's mesh."""
    return {"shape": list(plan.mesh_shape),
            "dim_names": None if plan.mesh_dim_names is None else list(plan.mesh_dim_names),
            "device_type": plan.device_type}


def counts_document(modules, *, backend, world_size, phase, model, mesh, plan_source, device):
    """A commlens-counts document (``mesh``: see :func:`plan_mesh`; ``device``: :func:`device_info`)."""
    import torch

    return {
        "format": COUNTS_FORMAT,
        "version": COUNTS_VERSION,
        "source": "measure",
        "backend": backend,
        "world_size": world_size,
        "phase": phase,
        "model": model,
        "plan": plan_source,
        "mesh": mesh,
        "device": device,
        "torch_version": torch.__version__,
        "modules": modules,
    }


def format_counts(doc):
    """JSON text of a counts document: header fields one per line, then one
    line per module."""
    head = {k: v for k, v in doc.items() if k not in ("modules", "rank")}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v)},")
    lines.append('  "modules": [')
    mods = [f"    {json.dumps(m)}" for m in doc["modules"]]
    lines.append(",\n".join(mods))
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# backends
# --------------------------------------------------------------------------


def _check_args(plan, backend, phase, world_size, subject):
    if backend not in BACKENDS:
        raise CommlensError(subject, f"unknown backend {backend!r} (expected one of {', '.join(BACKENDS)})")
    if phase not in PHASES:
        raise CommlensError(subject, f"unknown phase {phase!r} (expected one of {', '.join(PHASES)})")
    ws = math.prod(plan.mesh_shape) if world_size is None else int(world_size)
    if math.prod(plan.mesh_shape) != ws:
        raise PlanError(subject, f"mesh shape {tuple(plan.mesh_shape)} has {math.prod(plan.mesh_shape)} "
                        f"devices but the world size is {ws}")
    return ws


DEVICES = ("meta", "cuda")


def _fake_model_device(plan, device, subject):
    """The device the fake backend moves the fresh model and inputs to (None: leave them).

    A ``cuda`` plan runs on the GPU when there is one (the real CUDA dispatch: SDPA backend,
    kernels), else on ``meta`` (CPU tensors cannot live on a CUDA mesh)."""
    import torch

    if device == "cuda":
        if plan.device_type != "cuda":
            raise PlanError(subject, f"--device cuda needs a plan with device_type 'cuda' "
                            f"(plan has {plan.device_type!r})")
        if not torch.cuda.is_available():
            raise CommlensError("measure", f"--device cuda needs a CUDA GPU (torch {torch.__version__}: "
                                "torch.cuda.is_available() is False)")
        return f"cuda:{torch.cuda.current_device()}"
    if device is not None:
        return device
    if plan.device_type == "cuda":
        return f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "meta"
    return None


def device_info(device):
    """What the counts file records about where the model ran: the device type and, on a GPU,
    what selects CUDA kernels (``commlens predict --gpu-arch/--cudnn-version/--cuda-version/--torch-version``)."""
    import torch

    dev = torch.device(device)
    info = {"type": dev.type}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        info.update(name=props.name, compute_capability=f"{props.major}.{props.minor}",
                    cudnn_version=torch.backends.cudnn.version(), cuda_version=torch.version.cuda,
                    torch_version=torch.__version__)
    return info


def _measure_fake(model_spec, plan, phase, ws, json_dump, noise_level, subject, model_device):
    with fake_process_group(ws):
        return _run_measurement(model_spec, plan, phase, "fake", json_dump=json_dump,
                                noise_level=noise_level, plan_subject=subject,
                                model_device=model_device)


@contextlib.contextmanager
def fake_process_group(world_size, subject="measure"):
    """``dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)`` for the
    block: rank 0 of ``world_size``, collectives counted but not run; destroyed after it. ``subject``
    names the caller in the error when a default process group already exists."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise CommlensError(subject, "a default process group is already initialised; "
                            "the fake backend needs its own (call dist.destroy_process_group())")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()
        # DTensor caches sharding decisions keyed by the mesh's value (ranks, dim names), not
        # its process groups: the next measurement's equal sub-mesh must not reuse this one's.
        from torch.distributed.tensor.debug import _clear_sharding_prop_cache

        _clear_sharding_prop_cache()


def _gloo_worker(rank, world_size, store_path, jobs, noise_level, out_dir):
    """Spawned gloo rank: run every job (model_spec, plan_json, subject, phase,
    json_dump) in order in one process group; write rank<r>.json."""
    import datetime

    import torch.distributed as dist

    from commlens.plan import from_json

    result = {"rank": rank, "results": []}
    try:
        dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank,
                                world_size=world_size, timeout=datetime.timedelta(seconds=300))
        try:
            for model_spec, plan_json, subject, phase, json_dump in jobs:
                plan = from_json(plan_json, subject)
                result["results"].append(_run_measurement(
                    model_spec, plan, phase, "gloo", json_dump=json_dump if rank == 0 else None,
                    noise_level=noise_level, plan_subject=subject))
        finally:
            dist.destroy_process_group()
    except CommlensError as err:
        result["error"] = str(err)
    except Exception as err:  # noqa: BLE001 - reported by the parent
        import traceback

        result["exception"] = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    # The result is on disk: torch's c10d/gloo threads now and then abort the teardown ("terminate
    # called without an active exception", seen once in CI after a complete, correct measurement).
    exit_without_teardown(0)


def _collect(results, subjects):
    """Check every rank succeeded and counted the same; return rank 0's results."""
    for r in results:
        if "error" in r:
            subj, _, msg = r["error"].partition(": ")
            raise CommlensError(subj, msg)
    for r in results:
        if "exception" in r:
            raise RuntimeError(f"rank {r['rank']} failed: {r['exception']}")
    first = results[0]["results"]
    for r in results[1:]:
        for i, (a, b) in enumerate(zip(first, r["results"])):
            if a["modules"] != b["modules"]:
                raise CommlensError(subjects[i], f"rank {r['rank']} counted different collectives than rank 0")
    return first


def _measure_gloo_spawn(jobs, ws, noise_level):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="commlens-gloo-") as tmp:
        store = os.path.join(tmp, "store")
        mp.start_processes(_gloo_worker, nprocs=ws, join=True, start_method="spawn",
                           args=(ws, store, jobs, noise_level, tmp))
        results = []
        for r in range(ws):
            with open(os.path.join(tmp, f"rank{r}.json")) as f:
                results.append(json.load(f))
    return _collect(results, [j[2] for j in jobs])


def _measure_torchrun(jobs, backend, noise_level):
    import datetime

    import torch
    import torch.distributed as dist

    from commlens.plan import from_json

    rank = int(os.environ["RANK"])
    device = None
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise CommlensError("measure", f"the nccl backend needs CUDA GPUs (torch {torch.__version__}: "
                                "torch.cuda.is_available() is False)")
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=600))
    try:
        result = {"rank": rank, "results": []}
        try:
            for model_spec, plan_json, subject, phase, json_dump in jobs:
                plan = from_json(plan_json, subject)
                result["results"].append(_run_measurement(
                    model_spec, plan, phase, backend, json_dump=json_dump if rank == 0 else None,
                    noise_level=noise_level, plan_subject=subject, model_device=device))
        except CommlensError as err:
            result["error"] = str(err)
        except Exception as err:  # noqa: BLE001
            result["exception"] = f"{type(err).__name__}: {err}"
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, result)
        return _collect(gathered, [j[2] for j in jobs]), rank
    finally:
        dist.destroy_process_group()


def measure_many(cases, backend="fake", phase="both", world_size=None, *, noise_level=3,
                 device=None, return_documents=False):
    """Measure several ``(model_spec, plan[, phase[, json_dump]])`` cases.

    All plans must have the same world size.  ``fake`` runs them one after the
    other in this process (a fresh fake process group each); ``gloo`` runs them
    all in **one** set of spawned processes (one process group, a fresh model,
    mesh and CommDebugMode per case), which saves the process start-up cost;
    under torchrun (``gloo``/``nccl``) the current processes run them.
    Returns a list of per-module count dicts (see :func:`measure`).
    """
    from commlens._factory import resolve

    if backend not in BACKENDS:
        raise CommlensError("measure", f"unknown backend {backend!r} (expected one of {', '.join(BACKENDS)})")
    if device is not None and device not in DEVICES:
        raise CommlensError("measure", f"unknown device {device!r} (expected one of {', '.join(DEVICES)})")
    if device is not None and backend != "fake":
        raise CommlensError("measure", "--device is only supported with the fake backend")
    prepared = []
    for case in cases:
        case = tuple(case)
        model_spec, plan_in = case[0], case[1]
        case_phase = case[2] if len(case) > 2 and case[2] is not None else phase
        json_dump = case[3] if len(case) > 3 else None
        plan_source = plan_in if isinstance(plan_in, str) else getattr(plan_in, "source", None)
        subject = plan_source or "plan"
        if isinstance(model_spec, str):
            # the model's imports first: they may register ops the plan names (torchtitan's
            # checkpoint policy saves torch_attn._varlen_attn, which torch registers on import)
            resolve(model_spec)
        plan = resolve_plan(plan_in)
        ws = _check_args(plan, backend, case_phase, world_size, subject)
        if backend == "gloo" and plan.device_type != "cpu":
            raise PlanError(subject, f"the gloo backend needs device_type 'cpu' (plan has {plan.device_type!r})")
        if backend == "nccl" and plan.device_type != "cuda":
            raise PlanError(subject, f"the nccl backend needs device_type 'cuda' (plan has {plan.device_type!r})")
        if backend != "fake" and not isinstance(model_spec, str):
            raise CommlensError(_spec_name(model_spec), f"the {backend} backend needs a MODULE:FACTORY spec string")
        model_device = _fake_model_device(plan, device, subject) if backend == "fake" else None
        prepared.append((model_spec, plan, plan_source, subject, case_phase, json_dump, ws, model_device))
    sizes = {p[6] for p in prepared}
    if len(sizes) > 1:
        raise CommlensError("measure", f"all cases must have the same world size (got {sorted(sizes)})")
    ws = sizes.pop() if sizes else 0
    rank = 0
    if backend == "fake":
        results = [
            _measure_fake(m, plan, ph, ws, jd, noise_level, subj, dev)
            for m, plan, _src, subj, ph, jd, _ws, dev in prepared
        ]
    else:
        jobs = [(m, to_json(plan), subj, ph, jd) for m, plan, _src, subj, ph, jd, _ws, _dev in prepared]
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            if int(os.environ["WORLD_SIZE"]) != ws:
                subj = prepared[0][3]
                raise PlanError(subj, f"mesh shape {tuple(prepared[0][1].mesh_shape)} has {ws} "
                                f"devices but the world size is {os.environ['WORLD_SIZE']}")
            results, rank = _measure_torchrun(jobs, backend, noise_level)
        elif backend == "gloo":
            results = _measure_gloo_spawn(jobs, ws, noise_level)
        else:
            raise CommlensError("measure", "the nccl backend must run under torchrun "
                                "(RANK/WORLD_SIZE not set); see python -m commlens.measure --help")
    out = []
    for (m, plan, src, _subj, ph, _jd, _ws, _dev), result in zip(prepared, results):
        modules = result["modules"]
        if return_documents:
            doc = counts_document(modules, backend=backend, world_size=ws, phase=ph, model=_spec_name(m),
                                  mesh=plan_mesh(plan), plan_source=src, device=result["device"])
            doc["rank"] = rank
            out.append(doc)
        else:
            out.append({e["fqn"]: {"forward": e["forward"], "backward": e["backward"]} for e in modules})
    return out


def measure(model_spec_or_factory, plan, backend="fake", phase="both", world_size=None,
            *, json_dump=None, noise_level=3, device=None, return_document=False):
    """Measure one model under one plan; return the per-module counts.

    ``model_spec_or_factory``: ``"MODULE:FACTORY(...)"`` or (fake backend) a
    zero-argument callable returning ``(model, args[, kwargs])``.  ``plan``: a
    :class:`commlens.plan.Plan`, a plan JSON path, or a plan factory spec.

    Returns ``{"Global": {"forward": {op: n}, "backward": {op: n}}, "MLP.w1": ...}``
    in CommDebugMode's module order or, with ``return_document=True``, the
    whole commlens-counts document (plus ``"rank"``).  ``json_dump``: path for
    CommDebugMode's ``generate_json_dump`` (rank 0).  ``device="meta"`` moves
    the fresh model and inputs to meta (fake backend only).
    """
    return measure_many([(model_spec_or_factory, plan, phase, json_dump)], backend=backend,
                        phase=phase, world_size=world_size, noise_level=noise_level,
                        device=device, return_documents=return_document)[0]


@cli_main
def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m commlens.measure",
        description="Run a parallelised model once under CommDebugMode and write per-module collective counts.",
        epilog=__doc__.split("Backends:")[1].split("Python API")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("factory", help="model factory MODULE:FACTORY or MODULE:FACTORY(key=literal, ...)")
    parser.add_argument("--plan", required=True, help="plan JSON file or MODULE:PLAN_FACTORY(...) spec")
    parser.add_argument("--backend", default="fake", choices=BACKENDS)
    parser.add_argument("--phase", default="both", choices=PHASES)
    parser.add_argument("--world-size", type=int, default=None,
                        help="must equal the product of the mesh shape (default: that product)")
    parser.add_argument("--noise-level", type=int, default=3, help="generate_json_dump noise level (0-3)")
    parser.add_argument("--device", choices=DEVICES, default=None,
                        help="move the fresh model and inputs to this device (fake backend; cuda: the "
                             "current GPU, for a device_type='cuda' plan, which also goes there by default "
                             "when a GPU exists, else to meta)")
    parser.add_argument("-o", "--output", required=True, help="CommDebugMode JSON dump path")
    parser.add_argument("--counts", help="counts JSON path (default: <stem of -o>.counts.json)")
    ns = parser.parse_args(argv)
    counts_path = ns.counts
    if counts_path is None:
        stem = ns.output[:-5] if ns.output.endswith(".json") else ns.output
        counts_path = stem + ".counts.json"
    doc = measure(ns.factory, ns.plan, backend=ns.backend, phase=ns.phase, world_size=ns.world_size,
                  json_dump=os.path.abspath(ns.output), noise_level=ns.noise_level, device=ns.device,
                  return_document=True)
    if doc.get("rank", 0) != 0:
        return 0
    doc.pop("rank", None)
    try:
        with open(counts_path, "w") as f:
            f.write(format_counts(doc))
    except OSError as err:
        raise CommlensError(counts_path, f"cannot write counts: {err.strerror or err}") from None
    total = doc["modules"][0]
    fw = sum(total["forward"].values())
    bw = sum(total["backward"].values())
    print(f"commlens: measured {ns.factory} with {ns.plan} ({ns.backend}, world size "
          f"{doc['world_size']}, phase {ns.phase}): {fw} forward + {bw} backward collectives; "
          f"wrote {ns.output} and {counts_path}")
    return 0


if __name__ == "__main__":
    from commlens.measure import main as _main

    sys.exit(_main())
