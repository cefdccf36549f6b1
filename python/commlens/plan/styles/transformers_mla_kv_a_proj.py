"""``TransformersMlaKvAProjParallel``: the plan codec's entry for ``class MlaKvAProjParallel`` of
transformers/distributed/tensor_parallel.py (transformers 5.23), registered as ``"mla_kv_a_proj"``
(the ``kv_a_proj_with_mqa`` of multi-head latent attention: DeepSeek-V2, GLM-4-MoE-Lite,
LongCat-Flash, MiniCPM3, ...). It places no parameter; its output hook splits the projection's
output and takes the last ``qk_rope_head_dim`` features (the rope part, which bypasses
``kv_b_proj``) through an all-reduce in backward (``_AllReduceBackward``)
(parallel/TransformersMlaKvAProjParallel.cpp). The layer reads ``qk_rope_head_dim`` from the
model config transformers hands the module; the plan holds it as the style's field."""

from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    from transformers.distributed.tensor_parallel import MlaKvAProjParallel

    rope = values.get("qk_rope_head_dim")
    if rope is None or rope < 1:
        raise ValueError(f"qk_rope_head_dim must be a positive int (the model config's), got {rope!r}")
    layer = MlaKvAProjParallel()
    layer.qk_rope_head_dim = rope
    return layer


ENTRY = StyleEntry(
    name="TransformersMlaKvAProjParallel",
    cls="transformers.distributed.tensor_parallel:MlaKvAProjParallel",
    fields=(("qk_rope_head_dim", "int"),),
    construct=_construct,
)
