"""An FSDP2 unit whose module runs more than once per forward (examples.shared:shared_mlp calls
``block`` twice: ``block(proj(x))``, then ``block(norm(h))``), predicted and checked against
CommDebugMode (commlens.measure, fake process group) in the same run.

torch 2.13 (``_fsdp_param_group.py``): pre-forward and post-forward run at every call, so a unit
resharded after forward gathers again at its next call; backward runs the calls' hooks latest
first: pre-backward unshards unless the unit is already in pre-backward, so after the later call's
post-backward resharded it, the earlier call gathers again; a post-backward reduce-scatters only
the gradients autograd has accumulated, and a parameter used by both calls gets its gradient once
both contributions are in, so only the earlier call's post-backward reduce-scatters."""
import pytest

from commlens import plan as planlib
from integration_helpers import compare_with_measure, export_pt2, module_rows, predict_both

SHARED = "examples.shared:shared_mlp"  # dim 16, hidden 32, float32
AG, RS = "c10d._allgather_base_", "c10d._reduce_scatter_base_"
# By hand, dp=4 (each weight's dim 0 and each bias split in 4):
#   block: w1 Linear(16, 32) 8*16 + 8, w2 Linear(32, 16) 4*32 + 4 = 268 elements, 1072 bytes per
#          all-gather, 4 x 1072 = 4288 per reduce-scatter;
#   root:  proj and head Linear(16, 16) 4*16 + 4 each, norm LayerNorm(16) 4 + 4 = 144 elements,
#          576 bytes per all-gather, 2304 per reduce-scatter.
BLOCK_AG, BLOCK_RS, ROOT_AG, ROOT_RS = 1072, 4288, 576, 2304


@pytest.fixture(scope="module")
def shared_pt2(tmp_path_factory):
    return export_pt2(SHARED, tmp_path_factory.mktemp("shared"))


def test_unit_called_twice_by_hand(run_commlens, shared_pt2, tmp_path):
    plan = "examples.plans:shared_mlp_fsdp(dp=4)"
    predicted, tree = predict_both(run_commlens, shared_pt2, plan, tmp_path)
    rows = module_rows(tree)
    # Forward: the root gathers once and keeps its parameters; the block gathers at each call
    # (resharded after the first). Backward: the root's pre-backward prefetches the block (charged
    # to the root); the later call finds it unsharded, its post-backward reshards it and finds no
    # gradient yet; the earlier call's pre-backward gathers again and its post-backward
    # reduce-scatters, under block.w1, the module whose backward ran last; the root's parameters
    # are reduce-scattered in its final callback (the input needs no gradient), under proj.
    assert rows["FSDPSharedMLPNet"] == ({AG: 3}, {AG: 2, RS: 2}, {AG: ROOT_AG + 2 * BLOCK_AG},
                                        {AG: 2 * BLOCK_AG, RS: BLOCK_RS + ROOT_RS})
    assert rows["FSDPSharedMLPNet.block"] == ({AG: 2}, {AG: 1, RS: 1}, {AG: 2 * BLOCK_AG},
                                              {AG: BLOCK_AG, RS: BLOCK_RS})
    assert rows["FSDPSharedMLPNet.block.w1"] == ({}, {RS: 1}, {}, {RS: BLOCK_RS})
    assert rows["FSDPSharedMLPNet.proj"] == ({}, {RS: 1}, {}, {RS: ROOT_RS})
    summary = compare_with_measure(run_commlens, predicted, SHARED, planlib.resolve_plan(plan), tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0


def test_unit_called_twice_kept_after_forward(run_commlens, shared_pt2, tmp_path):
    plan = "examples.plans:shared_mlp_fsdp(dp=4, reshard_after_forward=False)"
    predicted, tree = predict_both(run_commlens, shared_pt2, plan, tmp_path)
    # The block keeps its parameters after each call: one gather in forward; in backward only the
    # earlier call gathers again (after the later call's post-backward resharded them).
    assert module_rows(tree)["FSDPSharedMLPNet.block"] == ({AG: 1}, {AG: 1, RS: 1}, {AG: BLOCK_AG},
                                                           {AG: BLOCK_AG, RS: BLOCK_RS})
    summary = compare_with_measure(run_commlens, predicted, SHARED, planlib.resolve_plan(plan), tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0


def test_unit_called_twice_resharded_to_a_smaller_group(run_commlens, shared_pt2, tmp_path):
    plan = "examples.plans:shared_mlp_fsdp(dp=4, reshard_after_forward=2)"
    predicted, tree = predict_both(run_commlens, shared_pt2, plan, tmp_path)
    # After each call the block keeps a shard of 2 ranks: the second call gathers 2 x 1072 bytes,
    # as does the root's backward prefetch; the earlier call's backward gather follows a
    # post-backward, which reshards over all 4 ranks: 1072 bytes.
    assert module_rows(tree)["FSDPSharedMLPNet.block"] == ({AG: 2}, {AG: 1, RS: 1}, {AG: 3 * BLOCK_AG},
                                                           {AG: BLOCK_AG, RS: BLOCK_RS})
    assert module_rows(tree)["FSDPSharedMLPNet"][3][AG] == 3 * BLOCK_AG
    summary = compare_with_measure(run_commlens, predicted, SHARED, planlib.resolve_plan(plan), tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0


@pytest.mark.parametrize("args", [
    "dp=4, requires_gradient_sync=False",
    "dp=4, hsdp=2",
    "dp=4, input_requires_grad=True",
    "dp=4, units=('block.w1', 'block')",
    "dp=4, units=('block.w1', 'block'), reshard_after_forward=False",
    "dp=2, tp=2",
    "dp=2, tp=2, input_requires_grad=True",
])
def test_unit_called_twice_against_commdebugmode(run_commlens, shared_pt2, tmp_path, args):
    plan = f"examples.plans:shared_mlp_fsdp({args})"
    predicted, _ = predict_both(run_commlens, shared_pt2, plan, tmp_path)
    summary = compare_with_measure(run_commlens, predicted, SHARED, planlib.resolve_plan(plan), tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0
