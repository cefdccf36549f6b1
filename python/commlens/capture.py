"""Capture the plan a user's own parallelization code applies.

CLI::

    python -m commlens.capture --model MODULE:FACTORY[(k=v, ...)] --parallelize MODULE:FN[(k=v, ...)] \\
        --world-size N [--loss sum|cross_entropy] [--loss-parallel] [--input-requires-grad KEY ...] -o plan.json

Python: ``commlens.capture(model_factory, parallelize, world_size=N, ...)`` (this module is
callable) or :func:`capture`; both return a :class:`commlens.plan.Plan`.

The model factory (what ``commlens.export`` takes, returning ``(model, args[, kwargs])``) builds
the model on the meta device; ``FN(model)`` then runs under a fake process group of N ranks, as
the user wrote it: ``parallelize_module`` with torch's styles, ``fully_shard``,
``checkpoint_wrapper``, ``distribute_tensor`` on parameters, ``requires_grad_(False)``, on any
``DeviceMesh`` FN builds.  While it runs, every ``ParallelStyle._apply`` is recorded (the class
attribute, so however FN imported ``parallelize_module``) with the style as it was before
``_apply`` touched it, its module and its mesh, and every ``fully_shard`` call with its arguments
(``FSDPState.init`` reads them from ``fully_shard``'s frame).  The plan is then read off the
result: styles and units in application order, merged into ``layers.*`` patterns where every
module a pattern matches had the same style, the FSDP setters' state (gradient sync, prefetch
lists), ``CheckpointWrapper`` modules, parameters placed by ``distribute_tensor``, frozen
parameters, and the styled modules' classes that subclass ``nn.Linear`` / ``nn.Embedding`` (torch's
styles test ``isinstance``; an exported program keeps only class names).

``--parallelize transformers`` runs the calls transformers' ``from_pretrained(..., tp_plan="auto")``
makes (:mod:`commlens._transformers`); transformers' layer classes (``shard_param``, then
``install_forward`` replacing the module's forward) are recorded and mapped to the torch styles
that issue the same collectives in training, by their registration name.

Whatever the plan format cannot state is refused in one line naming the class and the module:
another ``ParallelStyle`` (a subclass included), a module FN added or whose class it changed
(other than ``checkpoint_wrapper`` and ``fully_shard``'s class swap), a forward or backward hook
that no style or unit registered (``distribute_module``'s ``input_fn``/``output_fn``),
``fully_shard``'s ``ignored_params`` / ``dp_mesh_dims`` (and a ``shard_placement_fn`` on a list of
modules), the FSDP setters commlens does not model, a reentrant or custom checkpoint, a
selective-checkpoint policy that is not an op list, two unrelated device meshes, a module whose
``forward`` was replaced other than by a mapped transformers layer.
"""

import argparse
import copy
import fnmatch
import functools
import inspect
import json
import sys
import types
import warnings

from commlens._errors import CommlensError, cli_main

# Module classes whose children are list or dict items: where a recorded path may become a
# "layers.*" pattern.
_CONTAINER_NAMES = ("ModuleList", "ModuleDict", "Sequential")

# FSDPParamGroup state the plan format has no field for, with its default and the setter that
# changes it; a unit with any other value is refused.
_UNMODELLED_GROUP_STATE = (
    ("reshard_after_backward", True, "set_reshard_after_backward"),
    ("unshard_in_backward", True, "set_unshard_in_backward"),
    ("reduce_scatter_unused_params", False, "set_reduce_scatter_unused_params"),
    ("_all_reduce_hook", None, "set_all_reduce_hook"),
)

# The built-in parallelize spec: transformers' from_pretrained(tp_plan="auto") (commlens._transformers);
# "transformers(tp_size=2, ...)" passes DistributedConfig arguments.
_TRANSFORMERS = "transformers"

# torchtitan's per-op selective checkpointing policy, as its context_fn is named.
_TORCHTITAN_OP_SAC = "_apply_op_sac.<locals>.selective_checkpointing_context_fn"

# checkpoint() keywords that change no collective, so a wrapper may set them.
_NEUTRAL_CHECKPOINT_KWARGS = ("preserve_rng_state", "determinism_check", "debug")


class CaptureError(CommlensError):
    """A parallelization the plan format cannot state (refused by class and module)."""


def _qualname(obj):
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _unsharded_class(cls):
    """The class ``fully_shard`` swapped for ``FSDP<Class>`` (``(FSDPModule, Class)``), else ``cls``."""
    from torch.distributed.fsdp import FSDPModule

    if issubclass(cls, FSDPModule) and len(cls.__bases__) == 2 and cls.__bases__[0] is FSDPModule:
        return cls.__bases__[1]
    return cls


def _hook_ids(module):
    """Ids of the module's forward and backward hooks (each dict keyed by handle id)."""
    return {key for table in (module._forward_pre_hooks, module._forward_hooks,
                              module._backward_pre_hooks, module._backward_hooks) for key in table}


def _state_slots(module):
    """``{(id(owner), name): tensor}`` for every parameter and buffer below ``module`` (itself
    included): a style may replace either (distribute_module replicates the buffers)."""
    return {(id(owner), name): t for owner in module.modules()
            for table in (owner._parameters, owner._buffers) for name, t in table.items() if t is not None}


class _Recorder:
    """Records style applications and fully_shard calls while the user's function runs."""

    def __init__(self):
        self.styles = []    # (style before _apply, module, mesh, src_data_rank or None)
        self.units = []     # fully_shard's arguments, its state and modules
        self.hooks = {}     # id(module) -> hook ids a style or unit registered on it
        self.styled = set()  # (id(owner), name) of parameters and buffers a style replaced
        self.placed_then_sharded = []  # (owner, name): a distribute_tensor parameter fully_shard took
        self.replaced_forward = set()  # id(module) whose forward a recorded transformers layer replaced
        self.unmapped_layers = []  # (registration name or None, layer, module): no torch style to map to
        self.layer_sharded = []  # (layer, owner, name, mesh): a parameter a transformers layer sharded
        self.layer_installed = set()  # (id(layer), id(module)): a transformers layer's install_forward
        self.ep_dispatch = {}  # id(module) -> install_forward's keywords, for transformers' ep_dispatch_experts
        self._depth = 0
        self._layer_depth = {"install_forward": 0, "shard_param": 0}
        self._restore = []

    # ---- ParallelStyle._apply

    def _wrap_style_class(self, cls):
        from torch.distributed.tensor.parallel import RowwiseParallel

        original = cls.__dict__.get("_apply")
        if original is None or getattr(original, "_commlens_original", None) is not None:
            return
        recorder = self

        @functools.wraps(original)
        def _apply(style, module, device_mesh):
            if recorder._depth:  # a style calling another (PrepareModuleInputOutput, super()._apply)
                return original(style, module, device_mesh)
            before = copy.deepcopy(style) if type(style).__module__.startswith("torch.") else style
            if type(style) is RowwiseParallel:
                # RowwiseParallel._apply sets it from the module's class, whatever it was, and a
                # style applied again carries the last module's
                vars(before).pop("desired_input_layouts", None)
            hooks, params = _hook_ids(module), _state_slots(module)
            recorder._depth += 1
            try:
                out = original(style, module, device_mesh)
            finally:
                recorder._depth -= 1
            recorder.styles.append((before, module, device_mesh, style.src_data_rank))
            recorder.hooks.setdefault(id(module), set()).update(_hook_ids(module) - hooks)
            recorder.styled.update(slot for slot, p in _state_slots(module).items() if params.get(slot) is not p)
            return out

        _apply._commlens_original = original
        cls._apply = _apply
        self._restore.append(lambda: setattr(cls, "_apply", original))

    def _wrap_styles(self):
        from torch.distributed.tensor.parallel.style import ParallelStyle

        pending = [ParallelStyle]
        while pending:
            cls = pending.pop()
            self._wrap_style_class(cls)
            pending.extend(cls.__subclasses__())
        recorder = self

        def init_subclass(cls, **kwargs):  # styles FN defines while it runs
            super(ParallelStyle, cls).__init_subclass__(**kwargs)
            recorder._wrap_style_class(cls)

        ParallelStyle.__init_subclass__ = classmethod(init_subclass)
        self._restore.append(lambda: delattr(ParallelStyle, "__init_subclass__"))

    # ---- fully_shard (FSDPState.init, called by fully_shard with the unit's modules)

    def _wrap_fsdp_state(self):
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState
        from torch.distributed.tensor import DTensor

        original = FSDPState.init
        fully_shard_code = inspect.unwrap(fully_shard).__code__
        recorder = self

        def init(state, modules, *args, **kwargs):
            caller = sys._getframe(1)
            call = dict(caller.f_locals) if caller.f_code is fully_shard_code else None
            if call is not None:
                # A parameter distribute_tensor placed before fully_shard: a plan places after it.
                for module in modules:
                    for owner in module.modules():
                        for name, p in owner._parameters.items():
                            if (isinstance(p, DTensor) and (id(owner), name) not in recorder.styled
                                    and not getattr(owner, "_is_fsdp_managed_module", False)):
                                recorder.placed_then_sharded.append((owner, name))
            out = original(state, modules, *args, **kwargs)
            for handle in (state._pre_forward_hook_handle, state._post_forward_hook_handle):
                for h in getattr(handle, "handles", (handle,)):  # a list unit's _MultiHandle
                    for module in modules:
                        recorder.hooks.setdefault(id(module), set()).add(h.id)
            recorder.units.append({"state": state, "modules": tuple(modules), "call": call,
                                   "caller": caller.f_code.co_qualname})
            return out

        FSDPState.init = init
        self._restore.append(lambda: setattr(FSDPState, "init", original))

    # ---- transformers' layer classes (transformers/distributed/tensor_parallel.py): shard_param on a
    # module's parameters, then install_forward replacing its forward

    def _wrap_transformers_layers(self):
        tp = sys.modules.get("transformers.distributed.tensor_parallel")
        if tp is None:
            # not imported before FN ran: a layer FN applies shows as a replaced forward, refused
            return
        from commlens._transformers import EP_DISPATCH, MLA_KV_A_PROJ, NO_OP_STYLES, OWN_STYLES, TORCH_STYLES

        registered = {id(layer): name for name, layer in tp.ALL_PARALLEL_STYLES.items()}
        recorder = self

        def wrap(cls, method, record):
            original = cls.__dict__.get(method)
            if original is None:
                return

            @functools.wraps(original)
            def wrapper(layer, module, *args, **kwargs):
                if recorder._layer_depth[method]:  # a subclass calling super()
                    return original(layer, module, *args, **kwargs)
                before = dict(module._parameters)
                recorder._layer_depth[method] += 1
                try:
                    out = original(layer, module, *args, **kwargs)
                finally:
                    recorder._layer_depth[method] -= 1
                record(layer, module, args, kwargs, before)
                return out

            setattr(cls, method, wrapper)
            self._restore.append(lambda: setattr(cls, method, original))

        def installed(layer, module, args, kwargs, before):
            name = registered.get(id(layer))
            recorder.layer_installed.add((id(layer), id(module)))
            if name in NO_OP_STYLES or name in TORCH_STYLES or name in OWN_STYLES:
                recorder.replaced_forward.add(id(module))
            if name == EP_DISPATCH:
                # install_forward(module, ep_mesh=, tp_mesh=, ep_implementation=) (expert_parallel.py):
                # its keywords are the plan style's fields, on an object of their own
                recorder.ep_dispatch[id(module)] = (module, kwargs)
                # (its tp_mesh, as shares_batch / tp_mesh_dim, is read by check_expert_dispatch)
                style = type(layer)()
                style.ep_implementation = kwargs.get("ep_implementation", "auto")
                recorder.styles.append((style, module, kwargs["ep_mesh"], None))
            elif name == MLA_KV_A_PROJ:
                # the model config's qk_rope_head_dim, which transformers set on the module, is the
                # plan style's field, on an object of its own
                style = type(layer)()
                style.qk_rope_head_dim = module.config.qk_rope_head_dim
                recorder.styles.append((style, module, args[0], None))
            elif name in OWN_STYLES:
                recorder.styles.append((layer, module, args[0], None))
            elif name in TORCH_STYLES:
                style = TORCH_STYLES[name]()
                recorder.styles.append((style, module, args[0], style.src_data_rank))
            elif name not in NO_OP_STYLES:
                recorder.unmapped_layers.append((name, layer, module))

        def sharded(layer, module, args, kwargs, before):
            name = args[0]
            if module._parameters.get(name) is not before.get(name):
                recorder.styled.add((id(module), name))
                recorder.layer_sharded.append((layer, module, name, args[1] if len(args) > 1 else None))

        ep = sys.modules.get("transformers.distributed.expert_parallel")
        pending = [tp.TensorParallelLayer, *([ep.ExpertParallelLayer] if ep is not None else [])]
        while pending:
            cls = pending.pop()
            pending.extend(cls.__subclasses__())
            wrap(cls, "install_forward", installed)
            wrap(cls, "shard_param", sharded)

    def __enter__(self):
        self._wrap_styles()
        self._wrap_fsdp_state()
        self._wrap_transformers_layers()
        return self

    def __exit__(self, *exc):
        for restore in reversed(self._restore):
            restore()


# --------------------------------------------------------------------------
# paths and patterns
# --------------------------------------------------------------------------


def _match(paths, pattern):
    """The paths ``pattern`` matches, token by token as ``parallelize_module`` matches plan keys."""
    if pattern == "":
        return [""]
    tokens = pattern.split(".")
    return [p for p in paths if p and len(p.split(".")) == len(tokens)
            and all(fnmatch.fnmatch(name, token) for name, token in zip(p.split("."), tokens))]


def _related(a, b):
    return a == b or a == "" or b == "" or a.startswith(b + ".") or b.startswith(a + ".")


def _group_patterns(entries, paths, containers):
    """Merge ``entries`` (``(path, key)`` in application order) into ``[(pattern, [indices])]``.

    The entries of one group share a key, and its pattern (one list or dict index of a path
    replaced by ``*``) matches exactly their paths; the group takes the place of its first entry.
    An entry moves earlier only past entries on unrelated modules (neither the same, an ancestor
    nor a descendant), so every module still sees its styles (or units) in the order FN applied
    them."""
    done = [False] * len(entries)
    groups = []
    for i, (path, key) in enumerate(entries):
        if done[i]:
            continue
        pattern, members = path, [i]
        tokens = path.split(".") if path else []
        for j in range(len(tokens)):
            if ".".join(tokens[:j]) not in containers:
                continue
            candidate = ".".join(tokens[:j] + ["*"] + tokens[j + 1:])
            picked = []
            for match in _match(paths, candidate):
                k = next((k for k in range(i, len(entries))
                          if not done[k] and k not in picked and entries[k] == (match, key)), None)
                if k is None:
                    break
                picked.append(k)
            else:
                if all(not _related(entries[m][0], entries[k][0])
                       for k in picked for m in range(i + 1, k) if not done[m] and m not in picked):
                    pattern, members = candidate, picked
                    break
        for k in members:
            done[k] = True
        groups.append((pattern, members))
    return groups


# --------------------------------------------------------------------------
# capture
# --------------------------------------------------------------------------


def _tiles(dims, world_size):
    """Whether ``[(name, (size, stride))]``, outermost first, lay the world's ranks out as one mesh
    (size-1 dims anywhere)."""
    stride = 1
    for _name, (size, dim_stride) in reversed(dims):
        if size == 1:
            continue
        if dim_stride != stride:
            return False
        stride *= size
    return stride == world_size


class _Capture:
    """Reads the plan off the model FN parallelized and the recorder's log."""

    def __init__(self, subject, model, original, recorder):
        from commlens.measure import _unwrapped_path

        self.subject = subject
        self.model = model
        self.recorder = recorder
        self.root_name = type(model).__name__
        named = list(model.named_modules())
        self.path_of = {id(m): path for path, m in named}
        self.unwrapped = {id(m): _unwrapped_path(path) for path, m in named}
        self.modules_by_path = dict(named)
        self.original = original
        self.wrapped_paths = [path for path, _m in named]
        self.plain_paths = list(dict.fromkeys(_unwrapped_path(path) for path, _m in named))
        self.wrapped_containers = {path for path, m in named if type(m).__name__ in _CONTAINER_NAMES}
        self.plain_containers = {_unwrapped_path(p) for p in self.wrapped_containers}
        self.root_mesh = None
        # dim name -> (size, stride) in the ranks of a 1-D root mesh that the meshes in use were
        # unflattened from (DeviceMesh._unflatten, torchtitan's ParallelDims.build_mesh)
        self.unflattened_dims = {}
        self.other_roots = []  # root meshes besides root_mesh (transformers' dense and expert meshes)
        self.root_dims = {}    # dim name -> (size, stride) in the world's ranks, of named root meshes

    def fail(self, message):
        raise CaptureError(self.subject, message)

    def shown(self, module, unwrapped=False):
        path = (self.unwrapped if unwrapped else self.path_of).get(id(module))
        name = _unsharded_class(type(module)).__name__
        if path is None:
            return f"a {name} that is no longer in the model"
        return f"{path!r} ({name})" if path else f"the root ({name})"

    # ---- meshes

    def mesh_dims(self, mesh, what):
        """The plan's mesh dims for ``mesh``: None for the whole (1-D, unnamed) root mesh, else
        its dim names, which must be dims of the one root mesh."""
        root = mesh._get_root_mesh()
        if self.root_mesh is None:
            self.root_mesh = root
        elif root != self.root_mesh and root not in self.other_roots:
            import torch

            # transformers' expert parallelism: a dense and an expert init_device_mesh over the same
            # ranks (transformers/distributed/utils.py); their dims are laid out as one plan mesh
            for one in (self.root_mesh, root):
                if not one.mesh_dim_names or not torch.equal(one._rank_map, torch.arange(one._rank_map.numel())):
                    self.fail(f"{what} runs on {root}, another device mesh than {self.root_mesh}; a plan has "
                              "one mesh (slice every mesh from one init_device_mesh, or build each over the ranks "
                              "in order with named dims)")
            self.other_roots.append(root)
        names = mesh.mesh_dim_names
        if root.mesh_dim_names and names and all(name in root.mesh_dim_names for name in names):
            self.record_root_dims(root, mesh, what)
        if mesh == root:
            return tuple(names) if names else None
        root_names = root.mesh_dim_names or ()
        if root.ndim == 1 and names and any(name not in root_names for name in names):
            return self.unflattened_mesh_dims(mesh, what)
        for name in names or ():
            if name not in root_names:
                self.fail(f"{what} runs on mesh dim {name!r}, which is not a dim of the root mesh "
                          f"{tuple(root_names)} (flattened meshes are not modelled)")
        return tuple(names)

    def record_root_dims(self, root, mesh, what):
        """Each dim of ``mesh`` (sliced from the named N-D ``root``) with its size and stride in the
        world's ranks, for :meth:`plan_mesh` when the model uses several root meshes."""
        for name in mesh.mesh_dim_names:
            dim = root.mesh_dim_names.index(name)
            layout = (root.shape[dim], root.mesh.stride(dim)) if root.shape[dim] != 1 else (1, 0)
            seen = self.root_dims.setdefault(name, layout)
            if seen != layout:
                self.fail(f"{what} runs on mesh dim {name!r} of size {layout[0]} and rank stride {layout[1]}, "
                          f"but another mesh's dim {name!r} has size {seen[0]} and stride {seen[1]}")

    def unflattened_mesh_dims(self, mesh, what):
        """The dims of ``mesh``, unflattened from a 1-D root mesh: each dim's size and stride in
        the root's ranks (``DeviceMesh._layout``) is recorded, and :meth:`plan_mesh` lays the dims
        used out as one mesh, as ``init_device_mesh`` of those sizes would."""
        for name, axis in zip(mesh.mesh_dim_names, mesh._layout.axes):
            if len(axis.shape) > 1:
                self.fail(f"{what} runs on mesh dim {name!r}, flattened from several dims of the mesh it was "
                          "unflattened into (flattened meshes are not modelled)")
            layout = (axis.shape[0], axis.stride[0]) if axis.shape else (1, 0)  # a size-1 dim has no stride
            seen = self.unflattened_dims.setdefault(name, layout)
            if seen != layout:
                self.fail(f"{what} runs on mesh dim {name!r} of size {layout[0]} and rank stride {layout[1]}, "
                          f"but another mesh dim {name!r} in the model has size {seen[0]} and stride {seen[1]}")
        return tuple(mesh.mesh_dim_names)

    def plan_mesh(self, world_size, style_dims=()):
        """``(shape, dim names, aliases, flattened)`` of one mesh holding every unflattened dim in use, outermost
        (largest rank stride) first, when they tile the root's ranks; None when no unflattened dim
        is used. Size-1 dims (torchtitan's pp and cp at degree 1) go first: they change no rank's
        place. Dims over the same ranks (torchtitan's ``ep`` borrowing all of ``fsdp``) are one plan
        dim; ``aliases`` maps each other name to it. It keeps the name a parallel style used
        (``style_dims``): styles may read their mesh's dim names, as torchtitan's GroupedExperts
        does. A dim over the ranks of several others (torchtitan's ``fsdp`` over ``efsdp`` x ``ep``
        when ep takes part of dp_shard) is their flattening: ``flattened`` maps its name to theirs;
        a piece of the ranks that no dim is alone gets the name of the dims sharing it
        (``"fsdp&ep"``). With several root meshes (transformers' dense and expert ones) their dims
        in use are laid out so."""
        if self.other_roots and self.unflattened_dims:
            self.fail("the model uses several root meshes and meshes unflattened from a 1-D one; a plan lays out "
                      "one or the other as its mesh")
        layouts = self.unflattened_dims or (self.root_dims if self.other_roots else None)
        if not layouts:
            return None
        aliases, kept = {}, {}
        for name, layout in sorted(layouts.items(), key=lambda item: item[0] not in style_dims):
            if layout[0] != 1 and layout in kept:
                aliases[name] = kept[layout]
            else:
                kept.setdefault(layout, name)
        dims = sorted(((name, layout) for name, layout in layouts.items() if name not in aliases),
                      key=lambda item: (item[1][0] != 1, -item[1][1]))
        flattened = {}
        if not _tiles(dims, world_size):
            # dims over the ranks of several others (torchtitan's fsdp over efsdp x ep; transformers'
            # ep over part of fsdp x tp) are flattenings: the plan's dims are the finest pieces their
            # rank strides cut the world into, each named by the dim it is, or by the dims sharing
            # it ("fsdp&ep") where none is it alone
            bounds = sorted({b for _name, (size, stride) in dims if size > 1 for b in (stride, stride * size)})
            pieces = [(low, high // low) for low, high in zip(bounds, bounds[1:]) if high % low == 0]
            if len(pieces) == len(bounds) - 1:
                named = {}
                for low, size in pieces:
                    exact = [name for name, layout in dims if layout == (size, low)]
                    named[low] = exact[0] if exact else "&".join(
                        name for name, (n, stride) in dims if n > 1 and stride <= low < stride * n)
                for name, (size, stride) in dims:
                    run = [named[low] for low, _n in reversed(pieces) if stride <= low < stride * size]
                    if size > 1 and len(run) > 1:
                        flattened[name] = tuple(run)
                dims = [d for d in dims if d[0] not in flattened]
                dims += [(named[low], (size, low)) for low, size in pieces if named[low] not in dict(dims)]
                dims.sort(key=lambda item: (item[1][0] != 1, -item[1][1]))
        if not _tiles(dims, world_size):
            shown = ", ".join(f"{name!r} (size {size}, stride {dim_stride})" for name, (size, dim_stride) in dims)
            roots = ", ".join(str(tuple(r.mesh_dim_names)) for r in [self.root_mesh, *self.other_roots])
            source = (f"of the meshes {roots}" if self.other_roots else
                      f"unflattened from the {world_size}-rank mesh {tuple(self.root_mesh.mesh_dim_names or ())}")
            self.fail(f"the mesh dims in use, {shown}, {source}, do not lay out as one mesh over the ranks "
                      "with dims flattened from others")
        return (tuple(size for _name, (size, _stride) in dims), tuple(name for name, _layout in dims), aliases,
                flattened)

    # ---- the model's modules and hooks

    def check_modules(self):
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

        from commlens._transformers import OWN_STYLES, TORCH_STYLES

        for name, layer, module in self.recorder.unmapped_layers:
            shown = f"{name!r} ({_qualname(layer)})" if name else f"{_qualname(layer)} (not a registered instance)"
            self.fail(f"transformers' tensor-parallel style {shown} on module {self.shown(module)} is not "
                      f"modelled (commlens models {', '.join(dict.fromkeys([*TORCH_STYLES, *OWN_STYLES]))})")
        for layer, owner, name, _mesh in self.recorder.layer_sharded:
            # A plan entry naming the parameter itself (MoE experts' "...experts.gate_up_proj":
            # "packed_colwise"): shard_param alone, a distribute_tensor, so the plan's placements
            # record it as the DTensor it became.
            installed = (id(layer), id(owner)) in self.recorder.layer_installed
            if not installed and id(owner) not in self.recorder.ep_dispatch:
                self.recorder.styled.discard((id(owner), name))
        self.check_expert_dispatch()
        for module in self.modules_by_path.values():
            cls = _unsharded_class(type(module))
            before = self.original.get(id(module))
            if before is None:
                if cls is not CheckpointWrapper:
                    self.fail(f"module {self.path_of[id(module)]!r} is a {_qualname(cls)} the parallelization "
                              "added; commlens models no module wrapper but checkpoint_wrapper")
                continue
            if cls is not before[1]:
                self.fail(f"module {self.shown(module)} changed class from {_qualname(before[1])} to "
                          f"{_qualname(cls)} in the parallelization; commlens cannot model it")
            forward = module.__dict__.get("forward")
            if forward is not before[3] and id(module) not in self.recorder.replaced_forward:
                name = getattr(forward, "__qualname__", None) or _qualname(forward)
                self.fail(f"module {self.shown(module)} had its forward replaced ({name}) by the "
                          "parallelization; commlens cannot model it")
            added = _hook_ids(module) - before[2] - self.recorder.hooks.get(id(module), set())
            if added:
                tables = (module._forward_pre_hooks, module._forward_hooks, module._backward_pre_hooks,
                          module._backward_hooks)
                hook = next(t[k] for t in tables for k in t if k in added)
                name = getattr(hook, "__qualname__", None) or getattr(getattr(hook, "func", None), "__qualname__", "?")
                self.fail(f"module {self.shown(module)} got a hook ({name}) from the parallelization that no "
                          "ParallelStyle or fully_shard registered (distribute_module input_fn/output_fn?); "
                          "commlens cannot model it")

    def check_expert_dispatch(self):
        """transformers' ``ep_dispatch_experts`` as commlens models it (plan style
        ``TransformersEpDispatchExpertsParallel``): the experts' own parameters sharded by expert
        (``grouped_gemm``: Shard(0)) on the expert-parallel mesh, a TP group of one rank or the
        expert group itself, and the all-to-all or all-reduce implementations."""
        from torch.distributed import get_process_group_ranks

        from commlens.plan.styles.transformers_ep_dispatch_experts import EP_IMPLEMENTATIONS

        for module, kwargs in self.recorder.ep_dispatch.values():
            where = f"transformers' ep_dispatch_experts on module {self.shown(module)}"
            implementation = kwargs.get("ep_implementation", "auto")
            if implementation not in EP_IMPLEMENTATIONS:
                self.fail(f"{where}: ep_implementation={implementation!r} is not modelled (commlens models "
                          f"{', '.join(map(repr, EP_IMPLEMENTATIONS))})")
            if getattr(getattr(module, "config", None), "_experts_implementation", None) == "deepgemm_megamoe":
                self.fail(f"{where}: DeepGEMM Mega MoE experts (MegaMoeEP) are not modelled")
            # install_forward's tp_mesh: the expert group itself (shares_batch), a TP group inside it
            # (1 < tp_size < ep_size: the plan names its dim, tp_mesh_dim), or of one rank
            tp_mesh, ep_mesh = kwargs["tp_mesh"], kwargs["ep_mesh"]
            tp_ranks, ep_ranks = (get_process_group_ranks(mesh.get_group()) for mesh in (tp_mesh, ep_mesh))
            style = next(style for style, styled, *_rest in self.recorder.styles if styled is module)
            style.shares_batch, style.tp_mesh_dim = tp_mesh.size() > 1 and tp_ranks == ep_ranks, None
            if tp_mesh.size() != 1 and tp_ranks != ep_ranks:
                if not set(tp_ranks) <= set(ep_ranks):
                    self.fail(f"{where}: its TP group of {tp_mesh.size()} ranks is not part of its expert group of "
                              f"{ep_mesh.size()}; commlens models a TP group inside the expert group")
                dims = self.mesh_dims(tp_mesh, f"{where}: its TP group")
                if dims is None or len(dims) != 1:
                    self.fail(f"{where}: its TP group is not one named mesh dim ({dims}); commlens models "
                              "transformers' tp dim")
                style.tp_mesh_dim = dims[0]
            sharded = {name: (layer, mesh) for layer, owner, name, mesh in self.recorder.layer_sharded
                       if owner is module}
            for name, p in module._parameters.items():
                layer, mesh = sharded.get(name, (None, None))
                if p is not None and (type(layer).__name__ != "MoEParamShard" or mesh != ep_mesh
                                      or repr(layer.placement) != "Shard(dim=0)"):
                    self.fail(f"{where}: its parameter {name!r} is not sharded by expert on the expert-parallel "
                              "mesh (grouped_gemm, Shard(0)); commlens models the experts split so")

    # ---- styles

    def parallelize_steps(self):
        from commlens.plan import style_to_json
        from commlens.plan.styles import BY_NAME, entry_of

        entries, styles = [], []
        for style, module, mesh, _rank in self.recorder.styles:
            if entry_of(type(style)) is None:
                self.fail(f"parallel style {_qualname(style)} on module {self.shown(module, True)} is not "
                          f"modelled (commlens models {', '.join(BY_NAME)})")
            if id(module) not in self.unwrapped:
                self.fail(f"{type(style).__name__} was applied to a {type(module).__name__} that the "
                          "parallelization then removed from the model")
            dims = self.mesh_dims(mesh, f"{type(style).__name__} on module {self.shown(module, True)}")
            dim = (dims if len(dims) > 1 else dims[0]) if dims else None  # a 2-D sub-mesh: its dims
            text = json.dumps(style_to_json(style, self.subject))
            entries.append((self.unwrapped[id(module)], (dim, text)))
            styles.append(style)
        steps = []
        for pattern, members in _group_patterns(entries, self.plain_paths, self.plain_containers):
            dim = entries[members[0]][1][0]
            if not steps or steps[-1][0] != dim or pattern in steps[-1][1]:
                steps.append((dim, {}))
            steps[-1][1][pattern] = styles[members[0]]
        return steps

    def module_subclasses(self):
        """The styled modules' classes that subclass nn.Linear or nn.Embedding, by the names the
        exported program gives them: torch's styles test isinstance, the program keeps names."""
        import torch.nn as nn

        from commlens.plan.validation import MODULE_BASES

        out = {}
        for _style, module, _mesh, _rank in self.recorder.styles:
            cls = self.original[id(module)][1]
            for base, name in zip((nn.Linear, nn.Embedding), MODULE_BASES):
                if cls is not base and issubclass(cls, base):
                    out[f"{cls.__module__}.{cls.__qualname__}"] = name
        return out

    def src_data_rank(self):
        # transformers' layers have none (they place their shards with src_data_rank=None)
        ranks = {rank for *_s, rank in self.recorder.styles if rank is not None}
        if len(ranks) > 1:
            self.fail(f"parallelize_module ran with different src_data_rank values {sorted(ranks, key=str)}; "
                      "a plan has one")
        return ranks.pop() if ranks else 0

    # ---- fully_shard units

    def units(self):
        from commlens.plan import FullyShard, fully_shard_to_json

        entries, units = [], []
        for record in self.recorder.units:
            modules, state, call = record["modules"], record["state"], record["call"]
            if call is None:
                self.fail(f"{record['caller']} sharded module {self.shown(modules[0])} with FSDP2's state; "
                          "commlens models fully_shard only")
            module = modules[0]
            where = (f"fully_shard of module {self.shown(module)}" if len(modules) == 1 else
                     f"fully_shard of modules [{', '.join(self.shown(m) for m in modules)}]")
            for arg in ("ignored_params", "dp_mesh_dims"):
                if call.get(arg):
                    self.fail(f"{where}: {arg} is not modelled")
            groups = state._fsdp_param_groups
            for group in groups:
                for attr, default, setter in _UNMODELLED_GROUP_STATE:
                    if getattr(group, attr, default) != default:
                        self.fail(f"{where}: {setter}({getattr(group, attr)!r}) is not modelled")
                for attr, default, setter in (("_all_gather_comm", "DefaultAllGather", "set_custom_all_gather"),
                                              ("_reduce_scatter_comm", "DefaultReduceScatter",
                                               "set_custom_reduce_scatter")):
                    if type(getattr(group, attr)).__name__ != default:
                        self.fail(f"{where}: {setter}({_qualname(getattr(group, attr))}) is not modelled")
            dims = self.mesh_dims(call["mesh"], where)
            raf = self.reshard_after_forward(call, state)
            # shard_placement_fn: the dims FSDP shards on besides 0, by FQN relative to the module
            off_dim0 = [p for g in groups for p in g.fsdp_params if p.fsdp_placement.dim != 0]
            names = {id(p): name for name, p in module.named_parameters()} if off_dim0 else {}
            shard_dims = {names[id(p.sharded_param)]: p.fsdp_placement.dim for p in off_dim0}
            if shard_dims and len(modules) > 1:
                self.fail(f"{where}: shard_placement_fn on a list of modules is not modelled")
            group = groups[0] if groups else None
            # fully_shard([a, b]): one unit of the modules, a tuple of their paths
            fqn = self.path_of[id(module)] if len(modules) == 1 else tuple(self.path_of[id(m)] for m in modules)
            unit = FullyShard(
                fqn=fqn, mesh_dims=dims or (), reshard_after_forward=raf,
                gradient_divide_factor=getattr(group, "gradient_divide_factor", None),
                force_sum_reduction_for_comms=bool(getattr(group, "force_sum_reduction_for_comms", False)),
                mp_policy=call["mp_policy"], offload_policy=call["offload_policy"],
                requires_gradient_sync=group.reduce_grads if group else True,
                # without reduce_grads FSDP skips the all-reduce too (FSDPParamGroup.post_backward)
                requires_all_reduce=group.all_reduce_grads if group and group.reduce_grads else True,
                forward_prefetch=tuple(self.path_of[id(s._modules[0])] for s in state._states_to_forward_prefetch),
                backward_prefetch=tuple(self.path_of[id(s._modules[0])] for s in state._states_to_backward_prefetch),
                shard_dims=shard_dims)
            body = fully_shard_to_json(unit, self.subject, where)
            del body["fqn"]
            if isinstance(fqn, tuple):  # a list unit stays as it is, grouped with no other
                entries.append((fqn[0], f"list unit {len(units)}"))
            else:
                entries.append((fqn, json.dumps(body)))
            units.append(unit)
        out = []
        for pattern, members in _group_patterns(entries, self.wrapped_paths, self.wrapped_containers):
            unit = units[members[0]]
            if not isinstance(unit.fqn, tuple):
                unit.fqn = pattern
            out.append(unit)
        return out

    @staticmethod
    def reshard_after_forward(call, state):
        """fully_shard's argument, unless ``set_reshard_after_forward(b)`` changed it since (then
        ``b``, read off the unit's post-forward mesh)."""
        raf = call["reshard_after_forward"]
        groups = state._fsdp_param_groups
        if state._auto_reshard_after_forward or not groups:
            return raf  # None, or a unit without parameters, which nothing reshards
        shard_size = groups[0].mesh_info.shard_mesh_size
        now = groups[0].post_forward_mesh_info
        now_size = 0 if now is None else now.shard_mesh_size
        if isinstance(raf, bool):
            given = shard_size if raf else 0
        else:  # an int: 1 keeps the parameters unsharded, the shard size is True
            given = None if raf is None else 0 if raf == 1 else raf
        return raf if given == now_size else now is not None

    # ---- activation checkpointing

    def checkpoints(self):
        import torch.utils.checkpoint as checkpoint
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, CheckpointWrapper

        from commlens.plan import ActivationCheckpoint, checkpoint_save_op

        entries = []
        for module in self.modules_by_path.values():
            if _unsharded_class(type(module)) is not CheckpointWrapper:
                continue
            where = f"checkpoint_wrapper of module {self.shown(module, True)}"
            if module.checkpoint_impl is not CheckpointImpl.NO_REENTRANT:
                self.fail(f"{where} is reentrant ({module.checkpoint_impl}); commlens models non-reentrant "
                          "checkpointing only")
            fn = module.checkpoint_fn
            if not (isinstance(fn, functools.partial) and fn.func is checkpoint.checkpoint and not fn.args):
                self.fail(f"{where} runs {getattr(fn, '__qualname__', fn)!r}, not torch.utils.checkpoint."
                          "checkpoint; commlens cannot model it")
            save_ops, every_second, forced, early_stop = (), (), (), True
            for key, value in fn.keywords.items():
                if key in _NEUTRAL_CHECKPOINT_KWARGS or (key, value) == ("use_reentrant", False):
                    continue
                if key == "early_stop" and isinstance(value, bool):
                    early_stop = value
                    continue
                if key == "context_fn" and value is checkpoint.noop_context_fn:
                    continue
                if key == "context_fn":
                    save_ops, every_second, forced = self.save_ops(value, where)
                    continue
                self.fail(f"{where}: checkpoint option {key}={value!r} is not modelled")
            for op in save_ops:
                checkpoint_save_op(op, self.subject, where)
            entries.append((self.unwrapped[id(module)], json.dumps([save_ops, every_second, forced, early_stop])))
        groups = _group_patterns(entries, self.plain_paths, self.plain_containers)
        options = [json.loads(entries[members[0]][1]) for _pattern, members in groups]
        return tuple(ActivationCheckpoint(pattern, save_ops=tuple(save_ops), early_stop=early_stop,
                                          recompute_every_second=tuple(every_second),
                                          recompute_mm_rhs_shapes=forced)
                     for (pattern, _members), (save_ops, every_second, forced, early_stop) in zip(groups, options))

    def save_ops(self, context_fn, where):
        """``(save_ops, recompute_every_second, recompute_mm_rhs_shapes)`` of a selective policy commlens
        models: an op list, ``partial(create_selective_checkpoint_contexts, [ops])``, or torchtitan's
        per-op policy."""
        import torch
        from torch.utils.checkpoint import create_selective_checkpoint_contexts

        if (isinstance(context_fn, functools.partial) and context_fn.func is create_selective_checkpoint_contexts
                and len(context_fn.args) == 1 and not context_fn.keywords
                and isinstance(context_fn.args[0], (list, tuple))
                and all(isinstance(op, torch._ops.OpOverload) for op in context_fn.args[0])):
            return tuple(str(op) for op in context_fn.args[0]), (), ()
        if (getattr(context_fn, "__module__", None) == "torchtitan.distributed.activation_checkpoint"
                and getattr(context_fn, "__qualname__", None) == _TORCHTITAN_OP_SAC):
            return self.torchtitan_op_sac(context_fn, where)
        shown = getattr(getattr(context_fn, "func", context_fn), "__qualname__", repr(context_fn))
        self.fail(f"{where}: context_fn {shown} is not partial(create_selective_checkpoint_contexts, "
                  "[op overloads]) (an op-list policy) nor torchtitan's per-op policy; commlens cannot model it")

    def torchtitan_op_sac(self, context_fn, where):
        """torchtitan's per-op policy (0.2.2, activation_checkpoint.py ``_apply_op_sac``): it saves the
        outputs of the ops in ``op_sac_save_list`` except every second ``aten.mm`` of each run, and
        recomputes the mms whose second operand has a shape ``per_op_sac_force_recompute_mm_shapes_by_fqns``
        names (``recompute_mm_rhs_shapes``; not counted among the mms). The list's higher-order ops
        (``flex_attention``, ``inductor_compiled_code``) are left out of the plan: an exported
        program has no such op, and one that had would be refused by name when predicted."""
        import inspect

        import torch

        policy = inspect.getclosurevars(context_fn).nonlocals.get("_get_custom_policy")
        cells = inspect.getclosurevars(policy).nonlocals if callable(policy) else {}
        save_list, forced = cells.get("op_sac_save_list"), cells.get("mm_recompute_shapes")
        if not isinstance(save_list, (set, frozenset, list, tuple)) or not isinstance(forced, set):
            self.fail(f"{where}: torchtitan's per-op policy {_TORCHTITAN_OP_SAC} does not hold the op list and mm "
                      "shapes commlens reads (another torchtitan version than 0.2.2?); commlens cannot model it")
        ops = sorted(str(op) for op in save_list if isinstance(op, torch._ops.OpOverload))
        return tuple(ops), ("aten.mm.default",), tuple(sorted(tuple(s) for s in forced))

    # ---- parameters

    def placements_and_frozen(self, fsdp_params):
        from torch.distributed.tensor import DTensor

        for owner, name in self.recorder.placed_then_sharded:
            self.fail(f"parameter {name!r} of module {self.shown(owner, True)} was placed by distribute_tensor "
                      "and then sharded by fully_shard; a plan places parameters after its fully_shard units")
        placements, frozen = {}, []
        for module in self.modules_by_path.values():
            prefix = self.unwrapped[id(module)]
            for table in (module._parameters, module._buffers):
                for name, t in table.items():
                    if t is None:
                        continue
                    fqn = f"{prefix}.{name}" if prefix else name
                    if table is module._parameters and not t.requires_grad and fqn not in frozen:
                        frozen.append(fqn)
                    if (isinstance(t, DTensor) and id(t) not in fsdp_params
                            and (id(module), name) not in self.recorder.styled and fqn not in placements):
                        dims = self.mesh_dims(t.device_mesh, f"distribute_tensor of {fqn!r}")
                        pls = tuple(t.placements)
                        whole_mesh = t.device_mesh == self.root_mesh and not self.other_roots
                        placements[fqn] = pls if dims is None or whole_mesh else dict(zip(dims, pls))
        return placements, tuple(frozen)


def _build_meta_model(model_factory):
    """``(model, args, kwargs)`` from the factory, built on the meta device: with ``device="meta"``
    when the factory takes a ``device`` argument the spec leaves out, under ``torch.device("meta")``
    in any case, then moved there (a factory that pins a device)."""
    import torch

    from commlens._factory import normalize_model_result, resolve

    if isinstance(model_factory, str):
        fn, kwargs = resolve(model_factory)
        name = model_factory
    else:
        fn, kwargs, name = model_factory, {}, getattr(model_factory, "__qualname__", repr(model_factory))
    try:
        takes_device = "device" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes_device = False
    if takes_device and "device" not in kwargs:
        kwargs = dict(kwargs, device="meta")
    try:
        with torch.device("meta"):
            result = fn(**kwargs)
    except CommlensError:
        raise
    except (TypeError, ValueError) as err:
        raise CommlensError(name, f"calling the factory failed: {err}") from None
    model, args, kw = normalize_model_result(name, result)
    return model.to("meta"), args, kw


def _resolve_parallelize(parallelize):
    from commlens._factory import resolve

    if isinstance(parallelize, str):
        spec = parallelize
        if spec == _TRANSFORMERS or spec.startswith(_TRANSFORMERS + "("):
            spec = "commlens._transformers:parallelize" + spec[len(_TRANSFORMERS):]
        fn, kwargs = resolve(spec)
        return functools.partial(fn, **kwargs), parallelize
    if not callable(parallelize):
        raise CommlensError(repr(parallelize), "parallelize must be a MODULE:FN spec or a callable FN(model)")
    return parallelize, f"{getattr(parallelize, '__module__', '?')}:{getattr(parallelize, '__qualname__', '?')}"


def _loss(loss):
    from commlens.plan import Loss

    if isinstance(loss, Loss):
        return loss
    if loss == "sum":
        return Loss.sum()
    if loss == "cross_entropy":
        return Loss.cross_entropy()
    raise CommlensError("capture", f"unknown loss {loss!r} (expected 'sum' or 'cross_entropy')")


def capture(model_factory, parallelize, world_size, *, loss="sum", loss_parallel=False, inputs_requires_grad=()):
    """The :class:`commlens.plan.Plan` that ``parallelize(model)`` applies to the factory's model.

    ``model_factory``: a ``MODULE:FACTORY(...)`` spec or a callable returning ``(model, args[,
    kwargs])``; the model is built on the meta device.  ``parallelize``: a ``MODULE:FN(...)`` spec
    or a callable ``FN(model)``, run under a fake process group of ``world_size`` ranks.
    ``loss`` (``"sum"``, ``"cross_entropy"`` or a :class:`commlens.plan.Loss`), ``loss_parallel``
    and ``inputs_requires_grad`` are what the plan says about the training step, which FN does not
    run.  Raises :class:`CaptureError` (a :class:`commlens.CommlensError`) for what a plan cannot
    state."""
    from commlens.measure import fake_process_group
    from commlens.plan import Plan, validate
    from commlens.plan.validation import step_dims

    fn, subject = _resolve_parallelize(parallelize)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise CommlensError(subject, f"world size must be a positive int, got {world_size!r}")
    plan_loss = _loss(loss)
    model, args, kwargs = _build_meta_model(model_factory)
    original = {id(m): (m, type(m), _hook_ids(m), m.__dict__.get("forward")) for m in model.modules()}
    with fake_process_group(world_size, subject), _Recorder() as recorder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            returned = fn(model)
        except CommlensError:
            raise
        except Exception as err:  # noqa: BLE001 - the user's code: one line naming it
            raise CaptureError(subject, f"the parallelize function raised {type(err).__name__}: {err}") from None
        if returned is not None and returned is not model:
            raise CaptureError(subject, f"the parallelize function returned a {_qualname(returned)}, not the "
                               f"{type(model).__name__} it was given; commlens captures a model parallelized "
                               "in place")
        cap = _Capture(subject, model, original, recorder)
        cap.check_modules()
        steps = cap.parallelize_steps()
        units = cap.units()
        checkpoints = cap.checkpoints()
        fsdp_params = {id(p.sharded_param) for r in recorder.units
                       for g in r["state"]._fsdp_param_groups for p in g.fsdp_params}
        placements, frozen = cap.placements_and_frozen(fsdp_params)
        src_data_rank = cap.src_data_rank()
        module_subclasses = cap.module_subclasses()
    root, flattened = cap.root_mesh, {}
    unflattened = cap.plan_mesh(world_size, style_dims={name for dim, _plan in steps for name in step_dims(dim)})
    if root is None:
        shape, names, device_type = (world_size,), None, "cpu"
    elif unflattened is not None:
        (shape, names, aliases, flattened), device_type = unflattened, root.device_type
        steps = [(tuple(aliases.get(d, d) for d in dim) if isinstance(dim, tuple) else aliases.get(dim, dim), plan)
                 for dim, plan in steps]
        for style in [style for _dim, plan in steps for style in plan.values()]:
            if getattr(style, "tp_mesh_dim", None) in aliases:  # transformers' ep_dispatch_experts
                style.tp_mesh_dim = aliases[style.tp_mesh_dim]
        for dim in [name for spec in placements.values() if isinstance(spec, dict) for name in spec]:
            if dim in flattened:
                raise CaptureError(subject, f"a DTensor placement is on mesh dim {dim!r}, flattened from "
                                   f"{' x '.join(flattened[dim])}; placements on a flattened dim are not modelled "
                                   "(fully_shard's mesh and parallelize_module's may be one)")
        for unit in units:
            unit.mesh_dims = tuple(aliases.get(name, name) for name in unit.mesh_dims)
        for spec in placements.values():
            if isinstance(spec, dict):
                for name in [n for n in spec if n in aliases]:
                    spec[aliases[name]] = spec.pop(name)
    else:
        shape, names, device_type = tuple(root.shape), root.mesh_dim_names, root.device_type
        if names is None and units:
            # fully_shard's default mesh (and any 1-D init_device_mesh without names): a plan's
            # units name their dims; the name changes no collective
            names = ("dp",)
            for unit in units:
                unit.mesh_dims = names
    if len(steps) == 1 and not isinstance(steps[0][0], tuple):
        (tp_dim, parallelize_plan), = steps
    else:
        tp_dim, parallelize_plan = None, steps
    plan = Plan(mesh_shape=shape, mesh_dim_names=None if names is None else tuple(names), device_type=device_type,
                flattened_dims=flattened,
                parallelize_plan=parallelize_plan, tp_mesh_dim=tp_dim, placements=placements,
                inputs_requires_grad=tuple(inputs_requires_grad), frozen_after_parallelize=frozen,
                loss=plan_loss, loss_parallel=loss_parallel, src_data_rank=src_data_rank,
                name=getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", None),
                source=subject, fully_shard=tuple(units), activation_checkpoint=checkpoints,
                module_subclasses=module_subclasses)
    if plan.world_size != world_size:
        raise CaptureError(subject, f"the device mesh {shape} has {plan.world_size} devices but the world size "
                           f"is {world_size}")
    validate(plan, subject)
    return plan


def _input_key(text):
    return int(text) if text.isdigit() else text


@cli_main
def main(argv=None):
    from commlens.plan import save

    parser = argparse.ArgumentParser(
        prog="python -m commlens.capture",
        description="Run a parallelize function on a meta-device model under a fake process group and write "
                    "the commlens plan it applied.")
    parser.add_argument("--model", required=True, metavar="MODULE:FACTORY",
                        help="model factory (returns (model, args)), as commlens.export takes it")
    parser.add_argument("--parallelize", required=True, metavar="MODULE:FN",
                        help="FN(model) applying parallelize_module / fully_shard / checkpoint_wrapper / "
                             "distribute_tensor, optionally with (key=literal, ...) arguments; 'transformers' "
                             "for transformers' from_pretrained(tp_plan='auto') calls")
    parser.add_argument("--world-size", required=True, type=int, help="ranks of the fake process group")
    parser.add_argument("--loss", default="sum", choices=("sum", "cross_entropy"),
                        help="the training step's loss (cross_entropy: random targets, seed 0)")
    parser.add_argument("--loss-reduction", default="mean", choices=("mean", "sum"),
                        help="cross_entropy's reduction (torchtitan's loss: sum)")
    parser.add_argument("--logits-dtype", choices=("float32", "bfloat16", "float16"),
                        help="cross_entropy casts the logits to this dtype first (torchtitan's loss: float32)")
    parser.add_argument("--loss-parallel", action="store_true", help="the step runs inside loss_parallel()")
    parser.add_argument("--input-requires-grad", action="append", default=[], metavar="KEY",
                        help="a user input (position or keyword name) that requires grad; repeatable")
    parser.add_argument("-o", "--output", required=True, help="plan JSON path")
    ns = parser.parse_args(argv)
    loss = ns.loss
    if ns.loss_reduction != "mean" or ns.logits_dtype is not None:
        if ns.loss != "cross_entropy":
            parser.error("--loss-reduction and --logits-dtype need --loss cross_entropy")
        from commlens.plan import Loss

        loss = Loss.cross_entropy(reduction=ns.loss_reduction, logits_dtype=ns.logits_dtype)
    plan = capture(ns.model, ns.parallelize, ns.world_size, loss=loss, loss_parallel=ns.loss_parallel,
                   inputs_requires_grad=tuple(_input_key(k) for k in ns.input_requires_grad))
    save(plan, ns.output)
    entries = sum(len(styles) for _dim, styles in plan.parallelize_steps())
    print(f"commlens: wrote {ns.output} ({entries} plan entries, {len(plan.fully_shard)} fully_shard units, "
          f"{len(plan.activation_checkpoint)} activation checkpoints, mesh {tuple(plan.mesh_shape)}"
          f"{'' if plan.mesh_dim_names is None else ' ' + str(tuple(plan.mesh_dim_names))}, {plan.device_type})")
    return 0


class _CallableModule(types.ModuleType):
    """``commlens.capture(...)`` calls :func:`capture`: the name is both this module (for
    ``python -m commlens.capture``) and the function."""

    def __call__(self, *args, **kwargs):
        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule


if __name__ == "__main__":
    from commlens.capture import main as _main

    sys.exit(_main())
