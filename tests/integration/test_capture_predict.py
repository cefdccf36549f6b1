"""commlens.capture end to end: the user's own parallelize function runs natively on a real CPU
model under a fake process group and CommDebugMode counts one training step; `commlens predict`
predicts the plan capture wrote for the same function; `commlens compare` finds no cell that
differs (counts and bytes)."""
import json

import pytest
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from commlens import plan as planlib
from commlens.capture import CaptureError, capture
from commlens.measure import format_counts
from commlens.plan import save
from examples.parallelize import measure_natively
from integration_helpers import export_pt2

LLAMA = "examples.llama:llama"
SMLP_12 = "examples.mlp:stacked_mlp(dim=12, hidden=32)"
CASES = [
    (LLAMA, "examples.parallelize:llama_tp_sp(tp=4)", 4, "cross_entropy", ()),
    (LLAMA, "examples.parallelize:llama_fsdp_tp(dp=2, tp=4)", 8, "cross_entropy", ()),
    (LLAMA, "examples.parallelize:llama_fsdp_tp(dp=2, tp=4, ac=True)", 8, "cross_entropy", ()),
    (LLAMA, "examples.parallelize:llama_fsdp_tp(dp=2, tp=4, ac='sac', prefetch=True)", 8, "cross_entropy", ()),
    (LLAMA, "examples.parallelize:llama_fsdp_tp(dp=2, tp=4, ac=True, early_stop=False, embedding_unit=True)", 8,
     "cross_entropy", ()),
    ("examples.mlp:stacked_mlp", "examples.parallelize:stacked_mlp_fsdp", 4, "sum", (0,)),
    ("examples.mlp:mlp", "examples.parallelize:mlp_placed(dp=2, tp=2)", 4, "sum", (0,)),
    # subclasses of nn.Embedding and nn.Linear (isinstance, which the program cannot show) with
    # parameters and buffers of their own
    ("examples.subclassed:subclassed", "examples.parallelize:subclassed_tp(tp=4)", 4, "sum", ()),
    ("examples.subclassed:subclassed", "examples.parallelize:subclassed_tp(tp=2)", 2, "sum", ()),
    # shard_placement_fn: w2.weight [12, 32] sharded on dim 1 over 8 ranks
    (SMLP_12, "examples.parallelize:stacked_mlp_fsdp_dim1(dp=8)", 8, "sum", (0,)),
]


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    cache = {}

    def get(model_spec):
        if model_spec not in cache:
            cache[model_spec] = export_pt2(model_spec, tmp_path_factory.mktemp("capture"))
        return cache[model_spec]
    return get


@pytest.mark.parametrize("model_spec, parallelize, world_size, loss, requires_grad", CASES,
                         ids=[c[1].split(":")[1] for c in CASES])
def test_prediction_from_the_captured_plan_matches_the_native_run(run_commlens, programs, tmp_path, model_spec,
                                                                  parallelize, world_size, loss, requires_grad):
    plan = capture(model_spec, parallelize, world_size, loss=loss, inputs_requires_grad=requires_grad)
    plan_path = tmp_path / "captured.json"
    save(plan, plan_path)
    predicted = tmp_path / "predicted.json"
    r = run_commlens("predict", programs(model_spec), "--plan", plan_path, "--phase", "both", "--format", "json",
                     "-o", predicted)
    assert r.returncode == 0, r.stderr
    measured = tmp_path / "measured.counts.json"
    doc = measure_natively(model=model_spec, parallelize=parallelize, world_size=world_size, loss=plan.loss,
                           loss_parallel=plan.loss_parallel, inputs_requires_grad=plan.inputs_requires_grad)
    measured.write_text(format_counts(doc))
    total = doc["modules"][0]
    assert total["fqn"] == "Global" and (total["forward"] or total["backward"])  # the step communicated
    r = run_commlens("compare", predicted, measured)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ", 0 differ;" in r.stdout.splitlines()[-1], r.stdout


def _lora_colwise(model):
    parallelize_module(model, init_device_mesh("cpu", (2,)), ColwiseParallel())


def _lora_rowwise(model):
    parallelize_module(model, init_device_mesh("cpu", (2,)), RowwiseParallel())


def test_a_linear_subclass_with_modules_of_its_own_is_refused_by_name(run_commlens, programs, tmp_path):
    # torch's ColwiseParallel partitions every parameter below the module under its dotted name
    # (register_parameter("lora_a.weight", ...)): torch raises, and capture says so
    with pytest.raises(CaptureError) as info:
        capture("examples.subclassed:lora", _lora_colwise, 2)
    assert str(info.value).endswith(": the parallelize function raised KeyError: 'parameter name can\\'t "
                                    "contain \".\"'")
    # RowwiseParallel runs (it shards each child Linear's weight as the module's); commlens does not
    # model the children and refuses by name
    plan_path = tmp_path / "rowwise.json"
    save(capture("examples.subclassed:lora", _lora_rowwise, 2), plan_path)
    pt2 = programs("examples.subclassed:lora")
    r = run_commlens("predict", pt2, "--plan", plan_path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {pt2}: RowwiseParallel on LoRALinear (examples.subclassed.LoRALinear): "
                        "parameter 'lora_a.weight' of a module below it is not modelled (torch's partition of the "
                        "module partitions it too, or raises)\n")


def test_a_subclass_the_plan_does_not_name_is_refused_with_where_to_name_it(run_commlens, programs, tmp_path):
    doc = planlib.to_json(capture("examples.subclassed:subclassed", "examples.parallelize:subclassed_tp(tp=2)", 2))
    del doc["module_subclasses"]
    plan_path = tmp_path / "no_subclasses.json"
    plan_path.write_text(json.dumps(doc))
    pt2 = programs("examples.subclassed:subclassed")
    r = run_commlens("predict", pt2, "--plan", plan_path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {pt2}: ColwiseParallel on SubclassedNet.w1 "
                        "(examples.subclassed.GatedLinear): only nn.Linear and nn.Embedding are supported (a subclass "
                        "of either is one where the plan's module_subclasses names it, as commlens.capture records "
                        "it)\n")


def test_shard_placement_fn_gathers_unpadded_shards():
    # Each block: w1.weight [32, 12] and w1.bias [32] on dim 0 (4 rows each of 8 ranks), w2.weight
    # [12, 32] on dim 1 (4 columns: 12 x 4), w2.bias [12] on dim 0 padded to 2 rows: 102 floats a
    # rank. On dim 0, w2.weight would be padded to 2 rows of 32 (118 floats).
    per_block = 4 * (4 * 12 + 4 + 12 * 4 + 2)
    assert per_block == 408
    doc = measure_natively(model=SMLP_12, parallelize="examples.parallelize:stacked_mlp_fsdp_dim1(dp=8)",
                           world_size=8, loss="sum", inputs_requires_grad=(0,))
    block = next(m for m in doc["modules"] if m["fqn"].endswith("layers.0"))
    assert block["forward_bytes"] == {"c10d._allgather_base_": per_block}
    assert block["backward_bytes"] == {"c10d._reduce_scatter_base_": 8 * per_block}
    # the prediction equals these (the parametrized case above compares every cell)
    assert capture(SMLP_12, "examples.parallelize:stacked_mlp_fsdp_dim1(dp=8)", 8).fully_shard[0].shard_dims == \
        {"w2.weight": 1}


@pytest.mark.parametrize("shard_dims, message", [
    ({"w1.weight": 1}, "parameter 'layers.0.w1.weight' f32[32, 12] does not split evenly on dim 1 over 8 ranks "
                       "(FSDP raises: it does not support uneven sharding on a dim other than 0)"),
    ({"w2.weight": 2}, "shard dim 2 of parameter 'layers.0.w2.weight' is invalid for its 2-D shape f32[12, 32] "
                       "(FSDP raises)"),
    ({"w3.weight": 1}, "shard_dims names 'w3.weight', which is not a parameter the unit manages"),
])
def test_shard_dims_fsdp_raises_on_are_refused_by_name(run_commlens, programs, tmp_path, shard_dims, message):
    doc = planlib.to_json(capture(SMLP_12, "examples.parallelize:stacked_mlp_fsdp_dim1(dp=8)", 8))
    doc["fully_shard"][0]["shard_dims"] = shard_dims
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(doc))
    pt2 = programs(SMLP_12)
    r = run_commlens("predict", pt2, "--plan", plan_path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"commlens: error: {pt2}: fully_shard 'layers.*' on StackedMLP.layers.0: {message}\n"
