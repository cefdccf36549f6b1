"""argmax / argmin on DTensors run DTensor's custom handler (torch 2.13 _nonlinear_redux.py), not
their strategy's redistributions; predict models the handler. Each case's counts and bytes are
derived by hand below, and both predict and CommDebugMode (commlens.measure, fake process group,
forward: the result is integer, nothing to differentiate) must give them."""
import pathlib

import pytest
import torch
from torch.distributed.tensor import Partial, Replicate, Shard

from commlens.plan import Loss, Plan
from integration_helpers import save_plan

AG = "c10d_functional.all_gather_into_tensor"
AR = "c10d_functional.all_reduce"


class ArgReduction(torch.nn.Module):
    """y = x * w on [8, 16] float32, then argmax / argmin of y."""

    def __init__(self, reduce):
        super().__init__()
        self.reduce = reduce
        self.w = torch.nn.Parameter(torch.randn(8, 16))

    def forward(self, x):
        return self.reduce(x * self.w)


REDUCTIONS = {
    "argmax_last": lambda y: y.argmax(-1),
    "argmin_keepdim": lambda y: y.argmin(1, keepdim=True),
    "argmax_all": lambda y: y.argmax(),
    "argmax_rows": lambda y: y.argmax(0),
}


def model(name):
    torch.manual_seed(0)
    return ArgReduction(REDUCTIONS[name]), (torch.randn(8, 16),)


CASES = [
    # Shard(1) on 4 ranks, reducing dim 1: each rank's [8, 1] values (f32, 32 B) and indices
    # (int64, 64 B) are all-gathered once.
    ("argmax_last", (4,), (Shard(1),), (Replicate(),), {AG: (2, 96)}),
    ("argmin_keepdim", (4,), (Shard(1),), (Replicate(),), {AG: (2, 96)}),
    # Every dim reduced: a [1] value (4 B) and a [1] index (8 B).
    ("argmax_all", (4,), (Shard(0),), (Replicate(),), {AG: (2, 12)}),
    # The shard is not on the reduced dim: no collective.
    ("argmax_last", (4,), (Shard(0),), (Replicate(),), {}),
    # x Replicate * w Partial is Partial: replicated first, an all_reduce of [8, 16] f32 (512 B).
    ("argmax_last", (4,), (Replicate(),), (Partial(),), {AR: (1, 512)}),
    # (2, 2), both mesh dims shard dim 0, reduced: [1, 16] values (64 B) and indices (128 B) along
    # mesh dim 0, then the gathered [2, 16] ones (128 B + 256 B) along mesh dim 1: 576 B.
    ("argmax_rows", (2, 2), (Shard(0), Shard(0)), (Replicate(), Replicate()), {AG: (4, 576)}),
]


@pytest.mark.parametrize("name, mesh, x_placements, w_placements, expected", CASES)
def test_arg_reduction_matches_comm_debug_mode(run_commlens, tmp_path, name, mesh, x_placements, w_placements,
                                               expected):
    import json

    from commlens.export import export_model
    from commlens.measure import measure

    plan = Plan(name="arg", mesh_shape=mesh, mesh_dim_names=("a", "b")[:len(mesh)],
                input_placements={0: x_placements}, placements={"w": w_placements}, loss=Loss.sum())
    pt2 = pathlib.Path(tmp_path) / "model.pt2"
    torch.export.save(export_model(*model(name)), str(pt2))
    predicted = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", save_plan(plan, tmp_path), "--phase", "forward", "--format", "json",
                     "-o", predicted)
    assert r.returncode == 0, r.stderr
    tree = json.loads(predicted.read_text())
    assert {op: (n, tree["collective_bytes_forward"][op]) for op, n in tree["collectives_forward"]} == expected
    doc = measure(lambda: model(name), plan, phase="forward", return_document=True)
    measured = doc["modules"][0]
    assert measured["fqn"] == "Global"
    assert {op: (n, measured["forward_bytes"][op]) for op, n in measured["forward"].items()} == expected
