"""Example sharding plans (plan factories) for the example models.

Each factory takes ``tp=`` (and ``dp=`` for 2-D meshes) plus a few options
and returns a :class:`commlens.plan.Plan`; serialise one with::

    python -m commlens.plan 'examples.plans:gpt2_tp(tp=4)' -o plan.json

Common options:

* ``device_type``: ``"cpu"`` (default) or ``"cuda"``;
* ``input_requires_grad``: mark user input 0 ``requires_grad`` (float inputs only);
* ``frozen``: parameter FQN patterns (fnmatch) set to ``requires_grad=False``
  (``frozen_after``, where offered: after parallelising);
* ``loss``: ``"sum"`` or ``"cross_entropy"`` (random targets, seed 0).

FSDP2 factories (``*_fsdp``, ``*_hsdp``, ``*_fsdp_tp``, ``*_hsdp_tp``) add
``fully_shard`` units the way torchtitan does: every ``layers.*`` block, then
the root, on the data-parallel mesh dims (TP, if any, first on ``tp``).  Their
options:

* ``reshard_after_forward``: passed to the ``layers.*`` units only; the root
  keeps None (fully_shard's default: False for the root);
* ``mixed_precision``: None (``MixedPrecisionPolicy()``) or ``"bf16"``
  (``param_dtype=torch.bfloat16, reduce_dtype=torch.float32``), for every unit.

* ``prefetch`` (``gpt2_fsdp``, ``llama_fsdp_tp``): None (one ``layers.*``
  unit, FSDP2's default prefetching) or ``"explicit"``: one unit per block
  ``layers.0`` ... ``layers.{n_layers-1}`` (``n_layers=2``, the example
  models' default), block i prefetching ``layers.{i+1}`` in forward and
  ``layers.{i-1}`` in backward, as torchtitan's ``apply_fsdp`` does.

``stacked_mlp_fsdp_tp_nested_ac`` names its ``fully_shard`` units on the
wrapped model.  ``with_ac(plan=NAME, ac=("layers.*",), wrapper=True, **options)`` is any
factory here (by name) plus activation checkpointing of the modules ``ac``
matches: ``checkpoint_wrapper`` on each (torchtitan's full AC) or, with
``wrapper=False``, the model's own forward checkpointing them (Hugging Face
``gradient_checkpointing``).

Model/plan pairs: ``linear_colwise``/``linear_rowwise`` for ``examples.mlp:linear``,
``mlp_tp``/``mlp_2d``/``mlp_nd`` for ``examples.mlp:mlp``, ``stacked_mlp_tp``/
``stacked_mlp_fsdp``/``stacked_mlp_fsdp_tp_nested`` for ``examples.mlp:stacked_mlp``, ``gpt2_tp``/``gpt2_tp_sp``/
``gpt2_tp_loss_parallel``/``gpt2_fsdp``/``gpt2_hsdp``/``gpt2_fsdp_tp`` for
``examples.gpt2:gpt2``, ``llama_tp``/``llama_2d``/``llama_fsdp_tp``/``llama_hsdp_tp``
for ``examples.llama:llama``, ``gated_tp`` for ``examples.kwargs:gated`` (keyword
inputs), ``shared_mlp_tp``/``shared_mlp_fsdp`` for ``examples.shared:shared_mlp`` (a module
called twice).  ``mlp_nd`` has no parallelize step: explicit
placements on both dims of a 2-D mesh.
"""

import dataclasses

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
)

from commlens.plan import ActivationCheckpoint, FullyShard, Loss, Plan


def _loss(loss):
    if loss == "sum":
        return Loss.sum()
    if loss == "cross_entropy":
        return Loss.cross_entropy(targets="random", seed=0)
    raise ValueError(f"loss must be 'sum' or 'cross_entropy', got {loss!r}")


def _plan(name, tp, styles, *, dp=None, device_type="cpu", input_requires_grad=False,
          frozen=(), frozen_after=(), loss="sum", loss_parallel=False):
    if dp is None:
        shape, names, tp_dim = (tp,), ("tp",), "tp"
    else:
        shape, names, tp_dim = (dp, tp), ("dp", "tp"), "tp"
    return Plan(
        name=name,
        mesh_shape=shape,
        mesh_dim_names=names,
        device_type=device_type,
        parallelize_plan=styles,
        tp_mesh_dim=tp_dim,
        inputs_requires_grad=(0,) if input_requires_grad else (),
        frozen=tuple(frozen),
        frozen_after_parallelize=tuple(frozen_after),
        loss=_loss(loss),
        loss_parallel=loss_parallel,
    )


# ---------------------------------------------------------------- Linear / MLP

def linear_colwise(*, tp=4, input_requires_grad=False, device_type="cpu", frozen=(),
                   use_local_output=True):
    """Root ``nn.Linear`` (examples.mlp:linear) with ColwiseParallel."""
    return _plan("linear_colwise", tp, {"": ColwiseParallel(use_local_output=use_local_output)},
                 device_type=device_type, input_requires_grad=input_requires_grad, frozen=frozen)


def linear_rowwise(*, tp=4, input_requires_grad=False, device_type="cpu", frozen=(),
                   output="replicate"):
    """Root ``nn.Linear`` with RowwiseParallel; the input is a plain tensor
    that each rank passes as its Shard(-1) slice of the example input (the
    global one: ``measure`` passes each rank its slice)."""
    out = Replicate() if output == "replicate" else Shard(1)
    return _plan("linear_rowwise", tp, {"": RowwiseParallel(output_layouts=out)},
                 device_type=device_type, input_requires_grad=input_requires_grad, frozen=frozen)


def mlp_tp(*, tp=4, input_requires_grad=False, device_type="cpu", frozen=()):
    """examples.mlp:mlp: w1 ColwiseParallel, w2 RowwiseParallel."""
    return _plan("mlp_tp", tp, {"w1": ColwiseParallel(), "w2": RowwiseParallel()},
                 device_type=device_type, input_requires_grad=input_requires_grad, frozen=frozen)


def normalized_mlp_tp(*, tp=4, input_requires_grad=False, device_type="cpu"):
    """examples.mlp:normalized_mlp: w1 ColwiseParallel keeping its output a DTensor
    (use_local_output=False), so that F.normalize's norm over the sharded features is a partial
    p-norm (_NormPartial) DTensor reduces; w2 RowwiseParallel takes the normalised Shard(-1)."""
    return _plan("normalized_mlp_tp", tp,
                 {"w1": ColwiseParallel(use_local_output=False), "w2": RowwiseParallel(input_layouts=Shard(-1))},
                 device_type=device_type, input_requires_grad=input_requires_grad)


def stacked_mlp_tp(*, tp=4, input_requires_grad=False, device_type="cpu", frozen=()):
    """examples.mlp:stacked_mlp: every layer's w1 Colwise, w2 Rowwise (fnmatch ``*``)."""
    return _plan("stacked_mlp_tp", tp,
                 {"layers.*.w1": ColwiseParallel(), "layers.*.w2": RowwiseParallel()},
                 device_type=device_type, input_requires_grad=input_requires_grad, frozen=frozen)


def mlp_2d(*, dp=2, tp=2, input_requires_grad=False, device_type="cpu", frozen=()):
    """examples.mlp:mlp on a 2-D ``(dp, tp)`` mesh, TP applied on ``tp``."""
    return _plan("mlp_2d", tp, {"w1": ColwiseParallel(), "w2": RowwiseParallel()}, dp=dp,
                 device_type=device_type, input_requires_grad=input_requires_grad, frozen=frozen)


def mlp_nd(*, dp=2, tp=4, device_type="cpu"):
    """examples.mlp:mlp with no parallelize step: explicit placements on the
    whole 2-D ``("dp", "tp")`` mesh, sharded on both dims, so DTensor's own
    op strategies pick every redistribution.  w1.weight and w1.bias
    ``(Replicate(), Shard(0))``, w2.weight ``(Shard(0), Shard(1))``, w2.bias
    ``(Replicate(), Replicate())``; input 0 ``(Shard(0), Shard(2))`` (batch on
    dp, features on tp), requiring grad; loss ``sum``."""
    return Plan(
        name="mlp_nd",
        mesh_shape=(dp, tp),
        mesh_dim_names=("dp", "tp"),
        device_type=device_type,
        placements={
            "w1.weight": (Replicate(), Shard(0)),
            "w1.bias": (Replicate(), Shard(0)),
            "w2.weight": (Shard(0), Shard(1)),
            "w2.bias": (Replicate(), Replicate()),
        },
        input_placements={0: (Shard(0), Shard(2))},
        inputs_requires_grad=(0,),
        loss=Loss.sum(),
    )


# ---------------------------------------------------------------------- GPT-2

def _gpt2_block_tp():
    return {
        "layers.*.attn.wq": ColwiseParallel(),
        "layers.*.attn.wk": ColwiseParallel(),
        "layers.*.attn.wv": ColwiseParallel(),
        "layers.*.attn.wo": RowwiseParallel(),
        "layers.*.mlp.w1": ColwiseParallel(),
        "layers.*.mlp.w2": RowwiseParallel(),
    }


def gpt2_tp(*, tp=4, dp=None, loss="cross_entropy", loss_parallel=False,
            device_type="cpu", frozen=()):
    """examples.gpt2:gpt2, Megatron-style TP without sequence parallel.

    Token embedding RowwiseParallel (vocab-sharded, output all-reduced to
    Replicate); position embedding and LayerNorms replicated (untouched);
    q/k/v/w1 Colwise; wo/w2 Rowwise; lm_head Colwise gathering the logits
    (or, with ``loss_parallel=True``, keeping them Shard(-1) as a DTensor for
    ``loss_parallel()``).  ``parallelize_module`` gives tok_embeddings and
    lm_head separate DTensor parameters, so the weight tie is broken.
    """
    styles = {"tok_embeddings": RowwiseParallel(input_layouts=Replicate())}
    styles.update(_gpt2_block_tp())
    if loss_parallel:
        styles["lm_head"] = ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
    else:
        styles["lm_head"] = ColwiseParallel(output_layouts=Replicate())
    return _plan("gpt2_tp" + ("_loss_parallel" if loss_parallel else ""), tp, styles, dp=dp,
                 device_type=device_type, frozen=frozen, loss=loss, loss_parallel=loss_parallel)


def gpt2_tp_loss_parallel(*, tp=4, dp=None, device_type="cpu", frozen=()):
    """gpt2_tp with loss_parallel: lm_head Colwise(output_layouts=Shard(-1),
    use_local_output=False) and cross_entropy inside ``loss_parallel()``."""
    return gpt2_tp(tp=tp, dp=dp, loss="cross_entropy", loss_parallel=True,
                   device_type=device_type, frozen=frozen)


def gpt2_tp_sp(*, tp=4, dp=None, loss="cross_entropy", loss_parallel=False,
               device_type="cpu", frozen=()):
    """examples.gpt2:gpt2 with TP + sequence parallel.

    Both embeddings RowwiseParallel reduce-scattering onto the sequence dim
    (token output Shard(1) of [B, S, D], position output Shard(0) of [S, D],
    so the local shards add up); LayerNorms SequenceParallel;
    ``attn``/``mlp`` PrepareModuleInput all-gathering Shard(1) -> Replicate;
    wo/w2 Rowwise reduce-scattering to Shard(1); lm_head Colwise with
    ``input_layouts=Shard(1)``.
    """
    styles = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "pos_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0)),
        "layers.*.attn_norm": SequenceParallel(),
        "layers.*.attn": PrepareModuleInput(input_layouts=(Shard(1),),
                                            desired_input_layouts=(Replicate(),)),
        "layers.*.attn.wq": ColwiseParallel(),
        "layers.*.attn.wk": ColwiseParallel(),
        "layers.*.attn.wv": ColwiseParallel(),
        "layers.*.attn.wo": RowwiseParallel(output_layouts=Shard(1)),
        "layers.*.mlp_norm": SequenceParallel(),
        "layers.*.mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                           desired_input_layouts=(Replicate(),)),
        "layers.*.mlp.w1": ColwiseParallel(),
        "layers.*.mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
        "norm": SequenceParallel(),
    }
    if loss_parallel:
        styles["lm_head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                            use_local_output=False)
    else:
        styles["lm_head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    return _plan("gpt2_tp_sp", tp, styles, dp=dp, device_type=device_type, frozen=frozen,
                 loss=loss, loss_parallel=loss_parallel)


# ---------------------------------------------------------------------- Llama

def llama_tp(*, tp=4, dp=None, sp=True, loss="cross_entropy", loss_parallel=False,
             device_type="cpu", frozen=(), frozen_after=()):
    """examples.llama:llama, torchtitan-style TP.

    With ``sp=True`` (torchtitan's plan): tok_embeddings Rowwise ->
    Shard(1); RMSNorms SequenceParallel; ``attention`` PrepareModuleInput
    ``(Shard(1), None) -> (Replicate(), None)`` (the second input is the RoPE
    table, left alone); ``feed_forward`` PrepareModuleInput ``Shard(1) ->
    Replicate()``; wq/wk/wv/w1/w3 Colwise; wo/w2 Rowwise -> Shard(1); output
    Colwise(input_layouts=Shard(1)).

    With ``sp=False``: tok_embeddings Rowwise -> Replicate; norms untouched;
    ``attention``/``feed_forward`` PrepareModuleInput Replicate -> Replicate
    (turns the block input into a DTensor once, so the q/k/v (w1/w3) input
    grads are summed as DTensors before one all-reduce); wo/w2 Rowwise.

    ``loss_parallel=True``: output Colwise(output_layouts=Shard(-1),
    use_local_output=False) and cross_entropy inside ``loss_parallel()``.
    """
    seq = Shard(1) if sp else Replicate()
    styles = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
    }
    if sp:
        styles["norm"] = SequenceParallel()
    if loss_parallel:
        styles["output"] = ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1),
                                           use_local_output=False)
    else:
        styles["output"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate())
    if sp:
        styles["layers.*.attention_norm"] = SequenceParallel()
    styles.update({
        "layers.*.attention": PrepareModuleInput(input_layouts=(seq, None),
                                                 desired_input_layouts=(Replicate(), None)),
        "layers.*.attention.wq": ColwiseParallel(),
        "layers.*.attention.wk": ColwiseParallel(),
        "layers.*.attention.wv": ColwiseParallel(),
        "layers.*.attention.wo": RowwiseParallel(output_layouts=seq),
    })
    if sp:
        styles["layers.*.ffn_norm"] = SequenceParallel()
    styles.update({
        "layers.*.feed_forward": PrepareModuleInput(input_layouts=(seq,),
                                                    desired_input_layouts=(Replicate(),)),
        "layers.*.feed_forward.w1": ColwiseParallel(),
        "layers.*.feed_forward.w2": RowwiseParallel(output_layouts=seq),
        "layers.*.feed_forward.w3": ColwiseParallel(),
    })
    name = "llama_tp" + ("_sp" if sp else "") + ("_loss_parallel" if loss_parallel else "")
    return _plan(name, tp, styles, dp=dp, device_type=device_type, frozen=frozen, frozen_after=frozen_after,
                 loss=loss, loss_parallel=loss_parallel)


def llama_2d(*, dp=2, tp=2, sp=True, loss="cross_entropy", loss_parallel=False,
             device_type="cpu", frozen=()):
    """llama_tp on a 2-D ``(dp, tp)`` mesh, TP applied on the ``tp`` dim."""
    return llama_tp(tp=tp, dp=dp, sp=sp, loss=loss, loss_parallel=loss_parallel,
                    device_type=device_type, frozen=frozen)


# ----------------------------------------------------------------------- FSDP2

def _mp_policy(mixed_precision):
    if mixed_precision is None:
        return MixedPrecisionPolicy()
    if mixed_precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    raise ValueError(f"mixed_precision must be None or 'bf16', got {mixed_precision!r}")


def _fsdp_units(mesh_dims, reshard_after_forward, mixed_precision, *, prefetch=None, n_layers=2):
    """torchtitan's wrapping: one unit per block (``reshard_after_forward`` as
    given), then the root (``reshard_after_forward`` None: not resharded).

    ``prefetch=None``: one ``"layers.*"`` unit (FSDP2's default prefetching).
    ``prefetch="explicit"``: one unit per block ``"layers.0"`` ...
    ``"layers.{n_layers-1}"``, block i prefetching ``layers.{i+1}`` in forward
    and ``layers.{i-1}`` in backward (torchtitan's ``apply_fsdp`` with
    explicit prefetching), then the root as before.
    """
    mp = _mp_policy(mixed_precision)
    dims = tuple(mesh_dims)
    root = FullyShard("", dims, mp_policy=mp)
    if prefetch is None:
        return (FullyShard("layers.*", dims, reshard_after_forward=reshard_after_forward, mp_policy=mp), root)
    if prefetch != "explicit":
        raise ValueError(f"prefetch must be None or 'explicit', got {prefetch!r}")
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
        raise ValueError(f"n_layers must be a positive int, got {n_layers!r}")
    blocks = tuple(
        FullyShard(f"layers.{i}", dims, reshard_after_forward=reshard_after_forward, mp_policy=mp,
                   forward_prefetch=(f"layers.{i + 1}",) if i + 1 < n_layers else (),
                   backward_prefetch=(f"layers.{i - 1}",) if i > 0 else ())
        for i in range(n_layers))
    return blocks + (root,)


def _fsdp_only(name, shape, names, units, *, device_type="cpu", input_requires_grad=False,
               frozen=(), loss="sum"):
    return Plan(
        name=name,
        mesh_shape=tuple(shape),
        mesh_dim_names=tuple(names),
        device_type=device_type,
        inputs_requires_grad=(0,) if input_requires_grad else (),
        frozen=tuple(frozen),
        loss=_loss(loss),
        fully_shard=units,
    )


def _tp_with_fsdp(tp_plan, name, shape, names, units):
    """A TP plan (its styles applied on ``tp``) moved onto a bigger mesh, with
    FSDP units on the other dims."""
    return dataclasses.replace(tp_plan, name=name, mesh_shape=tuple(shape), mesh_dim_names=tuple(names),
                               tp_mesh_dim="tp", fully_shard=units)


def stacked_mlp_fsdp(*, dp=8, reshard_after_forward=None, mixed_precision=None,
                     input_requires_grad=False, frozen=(), device_type="cpu"):
    """examples.mlp:stacked_mlp with FSDP2 on a 1-D ``("dp",)`` mesh: every
    ``layers.*`` block is a unit, then the root (which holds no parameter of
    its own)."""
    return _fsdp_only("stacked_mlp_fsdp", (dp,), ("dp",),
                      _fsdp_units(("dp",), reshard_after_forward, mixed_precision),
                      device_type=device_type, input_requires_grad=input_requires_grad, frozen=frozen)


def stacked_mlp_fsdp_roots(*, dp=4, units=("layers.*",), input_requires_grad=False, device_type="cpu"):
    """examples.mlp:stacked_mlp with FSDP2 units and no unit on the root, as PyTorch's own FSDP
    tests often write it: ``units`` (by default every block; ``("layers.*.w1", "layers.*.w2")``:
    every Linear) on a 1-D ``("dp",)`` mesh. A unit that no other unit encloses is a root of its
    own: it keeps its parameters after forward and prefetches only within itself in backward."""
    return _fsdp_only("stacked_mlp_fsdp_roots", (dp,), ("dp",), tuple(FullyShard(u, ("dp",)) for u in units),
                      device_type=device_type, input_requires_grad=input_requires_grad)


def shared_mlp_fsdp(*, dp=4, tp=1, units=("block",), reshard_after_forward=None, requires_gradient_sync=True,
                    hsdp=1, input_requires_grad=False, device_type="cpu"):
    """examples.shared:shared_mlp (``block`` called twice per forward) with FSDP2: each of ``units``
    (by default ``block``; ``("block.w1", "block")`` nests a unit in it) a unit, then the root
    (``proj``, ``norm``, ``head``), on a 1-D ``("dp",)`` mesh; with ``hsdp`` above 1 on a
    ``("rep", "dp")`` mesh (HSDP: replicate on ``rep``, shard on ``dp``); with ``tp`` above 1,
    ``shared_mlp_tp``'s styles on ``tp`` of a ``("dp", "tp")`` mesh. ``reshard_after_forward`` and
    ``requires_gradient_sync`` apply to ``units``."""
    mesh = ("rep", "dp") if hsdp > 1 else ("dp",)
    unit_list = tuple(FullyShard(u, mesh, reshard_after_forward=reshard_after_forward,
                                 requires_gradient_sync=requires_gradient_sync) for u in units)
    unit_list += (FullyShard("", mesh),)
    if tp > 1:
        tp_plan = shared_mlp_tp(tp=tp, input_requires_grad=input_requires_grad, device_type=device_type)
        return _tp_with_fsdp(tp_plan, "shared_mlp_fsdp_tp", (dp, tp), ("dp", "tp"), unit_list)
    return _fsdp_only("shared_mlp_fsdp", (hsdp, dp) if hsdp > 1 else (dp,), mesh, unit_list,
                      device_type=device_type, input_requires_grad=input_requires_grad)


def stacked_mlp_fsdp_tp_nested(*, dp=2, tp=2, device_type="cpu"):
    """stacked_mlp_tp's styles on ``tp`` of a ``("dp", "tp")`` mesh, input 0 requiring grad, and
    nested FSDP2 units on ``dp``: every Rowwise ``layers.*.w2`` (a unit on a TP-styled module: FSDP's
    pre-forward hook runs before the style's, its post-forward after), then every block, then the
    root."""
    tp_plan = stacked_mlp_tp(tp=tp, input_requires_grad=True, device_type=device_type)
    units = tuple(FullyShard(fqn, ("dp",)) for fqn in ("layers.*.w2", "layers.*", ""))
    return _tp_with_fsdp(tp_plan, "stacked_mlp_fsdp_tp_nested", (dp, tp), ("dp", "tp"), units)


def gpt2_fsdp(*, dp=8, reshard_after_forward=None, mixed_precision=None, loss="cross_entropy",
              device_type="cpu", frozen=(), prefetch=None, n_layers=2):
    """examples.gpt2:gpt2 with FSDP2 on a 1-D ``("dp",)`` mesh: ``layers.*``
    units, then the root (embeddings, final norm, lm_head; the tied
    tok_embeddings/lm_head weight is one parameter of the root unit).
    ``prefetch="explicit"``: one unit per block (``n_layers`` of them, the
    model's default 2) with explicit forward/backward prefetching."""
    return _fsdp_only("gpt2_fsdp" + ("_explicit_prefetch" if prefetch else ""), (dp,), ("dp",),
                      _fsdp_units(("dp",), reshard_after_forward, mixed_precision,
                                  prefetch=prefetch, n_layers=n_layers),
                      device_type=device_type, frozen=frozen, loss=loss)


def gpt2_hsdp(*, replicate=2, shard=4, reshard_after_forward=None, mixed_precision=None,
              loss="cross_entropy", device_type="cpu", frozen=()):
    """gpt2_fsdp as HSDP on a ``("dp_replicate", "dp_shard")`` mesh: parameters
    sharded on ``dp_shard``, replicated on ``dp_replicate`` (gradients
    reduce-scattered, then all-reduced)."""
    dims = ("dp_replicate", "dp_shard")
    return _fsdp_only("gpt2_hsdp", (replicate, shard), dims,
                      _fsdp_units(dims, reshard_after_forward, mixed_precision),
                      device_type=device_type, frozen=frozen, loss=loss)


def gpt2_fsdp_tp(*, dp=2, tp=4, sp=False, reshard_after_forward=None, mixed_precision=None,
                 loss="cross_entropy", loss_parallel=False, device_type="cpu", frozen=()):
    """examples.gpt2:gpt2 on a ``("dp", "tp")`` mesh: the gpt2_tp (or, with
    ``sp=True``, gpt2_tp_sp) styles on ``tp``, then FSDP2 units
    (``layers.*``, root) on ``dp``."""
    build = gpt2_tp_sp if sp else gpt2_tp
    tp_plan = build(tp=tp, dp=dp, loss=loss, loss_parallel=loss_parallel, device_type=device_type,
                    frozen=frozen)
    return _tp_with_fsdp(tp_plan, "gpt2_fsdp_tp" + ("_sp" if sp else ""), (dp, tp), ("dp", "tp"),
                         _fsdp_units(("dp",), reshard_after_forward, mixed_precision))


def llama_fsdp_tp(*, dp=2, tp=4, sp=True, reshard_after_forward=None, mixed_precision=None,
                  loss="cross_entropy", loss_parallel=False, device_type="cpu", frozen=(),
                  frozen_after=(), prefetch=None, n_layers=2, embedding_unit=False):
    """examples.llama:llama, torchtitan-style 2-D parallelism on a
    ``("dp", "tp")`` mesh: the llama_tp styles (with sequence parallel when
    ``sp=True``) on ``tp``, then ``fully_shard`` of every ``layers.*`` block
    and of the root on ``dp``.  ``prefetch="explicit"``: one unit per block
    (``n_layers`` of them, the model's default 2) with explicit
    forward/backward prefetching.  ``frozen`` patterns are frozen before
    parallelising (SequenceParallel makes its norms trainable again),
    ``frozen_after`` after the parallelize step.  ``embedding_unit=True``:
    ``tok_embeddings`` (vocab-parallel) is a unit of its own first, as
    torchtitan's ``apply_fsdp`` makes it."""
    tp_plan = llama_tp(tp=tp, dp=dp, sp=sp, loss=loss, loss_parallel=loss_parallel,
                       device_type=device_type, frozen=frozen, frozen_after=frozen_after)
    name = "llama_fsdp_tp" + ("_sp" if sp else "") + ("_explicit_prefetch" if prefetch else "")
    units = _fsdp_units(("dp",), reshard_after_forward, mixed_precision, prefetch=prefetch, n_layers=n_layers)
    if embedding_unit:
        name += "_embedding_unit"
        units = (FullyShard("tok_embeddings", ("dp",), reshard_after_forward=reshard_after_forward,
                            mp_policy=_mp_policy(mixed_precision)),) + units
    return _tp_with_fsdp(tp_plan, name, (dp, tp), ("dp", "tp"), units)


def llama_hsdp_tp(*, replicate=2, shard=2, tp=2, sp=True, reshard_after_forward=None,
                  mixed_precision=None, loss="cross_entropy", loss_parallel=False,
                  device_type="cpu", frozen=()):
    """llama_fsdp_tp with HSDP on a 3-D ``("dp_replicate", "dp_shard", "tp")``
    mesh: TP styles on ``tp``, ``fully_shard`` units on
    ``("dp_replicate", "dp_shard")``."""
    tp_plan = llama_tp(tp=tp, sp=sp, loss=loss, loss_parallel=loss_parallel,
                       device_type=device_type, frozen=frozen)
    dims = ("dp_replicate", "dp_shard")
    return _tp_with_fsdp(tp_plan, "llama_hsdp_tp" + ("_sp" if sp else ""), (replicate, shard, tp),
                         dims + ("tp",), _fsdp_units(dims, reshard_after_forward, mixed_precision))


# ------------------------------------------------------- activation checkpointing

def with_ac(*, plan, ac=("layers.*",), wrapper=True, save_ops=(), early_stop=True, **options):
    """The plan factory ``plan`` (a name in this module) called with
    ``options``, plus non-reentrant activation checkpointing of every module
    an ``ac`` pattern matches (``wrapper=True``: torchtitan's
    ``checkpoint_wrapper`` per block; ``False``: the model checkpoints them
    itself).  ``save_ops``: selective checkpointing's op list (op overload
    names such as ``"aten.mm.default"``).  ``early_stop=False``: torchtitan's
    default, recomputation runs each block's whole forward."""
    factory = globals().get(plan)
    if not callable(factory) or plan.startswith("_") or plan == "with_ac":
        raise ValueError(f"with_ac: no plan factory {plan!r} in examples.plans")
    if isinstance(ac, str):
        ac = (ac,)
    base = factory(**options)
    name = f"{base.name}_{'sac' if save_ops else 'ac'}" + ("" if early_stop else "_no_early_stop")
    return dataclasses.replace(base, name=name,
                               activation_checkpoint=tuple(ActivationCheckpoint(p, wrapper=wrapper, save_ops=save_ops,
                                                                                early_stop=early_stop)
                                                           for p in ac))


def stacked_mlp_fsdp_tp_nested_ac(*, dp=2, tp=2, device_type="cpu"):
    """stacked_mlp_fsdp_tp_nested with every block in a ``checkpoint_wrapper``: the units are named
    on the wrapped model (``layers.*._checkpoint_wrapped_module.w2``, the ``layers.*`` wrappers,
    the root), so one unit runs inside each checkpointed block."""
    base = stacked_mlp_fsdp_tp_nested(dp=dp, tp=tp, device_type=device_type)
    units = tuple(FullyShard(fqn, ("dp",)) for fqn in ("layers.*._checkpoint_wrapped_module.w2", "layers.*", ""))
    return dataclasses.replace(base, name="stacked_mlp_fsdp_tp_nested_ac", fully_shard=units,
                               activation_checkpoint=(ActivationCheckpoint("layers.*"),))


# ------------------------------------------------- keyword inputs, shared modules

def gated_tp(*, tp=4, root_kwargs=False, context_requires_grad=False, loss="sum", device_type="cpu"):
    """examples.kwargs:gated.  ``ctx_proj`` RowwiseParallel turns the replicated
    ``context`` into a sequence-sharded gate (reduce-scatter); every
    ``layers.*.mixer`` gets ``PrepareModuleInput`` with
    ``input_kwarg_layouts={"gate": Shard(1)}`` (an all-gather to Replicate per
    call) and the mixer's Linears are Colwise, Colwise, Rowwise; ``out``
    Colwise gathers its output.  ``root_kwargs=True`` also gives the root a
    kwargs-only ``PrepareModuleInput`` (``context`` becomes a Replicate
    DTensor before ``ctx_proj``); ``context_requires_grad`` marks the keyword
    input ``context`` ``requires_grad``."""
    styles = {}
    if root_kwargs:
        styles[""] = PrepareModuleInput(input_kwarg_layouts={"context": Replicate()},
                                        desired_input_kwarg_layouts={"context": Replicate()})
    styles.update({
        "ctx_proj": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "layers.*.mixer": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),),
                                             input_kwarg_layouts={"gate": Shard(1)},
                                             desired_input_kwarg_layouts={"gate": Replicate()}),
        "layers.*.mixer.w_in": ColwiseParallel(),
        "layers.*.mixer.w_gate": ColwiseParallel(),
        "layers.*.mixer.w_out": RowwiseParallel(),
        "out": ColwiseParallel(output_layouts=Replicate()),
    })
    plan = _plan("gated_tp" + ("_root_kwargs" if root_kwargs else ""), tp, styles, device_type=device_type,
                 loss=loss)
    if context_requires_grad:
        plan = dataclasses.replace(plan, inputs_requires_grad=("context",))
    return plan


def shared_mlp_tp(*, tp=4, prepare=False, input_requires_grad=False, loss="sum", device_type="cpu"):
    """examples.shared:shared_mlp, whose ``block`` runs twice per forward:
    ``block.w1`` Colwise, ``block.w2`` Rowwise, ``head`` Colwise gathering its
    output.  ``prepare=True`` adds ``PrepareModuleInput`` (Replicate ->
    Replicate) on ``block``, so each call turns its input into a DTensor once
    and both Linears share it."""
    styles = {}
    if prepare:
        styles["block"] = PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),))
    styles.update({
        "block.w1": ColwiseParallel(),
        "block.w2": RowwiseParallel(),
        "head": ColwiseParallel(output_layouts=Replicate()),
    })
    return _plan("shared_mlp_tp" + ("_prepare" if prepare else ""), tp, styles, device_type=device_type,
                 input_requires_grad=input_requires_grad, loss=loss)
