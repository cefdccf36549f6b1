"""transformers' expert parallelism through its real path, ``from_pretrained(distributed_config=
DistributedConfig(ep_size=E, fsdp_size=F))`` (examples.hf_real), one training step or one no-grad
forward under CommDebugMode, predicted from the plan commlens.capture reads off transformers' own
calls. transformers builds two root meshes over the same ranks, a dense (pp, dp_replicate, fsdp,
tp) and an expert (pp, dp_replicate, efsdp, ep) one; its ep_plan shards each experts module's 3-D
weights by expert (``grouped_gemm``) and installs ``ep_dispatch_experts``, whose AllToAllEP
exchanges the per-expert counts and the tokens by all-to-all; its FSDP puts the experts on efsdp
and the dense layers on fsdp."""
import pytest

from integration_helpers import assert_prediction_equals_counts, export_pt2, save_plan

import commlens
from commlens.capture import CaptureError
from commlens.measure import measure
from examples.hf_real import measure_transformers  # needs accelerate (scripts/setup.sh installs it)

# examples.hf's tiny Qwen3-MoE: batch 2 x 16 tokens, hidden 64, 8 experts, top-2 routing, float32
TOKENS, HIDDEN, EXPERTS, TOP_K, F32, I64 = 2 * 16, 64, 8, 2, 4, 8
MODEL = "examples.hf:hf_model(family='qwen3_moe')"


def _module(doc, fqn):
    return next(m for m in doc["modules"] if m["fqn"] == fqn)


@pytest.mark.parametrize("ep,phase", [(2, "both"), (2, "inference"), (4, "both")])
def test_ep_dispatch_experts_from_the_captured_plan(ep, phase, tmp_path, run_commlens):
    distributed = {"fsdp_size": ep, "ep_size": ep}
    doc = measure_transformers(family="qwen3_moe", phase=phase, distributed=distributed)
    layer = "HFCausalLM.model.model.layers.0.mlp.experts"
    experts, act_fn = _module(doc, layer), _module(doc, layer + ".act_fn")
    # forward, with or without grad: the per-expert counts (8 int64 = 64 bytes, c10d.alltoall_base_
    # as dist.all_to_all_single is counted), then the dispatch and the combine, all_to_all_single
    # each. The dispatch sends each of the 32 tokens once per top-2 expert: 32 * 2 * 64 * 4 = 16384
    # bytes. (The combine sends back what the experts received, the routing's; the fake process
    # group's all-to-all leaves the received counts as they were allocated, here the same.)
    assert experts["forward"] == {"c10d.alltoall_base_": 1, "c10d_functional.all_to_all_single": 2}
    assert experts["forward_bytes"]["c10d.alltoall_base_"] == EXPERTS * I64
    # the experts' FSDP unit is on efsdp, of one rank: it issues nothing
    assert "c10d._allgather_base_" not in experts["forward"]
    # backward: each autograd all-to-all's gradient goes back by one more; CommDebugMode charges the
    # combine's to the experts and the dispatch's, run after the experts' last op, to act_fn
    assert act_fn["backward"] == ({"c10d_functional.all_to_all_single": 1} if phase == "both" else {})

    plan = commlens.capture(MODEL, f"transformers(fsdp_size={ep}, ep_size={ep})", ep, loss="cross_entropy")
    styles = {fqn: type(style).__name__ for _dim, entries in plan.parallelize_steps() for fqn, style in entries.items()}
    assert styles == {"model.model.layers.*.mlp.experts": "EpDispatchExpertsParallel"}
    # one plan mesh: efsdp (one rank) and ep, the dense fsdp dim over the same ranks as ep
    assert (plan.mesh_shape, plan.mesh_dim_names) == ((1, ep), ("efsdp", "ep"))
    assert {u.fqn if isinstance(u.fqn, str) else tuple(u.fqn): u.mesh_dims for u in plan.fully_shard} == {
        "model.model.layers.*.mlp.experts": ("efsdp",), "model.model.layers.*": ("ep",),
        "model.model.embed_tokens": ("ep",), ("model.model.norm", "model.lm_head"): ("ep",), "model": ("ep",)}
    # the experts' weights are FSDP's parameters, placed by the style: no placements entry
    assert plan.placements == {}
    pt2 = export_pt2(MODEL, tmp_path, eval_mode=phase == "inference")
    assert_prediction_equals_counts(run_commlens, pt2, save_plan(plan, tmp_path), doc, phase, tmp_path)
    if (ep, phase) == (2, "both"):
        # commlens.measure applying the captured plan issues what from_pretrained's own path issued
        def cells(counts):
            return {m["fqn"]: [m[k] for k in ("forward", "backward", "forward_bytes", "backward_bytes")]
                    for m in counts["modules"]}

        assert cells(measure(MODEL, plan, phase=phase, return_document=True)) == cells(doc)


@pytest.mark.parametrize("config,message", [
    # ep_size == tp_size: the dispatch slices the batch its TP group shares
    ({"tp_size": 2, "ep_size": 2},
     "transformers' ep_dispatch_experts on module 'model.model.layers.0.mlp.experts' (Qwen3MoeExperts): with tensor "
     "parallelism (tp_size 2) the dispatch splits the batch its TP group shares and gathers it back; that is not "
     "modelled"),
    # efsdp of 2 ranks: the experts' FSDP sums its gradients by itself (and fsdp, over efsdp x ep,
    # would not lay out as one plan mesh with them)
    ({"fsdp_size": 4, "ep_size": 2},
     "fully_shard of module 'model.model.layers.0.mlp.experts' (Qwen3MoeExperts): "
     "set_force_sum_reduction_for_comms(True) is not modelled"),
])
def test_unmodelled_expert_parallelism_is_refused(config, message):
    world_size = config.get("tp_size", 1) * config.get("fsdp_size", 1)
    spec = f"transformers({', '.join(f'{k}={v}' for k, v in config.items())})"
    with pytest.raises(CaptureError) as err:
        commlens.capture(MODEL, spec, world_size, loss="cross_entropy")
    assert str(err.value) == f"{spec}: {message}"
