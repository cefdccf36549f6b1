"""examples.hf: the TP plans transformers applies mapped to torch styles, or refused by name.
(Every mapped family's counts are checked against CommDebugMode by bench/accuracy, and against
transformers' own tp_plan="auto" path by tests/integration/test_hf_real_path.py.)"""
import pytest
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from examples.hf import shipped_tp_plan


def test_olmo2_plan_gathers_qkv_and_splits_o_proj_input():
    plan = shipped_tp_plan("olmo2")
    q, o = plan["model.model.layers.*.self_attn.q_proj"], plan["model.model.layers.*.self_attn.o_proj"]
    # transformers registers colwise_gather_output as Colwise(Replicate in, Replicate out) and
    # rowwise_split_input as Rowwise(Replicate in, Replicate out): torch's defaults except those
    assert isinstance(q, ColwiseParallel) and q.output_layouts == (Replicate(),)
    assert isinstance(o, RowwiseParallel) and o.input_layouts == (Replicate(),)
    assert o.output_layouts == (Replicate(),)
    down = plan["model.model.layers.*.mlp.down_proj"]
    assert isinstance(down, RowwiseParallel) and down.input_layouts == (Shard(-1),)
    assert isinstance(plan["model.lm_head"], ColwiseParallel)


def test_plan_shards_embed_tokens_on_the_vocabulary_as_transformers_adds_it():
    # transformers' init_parallel_plans puts embed_tokens: embedding_rowwise first in every plan
    # whose base model has an nn.Embedding embed_tokens: vocab-sharded weight, the ids replicated,
    # the partial lookups summed (Partial -> Replicate)
    for family in ("llama", "phi3", "gemma"):
        plan = shipped_tp_plan(family)
        key, embed = next(iter(plan.items()))
        assert key == "model.model.embed_tokens"
        assert isinstance(embed, RowwiseParallel)
        assert embed.input_layouts == (Replicate(),) and embed.output_layouts == (Replicate(),)
    assert "model.model.embed_tokens" in shipped_tp_plan("llama", lm_head=False)
    assert "model.lm_head" not in shipped_tp_plan("llama", lm_head=False)


def test_unmapped_style_is_refused_by_name():
    with pytest.raises(ValueError) as err:
        shipped_tp_plan("qwen3")
    assert str(err.value) == (
        "qwen3 ships tp plan entry 'model.model.layers.*.self_attn.q_norm': 'replicated_with_grad_allreduce', "
        "which commlens does not map (known: embedding_rowwise, colwise, rowwise, colwise_gather_output, "
        "rowwise_split_input)")


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match=r"family must be one of \[.*'olmo2'.*\], got 'falcon'"):
        shipped_tp_plan("falcon")


def test_moe_familys_shipped_tp_plan_is_refused_by_its_unmapped_style():
    # its experts' packed gate/up parameter is sharded by transformers' packed_colwise, no torch style
    with pytest.raises(ValueError, match=r"^mixtral ships tp plan entry 'model.model.layers.\*.mlp.experts.gate_up_proj': "
                                         r"'packed_colwise', which commlens does not map \(known: embedding_rowwise, "):
        shipped_tp_plan("mixtral")
