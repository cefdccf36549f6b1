"""Hugging Face ``transformers`` models (pinned by scripts/setup.sh) with the tensor-parallel plan
transformers applies to the model family, for the accuracy corpus.

``hf_llama(...)`` / ``hf_qwen2(...)`` / ``hf_mistral(...)`` / ``hf_granite(...)``, and ``hf_model(family=...)``
for any family in ``_FAMILIES`` (also gemma, gemma2, cohere, starcoder2, olmo, olmo2, olmo3, phi, phi3, glm,
smollm3, ministral, ernie4_5, arcee, qwen3, exaone4, apertus, granite_swa, and the text models of gemma3 and
qwen3_5: its gated delta-net layers, a causal conv1d, then every fourth layer full attention) or
``_MOE_FAMILIES``, build a small
randomly initialised ``<Family>ForCausalLM`` from a config (nothing is downloaded), wrapped so that the model takes the
token ids and returns the logits; they return ``(model, (ids,))``. Module names (root class
``HFCausalLM``)::

    model                                   LlamaForCausalLM / Qwen2ForCausalLM
    model.model.embed_tokens                nn.Embedding
    model.model.layers.N.self_attn.{q,k,v,o}_proj
    model.model.layers.N.mlp.{gate,up,down}_proj
    model.model.rotary_emb                  (its cos/sin run under torch.no_grad(): export wraps
                                            them in a wrap_with_set_grad_enabled subgraph)
    model.lm_head

``hf_tp(family=..., tp=...)`` turns the plan transformers applies to the family's model into the
real torch styles: the plan a model instance resolves (``init_parallel_plans``, what
``from_pretrained(tp_plan="auto")`` applies), i.e. the config's ``base_model_tp_plan`` (keys relative
to ``model.model``) with ``embed_tokens: embedding_rowwise`` put first (transformers adds it to every
non-empty plan whose base model has an nn.Embedding ``embed_tokens`` and does not name it) and, with
``lm_head=True``, the CausalLM's ``_tp_plan``. Each string becomes the torch style with the layouts
transformers registers for it (``distributed/tensor_parallel.py``): ``embedding_rowwise`` ->
``RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())`` (on an nn.Embedding:
vocab-sharded weight, ids replicated, partial lookups summed), ``colwise`` ->
``ColwiseParallel(input_layouts=Replicate(), output_layouts=Shard(-1))``, ``rowwise`` ->
``RowwiseParallel(input_layouts=Shard(-1), output_layouts=Replicate())``, ``colwise_gather_output``
-> ``ColwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())``,
``rowwise_split_input`` -> ``RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())``.
Any other string is refused: Qwen3's ``replicated_with_grad_allreduce`` (a transformers hook calling
``dist.all_reduce`` on a parameter's grad, not a DTensor style) and the MoE families'
``packed_colwise`` / ``moe_tp_experts`` have no torch style to map to.
None of these families ships a sequence-parallel plan in this transformers version.
In training, the counts of those styles equal, per module and in bytes, what transformers' own
layer classes issue (``examples.hf_real:measure_transformers``,
tests/integration/test_hf_real_path.py). Not in inference: under no_grad transformers' rowwise
Linear runs on local tensors and calls ``dist.all_reduce`` in place. Gemma's, Gemma2's and Gemma3's
``embed_tokens`` is an nn.Embedding subclass (scaled lookups): a captured plan names it in
``module_subclasses``, and apply-plan recognises it by structure in the plans ``hf_tp`` writes.
"""

import torch

from commlens._transformers import TORCH_STYLES
from commlens.plan import ActivationCheckpoint, FullyShard, Loss, Plan

# Families whose shipped plan uses only the strings mapped above, and whose decoder is `.model`.
_FAMILIES = {"llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral", "granite": "Granite",
             "gemma": "Gemma", "gemma2": "Gemma2", "cohere": "Cohere", "starcoder2": "Starcoder2", "olmo": "Olmo",
             "olmo2": "Olmo2", "olmo3": "Olmo3", "phi": "Phi", "phi3": "Phi3", "glm": "Glm", "smollm3": "SmolLM3",
             "ministral": "Ministral", "ernie4_5": "Ernie4_5", "arcee": "Arcee", "qwen3": "Qwen3",
             "exaone4": "Exaone4", "apertus": "Apertus", "granite_swa": "GraniteSWA", "gemma3": "Gemma3",
             "qwen3_5": "Qwen3_5"}

# Mixture-of-experts families (their shipped TP plans use packed_colwise / moe_tp_experts, which
# hf_tp does not map): the class prefix and the tiny config's expert settings, 8 routed experts,
# top 2, each expert's FFN hidden // 4 wide.
_MOE_FAMILIES = {
    "qwen3_moe": ("Qwen3Moe", dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)),
    "qwen2_moe": ("Qwen2Moe", dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                   shared_expert_intermediate_size=64)),
    "mixtral": ("Mixtral", dict(num_local_experts=8, num_experts_per_tok=2)),
    "olmoe": ("Olmoe", dict(num_experts=8, num_experts_per_tok=2)),
    "granitemoe": ("GraniteMoe", dict(num_local_experts=8, num_experts_per_tok=2)),
    # multi-head latent attention (low-rank q and kv, a rope part of each head: head_dim, as
    # tiny_config sets it; as many k/v heads as heads), group-limited
    # routing, a shared expert, the first layer dense
    "deepseek_v3": ("DeepseekV3", dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                       n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1,
                                       q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
                                       v_head_dim=8, num_key_value_heads=8)),
    # DeepSeek-V2's multi-head latent attention: q through a low rank, the kv
    # projection's rope part bypassing kv_b_proj (transformers' mla_kv_a_proj layer); group-limited
    # routing, a shared expert, the first layer dense
    "deepseek_v2": ("DeepseekV2", dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                       n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1,
                                       topk_method="group_limited_greedy", q_lora_rank=32, kv_lora_rank=16,
                                       qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, num_key_value_heads=8)),
    # Llama 4's text model (config Llama4TextConfig): every token through every expert pre-scaled
    # by its router score (top 1), a shared expert, chunked attention; its experts' gate_up_proj
    # packed row-wise (packed_rowwise: _StridedShard(-1, sf=2)), down_proj column-wise
    "llama4": ("Llama4", dict(num_local_experts=8, num_experts_per_tok=1, intermediate_size_mlp=128,
                              attention_chunk_size=16)),
}
# Families whose config class is not <prefix>Config.
# Text-only configs of families whose <Family>Config is multimodal.
_CONFIG_CLASSES = {"llama4": "Llama4TextConfig", "gemma3": "Gemma3TextConfig", "qwen3_5": "Qwen3_5TextConfig"}


def _family(name):
    import transformers

    if name not in _FAMILIES and name not in _MOE_FAMILIES:
        raise ValueError(f"family must be one of {sorted([*_FAMILIES, *_MOE_FAMILIES])}, got {name!r}")
    cls = _FAMILIES[name] if name in _FAMILIES else _MOE_FAMILIES[name][0]
    return (getattr(transformers, _CONFIG_CLASSES.get(name, cls + "Config")),
            getattr(transformers, cls + "ForCausalLM"))


class HFCausalLM(torch.nn.Module):
    """Takes token ids, returns the logits (no KV cache)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits


def tiny_config(family, *, n_layers=2, vocab=256, dim=64, hidden=128, n_heads=8, n_kv_heads=4, seq=16):
    """The tiny ``<Family>Config`` the factories build their model from."""
    config_cls, model_cls = _family(family)
    fields = dict(vocab_size=vocab, hidden_size=dim, intermediate_size=hidden, num_hidden_layers=n_layers,
                  num_attention_heads=n_heads, num_key_value_heads=n_kv_heads,
                  max_position_embeddings=max(64, seq), tie_word_embeddings=False,
                  head_dim=dim // n_heads)  # Ministral has no default head_dim
    config = config_cls(**{**fields, **(_MOE_FAMILIES[family][1] if family in _MOE_FAMILIES else {})})
    for special in ("pad_token_id", "bos_token_id", "eos_token_id"):
        # Phi3, Glm, SmolLM3 (pad), OLMoE (eos) default to an id past a tiny vocabulary
        if isinstance(getattr(config, special, None), int) and getattr(config, special) >= vocab:
            setattr(config, special, 0)
    # sdpa where the family supports it (eager otherwise, e.g. Gemma2's logit soft-capping)
    config._attn_implementation = "sdpa" if model_cls._supports_sdpa else "eager"
    return config


def token_ids(*, vocab=256, batch=2, seq=16, seed=0):
    """The factories' input: ``(batch, seq)`` token ids drawn from a generator seeded with ``seed``."""
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def _build(family, *, n_layers=2, vocab=256, dim=64, hidden=128, n_heads=8, n_kv_heads=4, batch=2, seq=16, seed=0,
           gradient_checkpointing=False):
    config = tiny_config(family, n_layers=n_layers, vocab=vocab, dim=dim, hidden=hidden, n_heads=n_heads,
                         n_kv_heads=n_kv_heads, seq=seq)
    torch.manual_seed(seed)
    lm = _family(family)[1](config)
    if gradient_checkpointing:
        # each decoder layer's call goes through torch.utils.checkpoint (non-reentrant) in training
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return HFCausalLM(lm), (token_ids(vocab=vocab, batch=batch, seq=seq, seed=seed),)


# Factories (keywords: n_layers=2, vocab=256, dim=64, hidden=128, n_heads=8, n_kv_heads=4, batch=2,
# seq=16, seed=0, gradient_checkpointing=False: True calls gradient_checkpointing_enable with
# use_reentrant=False, so every decoder layer call is checkpointed by the model itself).
def hf_model(*, family="llama", **kw):
    """A tiny transformers ``<Family>ForCausalLM`` of any family in ``_FAMILIES``."""
    return _build(family, **kw)


def hf_llama(**kw):
    """A tiny transformers LlamaForCausalLM (grouped-query attention, SwiGLU MLP, RMSNorm)."""
    return _build("llama", **kw)


def hf_qwen2(**kw):
    """A tiny transformers Qwen2ForCausalLM (as Llama, with q/k/v biases)."""
    return _build("qwen2", **kw)


def hf_mistral(**kw):
    """A tiny transformers MistralForCausalLM."""
    return _build("mistral", **kw)


def hf_granite(**kw):
    """A tiny transformers GraniteForCausalLM (Llama-like, with embedding/residual/logit multipliers)."""
    return _build("granite", **kw)


def shipped_tp_plan(family, *, lm_head=True):
    """The plan transformers applies to the family's model, keys as FQNs under HFCausalLM, values as
    torch styles."""
    _, model_cls = _family(family)
    # The plan a model instance resolves (PreTrainedModel.post_init -> init_parallel_plans), which is
    # what from_pretrained applies: the config's base_model_tp_plan with embed_tokens added, then
    # the CausalLM's own _tp_plan (lm_head). A meta-device instance of the tiny config is enough.
    with torch.device("meta"):
        lm = model_cls(tiny_config(family))
    head = getattr(model_cls, "_tp_plan", None) or {}
    entries = [("model." + k, v) for k, v in lm.tp_plan.items() if k not in head]
    if lm_head:
        entries += [("model." + k, v) for k, v in head.items()]
    styles = {}
    for key, kind in entries:
        if kind not in TORCH_STYLES:
            raise ValueError(f"{family} ships tp plan entry {key!r}: {kind!r}, which commlens does not map "
                             f"(known: {', '.join(TORCH_STYLES)})")
        styles[key] = TORCH_STYLES[kind]()
    return styles


def hf_tp(*, family="llama", tp=4, dp=None, lm_head=True, loss="cross_entropy", fsdp=False,
          gradient_checkpointing=False):
    """The shipped plan on a ``("tp",)`` mesh, or on the ``tp`` dim of ``("dp", "tp")``; with
    ``fsdp=True`` every decoder layer, then the root, is also a fully_shard unit on ``dp``.
    ``gradient_checkpointing=True`` states that the model checkpoints its decoder layers itself
    (pair it with the model factory's ``gradient_checkpointing=True``)."""
    shape, names = ((tp,), ("tp",)) if dp is None else ((dp, tp), ("dp", "tp"))
    if fsdp and dp is None:
        raise ValueError("fsdp=True needs dp")
    units = (FullyShard("model.model.layers.*", ("dp",)), FullyShard("", ("dp",))) if fsdp else ()
    return Plan(
        name=f"hf_{family}_tp" + ("_fsdp" if fsdp else "") + ("_gc" if gradient_checkpointing else ""),
        mesh_shape=shape,
        mesh_dim_names=names,
        parallelize_plan=shipped_tp_plan(family, lm_head=lm_head),
        tp_mesh_dim="tp",
        loss=Loss.cross_entropy(targets="random", seed=0) if loss == "cross_entropy" else Loss.sum(),
        fully_shard=units,
        activation_checkpoint=((ActivationCheckpoint("model.model.layers.*", wrapper=False),)
                               if gradient_checkpointing else ()),
    )


def hf_fsdp(*, family="qwen3_moe", dp=2):
    """FSDP2 alone, as users shard a transformers model themselves: every decoder layer, then the
    root, a fully_shard unit on a ``("dp",)`` mesh; the training step's cross-entropy against
    random targets (seed 0)."""
    return Plan(name=f"hf_{family}_fsdp", mesh_shape=(dp,), mesh_dim_names=("dp",),
                fully_shard=(FullyShard("model.model.layers.*", ("dp",)), FullyShard("", ("dp",))),
                loss=Loss.cross_entropy(targets="random", seed=0))


def distributed_sizes(tp, distributed):
    """``(DistributedConfig sizes, world size)``: ``tp`` ranks of tensor parallelism, or the
    ``distributed`` sizes (``{"fsdp_size": 2, "ep_size": 2}``; ``tp_size`` then defaults to 1) on as
    many ranks as transformers' dense (pp, dp_replicate, fsdp, tp) mesh holds."""
    import math

    sizes = {"tp_size": tp} if distributed is None else {"tp_size": 1, **distributed}
    return sizes, math.prod(sizes.get(k, 1) for k in ("pp_size", "dp_replicate_size", "fsdp_size", "tp_size"))


def hf_captured(*, family="llama", tp=4, distributed=None, **model_kw):
    """The plan ``python -m commlens.capture --parallelize transformers`` captures from transformers'
    own ``from_pretrained(tp_plan="auto")`` calls on the family's model, with the training step's
    cross-entropy against random targets (seed 0), as ``examples.hf_real`` measures it.
    ``distributed``: ``DistributedConfig`` sizes (``{"fsdp_size": 2, "ep_size": 2}``; ``tp_size``
    then defaults to 1) instead of ``tp`` ranks of tensor parallelism; ``model_kw``: the factory's
    (``n_layers=4``)."""
    import commlens.capture

    sizes, world_size = distributed_sizes(tp, distributed)
    spec = "transformers"
    if distributed is not None:
        spec += f"({', '.join(f'{k}={v!r}' for k, v in sizes.items())})"
    model = ", ".join([f"family={family!r}", *(f"{k}={v!r}" for k, v in model_kw.items())])
    plan = commlens.capture.capture(f"examples.hf:hf_model({model})", spec, world_size, loss="cross_entropy")
    plan.name = f"hf_{family}_captured"
    return plan
