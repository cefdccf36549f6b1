"""Example sharding plans (plan factories) for the example models.

Each factory takes ``tp=`` (and ``dp=`` for 2-D meshes) plus a few options
and returns a :class:`commlens.plan.Plan`; serialise one with::

    python -m commlens.plan 'examples.plans:gpt2_tp(tp=4)' -o plan.json

Common options:

* ``device_type``: ``"cpu"`` (default) or ``"cuda"``;
* ``input_requires_grad``: mark user input 0 ``requires_grad`` (float inputs only);
* ``frozen``: parameter FQN patterns (fnmatch) set to ``requires_grad=False``;
* ``loss``: ``"sum"`` or ``"cross_entropy"`` (random targets, seed 0).

Model/plan pairs: ``linear_colwise``/``linear_rowwise`` for ``examples.mlp:linear``,
``mlp_tp``/``mlp_2d`` for ``examples.mlp:mlp``, ``stacked_mlp_tp`` for
``examples.mlp:stacked_mlp``, ``gpt2_tp``/``gpt2_tp_sp``/``gpt2_tp_loss_parallel``
for ``examples.gpt2:gpt2``, ``llama_tp``/``llama_2d`` for ``examples.llama:llama``.
"""

from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
)

from commlens.plan import Loss, Plan


def _loss(loss):
    if loss == "sum":
        return Loss.sum()
    if loss == "cross_entropy":
        return Loss.cross_entropy(targets="random", seed=0)
    raise ValueError(f"loss must be 'sum' or 'cross_entropy', got {loss!r}")


def _plan(name, tp, styles, *, dp=None, device_type="cpu", input_requires_grad=False,
          frozen=(), loss="sum", loss_parallel=False):
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
    holding this rank's Shard(-1) slice (so the example input's last dim is the
    *local* in_features / tp)."""
    out = Replicate() if output == "replicate" else Shard(1)
    return _plan("linear_rowwise", tp, {"": RowwiseParallel(output_layouts=out)},
                 device_type=device_type, input_requires_grad=input_requires_grad, frozen=frozen)


def mlp_tp(*, tp=4, input_requires_grad=False, device_type="cpu", frozen=()):
    """examples.mlp:mlp: w1 ColwiseParallel, w2 RowwiseParallel."""
    return _plan("mlp_tp", tp, {"w1": ColwiseParallel(), "w2": RowwiseParallel()},
                 device_type=device_type, input_requires_grad=input_requires_grad, frozen=frozen)


def stacked_mlp_tp(*, tp=4, input_requires_grad=False, device_type="cpu", frozen=()):
    """examples.mlp:stacked_mlp: every layer's w1 Colwise, w2 Rowwise (fnmatch ``*``)."""
    return _plan("stacked_mlp_tp", tp,
                 {"layers.*.w1": ColwiseParallel(), "layers.*.w2": RowwiseParallel()},
                 device_type=device_type, input_requires_grad=input_requires_grad, frozen=frozen)


def mlp_2d(*, dp=2, tp=2, input_requires_grad=False, device_type="cpu", frozen=()):
    """examples.mlp:mlp on a 2-D ``(dp, tp)`` mesh, TP applied on ``tp``."""
    return _plan("mlp_2d", tp, {"w1": ColwiseParallel(), "w2": RowwiseParallel()}, dp=dp,
                 device_type=device_type, input_requires_grad=input_requires_grad, frozen=frozen)


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
             device_type="cpu", frozen=()):
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
    return _plan(name, tp, styles, dp=dp, device_type=device_type, frozen=frozen, loss=loss,
                 loss_parallel=loss_parallel)


def llama_2d(*, dp=2, tp=2, sp=True, loss="cross_entropy", loss_parallel=False,
             device_type="cpu", frozen=()):
    """llama_tp on a 2-D ``(dp, tp)`` mesh, TP applied on the ``tp`` dim."""
    return llama_tp(tp=tp, dp=dp, sp=sp, loss=loss, loss_parallel=loss_parallel,
                    device_type=device_type, frozen=frozen)
