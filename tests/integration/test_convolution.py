"""Convolutions on DTensors (examples.cnn), predicted as DTensor's custom handlers run them
(torch 2.13 `_tp_conv.py`: batch-dim strategies, the kernel on the local shards as they are,
the backward's grad_output redistributed to the input's placements), against CommDebugMode on the
user's parallelize function run natively."""

import pytest

from commlens.capture import capture
from commlens.measure import format_counts
from commlens.plan import save
from examples.parallelize import measure_natively
from integration_helpers import export_pt2

MODEL = "examples.cnn:cnn()"


def predict_and_compare(run_commlens, tmp_path, parallelize, doc):
    measured = tmp_path / "measured.counts.json"
    measured.write_text(format_counts(doc))
    plan = tmp_path / "plan.json"
    save(capture(MODEL, parallelize, 2, inputs_requires_grad=(0,)), plan)
    predicted = tmp_path / "predicted.json"
    r = run_commlens("predict", export_pt2(MODEL, tmp_path), "--plan", plan, "--phase", "both", "--format", "json",
                     "-o", predicted)
    assert r.returncode == 0, r.stderr
    r = run_commlens("compare", predicted, measured)
    assert r.returncode == 0 and ", 0 differ;" in r.stdout.splitlines()[-1], r.stdout + r.stderr


def test_batch_sharded_convolutions_communicate_only_the_input_gradient(run_commlens, tmp_path):
    parallelize = "examples.cnn:batch_parallel(dp=2)"
    doc = measure_natively(model=MODEL, parallelize=parallelize, world_size=2, inputs_requires_grad=(0,))
    # By hand: both convolutions run on the batch shards with replicated weights (no collective),
    # their weight gradients stay Partial. Backward, x's gradient goes back through
    # PrepareModuleInput's Replicate -> Shard(0): an all-gather of [8, 3, 8, 8] float32, each rank
    # sending its [4, 3, 8, 8] half (3072 B), attributed where autograd computes it (conv1).
    total = doc["modules"][0]
    assert (total["forward"], total["backward"], total["backward_bytes"]) == (
        {}, {"c10d_functional.all_gather_into_tensor": 1}, {"c10d_functional.all_gather_into_tensor": 3072})
    predict_and_compare(run_commlens, tmp_path, parallelize, doc)


def test_a_column_parallel_head_gathers_the_batch_shards(run_commlens, tmp_path):
    parallelize = "examples.cnn:batch_parallel(dp=2, head_tp=True)"
    doc = measure_natively(model=MODEL, parallelize=parallelize, world_size=2, inputs_requires_grad=(0,))
    # By hand: the head's input [8, 128] float32 is batch-sharded; ColwiseParallel wants it
    # replicated: an all-gather of the [4, 128] halves (2048 B). Backward, the head's input
    # gradient is Partial (its weight is sharded by output row): a reduce-scatter back to the batch
    # shards ([8, 128] float32 in, 4096 B).
    head = next(m for m in doc["modules"] if m["fqn"] == "SmallCNN.head")
    assert (head["forward"], head["forward_bytes"]) == ({"c10d_functional.all_gather_into_tensor": 1},
                                                        {"c10d_functional.all_gather_into_tensor": 2048})
    assert head["backward"]["c10d_functional.reduce_scatter_tensor"] == 1
    assert head["backward_bytes"]["c10d_functional.reduce_scatter_tensor"] == 4096
    predict_and_compare(run_commlens, tmp_path, parallelize, doc)


def test_a_sharded_convolution_weight_is_refused_by_name(run_commlens, tmp_path):
    # conv1's weight Shard(0): the strategy replicates it, but the handler runs the kernel on the
    # local half as it is (torch computes with 4 of the 8 filters): not modelled
    parallelize = "examples.cnn:batch_parallel(dp=2, conv_weight='shard_out')"
    plan = tmp_path / "plan.json"
    save(capture(MODEL, parallelize, 2, inputs_requires_grad=(0,)), plan)
    pt2 = export_pt2(MODEL, tmp_path)
    r = run_commlens("predict", pt2, "--plan", plan, "--phase", "forward")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {pt2}: node 'conv2d' aten::convolution.default in SmallCNN.conv1: DTensor's "
                        "convolution handler (torch 2.13 _tp_conv.py) runs the local kernel on the shards as they are, "
                        "without redistributing 'weight' from [S(0)] to [R] as the strategy asks: not modelled\n")
