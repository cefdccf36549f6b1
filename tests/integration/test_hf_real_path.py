"""examples.hf:hf_tp against what transformers' own tensor parallelism issues as a user runs it:
``from_pretrained(distributed_config=DistributedConfig(tp_plan="auto"))`` under the fake process
group, its layer classes on the plan the model resolves, one training step under CommDebugMode
(examples.hf_real). commlens predicts from hf_tp on the exported factory program; every cell, count
and bytes, must agree. A sample of the dense families (every plan string hf_tp maps); the corpus
measures them all (bench/accuracy/run.py, ``*-transformers_tp-*``)."""
import pytest

from integration_helpers import assert_prediction_equals_counts, export_pt2, save_plan

import commlens
from examples.hf import hf_tp
from examples.hf_real import measure_transformers  # needs accelerate (scripts/setup.sh installs it)


def _module(doc, fqn):
    return next(m for m in doc["modules"] if m["fqn"] == fqn)


@pytest.mark.parametrize("family,tp", [
    ("llama", 4),  # colwise / rowwise, lm_head colwise_gather_output
    ("olmo2", 2),  # q/k/v colwise_gather_output, o_proj rowwise_split_input
    ("phi3", 2),  # packed qkv_proj / gate_up_proj gathered, o_proj and down_proj rowwise_split_input
    # embed_tokens is GemmaTextScaledWordEmbedding, an nn.Embedding subclass: torch's RowwiseParallel
    # takes it (isinstance), and so does predict (one weight, read by an embedding lookup)
    ("gemma", 2),
])
@pytest.mark.parametrize("plan_source", ["hf_tp", "captured"])
def test_prediction_equals_transformers_tp_plan_auto(family, tp, plan_source, tmp_path, run_commlens):
    doc = measure_transformers(family=family, tp=tp, phase="both")
    # init_parallel_plans adds a vocab-parallel embed_tokens to every family's plan: the ranks'
    # partial lookups are summed once in forward (the ids need no gradient)
    embed = _module(doc, "HFCausalLM.model.model.embed_tokens")
    assert (embed["forward"], embed["backward"]) == ({"c10d_functional.all_reduce": 1}, {})
    pt2 = export_pt2(f"examples.hf:hf_model(family={family!r})", tmp_path)
    # hf_tp maps the plan strings by hand; capture reads transformers' layers off its own calls
    # (python -m commlens.capture --parallelize transformers), on a (pp, dp_replicate, fsdp, tp) =
    # (1, 1, 1, tp) mesh, as transformers builds it
    plan = save_plan(hf_tp(family=family, tp=tp) if plan_source == "hf_tp" else
                     commlens.capture(f"examples.hf:hf_model(family={family!r})", "transformers", tp,
                                      loss="cross_entropy"), tmp_path)
    assert_prediction_equals_counts(run_commlens, pt2, plan, doc, "both", tmp_path)


@pytest.mark.parametrize("family,tp", [
    ("llama", 4),  # o_proj and down_proj rowwise
    ("olmo2", 2),  # o_proj rowwise_split_input after gathered q/k/v
])
def test_inference_follows_transformers_local_row_wise_all_reduce(family, tp, tmp_path, run_commlens):
    """model.eval() under torch.no_grad() (one generate() step): transformers' row-wise Linear runs
    on its local shards and sums its [2, 16, 64] float32 output (batch 2, 16 tokens, hidden 64) with
    dist.all_reduce in place, c10d.allreduce_ of 2 * 16 * 64 * 4 = 8192 bytes, once per row-wise
    module (2 layers, 2 each);
    the vocab-parallel embed_tokens still reduces through DTensor. Predicted from the captured plan
    on the program exported in eval mode, against the native run."""
    doc = measure_transformers(family=family, tp=tp, phase="inference")
    assert doc["phase"] == "inference"
    glob = _module(doc, "Global")
    assert glob["forward"]["c10d.allreduce_"] == 4 and glob["backward"] == {}
    assert glob["forward_bytes"]["c10d.allreduce_"] == 4 * 8192
    o_proj = _module(doc, "HFCausalLM.model.model.layers.0.self_attn.o_proj")
    assert o_proj["forward"] == {"c10d.allreduce_": 1}
    embed = _module(doc, "HFCausalLM.model.model.embed_tokens")
    assert embed["forward"] == {"c10d_functional.all_reduce": 1}

    pt2 = export_pt2(f"examples.hf:hf_model(family={family!r})", tmp_path, eval_mode=True)
    plan = save_plan(commlens.capture(f"examples.hf:hf_model(family={family!r})", "transformers", tp,
                                      loss="cross_entropy"), tmp_path)
    assert_prediction_equals_counts(run_commlens, pt2, plan, doc, "inference", tmp_path)


@pytest.mark.parametrize("phase", ["both", "inference"])
def test_qwen3_norm_grad_all_reduce_from_the_captured_plan(phase, tmp_path, run_commlens):
    """Qwen3's per-head q_norm / k_norm are replicated_with_grad_allreduce: transformers registers
    a post-accumulate-grad hook that calls dist.all_reduce on the weight's gradient, a c10d
    allreduce_ outside DTensor that no torch ParallelStyle issues. hf_tp, which maps plan strings to
    torch styles, refuses the plan; the captured plan records the layer itself
    (TransformersReplicatedWithGradAllReduce) and predicts the hook's all-reduce where CommDebugMode
    charges it. Without grad the hook is not registered."""
    doc = measure_transformers(family="qwen3", tp=2, phase=phase)
    for layer in (0, 1):
        for norm in ("q_norm", "k_norm"):
            m = _module(doc, f"HFCausalLM.model.model.layers.{layer}.self_attn.{norm}")
            # one all-reduce of the head_dim=8 float32 weight's gradient
            assert (m["forward"], m["backward"], m["backward_bytes"]) == (
                ({}, {"c10d.allreduce_": 1}, {"c10d.allreduce_": 8 * 4}) if phase == "both" else ({}, {}, {}))
    with pytest.raises(ValueError, match="'replicated_with_grad_allreduce', which commlens does not map"):
        hf_tp(family="qwen3", tp=2)
    pt2 = export_pt2("examples.hf:hf_model(family='qwen3')", tmp_path, eval_mode=phase == "inference")
    plan = commlens.capture("examples.hf:hf_model(family='qwen3')", "transformers", 2, loss="cross_entropy")
    norms = {fqn: style for _dim, entries in plan.parallelize_steps() for fqn, style in entries.items()
             if fqn.endswith("_norm")}
    assert sorted(norms) == ["model.model.layers.*.self_attn.k_norm", "model.model.layers.*.self_attn.q_norm"]
    assert {type(style).__name__ for style in norms.values()} == {"ReplicatedWithGradAllReduce"}
    assert_prediction_equals_counts(run_commlens, pt2, save_plan(plan, tmp_path), doc, phase, tmp_path)


def test_local_params_attention_sinks(tmp_path, run_commlens):
    """GraniteSWA's plan shards each attention's sinks (one per head) by their own colwise entry and
    installs local_params on the attention, whose forward then reads the sinks' local shard beside
    its local heads: no collective of its own; predicted from the captured plan, training step."""
    from torch.distributed.tensor import Shard

    model = "examples.hf:hf_model(family='granite_swa')"
    doc = measure_transformers(family="granite_swa", tp=2, phase="both")
    attn = _module(doc, "HFCausalLM.model.model.layers.0.self_attn")
    # o_proj's forward all-reduce and q/k/v's backward ones, as in any colwise/rowwise attention
    assert (attn["forward"], attn["backward"]) == ({"c10d_functional.all_reduce": 1},
                                                   {"c10d_functional.all_reduce": 3})
    plan = commlens.capture(model, "transformers", 2, loss="cross_entropy")
    styles = {fqn: type(style).__name__ for _dim, entries in plan.parallelize_steps() for fqn, style in entries.items()}
    assert styles["model.model.layers.*.self_attn"] == "LocalParamsParallel"
    assert plan.placements["model.model.layers.0.self_attn.sinks"] == {"tp": Shard(0)}
    pt2 = export_pt2(model, tmp_path)
    assert_prediction_equals_counts(run_commlens, pt2, save_plan(plan, tmp_path), doc, "both", tmp_path)
