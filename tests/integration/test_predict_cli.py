"""`commlens predict` on bad input and unsupported ops: one-line errors with exit 2, never a
silent guess; `--allow-unsupported` continues and marks every dependent count approximate."""
import json

import pytest
import torch
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from commlens import plan as planlib
from commlens.export import export_model


class ShuffleNet(torch.nn.Module):
    """w2(renorm(w1(x))): aten::renorm (each slice along dim 0 rescaled to a p-norm of at most
    maxnorm) has no commlens rule yet."""

    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(16, 32)
        self.w2 = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.w2(torch.renorm(self.w1(x), 2, 0, 1.0))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("predict")
    pt2 = d / "net.pt2"
    torch.export.save(export_model(ShuffleNet(), (torch.randn(2, 8, 16),)), str(pt2))
    plan = planlib.Plan(mesh_shape=(4,), mesh_dim_names=("tp",), device_type="cpu",
                        parallelize_plan={"w1": ColwiseParallel(use_local_output=False), "w2": RowwiseParallel()},
                        tp_mesh_dim="tp")
    plan_path = d / "plan.json"
    planlib.save(plan, str(plan_path))
    return pt2, plan_path


def test_unsupported_op_names_op_node_and_module(run_commlens, files):
    pt2, plan = files
    r = run_commlens("predict", pt2, "--plan", plan)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {pt2}: unsupported op aten::renorm.default at node 'renorm' in "
                        "ShuffleNet (no DTensor sharding rule in commlens)\n")


def test_allow_unsupported_marks_dependent_counts_approximate(run_commlens, files, tmp_path):
    pt2, plan = files
    out = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", plan, "--allow-unsupported", "--format", "json", "-o", out)
    assert r.returncode == 0, r.stderr
    tree = json.loads(out.read_text())
    # renorm's operand is w1's S(2) output (use_local_output=False): replicating it for the
    # unsupported op is one all_gather, charged to the root module; its result is assumed
    # Replicate, so w2's Rowwise input hook chunks it locally, mm gives Partial and the output
    # hook all_reduces: both counts depend on the unsupported op and are approximate.
    assert tree["collectives_forward"] == [["c10d_functional.all_gather_into_tensor", 1],
                                           ["c10d_functional.all_reduce", 1]]
    assert tree["approximate_forward"] == ["c10d_functional.all_gather_into_tensor", "c10d_functional.all_reduce"]
    assert tree["commlens"]["warnings"] == [
        "unsupported op aten::renorm.default at node 'renorm' in ShuffleNet: operands replicated, "
        "counts that depend on it are approximate"]
    r = run_commlens("predict", pt2, "--plan", plan, "--allow-unsupported")
    assert "*c10d_functional.all_reduce: 1 (approximate)" in r.stdout


def test_print_after_dumps_placements(run_commlens, files):
    pt2, plan = files
    r = run_commlens("predict", pt2, "--plan", plan, "--allow-unsupported", "--print-after=apply-plan,propagate")
    assert r.returncode == 0
    assert "// -----// IR after apply-plan //----- //" in r.stderr
    assert "// -----// IR after propagate //----- //" in r.stderr
    assert 'input %p_w1_weight : f32[32, 16] {S(0)} parameter "w1.weight"' in r.stderr


@pytest.mark.parametrize("args,message", [
    (["--print-after=bogus"], "--print-after: unknown pass 'bogus' (passes: "),
    (["--phase", "sideways"], "--phase must be forward, backward, both or inference, got 'sideways'"),
    (["--format", "xml"], "--format must be table, json or html, got 'xml'"),
    (["--world-size", "8"], "{plan}: mesh shape DeviceMesh((4,), 'cpu', mesh_dim_names=('tp',)) has 4 devices but "
                            "the world size is 8"),
])
def test_bad_arguments(run_commlens, files, args, message):
    pt2, plan = files
    r = run_commlens("predict", pt2, "--plan", plan, *args)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.startswith("commlens: error: " + message.format(plan=plan))
    assert r.stderr.count("\n") == 1


def test_plan_naming_a_missing_module(run_commlens, files, tmp_path):
    # parallelize_module warns and skips such an entry; predict does the same (here both entries:
    # no DTensor, no collective), check-plan refuses it
    pt2, plan = files
    bad = tmp_path / "bad.json"
    bad.write_text(plan.read_text().replace('"fqn": "w1"', '"fqn": "w3"').replace('"fqn": "w2"', '"fqn": "w4"'))
    r = run_commlens("predict", pt2, "--plan", bad)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.splitlines()[-2:] == [
        f"warning: plan pattern '{p}' matches no module of ShuffleNet: skipped, as torch's parallelize_module skips it"
        for p in ("w3", "w4")]
    r = run_commlens("check-plan", pt2, "--plan", bad)
    assert (r.returncode, r.stderr) == (2, f"commlens: error: {bad}: plan pattern 'w3' matches no module of ShuffleNet\n")


def test_time_passes(run_commlens, tmp_path):
    from commlens import plan as planlib
    from integration_helpers import export_pt2, save_plan

    pt2 = export_pt2("examples.mlp:mlp", tmp_path)
    plan = save_plan(planlib.resolve_plan("examples.plans:mlp_tp(tp=2)"), tmp_path)
    plain = run_commlens("predict", pt2, "--plan", plan, "--phase", "both")
    timed = run_commlens("predict", pt2, "--plan", plan, "--phase", "both", "--time-passes")
    assert timed.returncode == 0 and timed.stdout == plain.stdout  # the report is unchanged
    lines = timed.stderr.splitlines()
    assert lines[0] == "===-- commlens --time-passes (wall time) --==="
    stages = [line.split(" s  ", 1)[1] for line in lines[1:]]
    assert stages == ["load (archive, program decode, plan)", "decompose", "apply-plan", "loss", "propagate",
                      "autodiff", "propagate-backward", "estimate-time", "report (build and render)", "total"]
    seconds = [float(line.split()[0]) for line in lines[1:]]
    assert all(s >= 0 for s in seconds) and abs(sum(seconds[:-1]) - seconds[-1]) < 1e-3
