"""The plan's data model: :class:`Plan` and the FSDP2, activation checkpointing and loss entries it
holds (the dataclasses plan factories build), and :class:`PlanError`."""

import math
from dataclasses import dataclass, field
from typing import Any

from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy

from commlens._errors import CommlensError

FORMAT = "commlens-plan"
VERSION = 1


class PlanError(CommlensError):
    """An invalid plan (bad JSON, unknown style, bad placement, ...)."""


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

      ``logits_dtype`` (``"float32"``, ``"bfloat16"``, ``"float16"`` or None)
      casts the logits to that dtype first, as torchtitan's loss does with
      ``pred.float()``: under bf16 mixed precision the loss-parallel
      all-reduces then carry float32.
    """

    kind: str = "sum"
    targets: str = "random"
    seed: int = 0
    reduction: str = "mean"
    ignore_index: int = -100
    logits_dtype: str | None = None

    @classmethod
    def sum(cls):
        return cls(kind="sum")

    @classmethod
    def cross_entropy(cls, targets="random", seed=0, reduction="mean", ignore_index=-100, logits_dtype=None):
        return cls(kind="cross_entropy", targets=targets, seed=seed,
                   reduction=reduction, ignore_index=ignore_index, logits_dtype=logits_dtype)


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

    ``fqn`` may also be a tuple of patterns: **one** ``fully_shard([...])``
    call on every module they match, in model order, which makes them one
    parameter group (torchtitan's ``fully_shard([model.norm, model.output])``);
    a list is taken as a tuple.  ``gradient_divide_factor`` calls
    ``module.set_gradient_divide_factor(f)`` after ``fully_shard``
    (torchtitan's 1.0): FSDP then reduces with a pre-multiplied sum instead of
    an average, which changes no collective or byte.  ``force_sum_reduction_for_comms``
    calls ``module.set_force_sum_reduction_for_comms(True)`` (transformers' experts under
    FSDP when ep takes part of fsdp): FSDP reduces by a sum and divides after, also the same
    collectives and bytes.

    ``shard_dims`` maps parameters of the unit (FQNs relative to its module) to the dim FSDP
    shards them on instead of 0: ``fully_shard(..., shard_placement_fn=...)`` returning
    ``Shard(dim)`` for them (torchtitan's ``Shard(1)`` for MoE experts).  FSDP requires such a dim
    to split evenly; the all-gathered and reduce-scattered bytes are then unpadded.  Not for list
    units.
    """

    fqn: str | tuple
    mesh_dims: tuple
    reshard_after_forward: bool | int | None = None
    mp_policy: MixedPrecisionPolicy = field(default_factory=MixedPrecisionPolicy)
    offload_policy: OffloadPolicy = field(default_factory=OffloadPolicy)
    requires_gradient_sync: bool = True
    requires_all_reduce: bool = True
    forward_prefetch: tuple = ()
    backward_prefetch: tuple = ()
    gradient_divide_factor: float | None = None
    shard_dims: dict = field(default_factory=dict)
    force_sum_reduction_for_comms: bool = False

    def __post_init__(self):
        if isinstance(self.fqn, list):
            self.fqn = tuple(self.fqn)
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

    ``recompute_every_second``: ops of ``save_ops`` (compute ops) whose 2nd,
    4th, ... call in each run of the module is recomputed after all --
    torchtitan's per-op policy (``activation_checkpoint.mode="selective"``,
    ``selective_ac_option="op"``), which saves every other ``aten.mm``.

    ``recompute_mm_rhs_shapes``: ``(rows, columns)`` pairs; an ``aten.mm`` whose
    second operand has one of these shapes is recomputed and not counted by
    ``recompute_every_second`` -- torchtitan's
    ``per_op_sac_force_recompute_mm_shapes_by_fqns`` (its MoE routers' gates by
    default), ``(in_features, out_features)`` of each Linear it names.  Needs
    ``"aten.mm.default"`` in ``recompute_every_second``.
    """

    fqn: str
    wrapper: bool = True
    save_ops: tuple = ()
    early_stop: bool = True
    recompute_every_second: tuple = ()
    recompute_mm_rhs_shapes: tuple = ()

    def __post_init__(self):
        for name in ("save_ops", "recompute_every_second"):
            value = getattr(self, name)
            if isinstance(value, (str, list)):
                setattr(self, name, (value,) if isinstance(value, str) else tuple(value))
        if isinstance(self.recompute_mm_rhs_shapes, (list, tuple)):
            self.recompute_mm_rhs_shapes = tuple(tuple(s) if isinstance(s, list) else s
                                                 for s in self.recompute_mm_rhs_shapes)


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

    ``module_subclasses`` maps module classes of the model, named as ``torch.export`` names them
    (``cls.__module__ + "." + cls.__qualname__``), that subclass ``nn.Linear`` or ``nn.Embedding``
    to that base (``"torch.nn.modules.linear.Linear"`` / ``"torch.nn.modules.sparse.Embedding"``):
    an exported program keeps only class names, and torch's styles test ``isinstance``.
    ``commlens.capture`` records the classes of the modules it saw styled.

    ``fully_shard`` is a sequence of :class:`FullyShard` units applied in
    order after every ``parallelize_module`` step (shard children first, the
    root last, as with ``fully_shard`` itself).

    ``flattened_dims`` names groups of mesh dims flattened into one, ``{name: (dim, dim, ...)}``
    in mesh order, as ``mesh[dims]._flatten(name)`` makes them (torchtitan's ``fsdp`` over
    ``efsdp`` x ``ep``): a :class:`FullyShard` unit's ``mesh_dims`` may name them.

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
    module_subclasses: dict = field(default_factory=dict)
    flattened_dims: dict = field(default_factory=dict)

    @property
    def world_size(self):
        return math.prod(self.mesh_shape)

    def parallelize_steps(self):
        """``[(mesh_dim, {pattern: style})]`` in application order; ``mesh_dim`` a name, a tuple of
        two names for a 2-D sub-mesh (``mesh["ep", "etp"]``), or None for the whole 1-D mesh."""
        pp = self.parallelize_plan
        if isinstance(pp, dict):
            return [(self.tp_mesh_dim, pp)] if pp else []
        return [(dim, dict(d)) for dim, d in pp]
