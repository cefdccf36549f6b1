"""transformers' mixture-of-experts families through their real tensor-parallel path,
``from_pretrained(distributed_config=DistributedConfig(tp_plan="auto"))`` (examples.hf_real), one
training step or one no-grad forward under CommDebugMode, predicted from the plan commlens.capture
reads off transformers' own calls. Their plans shard the experts' 3-D weights with entries naming
the parameters themselves (``experts.gate_up_proj: packed_colwise``, a _StridedShard(1, sf=2);
``experts.down_proj: rowwise``, Shard(-1)) and install ``moe_tp_experts`` on the experts module,
which runs them on their local shards between transformers' own autograd all-reduces."""
import pytest
from torch.distributed.tensor.placement_types import Shard, _StridedShard

from integration_helpers import (assert_measure_of_plan_equals, assert_prediction_equals_counts, export_pt2,
                                 save_plan)

import commlens
from examples.hf_real import measure_transformers  # needs accelerate (scripts/setup.sh installs it)

# examples.hf's tiny models: batch 2 x 16 tokens, hidden 64, top-2 routing, float32
TOKENS, HIDDEN, TOP_K, F32 = 2 * 16, 64, 2, 4


def _module(doc, fqn):
    return next(m for m in doc["modules"] if m["fqn"] == fqn)


@pytest.mark.parametrize("family,tp,phase", [
    ("qwen3_moe", 2, "both"),
    ("mixtral", 4, "both"),  # its router normalises the top-k weights in place
    ("qwen3_moe", 2, "inference"),
])
def test_moe_tp_experts_from_the_captured_plan(family, tp, phase, tmp_path, run_commlens):
    doc = measure_transformers(family=family, tp=tp, phase=phase)
    layer = "HFCausalLM.model.model.layers.0.mlp.experts"
    experts, act_fn = _module(doc, layer), _module(doc, layer + ".act_fn")
    # _AllReduceForward sums the experts' partial [32, 64] output in place, with or without grad:
    # 32 * 64 * 4 = 8192 bytes
    assert (experts["forward"], experts["forward_bytes"]) == (
        {"c10d.allreduce_": 1}, {"c10d.allreduce_": TOKENS * HIDDEN * F32})
    # with grad, _AllReduceBackward sums the gradients of hidden_states (8192 bytes) and of the
    # [32, 2] top-k weights (256 bytes) once the experts' backward is done: CommDebugMode charges
    # them to act_fn, the module whose backward ran last
    assert (act_fn["backward"], act_fn["backward_bytes"]) == (
        ({"c10d.allreduce_": 2}, {"c10d.allreduce_": TOKENS * HIDDEN * F32 + TOKENS * TOP_K * F32})
        if phase == "both" else ({}, {}))

    model = f"examples.hf:hf_model(family={family!r})"
    plan = commlens.capture(model, "transformers", tp, loss="cross_entropy")
    experts_styles = {fqn: type(style).__name__ for _dim, entries in plan.parallelize_steps()
                      for fqn, style in entries.items() if fqn.endswith("experts")}
    assert experts_styles == {"model.model.layers.*.mlp.experts": "MoeExpertsParallel"}
    # on the tp dim of transformers' (pp, dp_replicate, fsdp, tp) mesh
    placed = {fqn: pls for fqn, pls in plan.placements.items() if ".experts." in fqn}
    assert placed == {f"model.model.layers.{i}.mlp.experts.{name}": {"tp": placement}
                      for i in (0, 1) for name, placement in (("gate_up_proj", _StridedShard(1, split_factor=2)),
                                                               ("down_proj", Shard(2)))}
    pt2 = export_pt2(model, tmp_path, eval_mode=phase == "inference")
    assert_prediction_equals_counts(run_commlens, pt2, save_plan(plan, tmp_path), doc, phase, tmp_path)
    if family == "qwen3_moe":
        # commlens.measure applying the captured plan (transformers' layers, then the placements)
        # issues what from_pretrained's own path issued, module by module
        assert_measure_of_plan_equals(model, plan, phase, doc)


@pytest.mark.parametrize("phase", ["both", "inference"])
def test_mla_kv_a_proj_from_the_captured_plan(phase, tmp_path, run_commlens):
    """DeepSeek-V2's shipped plan installs mla_kv_a_proj on each kv_a_proj_with_mqa: the projection
    runs whole, and the rope part of its output (the last qk_rope_head_dim = 8 features), which
    bypasses the column-wise kv_b_proj, goes through _AllReduceBackward."""
    doc = measure_transformers(family="deepseek_v2", tp=2, phase=phase)
    kv_a = _module(doc, "HFCausalLM.model.model.layers.0.self_attn.kv_a_proj_with_mqa")
    # training: the rope part's gradient, 32 tokens x 8 x 4 = 1024 bytes, summed in its backward
    assert (kv_a["forward"], kv_a["backward"], kv_a["backward_bytes"]) == (
        ({}, {"c10d.allreduce_": 1}, {"c10d.allreduce_": TOKENS * 8 * F32}) if phase == "both" else ({}, {}, {}))

    model = "examples.hf:hf_model(family='deepseek_v2')"
    plan = commlens.capture(model, "transformers", 2, loss="cross_entropy")
    mla = {fqn: (type(style).__name__, style.qk_rope_head_dim) for _dim, entries in plan.parallelize_steps()
           for fqn, style in entries.items() if fqn.endswith("kv_a_proj_with_mqa")}
    assert mla == {"model.model.layers.*.self_attn.kv_a_proj_with_mqa": ("MlaKvAProjParallel", 8)}
    pt2 = export_pt2(model, tmp_path, eval_mode=phase == "inference")
    assert_prediction_equals_counts(run_commlens, pt2, save_plan(plan, tmp_path), doc, phase, tmp_path)
    if phase == "both":
        assert_measure_of_plan_equals(model, plan, phase, doc)


def test_moe_tp_experts_needs_the_call_signature(tmp_path, run_commlens):
    """Without the experts' recorded call signature (a program torch.export wrote directly) the
    style cannot tell hidden_states from the routing arguments: refused by name, exit 2."""
    import torch

    from commlens._factory import call_model_factory

    model = "examples.hf:hf_model(family='qwen3_moe')"
    module, args, kwargs = call_model_factory(model)
    pt2 = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(module, args, kwargs, strict=False), str(pt2))
    plan = save_plan(commlens.capture(model, "transformers", 2, loss="cross_entropy"), tmp_path)
    r = run_commlens("predict", pt2, "--plan", plan, "--phase", "both")
    assert r.returncode == 2
    assert ("TransformersMoeExpertsParallel on HFCausalLM.model.model.layers.0.mlp.experts: its input hook reads "
            "the call's positional (hidden_states, top_k_index, top_k_weights), which needs the module's call "
            "signature (python -m commlens.export records it)") in r.stderr, r.stderr
