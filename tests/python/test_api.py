"""commlens.predict (the C++ pipeline through commlens._core) on in-memory ExportedPrograms and
.pt2 paths: counts equal CommDebugMode's (commlens.measure, fake process group) and the CLI's
JSON; errors are CommlensError with the CLI's message; commlens.testing.assert_comm_counts."""
import json
import os
import pathlib
import subprocess

import pytest

_BUILD = pathlib.Path(os.environ.get("COMMLENS_BUILD", pathlib.Path(__file__).resolve().parents[2] / "build"))
if "COMMLENS_PYTHON:BOOL=OFF" in (_BUILD / "CMakeCache.txt").read_text(errors="replace") if (
        _BUILD / "CMakeCache.txt").exists() else False:
    # sanitizer builds (scripts/setup.sh) leave the extension out: an ASan-built module would need
    # the ASan runtime preloaded into Python
    pytest.skip(f"{_BUILD} is configured with COMMLENS_PYTHON=OFF", allow_module_level=True)

import commlens
from commlens import CommlensError
from commlens.export import export_model
from commlens.measure import measure
from commlens.testing import assert_comm_counts

GPT2 = "examples.gpt2:gpt2"
PLAN = "examples.plans:gpt2_tp_sp(tp=4)"


@pytest.fixture(scope="module")
def gpt2_ep():
    from commlens._factory import call_model_factory

    model, args, kwargs = call_model_factory(GPT2)
    return export_model(model, args, kwargs)


def test_in_memory_program_agrees_with_commdebugmode(gpt2_ep):
    p = commlens.predict(gpt2_ep, PLAN, phase="both")
    assert p == measure(GPT2, PLAN, phase="both")
    assert p.total("forward") + p.total("backward") == p.total("both") == len(p.collectives())
    assert repr(p) == f"<commlens.Prediction both: {p.total('forward')} forward, {p.total('backward')} backward>"


def test_in_memory_equals_the_cli_on_the_saved_program(gpt2_ep, tmp_path, commlens_bin):
    import torch

    pt2 = tmp_path / "gpt2.pt2"
    torch.export.save(gpt2_ep, str(pt2))
    plan = tmp_path / "plan.json"
    from commlens.plan import resolve_plan, save

    save(resolve_plan(PLAN), str(plan))
    out = tmp_path / "cli.json"
    r = subprocess.run([commlens_bin, "predict", str(pt2), "--plan", str(plan), "--phase", "both", "--cluster",
                        "h100-ib-ndr", "--format", "json", "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    from_path = commlens.predict(str(pt2), str(plan), phase="both", cluster="h100-ib-ndr")
    assert json.loads(from_path.to_json()) == json.loads(out.read_text())
    in_memory = commlens.predict(gpt2_ep, str(plan), phase="both", cluster="h100-ib-ndr")
    assert in_memory.counts() == from_path.counts()
    assert in_memory.step == from_path.step
    table = subprocess.run([commlens_bin, "predict", str(pt2), "--plan", str(plan), "--noise-level", "1"],
                           capture_output=True, text=True).stdout
    assert commlens.predict(gpt2_ep, str(plan)).table(noise_level=1) == table


def test_errors_are_commlens_errors(gpt2_ep):
    # a plan pattern that matches no module is no error: skipped with torch's warning
    skipped = commlens.predict(gpt2_ep, "examples.plans:stacked_mlp_tp(tp=2)")
    assert json.loads(skipped.to_json())["commlens"]["warnings"] == [
        f"plan pattern 'layers.*.{w}' matches no module of GPT2: skipped, as torch's parallelize_module skips it"
        for w in ("w1", "w2")]
    with pytest.raises(CommlensError) as info:
        commlens.predict(gpt2_ep, PLAN, phase="sideways")
    assert str(info.value) == "predict: phase must be forward, backward, both or inference, got 'sideways'"
    with pytest.raises(CommlensError) as info:
        commlens.predict("/nonexistent.pt2", PLAN)
    assert str(info.value).startswith("/nonexistent.pt2: ")
    with pytest.raises(CommlensError) as info:
        commlens.predict(gpt2_ep, PLAN, cluster="dgx")
    assert str(info.value).startswith("cluster: unknown cluster 'dgx' (known: h100-ib-ndr,")
    # the MoE routing model (the CLI's --routing-skew), checked in memory and from a path alike
    for program in (gpt2_ep, "/nonexistent.pt2"):
        with pytest.raises(CommlensError) as info:
            commlens.predict(program, PLAN, routing_skew=0.5)
        assert str(info.value) == ("routing_skew: the routing skew needs a number of at least 1 (the busiest "
                                   "expert-parallel rank's routed rows over the balanced number), got 0.5")
    with pytest.raises(CommlensError) as info:
        commlens.predict(gpt2_ep, PLAN, routing_skew="high")
    assert str(info.value) == "routing_skew: needs a number, got 'high'"


def test_assert_comm_counts():
    # MLP, Colwise w1 / Rowwise w2, input without grad: one all_reduce forward in w2 (its Partial
    # output made Replicate), nothing backward (hand derivation in tests/python/test_measure.py).
    AR = "c10d_functional.all_reduce"
    assert_comm_counts("examples.mlp:mlp", "examples.plans:mlp_tp(tp=4)",
                       {"Global": {"forward": {AR: 1}, "backward": {}}, "MLP.w2": {"forward": {AR: 1}}})
    assert_comm_counts("examples.mlp:mlp", "examples.plans:mlp_tp(tp=4, input_requires_grad=True)", "measure")
    with pytest.raises(AssertionError) as info:
        assert_comm_counts("examples.mlp:mlp", "examples.plans:mlp_tp(tp=4)", {"MLP.w1": {"forward": {AR: 1}}})
    assert str(info.value).splitlines()[:2] == ["collective counts differ:",
                                                f"  MLP.w1 forward: predicted {{}}, expected {{'{AR}': 1}}"]


def test_prediction_names_each_outputs_placements_as_dtensor_gives_them():
    """The JSON's commlens.outputs: each user output's DTensor placements as torch writes them
    (null for a plain tensor), checked against the DTensors the same forward returns (a sum over
    the sharded dim is Partial(sum), a contracting-dim shard of a matmul too)."""
    import json

    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import commlens
    from commlens.export import export_model
    from commlens.measure import fake_process_group
    from commlens.plan import Loss, Plan

    class Outputs(torch.nn.Module):
        def forward(self, a, b):
            return a.sum(0), a * 2, a @ b

    a, b = torch.randn(4, 6), torch.randn(6, 3)
    ep = export_model(Outputs(), (a, b))
    for pa, pb in [(Shard(0), Replicate()), (Shard(1), Shard(0)), (Replicate(), Shard(1))]:
        plan = Plan(mesh_shape=(2,), mesh_dim_names=("tp",), loss=Loss.sum(), input_placements={0: (pa,), 1: (pb,)})
        predicted = json.loads(commlens.predict(ep, plan, phase="forward").to_json())["commlens"]["outputs"]
        with fake_process_group(2, "test_api"):
            mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
            outs = Outputs()(distribute_tensor(a, mesh, [pa]), distribute_tensor(b, mesh, [pb]))
            measured = [[repr(p) for p in t.placements] for t in outs]
        assert predicted == measured, (pa, pb)
