"""`commlens predict` / `check-plan` on FSDP2 plans it must refuse: the same plan fails in torch
(checked here with commlens.measure), or cannot be expressed; one line, exit 2. And units on a
flattened mesh dim, predicted against commlens.measure."""
import dataclasses
import json
import re

import pytest

from commlens import plan as planlib
from commlens._factory import call_model_factory
from commlens.measure import measure
from commlens.plan import FullyShard
from integration_helpers import compare_with_measure, export_pt2, module_rows, predict_both, save_plan

STACKED = "examples.mlp:stacked_mlp"


@pytest.fixture(scope="module")
def stacked_pt2(tmp_path_factory):
    return export_pt2(STACKED, tmp_path_factory.mktemp("fsdp"))


def test_reshard_to_smaller_group_with_tp_parameters_is_refused_like_torch(run_commlens, stacked_pt2, tmp_path):
    from examples.plans import stacked_mlp_tp

    plan = dataclasses.replace(stacked_mlp_tp(tp=2), mesh_shape=(4, 2), mesh_dim_names=("dp", "tp"),
                               fully_shard=(FullyShard("layers.*", ("dp",), reshard_after_forward=2),))
    path = save_plan(plan, tmp_path)
    # torch 2.13 itself refuses it when the first TP block is sharded ...
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    try:
        mesh = init_device_mesh("cpu", (4, 2), mesh_dim_names=("dp", "tp"))
        model, args, _kwargs = call_model_factory(STACKED)
        parallelize_module(model, mesh["tp"], stacked_mlp_tp(tp=2).parallelize_plan)
        with pytest.raises(NotImplementedError, match="Resharding to smaller mesh is not supported for DTensor "
                                                      "parameters yet"):
            for block in model.layers:
                fully_shard(block, mesh=mesh["dp"], reshard_after_forward=2)
            fully_shard(model, mesh=mesh["dp"])
            model(*args)
    finally:
        dist.destroy_process_group()
    # ... and so does predict, naming the unit and the module.
    r = run_commlens("predict", stacked_pt2, "--plan", path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {stacked_pt2}: fully_shard 'layers.*' on StackedMLP.layers.0: "
                        "reshard_after_forward=2 with tensor-parallel (DTensor) parameters is not supported by torch "
                        "2.13 (\"Resharding to smaller mesh is not supported for DTensor parameters yet\")\n")


def test_fully_shard_pattern_matching_no_module(run_commlens, stacked_pt2, tmp_path):
    from examples.plans import stacked_mlp_fsdp

    plan = dataclasses.replace(stacked_mlp_fsdp(dp=4), fully_shard=(FullyShard("blocks.*", ("dp",)),))
    path = save_plan(plan, tmp_path)
    for command in ("check-plan", "predict"):
        r = run_commlens(command, stacked_pt2, "--plan", path)
        assert (r.returncode, r.stdout) == (2, "")
        assert r.stderr == (f"commlens: error: {path}: fully_shard pattern 'blocks.*' matches no module of "
                            "StackedMLP\n")


def test_module_sharded_by_two_units(run_commlens, stacked_pt2, tmp_path):
    from examples.plans import stacked_mlp_fsdp

    plan = dataclasses.replace(stacked_mlp_fsdp(dp=4), fully_shard=(FullyShard("layers.*", ("dp",)),
                                                                      FullyShard("layers.1", ("dp",))))
    path = save_plan(plan, tmp_path)
    r = run_commlens("check-plan", stacked_pt2, "--plan", path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {path}: fully_shard pattern 'layers.1' matches module 'layers.1' already "
                        "sharded by pattern 'layers.*'\n")


def test_explicit_placements_on_a_sharded_parameter(run_commlens, stacked_pt2, tmp_path):
    from torch.distributed.tensor import Shard

    from examples.plans import stacked_mlp_fsdp

    plan = dataclasses.replace(stacked_mlp_fsdp(dp=4), placements={"layers.1.w1.weight": (Shard(0),)})
    path = save_plan(plan, tmp_path)
    # fully_shard made it a DTensor first; measure refuses to distribute it again ...
    with pytest.raises(planlib.PlanError, match="already a DTensor"):
        measure(STACKED, str(path), phase="forward")
    # ... and predict names the unit that manages it.
    r = run_commlens("predict", stacked_pt2, "--plan", path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {stacked_pt2}: placements for 'layers.1.w1.weight': it is already a "
                        "DTensor after fully_shard ('layers.*' on FSDPStackedMLP.layers.1)\n")


def test_mixed_precision_leaves_activation_bytes_unknown(run_commlens, tmp_path):
    """FSDP's MixedPrecisionPolicy(param_dtype=bf16) runs the blocks in bf16, so the TP collectives
    inside them send half the bytes of the fp32 program; commlens does not re-type a float32 program
    (test_mixed_precision.py exports under the plan instead), so it records no bytes for those cells (compare then checks counts only there), while FSDP's own
    all-gathers and reduce-scatters keep exact bytes (bf16 parameters, fp32 gradients)."""
    import json

    model, plan_spec = "examples.gpt2:gpt2", "examples.plans:gpt2_fsdp_tp(dp=2, tp=2, mixed_precision='bf16')"
    pt2 = export_pt2(model, tmp_path)
    plan_path = save_plan(planlib.resolve_plan(plan_spec), tmp_path)
    predicted = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    root = json.loads(predicted.read_text())
    assert set(root["collective_bytes_forward"]) == {"c10d._allgather_base_"}  # no c10d_functional bytes
    details = [d for d in root["children"][0]["children"][-1]["collectives_forward_detail"]]
    assert details and all(d.get("bytes_known", True) is False for d in details if d["op"].startswith("c10d_func"))
    summary = compare_with_measure(run_commlens, predicted, model, plan_spec, tmp_path)
    assert summary["differ"] == 0 and 0 < summary["bytes_compared"] < summary["cells"]


def test_units_on_a_flattened_dim(run_commlens, stacked_pt2, tmp_path):
    """torchtitan's fsdp over efsdp x ep, on stacked_mlp: a (efsdp 2, ep 4) mesh with fsdp their
    flattening (mesh[("efsdp", "ep")]._flatten("fsdp")); layers.0 on fsdp (8 ranks), layers.1
    and layers.2 on ep (4 ranks), the root (no parameter of its own) on efsdp."""
    plan = planlib.Plan(mesh_shape=(2, 4), mesh_dim_names=("efsdp", "ep"), flattened_dims={"fsdp": ("efsdp", "ep")},
                        fully_shard=(FullyShard("layers.0", ("fsdp",)), FullyShard("layers.[12]", ("ep",)),
                                     FullyShard("", ("efsdp",))))
    pred, tree = predict_both(run_commlens, stacked_pt2, plan, tmp_path)
    rows = module_rows(tree)
    # a block: w1 [32, 16], b1 [32], w2 [16, 32], b2 [16] float32, 1072 elements (4288 bytes, what
    # the reduce-scatter sends). On 8 ranks a rank's shards are 4 x 16 + 4 + 2 x 32 + 2 = 134
    # elements (536 bytes); on 4 ranks twice that (1072 bytes)
    ag, rs = "c10d._allgather_base_", "c10d._reduce_scatter_base_"
    assert rows["FSDPStackedMLP.layers.0"][2] == {ag: 536}
    assert rows["FSDPStackedMLP.layers.1"][2] == {ag: 1072}
    # backward: layers.1's pre-backward prefetches layers.0 (its own gather was layers.2's prefetch)
    assert rows["FSDPStackedMLP.layers.1"][3] == {ag: 536, rs: 4288}
    assert rows["FSDPStackedMLP.layers.0"][3][rs] == 4288
    # the records name the flattened dim's two mesh dims, and the table names the dim
    records = [c for m in _tree(tree) for c in m.get("collectives_forward_detail", ())]
    assert {(c["module"], tuple(c["mesh_dims"])) for c in records} == {
        ("FSDPStackedMLP.layers.0", (0, 1)), ("FSDPStackedMLP.layers.1", (1,)), ("FSDPStackedMLP.layers.2", (1,))}
    r = run_commlens("predict", stacked_pt2, "--plan", tmp_path / "plan.json", "--phase", "both",
                     "--cluster", "h100-ib-ndr")
    assert r.returncode == 0 and "fsdp" in r.stdout, r.stderr
    summary = compare_with_measure(run_commlens, pred, STACKED, plan, tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0


def _two_mesh_plan(second=("ab", "layers.[12]"), **kwargs):
    """stacked_mlp on a (a 2, b 2) mesh with ab their flattening: layers.0 on mesh["b"] (2 ranks),
    the modules `second` names on mesh[second dim]. Each Linear Colwise with a Replicate output
    (an all-gather of its local shard), so that bytes show the mesh's size."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel

    gathered = ColwiseParallel(output_layouts=Replicate())
    dim, modules = second
    return planlib.Plan(name="stacked_mlp_two_meshes", mesh_shape=(2, 2), mesh_dim_names=("a", "b"),
                        flattened_dims={"ab": ("a", "b")},
                        parallelize_plan=[("b", {"layers.0.w1": gathered, "layers.0.w2": gathered}),
                                          (dim, {f"{modules}.w1": gathered, f"{modules}.w2": gathered})], **kwargs)


def test_styles_on_two_meshes_one_flattened(run_commlens, stacked_pt2, tmp_path):
    """parallelize_module on mesh["b"] and on mesh["ab"], flattened from the whole (a, b) mesh (as
    torchtitan's experts go on an ep dim flattened from fsdp x tp beside tp): each style's DTensors
    live on its own mesh, its collectives name that mesh's plan dims, and bytes follow its size."""
    pred, tree = predict_both(run_commlens, stacked_pt2, _two_mesh_plan(), tmp_path)
    rows = module_rows(tree)
    ag, ar = "c10d_functional.all_gather_into_tensor", "c10d_functional.all_reduce"
    # forward: each Colwise output [2, 8, out] float32 all-gathered from the rank's shard: w1 (out
    # 32) 2048 bytes, w2 (out 16) 1024 bytes, over the shard count: 2 on b, 4 on ab
    for layer, ranks in (("0", 2), ("1", 4), ("2", 4)):
        assert rows[f"StackedMLP.layers.{layer}.w1"][2] == {ag: 2048 // ranks}
        assert rows[f"StackedMLP.layers.{layer}.w2"][2] == {ag: 1024 // ranks}
    # backward: the Replicate input's gradient, a Partial sum, all-reduced whole (any mesh): w2's
    # input [2, 8, 32] 2048 bytes; w1's [2, 8, 16] 1024 bytes, but layers.0's input needs no grad
    assert rows["StackedMLP.layers.0.w1"][3] == {}
    assert rows["StackedMLP.layers.1.w1"][3] == rows["StackedMLP.layers.2.w1"][3] == {ar: 1024}
    assert rows["StackedMLP.layers.0.w2"][3] == rows["StackedMLP.layers.2.w2"][3] == {ar: 2048}
    records = [c for m in _tree(tree) for c in m.get("collectives_forward_detail", ())]
    assert {(c["module"], tuple(c["mesh_dims"])) for c in records} == {
        *((f"StackedMLP.layers.0.w{i}", (1,)) for i in (1, 2)),
        *((f"StackedMLP.layers.{layer}.w{i}", (0, 1)) for layer in (1, 2) for i in (1, 2))}
    summary = compare_with_measure(run_commlens, pred, STACKED, _two_mesh_plan(), tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0


def test_an_op_on_dtensors_of_two_meshes_is_refused_like_dtensor(run_commlens, stacked_pt2, tmp_path):
    """layers.0.w1 hands its output on as a DTensor on mesh["b"] (use_local_output=False) to w2, a
    Colwise on mesh["ab"]: its input hook keeps the DTensor's mesh, and F.linear meets a weight on
    another mesh, which DTensor refuses."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel

    plan = dataclasses.replace(_two_mesh_plan(), parallelize_plan=[
        ("b", {"layers.0.w1": ColwiseParallel(output_layouts=Replicate(), use_local_output=False)}),
        ("ab", {"layers.0.w2": ColwiseParallel()})])
    with pytest.raises(Exception, match="Cannot run aten.addmm.default on inputs with different meshes"):
        measure(STACKED, plan, phase="forward")
    path = save_plan(plan, tmp_path)
    r = run_commlens("predict", stacked_pt2, "--plan", path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {stacked_pt2}: node 'linear_1_addmm' aten::addmm.default in "
                        "StackedMLP.layers.0.w2: 'p_layers_0_w2_bias' is a DTensor on DeviceMesh((4,), 'cpu', "
                        "mesh_dim_names=('ab',)) and 'linear_1_view' one on DeviceMesh((2,), 'cpu', "
                        "mesh_dim_names=('b',)); DTensor raises (the operands of an op must share one device mesh)\n")


def test_a_torch_style_on_a_two_dimensional_mesh_is_refused_like_torch(run_commlens, stacked_pt2, tmp_path):
    """torch's styles distribute over a 1-D mesh; given mesh["a", "b"], distribute_tensor raises."""
    from torch.distributed.tensor.parallel import ColwiseParallel

    plan = dataclasses.replace(_two_mesh_plan(), parallelize_plan=[(("a", "b"), {"layers.0.w1": ColwiseParallel()})])
    with pytest.raises(Exception, match="placements. must have the same length as .device_mesh.ndim."):
        measure(STACKED, plan, phase="forward")
    r = run_commlens("predict", stacked_pt2, "--plan", save_plan(plan, tmp_path))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {stacked_pt2}: ColwiseParallel on 'layers.0.w1' takes a 1-D device mesh; "
                        "its parallelize step gives a 2-D one\n")


def test_a_placement_on_a_flattened_dim_is_refused(run_commlens, stacked_pt2, tmp_path):
    from torch.distributed.tensor import Replicate

    plan = dataclasses.replace(_two_mesh_plan(), placements={"layers.0.b1": {"ab": Replicate()}})
    message = ("'ab' (placements['layers.0.b1']) is a flattened dim (flattened_dims), which only fully_shard's "
               "mesh_dims and parallelize steps may name (DTensor placements on a flattened dim are not modelled)")
    with pytest.raises(planlib.PlanError, match=re.escape(message)):
        save_plan(plan, tmp_path)


def _tree(node):
    yield node
    for child in node.get("children", ()):
        yield from _tree(child)
