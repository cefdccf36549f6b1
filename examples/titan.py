"""torchtitan's own models, parallelized by torchtitan's own parallelize functions (torchtitan
0.2.2, pinned in scripts/setup.sh): Llama 3 (``parallelize_llama``), dense Qwen3
(``parallelize_qwen3``: q/k norms, DTensor activations), Qwen3-MoE (``qwen3_moe``: every
block's FFN torchtitan's ``MoE``: top-2 of 8 routed experts, grouped matmuls) and DeepSeek-V3
(``parallelize_deepseekv3``: multi-head latent attention, complex RoPE, a dense first block, MoE
blocks with a shared expert), each with its TP+SP plan, FSDP2 units
(``tok_embeddings``, every block, the list unit ``[norm, output]``, the root, gradient division
off), activation checkpointing (full, per-layer and per-op selective) and loss parallel, as its
trainer applies them, with no plan written for commlens::

    python -m commlens.export examples.titan:titan_model -o llama.pt2
    python -m commlens.capture --model examples.titan:titan_model --world-size 8 \\
        --parallelize 'examples.titan:parallelize(tp=4, dp_shard=2)' \\
        --loss cross_entropy --loss-reduction sum --logits-dtype float32 --loss-parallel -o plan.json

* ``titan_model(name="llama3" | "qwen3" | "qwen3_moe" | "deepseek_v3")``: the model class torchtitan's train spec of that name
  builds, on tiny arguments (initialised with its own ``init_weights``, seed 0), and a batch of
  token ids;
* ``parallelize(model, tp, dp_shard, dp_replicate, ac, ...)``: torchtitan's ``ParallelDims`` (its
  mesh built by its own ``build_mesh``) and a ``JobConfig`` with those settings, then the train
  spec's ``parallelize_fn(model, parallel_dims, job_config)`` for the model's class;
* ``measure_titan(name, phase, ...)``: the truth, natively: the model parallelized that way on the
  fake process group and one step of torchtitan's ``forward_backward_step`` counted under
  CommDebugMode: forward inside its train context (``loss_parallel()`` when TP is on and loss
  parallel is not disabled), its ``cross_entropy_loss`` (sum) over the global token count, backward;
* ``titan_captured(name, ...)``: the plan ``commlens.capture`` reads off those calls.

On a machine without a GPU, ``commlens._torchtitan.install()`` lets torchtitan import and run its
MoE layers there (a triton-free token permutation, integer ``histc``, ``ParallelDims`` on CPU),
none of it touching what torchtitan parallelizes; ``generate_permute_indices`` is re-exported
here from it.
"""

import torch

import commlens._torchtitan

commlens._torchtitan.install()
generate_permute_indices = commlens._torchtitan.generate_permute_indices

from torchtitan.config import JobConfig  # noqa: E402
from torchtitan.components.loss import cross_entropy_loss  # noqa: E402
from torchtitan.distributed import ParallelDims  # noqa: E402
from torchtitan.models.llama3 import TransformerModelArgs  # noqa: E402
from torchtitan.models.moe import MoEArgs  # noqa: E402
from torchtitan.models.qwen3 import Qwen3ModelArgs  # noqa: E402
from torchtitan.protocols.train_spec import get_train_spec  # noqa: E402

# example name -> torchtitan train spec
TRAIN_SPECS = {"llama3": "llama3", "qwen3": "qwen3", "qwen3_moe": "qwen3", "deepseek_v3": "deepseek_v3"}
NAMES = tuple(TRAIN_SPECS)


def _model_args(name, *, dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len):
    if name == "llama3":  # grouped-query attention, complex RoPE buffer
        return TransformerModelArgs(dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
                                    vocab_size=vocab_size, multiple_of=32, max_seq_len=seq_len)
    if name == "qwen3":  # dense: q/k RMSNorm per head, real RoPE cache
        return Qwen3ModelArgs(dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
                              head_dim=dim // n_heads, hidden_dim=2 * dim, vocab_size=vocab_size, max_seq_len=seq_len)
    if name == "qwen3_moe":  # every block's FFN an MoE layer routed as torchtitan's debugmodel_moe routes
        return Qwen3ModelArgs(dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
                              head_dim=dim // n_heads, hidden_dim=2 * dim, vocab_size=vocab_size, max_seq_len=seq_len,
                              moe_enabled=True, moe_inter_dim=dim // 2,
                              moe_args=MoEArgs(num_experts=8, num_shared_experts=0, top_k=2, score_func="softmax",
                                               route_norm=True, route_scale=1.0, score_before_experts=False))
    if name == "deepseek_v3":  # multi-head latent attention, complex RoPE, a dense first block, then MoE
        # blocks with a shared expert and top-2 of 8 routed experts
        from torchtitan.models.deepseek_v3 import DeepSeekV3ModelArgs

        args = DeepSeekV3ModelArgs(dim=dim, n_layers=n_layers, n_dense_layers=1, n_heads=n_heads, vocab_size=vocab_size,
                                   max_seq_len=seq_len, inter_dim=2 * dim, moe_inter_dim=dim // 2, q_lora_rank=0,
                                   kv_lora_rank=dim // 2, qk_nope_head_dim=dim // n_heads,
                                   qk_rope_head_dim=dim // n_heads // 2, v_head_dim=dim // n_heads,
                                   original_seq_len=seq_len, rope_factor=1,
                                   moe_args=MoEArgs(num_experts=8, num_shared_experts=1, top_k=2, score_func="softmax",
                                                    route_norm=True, route_scale=1.0, score_before_experts=False))
        args.moe_impl = "standard"  # what update_from_config sets from torchtitan's default job config
        return args
    raise ValueError(f"examples.titan models {', '.join(NAMES)}, not {name!r}")


def model_spec(name):
    return f"examples.titan:titan_model(name={name!r})"


def titan_model(*, name="llama3", dim=128, n_layers=2, n_heads=8, n_kv_heads=4, vocab_size=256, seq_len=16,
                batch=2):
    """The model torchtitan's train spec ``name`` builds and a ``[batch, seq_len]`` batch of token ids."""
    args = _model_args(name, dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
                       vocab_size=vocab_size, seq_len=seq_len)
    torch.manual_seed(0)
    model = get_train_spec(TRAIN_SPECS[name]).model_cls(args)
    with torch.no_grad():  # torchtitan's trainer initialises under no_grad too
        model.init_weights()
    ids = torch.randint(0, vocab_size, (batch, seq_len), generator=torch.Generator().manual_seed(0))
    return model, (ids,)


def job_config(*, ac="none", sac_option="op", early_stop=False, loss_parallel=True,
               mixed_precision_param="float32", seq_len=16):
    """The ``JobConfig`` fields torchtitan's parallelize functions read; everything else torchtitan's
    default. Two defaults differ from torchtitan's (selective per-op AC, bfloat16 parameters), so
    that the plain settings are the plain run: ``ac``: ``none``, ``full`` or ``selective``
    (``sac_option``: ``"op"``, torchtitan's per-op policy, or a layer period such as ``"2"``);
    ``mixed_precision_param``: ``float32``. ``early_stop`` (False) is torchtitan's."""
    cfg = JobConfig()
    cfg.training.seq_len = seq_len
    cfg.training.mixed_precision_param = mixed_precision_param
    cfg.activation_checkpoint.mode = ac
    cfg.activation_checkpoint.selective_ac_option = sac_option
    cfg.activation_checkpoint.early_stop = early_stop
    cfg.parallelism.disable_loss_parallel = not loss_parallel
    return cfg


def parallelize(model, *, tp=1, dp_shard=1, dp_replicate=1, ep=1, etp=1, **job):
    """torchtitan's parallelize function for the model on ``tp * dp_shard * dp_replicate`` ranks (the
    default process group's size must be that product; expert parallel, ``ep``, borrows its ranks
    from ``dp_shard`` and ``tp`` as torchtitan's does; ``etp``: 1, or ``tp`` for expert tensor
    parallel), ``job``: :func:`job_config`'s settings."""
    _parallelize(model, tp, dp_shard, dp_replicate, ep, job, etp)
    return model


def _parallelize(model, tp, dp_shard, dp_replicate, ep, job, etp=1):
    dims = ParallelDims(dp_replicate=dp_replicate, dp_shard=dp_shard, cp=1, tp=tp, pp=1, ep=ep, etp=etp,
                        world_size=tp * dp_shard * dp_replicate)
    dims.build_mesh()
    spec = next(s for s in TRAIN_SPECS.values() if isinstance(model, get_train_spec(s).model_cls))
    get_train_spec(spec).parallelize_fn(model, dims, job_config(**job))
    return dims


def _spec(ep=1, etp=1, **kwargs):
    """Keyword arguments as call text (``ep`` and ``etp`` only where not 1)."""
    return ", ".join(f"{k}={v!r}" for k, v in {**kwargs, **({"ep": ep} if ep != 1 else {}),
                                                **({"etp": etp} if etp != 1 else {})}.items())


def measure_titan(*, name="llama3", phase="both", tp=1, dp_shard=1, dp_replicate=1, ep=1, etp=1, **job):
    """The commlens-counts document of one torchtitan training step (``phase``: ``forward``,
    ``backward`` or ``both``) of ``titan_model(name=name)`` parallelized by :func:`parallelize`,
    rank 0 of the fake process group."""
    from commlens.measure import count_collectives, counts_document, device_info, fake_process_group

    model, (ids,) = titan_model(name=name)
    world_size = tp * dp_shard * dp_replicate
    cfg = job_config(**job)
    labels = torch.randint(0, model.tok_embeddings.num_embeddings, ids.shape, generator=torch.Generator().manual_seed(1))
    global_valid_tokens = torch.tensor(float(labels.numel()))

    def loss(pred, args):
        return cross_entropy_loss(pred, labels) / global_valid_tokens  # torchtitan's forward_backward_step

    with fake_process_group(world_size):
        world = _parallelize(model, tp, dp_shard, dp_replicate, ep, job, etp).world_mesh
        modules = count_collectives(model, (ids,), {}, phase, loss,
                                    loss_parallel=tp > 1 and not cfg.parallelism.disable_loss_parallel)
        doc_mesh = {"shape": list(world.shape), "dim_names": list(world.mesh_dim_names),
                    "device_type": world.device_type}
    settings = _spec(tp=tp, dp_shard=dp_shard, dp_replicate=dp_replicate, ep=ep, etp=etp, **job)
    function = get_train_spec(TRAIN_SPECS[name]).parallelize_fn.__name__
    return counts_document(modules, backend="fake", world_size=world_size, phase=phase, model=model_spec(name),
                           mesh=doc_mesh, plan_source=f"torchtitan:{function}({settings})",
                           device=device_info(ids.device))


def titan_captured(*, name="llama3", tp=1, dp_shard=1, dp_replicate=1, ep=1, etp=1, **job):
    """The plan ``commlens.capture`` reads off :func:`parallelize`'s calls, with torchtitan's loss:
    cross-entropy summed over float32 logits (``pred.float()``; the division by the token count
    issues nothing), inside ``loss_parallel()`` when TP is on."""
    import commlens.capture
    from commlens.plan import Loss

    loss_parallel = tp > 1 and job.get("loss_parallel", True)
    spec = f"examples.titan:parallelize({_spec(tp=tp, dp_shard=dp_shard, dp_replicate=dp_replicate, ep=ep, etp=etp, **job)})"
    plan = commlens.capture.capture(model_spec(name), spec, tp * dp_shard * dp_replicate,
                                    loss=Loss.cross_entropy(reduction="sum", logits_dtype="float32"),
                                    loss_parallel=loss_parallel)
    plan.name = f"titan_{name}_captured"
    return plan


class MoEBlock(torch.nn.Module):
    """``h + moe(h)``, ``moe_enabled`` as torchtitan's transformer blocks are."""

    moe_enabled = True

    def __init__(self, moe):
        super().__init__()
        self.moe = moe

    def forward(self, h):
        return h + self.moe(h)


class MoEStack(torch.nn.Module):
    """Token embeddings, then :class:`MoEBlock` s of torchtitan's ``MoE`` layer alone, so that
    torchtitan's own ``apply_moe_ep_tp`` and ``apply_fsdp`` parallelize it. Without attention, its tensor parallel runs on CPU (torchtitan's Qwen3-MoE
    under TP does not: its DTensor attention has no CPU sharding strategy)."""

    def __init__(self, *, vocab_size, dim, n_layers, moe_inter_dim, moe_args):
        from torchtitan.models.moe import MoE

        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(vocab_size, dim)
        self.norm = self.output = None  # what torchtitan's apply_fsdp looks for after the blocks
        self.layers = torch.nn.ModuleDict()
        for i in range(n_layers):
            self.layers[str(i)] = MoEBlock(MoE(moe_args, dim=dim, hidden_dim=moe_inter_dim))

    def forward(self, ids):
        h = self.tok_embeddings(ids)
        for block in self.layers.values():
            h = block(h)
        return h


def moe_stack(*, vocab_size=256, dim=64, n_layers=2, num_experts=8, top_k=2, batch=2, seq_len=16):
    """:class:`MoEStack` with Qwen3-MoE's routing (softmax top-k, normalised), torchtitan's own
    ``init_weights`` for the MoE layers (seed 0), and a ``[batch, seq_len]`` batch of token ids."""
    args = MoEArgs(num_experts=num_experts, num_shared_experts=0, top_k=top_k, score_func="softmax",
                   route_norm=True, route_scale=1.0, score_before_experts=False)
    torch.manual_seed(0)
    model = MoEStack(vocab_size=vocab_size, dim=dim, n_layers=n_layers, moe_inter_dim=dim // 2, moe_args=args)
    with torch.no_grad():
        for block in model.layers.values():
            block.moe.init_weights(0.02, torch.device("cpu"))
    ids = torch.randint(0, vocab_size, (batch, seq_len), generator=torch.Generator().manual_seed(0))
    return model, (ids,)


def parallelize_moe_stack(model, *, tp=2, dp_shard=1, ac="none", ep=1):
    """The token embeddings as torchtitan's ``apply_non_moe_tp`` plans them (row-wise, output
    sequence-sharded and local), then torchtitan's ``apply_moe_ep_tp`` with a tensor-parallel mesh
    alone: each MoE layer's input all-gathered and output reduce-scattered on the sequence dim
    (``PrepareModuleInputOutput``), the router gate replicated (``NoParallel``), the experts'
    weights column/row sharded (``TensorParallel``). ``ac="full"``: torchtitan's ``apply_ac`` on
    every block. With ``dp_shard`` > 1, torchtitan's ``apply_fsdp`` on the ``dp_shard`` dim of a
    ``(dp_shard, tp)`` mesh (the embeddings, each block and the root as units, float32, gradient
    division off). The order is torchtitan's: TP, AC, FSDP."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module
    from torchtitan.distributed.activation_checkpoint import apply_ac
    from torchtitan.models.llama4.infra.parallelize import apply_fsdp, apply_moe_ep_tp

    mesh = init_device_mesh("cpu", (dp_shard, tp), mesh_dim_names=("dp_shard", "tp"))
    parallelize_module(model, mesh["tp"],
                       {"tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))})
    if ep not in (1, tp):
        raise ValueError(f"ep {ep}: the MoE stack's expert parallel borrows the whole tp dim (ep 1 or {tp})")
    apply_moe_ep_tp(model, tp_mesh=mesh["tp"], ep_mesh=mesh["tp"] if ep > 1 else None, etp_mesh=None,
                    ep_etp_mesh=None)
    if ac != "none":
        apply_ac(model, job_config(ac=ac).activation_checkpoint)
    if dp_shard > 1:
        apply_fsdp(model, mesh["dp_shard"], param_dtype=torch.float32, reduce_dtype=torch.float32, pp_enabled=False)
    return model


def measure_moe_stack(*, phase="both", tp=2, dp_shard=1, ac="none", ep=1, **model_args):
    """The truth for :func:`parallelize_moe_stack`: one step (sum of the output as the loss) counted
    under CommDebugMode on the fake process group, on ``moe_stack(**model_args)``."""
    from commlens.measure import count_collectives, counts_document, device_info, fake_process_group

    model, (ids,) = moe_stack(**model_args)
    with fake_process_group(tp * dp_shard):
        parallelize_moe_stack(model, tp=tp, dp_shard=dp_shard, ac=ac, ep=ep)
        modules = count_collectives(model, (ids,), {}, phase, lambda out, args: out.sum())
    return counts_document(modules, backend="fake", world_size=tp * dp_shard, phase=phase,
                           model=f"examples.titan:moe_stack({_spec(**model_args)})",
                           mesh={"shape": [dp_shard, tp], "dim_names": ["dp_shard", "tp"], "device_type": "cpu"},
                           plan_source=f"examples.titan:parallelize_moe_stack(tp={tp}, dp_shard={dp_shard}, ac={ac!r}, "
                                       f"ep={ep})",
                           device=device_info(ids.device))


def moe_stack_captured(*, tp=2, dp_shard=1, ac="none", ep=1, **model_args):
    """The plan ``commlens.capture`` reads off :func:`parallelize_moe_stack`'s calls on
    ``moe_stack(**model_args)`` (loss: the output's sum, as :func:`measure_moe_stack` takes it)."""
    import commlens.capture

    plan = commlens.capture.capture(f"examples.titan:moe_stack({_spec(**model_args)})",
                                    f"examples.titan:parallelize_moe_stack(tp={tp}, dp_shard={dp_shard}, ac={ac!r}, "
                                    f"ep={ep})",
                                    tp * dp_shard)
    plan.name = f"titan_moe_stack_dp{dp_shard}xtp{tp}_captured"
    return plan
