"""FSDP2 settings where commlens once gave silently wrong counts, each checked by hand and against
CommDebugMode (commlens.measure, fake process group) in the same run:

- units with no common enclosing unit (every block, or every Linear, its own ``fully_shard``, as
  PyTorch's own FSDP tests write it): each is a root of its own (torch 2.13
  ``FSDPState._lazy_init``), keeps its parameters after forward and prefetches only inside its
  own context in backward;
- a vocab-parallel ``tok_embeddings`` that is its own unit (torchtitan's ``apply_fsdp``):
  fully_shard renames its class to ``FSDPEmbedding``, which RowwiseParallel must still treat as
  an ``nn.Embedding``."""

import pytest

from commlens import plan as planlib
from integration_helpers import compare_with_measure, export_pt2, module_rows, predict_both

STACKED = "examples.mlp:stacked_mlp"  # 3 blocks: w1 Linear(16, 32), w2 Linear(32, 16), with biases
LLAMA = "examples.llama:llama"


@pytest.fixture(scope="module")
def stacked_pt2(tmp_path_factory):
    return export_pt2(STACKED, tmp_path_factory.mktemp("stacked"))


@pytest.mark.parametrize("input_requires_grad", [False, True])
def test_every_block_its_own_root(run_commlens, stacked_pt2, tmp_path, input_requires_grad):
    plan = f"examples.plans:stacked_mlp_fsdp_roots(dp=4, input_requires_grad={input_requires_grad})"
    predicted, tree = predict_both(run_commlens, stacked_pt2, plan, tmp_path)
    # By hand, dp=4: a block's shard is w1 (32/4)*16 + 32/4 and w2 (16/4)*32 + 16/4 = 268 float32
    # elements: its all-gather sends 1072 bytes, its reduce-scatter takes 4 x 1072 = 4288. Each block
    # is a root: all-gathered once in forward and kept (a root does not reshard after forward), so
    # backward re-gathers nothing and prefetches nothing; one reduce-scatter per block.
    rows = module_rows(tree)
    for i in range(3):
        assert rows[f"StackedMLP.layers.{i}"] == ({"c10d._allgather_base_": 1}, {"c10d._reduce_scatter_base_": 1},
                                                  {"c10d._allgather_base_": 1072},
                                                  {"c10d._reduce_scatter_base_": 4288})
    summary = compare_with_measure(run_commlens, predicted, STACKED, planlib.resolve_plan(plan), tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0


def test_every_linear_its_own_root(run_commlens, stacked_pt2, tmp_path):
    plan = "examples.plans:stacked_mlp_fsdp_roots(dp=4, units=('layers.*.w1', 'layers.*.w2'))"
    predicted, tree = predict_both(run_commlens, stacked_pt2, plan, tmp_path)
    # By hand: six roots, each gathered once in forward (w1: 8*16 + 8 = 136 elements, 544 bytes; w2:
    # 4*32 + 4 = 132, 528 bytes) and reduce-scattered once in backward (4x); nothing in backward is
    # gathered again.
    forward, backward, forward_bytes, backward_bytes = module_rows(tree)["Global"]
    assert forward == {"c10d._allgather_base_": 6}
    assert backward == {"c10d._reduce_scatter_base_": 6}
    assert forward_bytes == {"c10d._allgather_base_": 3 * (544 + 528)}
    assert backward_bytes == {"c10d._reduce_scatter_base_": 3 * 4 * (544 + 528)}
    summary = compare_with_measure(run_commlens, predicted, STACKED, planlib.resolve_plan(plan), tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0


def test_nested_units_under_separate_roots(run_commlens, stacked_pt2, tmp_path):
    """layers.1 encloses its w2 unit (one context, layers.1 its root); layers.2.w1 is a root alone."""
    plan = ("examples.plans:stacked_mlp_fsdp_roots(dp=4, units=('layers.1.w2', 'layers.1', 'layers.2.w1'), "
            "input_requires_grad=True)")
    predicted, tree = predict_both(run_commlens, stacked_pt2, plan, tmp_path)
    # By hand: forward gathers layers.1 (w1: 136 elements), layers.1.w2 (132) and layers.2.w1 (136):
    # 3. layers.1.w2 is not a root, so it reshards after forward and its pre-backward gathers it
    # again (528 bytes); the roots keep theirs.
    forward, backward, _, backward_bytes = module_rows(tree)["Global"]
    assert forward == {"c10d._allgather_base_": 3}
    assert backward == {"c10d._allgather_base_": 1, "c10d._reduce_scatter_base_": 3}
    assert backward_bytes["c10d._allgather_base_"] == 528
    summary = compare_with_measure(run_commlens, predicted, STACKED, planlib.resolve_plan(plan), tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0


@pytest.mark.parametrize("options", ["dp=2, tp=4", "dp=2, tp=2, sp=False", "dp=2, tp=4, prefetch='explicit'"])
def test_vocab_parallel_embedding_as_its_own_unit(run_commlens, tmp_path, options):
    plan = f"examples.plans:llama_fsdp_tp({options}, embedding_unit=True)"
    pt2 = export_pt2(LLAMA, tmp_path)
    predicted, tree = predict_both(run_commlens, pt2, plan, tmp_path)
    # By hand: RowwiseParallel on the embedding shards its weight (256, 128) on the vocab dim and
    # leaves the lookup Partial (MaskPartial); no all-gather of the weight on tp. With sequence
    # parallel the output goes Partial -> Shard(1) (one reduce_scatter_tensor), without it
    # Partial -> Replicate (one all_reduce). FSDP gathers the unit once (its (256/tp)/2 x 128 shard).
    rows = module_rows(tree)
    forward, _, forward_bytes, _ = rows["FSDPTransformer.tok_embeddings"]
    tp = 2 if "tp=2" in options else 4
    output = "c10d_functional.all_reduce" if "sp=False" in options else "c10d_functional.reduce_scatter_tensor"
    assert forward == {"c10d._allgather_base_": 1, output: 1}
    assert forward_bytes["c10d._allgather_base_"] == 256 // tp // 2 * 128 * 4
    summary = compare_with_measure(run_commlens, predicted, LLAMA, planlib.resolve_plan(plan), tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0
