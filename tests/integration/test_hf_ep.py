"""transformers' expert parallelism through its real path, ``from_pretrained(distributed_config=
DistributedConfig(ep_size=E, fsdp_size=F))`` (examples.hf_real), one training step or one no-grad
forward under CommDebugMode, predicted from the plan commlens.capture reads off transformers' own
calls. transformers builds two root meshes over the same ranks, a dense (pp, dp_replicate, fsdp,
tp) and an expert (pp, dp_replicate, efsdp, ep) one; its ep_plan shards each experts module's 3-D
weights by expert (``grouped_gemm``) and installs ``ep_dispatch_experts``, whose AllToAllEP
exchanges the per-expert counts and the tokens by all-to-all (with tp_size == ep_size each rank
its slice of the batch the group shares, or AllReduceEP's all-reduce of partial outputs); its
FSDP puts the experts on efsdp and the dense layers on fsdp."""
import pytest

from integration_helpers import (assert_measure_of_plan_equals, assert_prediction_equals_counts, export_pt2,
                                 save_plan)

import commlens
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
        assert_measure_of_plan_equals(MODEL, plan, phase, doc)


@pytest.mark.parametrize("phase", ["both", "inference"])
def test_ep_dispatch_experts_on_part_of_fsdp(phase, tmp_path, run_commlens):
    """ep_size 2 of fsdp_size 4: the expert mesh (efsdp 2, ep 2) and the dense fsdp dim over all 4
    ranks, their flattening; the experts' FSDP units on efsdp sum their gradients
    (set_force_sum_reduction_for_comms, which changes no collective)."""
    distributed = {"fsdp_size": 4, "ep_size": 2}
    doc = measure_transformers(family="qwen3_moe", phase=phase, distributed=distributed)
    experts = _module(doc, "HFCausalLM.model.model.layers.0.mlp.experts")
    # forward: the experts' unit gathers its 4 experts' weights (ep 2 of 8) over efsdp 2: gate_up
    # [4, 2 x 32, 64] and down [4, 64, 32] float32, halved
    expert_weights = 4 * (2 * 32 * 64 + 64 * 32)
    assert experts["forward_bytes"]["c10d._allgather_base_"] == expert_weights // 2 * F32
    plan = commlens.capture(MODEL, "transformers(fsdp_size=4, ep_size=2)", 4, loss="cross_entropy")
    assert (plan.mesh_shape, plan.mesh_dim_names, plan.flattened_dims) == (
        (2, 2), ("efsdp", "ep"), {"fsdp": ("efsdp", "ep")})
    units = {u.fqn if isinstance(u.fqn, str) else tuple(u.fqn): (u.mesh_dims, u.force_sum_reduction_for_comms)
             for u in plan.fully_shard}
    assert units == {"model.model.layers.*.mlp.experts": (("efsdp",), True), "model.model.layers.*": (("fsdp",), False),
                     "model.model.embed_tokens": (("fsdp",), False),
                     ("model.model.norm", "model.lm_head"): (("fsdp",), False), "model": (("fsdp",), False)}
    pt2 = export_pt2(MODEL, tmp_path, eval_mode=phase == "inference")
    assert_prediction_equals_counts(run_commlens, pt2, save_plan(plan, tmp_path), doc, phase, tmp_path)
    if phase == "both":
        assert_measure_of_plan_equals(MODEL, plan, phase, doc)


@pytest.mark.parametrize("tp,implementation,phase", [
    (2, "auto", "both"), (2, "auto", "inference"), (4, "auto", "both"),
    (2, "all_reduce", "both"), (2, "all_to_all", "inference"),
])
def test_ep_dispatch_experts_on_the_tp_group(tp, implementation, phase, tmp_path, run_commlens):
    """ep_size == tp_size: the expert group is the TP group, whose ranks hold the same batch.
    AllToAllEP (AutoEP's choice while hidden_states require grad) has each rank dispatch its
    slice of the batch and all-gathers the outputs; AllReduceEP (AutoEP's choice without grad)
    runs every rank's experts on the whole batch and sums the partial outputs."""
    distributed = {"tp_size": tp, "ep_size": tp, "ep_implementation": implementation}
    doc = measure_transformers(family="qwen3_moe", phase=phase, distributed=distributed)
    experts = _module(doc, "HFCausalLM.model.model.layers.0.mlp.experts")
    all_reduce = implementation == "all_reduce" or (implementation == "auto" and phase == "inference")
    if all_reduce:  # the [32, 64] f32 partial output summed in place: 8192 bytes
        assert (experts["forward"], experts["forward_bytes"]) == (
            {"c10d.allreduce_": 1}, {"c10d.allreduce_": TOKENS * HIDDEN * F32})
    else:
        # this rank's 32 / tp tokens, each sent to its top-2 experts; its output slice all-gathered
        assert experts["forward"] == {"c10d.alltoall_base_": 1, "c10d_functional.all_gather_into_tensor": 1,
                                      "c10d_functional.all_to_all_single": 2}
        assert experts["forward_bytes"]["c10d_functional.all_gather_into_tensor"] == TOKENS // tp * HIDDEN * F32

    spec = f"transformers({', '.join(f'{k}={v!r}' for k, v in distributed.items())})"
    plan = commlens.capture(MODEL, spec, tp, loss="cross_entropy")
    layer = next(style for _dim, entries in plan.parallelize_steps() for fqn, style in entries.items()
                 if fqn == "model.model.layers.*.mlp.experts")
    assert (layer.shares_batch, layer.ep_implementation) == (True, implementation)
    pt2 = export_pt2(MODEL, tmp_path, eval_mode=phase == "inference")
    assert_prediction_equals_counts(run_commlens, pt2, save_plan(plan, tmp_path), doc, phase, tmp_path)
    if (tp, implementation, phase) == (2, "auto", "both"):
        assert_measure_of_plan_equals(MODEL, plan, phase, doc)


@pytest.mark.parametrize("fsdp,phase", [(2, "both"), (2, "inference"), (4, "both")])
def test_ep_dispatch_experts_with_a_tp_group_inside_the_expert_group(fsdp, phase, tmp_path, run_commlens):
    """1 < tp_size < ep_size: DistributedConfig(tp_size=2, fsdp_size=F, ep_size=4), AllToAllEP's
    own example (F=4). Each TP group of 2 ranks holds one batch; its ranks slice it over tp, the
    expert group of 4 exchanges the tokens, and the outputs are all-gathered over tp again. The
    expert group is the dense mesh's fsdp x tp (F=2) or, with F=4, the part of fsdp that efsdp
    leaves ("fsdp&ep", named by capture) x tp."""
    distributed = {"tp_size": 2, "fsdp_size": fsdp, "ep_size": 4}
    doc = measure_transformers(family="qwen3_moe", phase=phase, distributed=distributed)
    layer = "HFCausalLM.model.model.layers.0.mlp.experts"
    experts, act_fn = _module(doc, layer), _module(doc, layer + ".act_fn")
    def not_fsdp(counts):  # with fsdp 4 the experts' unit also gathers and reduce-scatters (below)
        return {k: v for k, v in counts.items() if k not in ("c10d._allgather_base_", "c10d._reduce_scatter_base_")}

    # forward: the counts of all 8 experts (int64) over ep, the dispatch and the combine over ep,
    # and this rank's output slice, 32 / 2 tokens x 64 float32, all-gathered over tp
    assert not_fsdp(experts["forward"]) == {
        "c10d.alltoall_base_": 1, "c10d_functional.all_gather_into_tensor": 1, "c10d_functional.all_to_all_single": 2}
    assert experts["forward_bytes"]["c10d.alltoall_base_"] == EXPERTS * I64
    assert experts["forward_bytes"]["c10d_functional.all_gather_into_tensor"] == TOKENS // 2 * HIDDEN * F32
    if phase == "both":
        # backward, charged to act_fn: the dispatch's all-to-all back, and the gradients of this
        # rank's slices of hidden_states [16, 64] and top_k_weights [16, 2] all-gathered over tp
        assert not_fsdp(act_fn["backward"]) == {"c10d_functional.all_gather_into_tensor": 2,
                                      "c10d_functional.all_to_all_single": 1}
        assert act_fn["backward_bytes"]["c10d_functional.all_gather_into_tensor"] == (
            TOKENS // 2 * (HIDDEN + TOP_K) * F32)
    if fsdp == 4:
        # the experts' unit gathers its 2 experts' weights (ep 4 of 8) over efsdp 2: gate_up
        # [2, 2 x 32, 64] and down [2, 64, 32] float32, halved
        assert experts["forward_bytes"]["c10d._allgather_base_"] == 2 * (2 * 32 * 64 + 64 * 32) // 2 * F32

    spec = f"transformers({', '.join(f'{k}={v!r}' for k, v in distributed.items())})"
    plan = commlens.capture(MODEL, spec, 2 * fsdp, loss="cross_entropy")
    layer_style = next(style for _dim, entries in plan.parallelize_steps() for fqn, style in entries.items()
                       if fqn == "model.model.layers.*.mlp.experts")
    assert (layer_style.shares_batch, layer_style.tp_mesh_dim) == (False, "tp")
    if fsdp == 2:
        assert (plan.mesh_shape, plan.mesh_dim_names, plan.flattened_dims) == (
            (1, 2, 2), ("efsdp", "fsdp", "tp"), {"ep": ("fsdp", "tp")})
    else:
        assert (plan.mesh_shape, plan.mesh_dim_names, plan.flattened_dims) == (
            (2, 2, 2), ("efsdp", "fsdp&ep", "tp"), {"fsdp": ("efsdp", "fsdp&ep"), "ep": ("fsdp&ep", "tp")})
    pt2 = export_pt2(MODEL, tmp_path, eval_mode=phase == "inference")
    assert_prediction_equals_counts(run_commlens, pt2, save_plan(plan, tmp_path), doc, phase, tmp_path)
    if phase == "both":
        assert_measure_of_plan_equals(MODEL, plan, phase, doc)
