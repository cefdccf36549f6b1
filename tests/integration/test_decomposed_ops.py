"""Composite ops that torch.export keeps but the dispatcher decomposes before DTensor sees them
(movedim, std.dim / var.dim, pad (constant and circular), cross_entropy_loss, dropout, linalg_svd, batch_norm, instance_norm): predict runs their decompositions (checked
op by op against DTensor in tests/backward/op_cases.py) and refuses, by node, op and module, the
variants whose kernels it does not model."""
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch.distributed.tensor import Shard

from commlens.plan import Loss, Plan
from integration_helpers import compare_with_measure, save_plan


class Head(torch.nn.Module):
    """x * w, then the op under test."""

    def __init__(self, op):
        super().__init__()
        self.op = op
        self.w = torch.nn.Parameter(torch.randn(4, 6, 8))

    def forward(self, x):
        return self.op(x * self.w)


OPS = {
    "movedim": lambda y: torch.movedim(y, 1, 0) * 2.0,
    "std": lambda y: torch.std(y, dim=1),
    "pad": lambda y: F.pad(y, (1, 2)),
    "cross_entropy": lambda y: F.cross_entropy(y.reshape(-1, 8), (y.reshape(-1, 8)[:, 0] > 0).long()),
    "dropout": lambda y: F.dropout(y, 0.1, training=True) * 2.0,
    "svd": lambda y: torch.linalg.svd(y)[1] * 2.0,
    "pad_reflect": lambda y: F.pad(y, (1, 2), mode="reflect"),
    "pad_circular": lambda y: F.pad(y, (1, 2), mode="circular"),
    # feature / alpha dropouts: the input itself with p = 0 or outside training (Dropout.cpp)
    "dropout2d_eval": lambda y: F.dropout2d(y, 0.5, training=False) * 2.0,
    "alpha_dropout_p0": lambda y: F.alpha_dropout(y, 0.0, training=True) * 2.0,
    "dropout2d": lambda y: F.dropout2d(y, 0.5, training=True),
    "cross_entropy_smoothed": lambda y: F.cross_entropy(y.reshape(-1, 8), (y.reshape(-1, 8)[:, 0] > 0).long(),
                                                        label_smoothing=0.1),
    "cross_entropy_smoothed_probs": lambda y: F.cross_entropy(y.reshape(-1, 8), y.reshape(-1, 8).softmax(1),
                                                              label_smoothing=0.1),
    # batch_norm runs native_batch_norm on the CPU; instance_norm views the input as one sample of
    # N*C channels and batch-normalizes that (Normalization.cpp)
    # linear algebra: the composite wrappers run their DTensor kernels (linalg_inv_ex and the
    # error check, _linalg_det, _linalg_slogdet, _linalg_solve_ex, _linalg_svd, _linalg_eigh, ...)
    "linalg_inv": lambda y: torch.linalg.inv(y[..., :6]),
    "linalg_det": lambda y: torch.linalg.det(y[..., :6]),
    "logdet": lambda y: torch.logdet(y[..., :6]),
    "slogdet": lambda y: torch.linalg.slogdet(y[..., :6])[1],
    "linalg_solve": lambda y: torch.linalg.solve(y[..., :6], y[..., 6:]),
    "svdvals": lambda y: torch.linalg.svdvals(y),
    "svd": lambda y: torch.svd(y)[2],
    "cond": lambda y: torch.linalg.cond(y[..., :6]),
    "eigvalsh": lambda y: torch.linalg.eigvalsh(y[..., :6]),
    "cholesky": lambda y: torch.linalg.cholesky(y[..., :6] @ y[..., :6].mT),
    "qr": lambda y: torch.qr(y)[1],
    "lu_factor": lambda y: torch.linalg.lu_factor(y[..., :6])[0],
    "matrix_exp": lambda y: torch.matrix_exp(y[..., :6]),
    "pinverse": lambda y: torch.pinverse(y),
    "ldl_factor": lambda y: torch.linalg.ldl_factor(y[..., :6] @ y[..., :6].mT)[0],
    # matrix_rank: its tolerances are float64 0-dim plain tensors (replicated where they meet DTensors)
    "matrix_rank": lambda y: torch.linalg.matrix_rank(y),
    "matrix_rank_hermitian": lambda y: torch.linalg.matrix_rank(y[..., :6] + y[..., :6].mT, hermitian=True),
    # isclose: its comparisons and the in-place bool combinations (TensorCompare.cpp)
    "isclose": lambda y: torch.isclose(y, y * 1.0001),
    "isclose_broadcast": lambda y: torch.isclose(y, y[:, :1] * 1.0001),
    # isfinite as it runs, (e == e) * (|e| != inf): of a sum over the sharded dim (Partial), abs
    # and both operands of eq each all-reduce it (3 all_reduces, where a pointwise rule has 1)
    "isfinite_of_sum": lambda y: torch.isfinite(y.sum(1)),
    # item(): _local_scalar_dense of the sum (Partial on a shard), which DTensor reads on each rank as
    # it is (no reduction: nothing to count)
    "item": lambda y: y.sum().item(),
    "batch_norm": lambda y: F.batch_norm(y, None, None, training=True),
    "instance_norm": lambda y: F.instance_norm(y),
    # gradient (ReduceOps.cpp): slices, differences and a cat per dim; linalg_vander: unsqueeze,
    # expand, cumprod, new_ones, cat (whose cumprod over N - 1 > 1 columns has no derivative here)
    "gradient": lambda y: torch.gradient(y, dim=1)[0],
    "gradient_edge2": lambda y: sum(torch.gradient(y, spacing=2.0, edge_order=2)),
    "vander": lambda y: torch.linalg.vander(y[:, :, 0], N=2) * 2.0,
    "vander_3": lambda y: torch.linalg.vander(y[:, :, 0], N=3),
    # rrelu: rrelu_with_noise (pointwise for DTensor) on an empty_like noise buffer
    "rrelu": lambda y: F.rrelu(y, training=True),
    "rrelu_of_sum": lambda y: F.rrelu(y.sum(1), 0.1, 0.3),
    # cauchy_: DTensor runs torch._refs' cauchy on the shards (rand_like, tan, ...) and copies it in
    "cauchy": lambda y: y * torch.empty_like(y).cauchy_(),
}


def head(name):
    torch.manual_seed(0)
    return Head(OPS[name]), (torch.randn(4, 6, 8),)


def sharded(dim=0):
    """The input sharded on `dim` over 2 ranks, the parameter replicated (a DTensor too)."""
    from torch.distributed.tensor import Replicate

    return Plan(name="sharded", mesh_shape=(2,), mesh_dim_names=("dp",), input_placements={0: (Shard(dim),)},
                placements={"w": (Replicate(),)}, inputs_requires_grad=(0,), loss=Loss.sum())


def export(name, directory):
    from commlens.export import export_model

    model, args = head(name)
    path = pathlib.Path(directory) / f"{name}.pt2"
    torch.export.save(export_model(model, args), str(path))
    return path


# (op, input shard dim, cells): std over the sharded dim 1 and cross_entropy's row-sharded mean
# reduce across ranks, so CommDebugMode records collectives there (cells > 0).
@pytest.mark.parametrize("name, dim, with_collectives", [
    ("movedim", 1, False), ("std", 1, True), ("pad", 0, False), ("cross_entropy", 0, True),
    # circular pad's output is a new Replicate tensor the input is copied into: a shard is gathered
    ("pad_circular", 0, True), ("pad_circular", 2, True),
    ("cross_entropy_smoothed", 0, True),
    # dropout's CPU kernel: a bernoulli_ mask on empty_like(y), which keeps y's Shard(1)
    ("dropout", 1, False), ("dropout2d_eval", 1, False), ("alpha_dropout_p0", 0, False),
    # native_batch_norm's strategy shards channels (dim 1) only: a batch-sharded input is moved off
    # dim 0 first; instance norm's [1, N*C, L] view of a batch-sharded input is channel-sharded
    ("batch_norm", 0, True), ("batch_norm", 1, False), ("instance_norm", 0, False),
    # slices along a sharded dim gather it; other dims' differences keep the shard
    ("gradient", 1, True), ("gradient", 0, False), ("gradient_edge2", 2, True),
    ("vander", 0, False), ("vander", 1, False),
    # the sum over the sharded dim is a Partial, which rrelu's kernel needs reduced
    ("rrelu", 1, False), ("rrelu_of_sum", 1, True), ("cauchy", 1, False)])
def test_decomposed_op_matches_comm_debug_mode(run_commlens, tmp_path, name, dim, with_collectives):
    pt2 = export(name, tmp_path)
    plan = sharded(dim)
    predicted = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", save_plan(plan, tmp_path), "--phase", "both", "--format", "json",
                     "-o", predicted)
    assert r.returncode == 0, r.stderr
    summary = compare_with_measure(run_commlens, predicted, lambda: head(name), plan, tmp_path)
    assert summary["differ"] == 0 and (summary["cells"] > 0) == with_collectives


@pytest.mark.parametrize("name, message", [
    ("pad_reflect", "node 'pad' aten::pad.default with mode 'reflect' in Head: only modes 'constant' and 'circular' "
                    "are supported"),
    ("cross_entropy_smoothed_probs",
     "node 'cross_entropy_loss' aten::cross_entropy_loss.default in Head: label_smoothing with class-probability "
     "targets is not supported"),
    ("dropout2d", "node 'feature_dropout' aten::feature_dropout.default in Head: dropout with p = 0.5 in training (a "
                  "noise mask per feature or the alpha variant's affine noise) is not modelled"),
])
def test_unmodelled_variants_are_refused_by_name(run_commlens, tmp_path, name, message):
    pt2 = export(name, tmp_path)
    r = run_commlens("predict", pt2, "--plan", save_plan(sharded(), tmp_path))
    assert (r.returncode, r.stderr) == (2, f"commlens: error: {pt2}: {message}\n")


def test_cumprod_derivative_over_several_elements_is_refused_by_name(run_commlens, tmp_path):
    """vander with N = 3 runs cumprod over 2 columns, whose derivative torch takes by whether the
    input holds a zero (and DTensor raises in its branch): the backward is refused, the forward
    predicted."""
    pt2 = export("vander_3", tmp_path)
    plan = save_plan(sharded(), tmp_path)
    r = run_commlens("predict", pt2, "--plan", plan, "--phase", "both")
    assert (r.returncode, r.stderr) == (2, (
        f"commlens: error: {pt2}: autodiff: the derivative of aten::cumprod.default over 2 elements is not modelled "
        "(torch's cumprod_backward branches on whether the input holds a zero; DTensor raises in the branch it "
        "takes) (node 'linalg_vander_cumprod' in Head)\n"))
    assert run_commlens("predict", pt2, "--plan", plan, "--phase", "forward").returncode == 0


def test_linalg_svd_replicates_its_input_like_comm_debug_mode(run_commlens, tmp_path):
    """linalg_svd runs as _linalg_svd, whose strategy replicates everything: the [4, 6, 8] float32
    input sharded on dim 0 over 2 ranks is all-gathered once, each rank passing its [2, 6, 8]
    shard (384 B). Forward only: _linalg_svd's derivative is modelled for 2-D matrices, and this
    input is batched (refused by name)."""
    import json

    from commlens.measure import measure

    pt2, plan = export("svd", tmp_path), sharded(0)
    r = run_commlens("predict", pt2, "--plan", save_plan(plan, tmp_path), "--phase", "forward", "--format", "json")
    assert r.returncode == 0, r.stderr
    tree = json.loads(r.stdout)
    expected = {"c10d_functional.all_gather_into_tensor": (1, 384)}
    assert {op: (n, tree["collective_bytes_forward"][op]) for op, n in tree["collectives_forward"]} == expected
    measured = measure(lambda: head("svd"), plan, phase="forward", return_document=True)["modules"][0]
    assert {op: (n, measured["forward_bytes"][op]) for op, n in measured["forward"].items()} == expected


FORWARD_ONLY = ["linalg_inv", "linalg_det", "logdet", "slogdet", "linalg_solve", "svdvals", "svd", "cond", "eigvalsh",
                "cholesky", "qr", "lu_factor", "matrix_exp", "pinverse", "ldl_factor", "isclose", "isclose_broadcast",
                "item", "matrix_rank", "matrix_rank_hermitian", "isfinite_of_sum"]
# the wrappers that check their factorization (inv, solve, cholesky, lu_factor) raise on the
# row-sharded input: the fake process group's all-gather leaves the other rank's rows zero
CHECKED = {"linalg_inv", "linalg_solve", "cholesky", "lu_factor", "ldl_factor"}


# DTensor's linalg strategies shard batch dims only (_math_ops.py linalg_batch_dim_strategy), and
# _linalg_svd / _linalg_eigh / linalg_qr and the error check's info replicate: predicted and
# measured on a batch-sharded [4, 6, *] input and, where the run needs no valid data, a
# row-sharded one.
@pytest.mark.parametrize("name, dim", [(n, 0) for n in FORWARD_ONLY] + [(n, 1) for n in FORWARD_ONLY if n not in CHECKED])
def test_composite_forward_matches_comm_debug_mode(run_commlens, tmp_path, name, dim):
    import json

    from commlens.measure import measure

    pt2, plan = export(name, tmp_path), sharded(dim)
    r = run_commlens("predict", pt2, "--plan", save_plan(plan, tmp_path), "--phase", "forward", "--format", "json")
    assert r.returncode == 0, r.stderr
    tree = json.loads(r.stdout)
    predicted = {op: (n, tree["collective_bytes_forward"][op]) for op, n in tree["collectives_forward"]}
    measured = measure(lambda: head(name), plan, phase="forward", return_document=True)["modules"][0]
    assert predicted == {op: (n, measured["forward_bytes"][op]) for op, n in measured["forward"].items()}


class ScaledMm(torch.nn.Module):
    """torch._scaled_mm of float8 operands (the second column-major) with tensor-wise scales, then a
    relu (which reduces a Partial product first)."""

    def forward(self, a, b, scale_a, scale_b):
        return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16).relu()


def scaled_mm_inputs():
    torch.manual_seed(0)
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(24, 32).to(torch.float8_e4m3fn).t()
    return ScaledMm(), (a, b, torch.ones(()), torch.ones(()))


# _scaled_mm's strategy is mm's (scales placed as their operands, a one-element scale replicated):
# row-sharded self keeps its shard; a contracting-dim shard of self (mat2 sharded to match, or
# replicated and chunked locally) gives a Partial product the relu all-reduces.
@pytest.mark.parametrize("placements", [(Shard(0), None), (Shard(1), Shard(0)), (Shard(1), None)])
def test_scaled_mm_forward_matches_comm_debug_mode(run_commlens, tmp_path, placements):
    import json

    from torch.distributed.tensor import Replicate

    from commlens.export import export_model
    from commlens.measure import measure

    model, args = scaled_mm_inputs()
    pt2 = tmp_path / "scaled_mm.pt2"
    torch.export.save(export_model(model, args), str(pt2))
    pa, pb = placements
    plan = Plan(name="scaled_mm", mesh_shape=(2,), mesh_dim_names=("tp",),
                input_placements={0: (pa,), 1: (pb or Replicate(),), 2: (Replicate(),), 3: (Replicate(),)})
    r = run_commlens("predict", pt2, "--plan", save_plan(plan, tmp_path), "--phase", "forward", "--format", "json")
    assert r.returncode == 0, r.stderr
    tree = json.loads(r.stdout)
    predicted = {op: (n, tree["collective_bytes_forward"][op]) for op, n in tree["collectives_forward"]}
    measured = measure(scaled_mm_inputs, plan, phase="forward", return_document=True)["modules"][0]
    assert predicted == {op: (n, measured["forward_bytes"][op]) for op, n in measured["forward"].items()}


def test_scaled_mm_backward_is_refused_as_torch_refuses_it(run_commlens, tmp_path):
    """torch has no derivative for _scaled_mm (derivatives.yaml lists it "not_implemented"): a
    training step through it raises, and predict refuses it by name, node and module."""
    from torch.distributed.tensor import Replicate

    from commlens.export import export_model
    from commlens.measure import measure

    model, args = scaled_mm_inputs()
    pt2 = tmp_path / "scaled_mm.pt2"
    torch.export.save(export_model(model, args), str(pt2))
    plan = Plan(name="scaled_mm", mesh_shape=(2,), mesh_dim_names=("tp",), inputs_requires_grad=(0,),
                input_placements={0: (Shard(0),), 1: (Replicate(),), 2: (Replicate(),), 3: (Replicate(),)})
    with pytest.raises(RuntimeError, match="derivative for aten::_scaled_mm is not implemented"):
        measure(scaled_mm_inputs, plan, phase="both")
    r = run_commlens("predict", pt2, "--plan", save_plan(plan, tmp_path), "--phase", "both")
    assert r.returncode == 2
    assert r.stderr.strip() == (f"commlens: error: {pt2}: autodiff: no derivative formula for "
                                "aten::_scaled_mm.default (node '_scaled_mm' in ScaledMm)")
