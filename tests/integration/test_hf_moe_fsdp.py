"""transformers' mixture-of-experts families (examples.hf: Qwen3-MoE, Mixtral, DeepSeek-V3) under FSDP2 as users
shard them (every decoder layer, then the root), one training step measured with CommDebugMode and
predicted from the exported program. Their experts' grouped matmuls are exported as the custom op
transformers::grouped_mm_fallback (run eagerly as torch._grouped_mm), and Mixtral's router
normalises its top-k weights in place (div_); DeepSeek-V3 adds multi-head latent attention,
group-limited routing and a shared expert (its first layer dense)."""

import pytest

from commlens import plan as planlib
from commlens.measure import measure
from examples.hf import hf_model
from integration_helpers import assert_prediction_equals_counts, export_pt2, save_plan


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral", "deepseek_v3"])
def test_moe_family_under_fsdp(tmp_path, run_commlens, family):
    model_spec = f"examples.hf:hf_model(family={family!r})"
    plan_path = save_plan(planlib.resolve_plan(f"examples.hf:hf_fsdp(family={family!r}, dp=2)"), tmp_path)
    doc = measure(model_spec, str(plan_path), backend="fake", phase="both", return_document=True)
    # each decoder layer's unit all-gathers its parameters in forward: each of the 2 ranks sends its
    # half of the layer's float32 parameters (attention, router, the 8 experts, norms)
    model, _ = hf_model(family=family)
    layer_bytes = sum(p.numel() for p in model.model.model.layers[0].parameters()) * 4
    layer = next(m for m in doc["modules"] if m["fqn"] == "FSDPHFCausalLM.model.model.layers.0")
    assert layer["forward_bytes"] == {"c10d._allgather_base_": layer_bytes // 2}
    assert_prediction_equals_counts(run_commlens, export_pt2(model_spec, tmp_path), plan_path, doc, "both", tmp_path)
