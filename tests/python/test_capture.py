"""commlens.capture: the plan a user's own parallelize function applies equals the hand-written
plan of examples/plans.py for the same parallelization, and what a plan cannot state is refused in
one line naming the class and the module (in Python and, exit 2, from the CLI).  Counts against
CommDebugMode: tests/integration/test_capture_predict.py."""
import json
import pathlib

import pytest
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    parallelize_module,
)

import commlens
from commlens import plan as planlib
from commlens.capture import CaptureError, capture
from commlens.plan import Plan
from conftest import error_lines

HERE = pathlib.Path(__file__).resolve().parent
LLAMA = "examples.llama:llama"
STACKED = "examples.mlp:stacked_mlp"


def _json(plan):
    """The plan's JSON without its informational name and source."""
    doc = planlib.to_json(plan)
    del doc["name"], doc["source"]
    return doc


@pytest.mark.parametrize("parallelize, world_size, hand_written", [
    ("examples.parallelize:llama_tp_sp(tp=4)", 4, "examples.plans:llama_tp(tp=4)"),
    ("examples.parallelize:llama_fsdp_tp(dp=2, tp=4)", 8, "examples.plans:llama_fsdp_tp(dp=2, tp=4)"),
    ("examples.parallelize:llama_fsdp_tp(dp=2, tp=4, ac=True)", 8,
     "examples.plans:with_ac(plan='llama_fsdp_tp', dp=2, tp=4)"),
    ("examples.parallelize:llama_fsdp_tp(dp=2, tp=4, ac=True, early_stop=False, embedding_unit=True)", 8,
     "examples.plans:with_ac(plan='llama_fsdp_tp', dp=2, tp=4, early_stop=False, embedding_unit=True)"),
    ("examples.parallelize:llama_fsdp_tp(dp=2, tp=4, ac='sac', prefetch=True)", 8,
     "examples.plans:with_ac(plan='llama_fsdp_tp', dp=2, tp=4, prefetch='explicit', "
     "save_ops=('aten.mm.default', '_c10d_functional.reduce_scatter_tensor.default'))"),
])
def test_captured_plan_equals_the_hand_written_one(parallelize, world_size, hand_written):
    captured = commlens.capture(LLAMA, parallelize, world_size=world_size, loss="cross_entropy")
    assert captured.source == parallelize
    assert _json(captured) == _json(planlib.resolve_plan(hand_written))


def test_placements_and_frozen_parameters_are_read_off_the_model():
    captured = capture("examples.mlp:mlp", "examples.parallelize:mlp_placed(dp=2, tp=2)", 4,
                       inputs_requires_grad=(0,))
    rep = Replicate()
    hand = Plan(
        mesh_shape=(2, 2), mesh_dim_names=("dp", "tp"), tp_mesh_dim="tp",
        parallelize_plan={"": PrepareModuleInput(input_layouts=(rep,), desired_input_layouts=(rep,),
                                                 use_local_output=False)},
        placements={"w1.weight": {"tp": Shard(0)}, "w1.bias": {"tp": Shard(0)},
                    "w2.weight": {"tp": Shard(1)}, "w2.bias": {"tp": rep}},
        inputs_requires_grad=(0,), frozen_after_parallelize=("w2.bias",))
    assert _json(captured) == _json(hand)


def test_styled_subclasses_of_linear_and_embedding_are_recorded_by_isinstance():
    # examples.subclassed: ScaledEmbedding(nn.Embedding), GatedLinear(nn.Linear), ShiftedLinear(nn.Linear)
    captured = capture("examples.subclassed:subclassed", "examples.parallelize:subclassed_tp(tp=2)", 2)
    assert captured.module_subclasses == {
        "examples.subclassed.ScaledEmbedding": "torch.nn.modules.sparse.Embedding",
        "examples.subclassed.GatedLinear": "torch.nn.modules.linear.Linear",
        "examples.subclassed.ShiftedLinear": "torch.nn.modules.linear.Linear"}
    # the buffers the styles replicated (emb.scale, w2.gain) are the styles', not placements
    assert captured.placements == {}
    doc = planlib.to_json(captured)
    assert list(doc["module_subclasses"]) == sorted(captured.module_subclasses)
    assert planlib.from_json(doc).module_subclasses == captured.module_subclasses
    # a plain nn.Linear is no subclass: plans without subclasses keep their bytes
    assert "module_subclasses" not in planlib.to_json(capture(STACKED, _partly_styled, 2))


def test_module_subclasses_names_only_the_bases_styles_test():
    plan = Plan(mesh_shape=(2,), module_subclasses={"m.Norm": "torch.nn.modules.normalization.LayerNorm"})
    with pytest.raises(planlib.PlanError) as info:
        planlib.validate(plan, "p")
    assert str(info.value) == ("p: module_subclasses['m.Norm']: 'torch.nn.modules.normalization.LayerNorm' is not "
                               "a base class commlens' styles test (expected 'torch.nn.modules.linear.Linear' or "
                               "'torch.nn.modules.sparse.Embedding')")


def test_shard_dims_are_not_modelled_for_list_units():
    from commlens.plan import FullyShard

    plan = Plan(mesh_shape=(2,), mesh_dim_names=("dp",), fully_shard=(FullyShard(("a", "b"), "dp",
                                                                                   shard_dims={"w.weight": 1}),))
    with pytest.raises(planlib.PlanError) as info:
        planlib.validate(plan, "p")
    assert str(info.value) == "p: fully_shard[0]: shard_dims of a list unit is not modelled"


def _partly_styled(model):
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    parallelize_module(model, mesh, {"layers.0.w1": ColwiseParallel(), "layers.*.w2": RowwiseParallel()})
    parallelize_module(model.layers[1], mesh, {"w1": ColwiseParallel()})
    parallelize_module(model.layers[2], mesh, {"w1": ColwiseParallel(use_local_output=False)})


def test_patterns_only_where_every_matched_module_has_the_style():
    captured = capture(STACKED, _partly_styled, 2)
    steps = [(dim, {fqn: type(s).__name__ + ("" if s.use_local_output else "(local=False)")
                    for fqn, s in styles.items()}) for dim, styles in captured.parallelize_steps()]
    # layers.*.w1 would take block 2's w1 too, whose style differs; one RowwiseParallel object
    # applied three times is one pattern (its _apply's desired_input_layouts left out)
    assert steps == [("tp", {"layers.0.w1": "ColwiseParallel", "layers.*.w2": "RowwiseParallel",
                             "layers.1.w1": "ColwiseParallel", "layers.2.w1": "ColwiseParallel(local=False)"})]


# ---------------------------------------------------------------- refusals


class MyColwise(ColwiseParallel):
    """A ParallelStyle subclass (its _apply is ColwiseParallel's)."""


class Wrapper(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


def unflattened_gap(model):
    """A dim unflattened from the 1-D world mesh that does not cover its ranks with the others in
    use: no one mesh of the plan holds it."""
    world = init_device_mesh("cpu", (2,), mesh_dim_names=("world",))
    fully_shard(model, mesh=world._unflatten(0, (2, 1), ("dp", "unused"))["unused"])


def style_subclass(model):
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    parallelize_module(model, mesh, {"layers.*.w1": MyColwise(), "layers.*.w2": RowwiseParallel()})


def custom_wrapper(model):
    model.layers[1] = Wrapper(model.layers[1])
    for block in model.layers:
        fully_shard(block)


def fails(model):
    fully_shard(model, reshard_after_forward=3)


def replaced_forward(model):
    """What transformers' layer classes and hand-rolled tensor parallelism do: shard a weight with
    distribute_tensor and replace the module's forward to redistribute around it. Read as a bare
    placement, the wrapper's collectives would silently go missing."""
    from torch.distributed.tensor import distribute_tensor

    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    w1 = model.layers[0].w1
    w1.weight = nn.Parameter(distribute_tensor(w1.weight, mesh, [Shard(0)]))
    original = w1.forward

    def colwise_forward(x):
        return original(x).redistribute(placements=[Replicate()]).to_local()

    w1.forward = colwise_forward


REFUSALS = [
    (unflattened_gap, "the mesh dims in use, 'unused' (size 1, stride 0), unflattened from the 2-rank mesh "
                      "('world',), do not lay out as one mesh over the ranks with dims "
                      "flattened from others"),
    (style_subclass, f"parallel style {MyColwise.__module__}.MyColwise on module 'layers.0.w1' (Linear) is not "
                     "modelled (commlens models ColwiseParallel, RowwiseParallel, SequenceParallel, "
                     "PrepareModuleInput, PrepareModuleOutput, PrepareModuleInputOutput, "
                     "TransformersRowwiseParallel, TransformersReplicatedWithGradAllReduce, "
                     "TransformersMoeExpertsParallel, TransformersEpDispatchExpertsParallel, "
                     "TransformersMlaKvAProjParallel, TransformersLocalParamsParallel, TorchtitanExpertParallel, TorchtitanExpertTensorParallel, TorchtitanTensorParallel, "
                     "TorchtitanNoParallel, TorchtitanReordererSequenceParallel)"),
    (custom_wrapper, f"module 'layers.1' is a {Wrapper.__module__}.Wrapper the parallelization added; commlens "
                     "models no module wrapper but checkpoint_wrapper"),
    (fails, "the parallelize function raised ValueError: If passing reshard_after_forward as an int, it should "
            "be a factor of 2, not 3"),
    (replaced_forward, "module 'layers.0.w1' (Linear) had its forward replaced "
                       "(replaced_forward.<locals>.colwise_forward) by the parallelization; commlens cannot model it"),
]


def torchtitan_shaped(model):
    """What torchtitan's ParallelDims and apply_fsdp do: dims unflattened from a ("world",) mesh,
    a list unit of two blocks, FSDP's gradient division off."""
    world = init_device_mesh("cpu", (4,), mesh_dim_names=("world",))
    mesh = world._unflatten(0, (2, 2), ("fsdp", "tp"))
    for block in model.layers:
        parallelize_module(block, mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    fully_shard(model.layers[2], mesh=mesh["fsdp"])
    fully_shard([model.layers[0], model.layers[1]], mesh=mesh["fsdp"], reshard_after_forward=False)
    fully_shard(model, mesh=mesh["fsdp"])
    for module in (model.layers[0], model.layers[2]):
        module.set_gradient_divide_factor(1.0)


def test_unflattened_meshes_list_units_and_gradient_divide_factor():
    plan = capture(STACKED, torchtitan_shaped, 4)
    # fsdp has rank stride 2 and tp stride 1 in the world's ranks: one (fsdp, tp) mesh
    assert (plan.mesh_shape, plan.mesh_dim_names, plan.tp_mesh_dim) == ((2, 2), ("fsdp", "tp"), "tp")
    assert [(u.fqn, u.mesh_dims, u.reshard_after_forward, u.gradient_divide_factor) for u in plan.fully_shard] == [
        ("layers.2", ("fsdp",), None, 1.0), (("layers.0", "layers.1"), ("fsdp",), False, 1.0), ("", ("fsdp",), None, None)]
    # the JSON says a list unit with a list, and reads back the same
    doc = planlib.to_json(plan)
    assert doc["fully_shard"][1]["fqn"] == ["layers.0", "layers.1"]
    assert planlib.from_json(doc).fully_shard == plan.fully_shard


@pytest.mark.parametrize("fn, message", REFUSALS, ids=[fn.__name__ for fn, _m in REFUSALS])
def test_refusals_name_the_class_and_the_module(fn, message):
    with pytest.raises(CaptureError) as info:
        capture(STACKED, fn, 2)
    assert str(info.value) == f"{__name__}:{fn.__name__}: {message}"


@pytest.mark.parametrize("fn, message", REFUSALS[:3], ids=[fn.__name__ for fn, _m in REFUSALS[:3]])
def test_cli_refuses_in_one_line_with_exit_2(cli, tmp_path, fn, message):
    spec = f"{__name__}:{fn.__name__}"
    r = cli("commlens.capture", "--model", STACKED, "--parallelize", spec, "--world-size", 2,
            "-o", tmp_path / "plan.json", cwd=HERE)
    assert (r.returncode, r.stdout, error_lines(r.stderr)) == (2, "", [f"commlens: error: {spec}: {message}"])
    assert not (tmp_path / "plan.json").exists()


def test_cli_writes_the_plan(cli, tmp_path):
    out = tmp_path / "plan.json"
    r = cli("commlens.capture", "--model", LLAMA, "--parallelize", "examples.parallelize:llama_fsdp_tp(dp=2, tp=4)",
            "--world-size", 8, "--loss", "cross_entropy", "-o", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"commlens: wrote {out} (14 plan entries, 2 fully_shard units, 0 activation checkpoints, "
                        "mesh (2, 4) ('dp', 'tp'), cpu)\n")
    hand = planlib.to_json(planlib.resolve_plan("examples.plans:llama_fsdp_tp(dp=2, tp=4)"))
    written = json.loads(out.read_text())
    assert {k: v for k, v in written.items() if k not in ("name", "source")} == \
        {k: v for k, v in hand.items() if k not in ("name", "source")}


def test_cli_parallelize_transformers(cli, tmp_path):
    """The built-in --parallelize transformers: transformers' own calls, its layers read by name. The
    Llama plan transformers resolves (init_parallel_plans): embed_tokens embedding_rowwise, q/k/v and
    gate/up colwise, o/down rowwise (recorded as transformers' own RowwiseParallel layer, whose
    no-grad path no torch style has), lm_head colwise_gather_output, on a (pp, dp_replicate, fsdp, tp)
    mesh of transformers' own making."""
    out = tmp_path / "plan.json"
    r = cli("commlens.capture", "--model", "examples.hf:hf_model(family='llama')", "--parallelize", "transformers",
            "--world-size", 2, "--loss", "cross_entropy", "-o", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"commlens: wrote {out} (9 plan entries, 0 fully_shard units, 0 activation checkpoints, "
                        "mesh (1, 1, 1, 2) ('pp', 'dp_replicate', 'fsdp', 'tp'), cpu)\n")
    styles = {e["fqn"]: (e["style"], e["input_layouts"], e["output_layouts"])
              for e in json.loads(out.read_text())["parallelize"][0]["plan"]}
    colwise, rowwise = ("ColwiseParallel", ["Replicate()"], ["Shard(-1)"]), \
        ("TransformersRowwiseParallel", ["Shard(-1)"], ["Replicate()"])
    layer = "model.model.layers.*."
    assert styles == {
        "model.model.embed_tokens": ("RowwiseParallel", ["Replicate()"], ["Replicate()"]),
        **{layer + m: colwise for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                        "mlp.gate_proj", "mlp.up_proj")},
        **{layer + m: rowwise for m in ("self_attn.o_proj", "mlp.down_proj")},
        "model.lm_head": ("ColwiseParallel", ["Replicate()"], ["Replicate()"]),
    }
