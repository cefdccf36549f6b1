"""Higher-order ops in exported programs: regions export wraps in subgraphs are analysed inline
(predicted counts equal CommDebugMode's, both phases), other higher-order ops are refused by
name with the node and module."""
import pytest
import torch
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from commlens import plan as planlib
from commlens.export import export_model
from commlens.measure import measure


class NoGradGate(torch.nn.Module):
    """Every Linear is Colwise with a replicated (gathered) output. w2 runs under no_grad: its
    forward all_gather counts, but its input's from_local backward (an all_reduce of the Partial
    input gradient) must not be predicted, since nothing flows back through it."""

    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(16, 32)
        self.w2 = torch.nn.Linear(32, 32)
        self.w3 = torch.nn.Linear(32, 16)

    def forward(self, x):
        h = self.w1(x)
        with torch.no_grad():
            gate = torch.sigmoid(self.w2(h))
        return self.w3(h * gate)


class AutocastBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(16, 32)
        self.w2 = torch.nn.Linear(32, 16)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.w1(x)
        return self.w2(h.float())


class CondNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: self.w1(t), lambda t: t * 2, (x,))


def no_grad_gate():
    torch.manual_seed(0)
    return NoGradGate(), (torch.randn(2, 8, 16),)


def autocast_block():
    torch.manual_seed(0)
    return AutocastBlock(), (torch.randn(2, 8, 16),)


def _plan(styles):
    return planlib.Plan(mesh_shape=(4,), mesh_dim_names=("tp",), device_type="cpu", parallelize_plan=styles,
                        tp_mesh_dim="tp", inputs_requires_grad=(0,), loss=planlib.Loss.sum())


@pytest.mark.parametrize("factory, styles, region", [
    (no_grad_gate, {f"w{i}": ColwiseParallel(output_layouts=Replicate()) for i in (1, 2, 3)},
     "wrap_with_set_grad_enabled"),
    (autocast_block, {"w1": ColwiseParallel(), "w2": RowwiseParallel()}, "wrap_with_autocast"),
])
def test_regions_are_inlined_and_predicted_exactly(run_commlens, tmp_path, factory, styles, region):
    model, args = factory()
    ep = export_model(model, args)
    assert any(region in str(n.target) for n in ep.graph.nodes), f"export no longer makes a {region} region"
    pt2 = tmp_path / "m.pt2"
    torch.export.save(ep, str(pt2))
    plan_path = tmp_path / "plan.json"
    planlib.save(_plan(styles), str(plan_path))
    predicted = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    measured = tmp_path / "measured.counts.json"
    from commlens.measure import format_counts

    doc = measure(f"{__name__}:{factory.__name__}", str(plan_path), phase="both", return_document=True)
    measured.write_text(format_counts(doc))
    r = run_commlens("compare", predicted, measured)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ", 0 differ;" in r.stdout.splitlines()[-1]


def test_other_higher_order_ops_are_refused_by_name(run_commlens, tmp_path):
    pt2 = tmp_path / "cond.pt2"
    torch.export.save(export_model(CondNet(), (torch.randn(2, 16),)), str(pt2))
    r = run_commlens("inspect", pt2)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.startswith(f"commlens: error: {pt2}: ")
    assert "higher-order op 'cond' is not supported by commlens yet (node 'cond' torch.ops.higher_order.cond in " \
           "CondNet)" in r.stderr
