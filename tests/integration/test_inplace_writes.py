"""In-place writes into views (`out[:, i] = x`) predicted as torch's autograd differentiates them
(CopySlices), against CommDebugMode on examples.inplace run natively: a write that carries the
only path from the loss to a DTensor's local output must carry its gradient, or the from_local
backward's all-reduce is silently lost (Qwen3.5's chunked delta rule was predicted 6 all-reduces
short before)."""

import pytest

from commlens.capture import capture
from commlens.measure import format_counts
from commlens.plan import save
from examples.parallelize import measure_natively
from integration_helpers import export_pt2

PARALLELIZE = "examples.inplace:tp_local(tp=2)"


def model(variant):
    return f"examples.inplace:inplace(variant={variant!r})"


@pytest.mark.parametrize("variant", ["copy_select", "copy_slice", "chunks", "overwrite"])
def test_writes_into_views_carry_the_gradient(run_commlens, tmp_path, variant):
    doc = measure_natively(model=model(variant), parallelize=PARALLELIZE, world_size=2, inputs_requires_grad=(0,))
    # By hand: lin's Shard(-1) output [4, 3, 8] all-gathered to Replicate (a rank sends its
    # [4, 3, 4] float32 half, 192 B); backward, x's gradient through from_local is Partial: one
    # all-reduce of [4, 3, 8] float32 (384 B). It exists only if the write carries the gradient.
    total = doc["modules"][0]
    assert (total["forward"], total["forward_bytes"]) == ({"c10d_functional.all_gather_into_tensor": 1},
                                                          {"c10d_functional.all_gather_into_tensor": 192})
    assert (total["backward"], total["backward_bytes"]) == ({"c10d_functional.all_reduce": 1},
                                                            {"c10d_functional.all_reduce": 384})
    measured = tmp_path / "measured.counts.json"
    measured.write_text(format_counts(doc))
    plan = tmp_path / "plan.json"
    save(capture(model(variant), PARALLELIZE, 2, inputs_requires_grad=(0,)), plan)
    predicted = tmp_path / "predicted.json"
    r = run_commlens("predict", export_pt2(model(variant), tmp_path), "--plan", plan, "--phase", "both",
                     "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    r = run_commlens("compare", predicted, measured)
    assert r.returncode == 0 and ", 0 differ;" in r.stdout.splitlines()[-1], r.stdout + r.stderr


def test_another_in_place_op_with_a_gradient_operand_is_refused_by_name(run_commlens, tmp_path):
    # y[:, 0].mul_(h[:, 1]): torch runs it (MulBackward under CopySlices); commlens models copy_ only
    plan = tmp_path / "plan.json"
    save(capture(model("mul_with_grad"), PARALLELIZE, 2, inputs_requires_grad=(0,)), plan)
    pt2 = export_pt2(model("mul_with_grad"), tmp_path)
    r = run_commlens("predict", pt2, "--plan", plan, "--phase", "both")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {pt2}: autodiff: node 'mul_' aten::mul_.Tensor in InPlace writes in place "
                        "into a view of 'mul': the gradient through the write is not modelled (an operand other "
                        "than the view requires grad)\n")
    doc = measure_natively(model=model("mul_with_grad"), parallelize=PARALLELIZE, world_size=2,
                           inputs_requires_grad=(0,))
    assert doc["modules"][0]["backward"] == {"c10d_functional.all_reduce": 1}  # torch runs it
