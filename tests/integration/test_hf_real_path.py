"""examples.hf:hf_tp against what transformers' own tensor parallelism issues as a user runs it:
``from_pretrained(distributed_config=DistributedConfig(tp_plan="auto"))`` under the fake process
group, its layer classes on the plan the model resolves, one training step under CommDebugMode
(examples.hf_real). commlens predicts from hf_tp on the exported factory program; every cell, count
and bytes, must agree. A sample of the dense families (every plan string hf_tp maps); the corpus
measures them all (bench/accuracy/run.py, ``*-transformers_tp-*``)."""
import json

import pytest

from integration_helpers import export_pt2, save_plan

pytest.importorskip("accelerate", reason="transformers' from_pretrained with a tp_plan needs accelerate "
                    "(scripts/setup.sh installs it)")

from commlens.measure import format_counts, measure  # noqa: E402
from examples.hf import hf_tp  # noqa: E402
from examples.hf_real import measure_transformers_tp  # noqa: E402


def _module(doc, fqn):
    return next(m for m in doc["modules"] if m["fqn"] == fqn)


@pytest.mark.parametrize("family,tp", [
    ("llama", 4),  # colwise / rowwise, lm_head colwise_gather_output
    ("olmo2", 2),  # q/k/v colwise_gather_output, o_proj rowwise_split_input
    ("phi3", 2),  # packed qkv_proj / gate_up_proj gathered, o_proj and down_proj rowwise_split_input
])
def test_prediction_equals_transformers_tp_plan_auto(family, tp, tmp_path, run_commlens):
    doc = measure_transformers_tp(family=family, tp=tp, phase="both")
    # init_parallel_plans adds a vocab-parallel embed_tokens to every family's plan: the ranks'
    # partial lookups are summed once in forward (the ids need no gradient)
    embed = _module(doc, "HFCausalLM.model.model.embed_tokens")
    assert (embed["forward"], embed["backward"]) == ({"c10d_functional.all_reduce": 1}, {})
    measured = tmp_path / "measured.counts.json"
    measured.write_text(format_counts(doc))

    pt2 = export_pt2(f"examples.hf:hf_model(family={family!r})", tmp_path)
    plan = save_plan(hf_tp(family=family, tp=tp), tmp_path)
    predicted = tmp_path / "predicted.json"
    r = run_commlens("predict", pt2, "--plan", plan, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    r = run_commlens("compare", predicted, measured, "--json")
    summary = json.loads(r.stdout)["summary"]
    assert r.returncode == 0 and summary["differ"] == 0, r.stdout
    assert summary["bytes_compared"] == summary["cells"] > 0


def test_gemma_scaled_embedding_is_refused_by_predict(tmp_path, run_commlens):
    """Expected refusal. Gemma's (and Gemma2's) embed_tokens is GemmaTextScaledWordEmbedding, an
    nn.Embedding subclass: transformers shards it vocab-parallel like any embedding, and torch's
    RowwiseParallel takes it too (isinstance), so hf_tp's plan under commlens.measure issues exactly
    what the real path does. commlens' apply-plan pass knows an embedding by the exact class name the
    exported program records (passes/ApplyShardingPlan.cpp, isEmbedding), which the subclass' is not,
    so predict refuses the plan until that pass learns about subclasses."""
    real = measure_transformers_tp(family="gemma", tp=2, phase="both")
    mapped = measure("examples.hf:hf_model(family='gemma')", hf_tp(family="gemma", tp=2), phase="both",
                     return_document=True)
    assert real["modules"] == mapped["modules"]

    pt2 = export_pt2("examples.hf:hf_model(family='gemma')", tmp_path)
    plan = save_plan(hf_tp(family="gemma", tp=2), tmp_path)
    r = run_commlens("predict", pt2, "--plan", plan, "--phase", "both", "--format", "json")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"commlens: error: {pt2}: RowwiseParallel on HFCausalLM.model.model.embed_tokens "
        "(transformers.models.gemma.modeling_gemma.GemmaTextScaledWordEmbedding): only nn.Linear and "
        "nn.Embedding are supported")


def test_qwen3_norm_grad_all_reduce_has_no_torch_style():
    """Expected refusal. Qwen3's per-head q_norm / k_norm are replicated_with_grad_allreduce:
    transformers registers a post-accumulate-grad hook that calls dist.all_reduce on the weight's
    gradient, a c10d allreduce_ outside DTensor that no torch ParallelStyle issues, so hf_tp refuses
    the plan rather than predict without those collectives."""
    doc = measure_transformers_tp(family="qwen3", tp=2, phase="both")
    for layer in (0, 1):
        for norm in ("q_norm", "k_norm"):
            m = _module(doc, f"HFCausalLM.model.model.layers.{layer}.self_attn.{norm}")
            # one all-reduce of the head_dim=8 float32 weight's gradient
            assert (m["forward"], m["backward"], m["backward_bytes"]) == (
                {}, {"c10d.allreduce_": 1}, {"c10d.allreduce_": 8 * 4})
    with pytest.raises(ValueError, match="'replicated_with_grad_allreduce', which commlens does not map"):
        hf_tp(family="qwen3", tp=2)
