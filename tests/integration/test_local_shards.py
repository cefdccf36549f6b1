"""Local shards the run cannot use as the program does (runtime/LocalShards.h). A style with
use_local_output=True hands each rank its shard of a DTensor as a plain tensor; the exported program
records global shapes. Where the run then fails, commlens refuses by name instead of predicting
from the global shapes. Each case is checked against the run itself: CommDebugMode on the fake
process group (commlens.measure) raises where commlens refuses, and the same model at a tp that
fits is predicted exactly as CommDebugMode counts it."""
import pytest

from integration_helpers import compare_with_measure, export_pt2, save_plan

KV_HEADS = "examples.llama:llama(dim=64, n_heads=4, n_kv_heads=2, n_layers=1)"
# ffn_hidden(64, multiple_of=6) = 174 columns: 87 per rank on tp=2; torch.chunk on tp=4 gives
# 44 + 44 + 44 + 42.
UNEVEN_FFN = "examples.llama:llama(dim=64, n_heads=4, n_kv_heads=4, n_layers=1, multiple_of=6)"
# 6 positions under sequence parallel: 3 + 3 on tp=2, 2 + 2 + 2 + 0 on tp=4.
SHORT_SEQUENCE = "examples.llama:llama(seq=6, n_layers=1)"

REFUSED = [
    # k = wk(x) is [2, 16, 32] (2 k/v heads of 16), Shard(-1) on tp=4: 8 features a rank, so
    # `k.view(bsz, seq, -1, head_dim)` has 2 x 16 x 8 = 256 elements for a multiple of 2 x 16 x 16.
    pytest.param(KV_HEADS, "llama_tp(tp=4, sp=False)",
                 "shape '[2, 16, -1, 16]' is invalid for input of size 256",
                 "node 'view_1' aten::view.default in Transformer.layers.0.attention: 'linear_1_out' is a local "
                 "shard ([S(2)] of [2, 16, 32] on DeviceMesh((4,), 'cpu', mesh_dim_names=('tp',)), handed back by "
                 "a style's use_local_output); on the rank at mesh coordinate [0] it holds 256 elements, which "
                 "torch cannot view as [2, 16, -1, 16] (it raises \"shape '[2, 16, -1, 16]' is invalid for input "
                 "of size 256\")", id="kv-heads-fewer-than-tp"),
    # w2's input hook: from_local of rank 0's 44 columns as Shard(-1) infers 44 x 4 = 176.
    pytest.param(UNEVEN_FFN, "llama_tp(tp=4, sp=False)",
                 "a and b must have same reduction dim, but got [32, 176] X [174, 64].",
                 "node 'mul_8_in' commlens::annotate.default in Transformer.layers.0.feed_forward.w2: "
                 "DTensor.from_local of 'mul_8' as [S(2)] infers the global shape [2, 16, 176] on the rank at mesh "
                 "coordinate [0], not the program's [2, 16, 174]: 'mul_8' is a local shard ([2, 16, 44] there; "
                 "[S(2)] of [2, 16, 174] on DeviceMesh((4,), 'cpu', mesh_dim_names=('tp',)), handed back by a "
                 "style's use_local_output), so the run's shapes differ from the program's and its next DTensor "
                 "op raises or communicates other bytes", id="uneven-ffn"),
    # The attention norm's SequenceParallel wraps rank 0's 2 positions as Shard(1): 2 x 4 = 8.
    pytest.param(SHORT_SEQUENCE, "llama_tp(tp=4, sp=True)",
                 "The size of tensor a (8) must match the size of tensor b (6) at non-singleton dimension 1",
                 "node 'embedding_out_in' commlens::sequence_parallel_input.default in "
                 "Transformer.layers.0.attention_norm: DTensor.from_local of 'embedding_out' as [S(1)] infers the "
                 "global shape [2, 8, 128] on the rank at mesh coordinate [0], not the program's [2, 6, 128]: "
                 "'embedding_out' is a local shard ([2, 2, 128] there; [S(1)] of [2, 6, 128] on "
                 "DeviceMesh((4,), 'cpu', mesh_dim_names=('tp',)), handed back by a style's use_local_output), so "
                 "the run's shapes differ from the program's and its next DTensor op raises or communicates other "
                 "bytes", id="uneven-sequence"),
]


def plan_of(call):
    """The Plan of a plan factory call in examples/plans.py."""
    from commlens._factory import call_factory

    return call_factory(f"examples.plans:{call}")


@pytest.mark.parametrize("model,plan,torch_error,commlens_error", REFUSED)
def test_refused_where_the_run_fails(run_commlens, tmp_path, model, plan, torch_error, commlens_error):
    from commlens.measure import measure

    with pytest.raises(RuntimeError) as raised:
        measure(model, plan_of(plan), phase="forward")
    assert torch_error in str(raised.value)

    pt2, plan_path = export_pt2(model, tmp_path), save_plan(plan_of(plan), tmp_path)
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both")
    assert (r.returncode, r.stdout) == (2, ""), r.stdout
    assert r.stderr == f"commlens: error: {pt2}: {commlens_error}\n"


@pytest.mark.parametrize("model,plan", [
    (KV_HEADS, "llama_tp(tp=2, sp=False)"),
    (UNEVEN_FFN, "llama_tp(tp=2, sp=False)"),
    (SHORT_SEQUENCE, "llama_tp(tp=2, sp=True)"),
])
def test_the_same_models_where_the_shards_fit(run_commlens, tmp_path, model, plan):
    pt2, plan_path = export_pt2(model, tmp_path), save_plan(plan_of(plan), tmp_path)
    predicted = tmp_path / "predicted.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    summary = compare_with_measure(run_commlens, predicted, model, plan_of(plan), tmp_path)
    assert summary["differ"] == 0 and summary["cells"] > 0, summary
