"""Local shards the run cannot use as the program does (runtime/LocalShards.h). A style with
use_local_output=True hands each rank its shard of a DTensor as a plain tensor; the exported program
records global shapes. Where the run then fails, commlens refuses by name instead of predicting
from the global shapes. Each case is checked against the run itself: CommDebugMode on the fake
process group (commlens.measure) raises where commlens refuses, and the same model at a tp that
fits is predicted exactly as CommDebugMode counts it.

The converse: a tensor every rank holds whole (computed by an unparallelized module) that a
style's input hook wraps as a Shard with DTensor.from_local, which takes it as this rank's shard
of a tensor tp times larger. The run then raises, or communicates tp times the program's bytes
(CommDebugMode's counts below); commlens refuses by name."""
import pathlib

import pytest
import torch

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


def assert_refused_where_torch_raises(run_commlens, directory, model, plan, torch_error, commlens_error):
    """CommDebugMode's run of `model` under `plan` (commlens.measure, fake process group) raises
    with `torch_error` in its message, and predict refuses the program with `commlens_error`."""
    from commlens.measure import measure

    with pytest.raises(RuntimeError) as raised:
        measure(model, plan, phase="forward")
    assert torch_error in str(raised.value)
    assert_predict_refuses(run_commlens, directory, model, plan, commlens_error)


def assert_predict_refuses(run_commlens, directory, model, plan, commlens_error):
    """predict refuses the program of `model` under `plan`: exit 2, nothing on stdout, the one line
    `commlens_error` names."""
    pt2, plan_path = export_pt2(model, directory), save_plan(plan, directory)
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both")
    assert (r.returncode, r.stdout) == (2, ""), r.stdout
    assert r.stderr == f"commlens: error: {pt2}: {commlens_error}\n"


def assert_predicted_as_measured(run_commlens, directory, model, plan):
    """predict's counts and bytes of `model` under `plan`, both phases, equal CommDebugMode's."""
    pt2, plan_path = export_pt2(model, directory), save_plan(plan, directory)
    predicted = pathlib.Path(directory) / "predicted.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    summary = compare_with_measure(run_commlens, predicted, model, plan, directory)
    assert summary["differ"] == 0 and summary["cells"] > 0, summary


@pytest.mark.parametrize("model,plan,torch_error,commlens_error", REFUSED)
def test_refused_where_the_run_fails(run_commlens, tmp_path, model, plan, torch_error, commlens_error):
    assert_refused_where_torch_raises(run_commlens, tmp_path, model, plan_of(plan), torch_error, commlens_error)


@pytest.mark.parametrize("model,plan", [
    (KV_HEADS, "llama_tp(tp=2, sp=False)"),
    (UNEVEN_FFN, "llama_tp(tp=2, sp=False)"),
    (SHORT_SEQUENCE, "llama_tp(tp=2, sp=True)"),
])
def test_the_same_models_where_the_shards_fit(run_commlens, tmp_path, model, plan):
    assert_predicted_as_measured(run_commlens, tmp_path, model, plan_of(plan))


# ---------------------------------------------------------------------------------------------
# A whole tensor wrapped as a Shard


class NormLinear(torch.nn.Module):
    """norm (LayerNorm 16) -> lin (Linear 16 -> 32) on x [2, 8, 16]."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.lin = torch.nn.Linear(16, 32)

    def forward(self, x):
        return self.lin(self.norm(x))


def norm_linear():
    return NormLinear(), (torch.randn(2, 8, 16),)


def tp4(styles):
    from commlens import plan as planlib

    return planlib.Plan(mesh_shape=(4,), mesh_dim_names=("tp",), parallelize_plan=styles)


AG = "c10d_functional.all_gather_into_tensor"
RS = "c10d_functional.reduce_scatter_tensor"
WHOLE = ("is the whole tensor on every rank (computed by plain ops from whole tensors or from a whole model input, "
         "not passed in as each rank's shard), so the run's shapes differ from the program's and its next DTensor "
         "op raises or communicates other bytes; give that input layout as Replicate(), or shard the tensor where it "
         "is made")


def test_whole_tensor_wrapped_as_a_shard_is_refused(run_commlens, tmp_path):
    """lin's ColwiseParallel(input_layouts=Shard(1)) wraps norm's output, which every rank computes
    whole from the whole input: torch runs, on a [2, 32, 16] global tensor. CommDebugMode: the
    all-gather sends each rank's [2, 8, 16] f32 (1024 bytes, where the program's [2, 8, 16] split
    four ways would send 256), and its backward reduce-scatters the gradient of the gathered
    [2, 32, 16] input (4096 bytes, not the program's 1024)."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel

    from commlens.measure import measure

    plan = tp4({"lin": ColwiseParallel(input_layouts=Shard(1))})
    doc = measure("test_local_shards:norm_linear", plan, phase="both", return_document=True)
    glob = next(m for m in doc["modules"] if m["fqn"] == "Global")
    assert (glob["forward_bytes"], glob["backward_bytes"]) == ({AG: 1024}, {RS: 4096})

    assert_predict_refuses(
        run_commlens, tmp_path, "test_local_shards:norm_linear", plan,
        "node 'layer_norm_in' commlens::annotate.default in NormLinear.lin: DTensor.from_local of 'layer_norm' as "
        f"[S(1)] takes it as this rank's shard and infers the global shape [2, 32, 16], not the program's [2, 8, 16]: "
        f"'layer_norm' {WHOLE}")


def test_whole_tensor_wrapped_as_a_shard_where_torch_raises(run_commlens, tmp_path):
    """RowwiseParallel on w2 alone: w1's relu output is whole on every rank, and w2's input hook
    wraps it as Shard(-1), a [8, 1, 128] global input for a [16, 32] weight: torch raises."""
    from torch.distributed.tensor.parallel import RowwiseParallel

    assert_refused_where_torch_raises(
        run_commlens, tmp_path, "examples.mlp:mlp(batch=8, seq=1, dim=16, hidden=32, bias=False)",
        tp4({"w2": RowwiseParallel()}), "Sharding propagation failed for aten.mm.default(Spec(f32[8, 128](S(1)))",
        "node 'relu_in' commlens::annotate.default in MLP.w2: DTensor.from_local of 'relu' as [S(2)] takes it as "
        f"this rank's shard and infers the global shape [8, 1, 128], not the program's [8, 1, 32]: 'relu' {WHOLE}")


def test_model_input_and_the_styles_own_shards_are_not_refused(run_commlens, tmp_path):
    """The counterparts torch runs as the program says: the model input itself under a Shard layout
    (each rank passes its shard: SequenceParallel on norm), and lin's Shard(1) input then coming
    from norm's DTensor output. Predicted exactly as CommDebugMode counts it, bytes included."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, SequenceParallel

    plan = tp4({"norm": SequenceParallel(), "lin": ColwiseParallel(input_layouts=Shard(1))})
    assert_predicted_as_measured(run_commlens, tmp_path, "test_local_shards:norm_linear", plan)


def test_local_shard_into_an_unparallelized_linear_is_refused(run_commlens, tmp_path):
    """ColwiseParallel on w1 alone: each rank gets its [8, 1, 8] shard of w1's output back as a
    plain tensor, and the unparallelized w2 multiplies it by its whole weight: torch raises."""
    from torch.distributed.tensor.parallel import ColwiseParallel

    assert_refused_where_torch_raises(
        run_commlens, tmp_path, "examples.mlp:mlp(batch=8, seq=1, dim=16, hidden=32)", tp4({"w1": ColwiseParallel()}),
        "mat1 and mat2 shapes cannot be multiplied (8x8 and 32x16)",
        "node 'linear_1_addmm' aten::addmm.default in MLP.w2: on the rank at mesh coordinate [0] this plain matrix "
        "product multiplies 'linear_1_view' [8, 8] (a local shard: [S(1)] of [8, 32] on DeviceMesh((4,), 'cpu', "
        "mesh_dim_names=('tp',)), handed back by a style's use_local_output) by 'linear_1_t' [32, 16] (whole on every "
        "rank), whose contracted sizes 8 and 32 differ, so torch raises (\"mat1 and mat2 shapes cannot be multiplied "
        "(8x8 and 32x16)\"); the module that runs it needs a parallel style too (a Rowwise one after a Colwise one)")


class Residual(torch.nn.Module):
    """x + lin2(relu(lin1(x))) on x [2, 8, 16], lin1 16 -> 32, lin2 32 -> 16."""

    def __init__(self):
        super().__init__()
        self.lin1 = torch.nn.Linear(16, 32)
        self.lin2 = torch.nn.Linear(32, 16)

    def forward(self, x):
        return x + self.lin2(torch.relu(self.lin1(x)))


def residual():
    return Residual(), (torch.randn(2, 8, 16),)


def test_local_shard_added_to_a_whole_tensor_is_refused(run_commlens, tmp_path):
    """lin2's RowwiseParallel(output_layouts=Shard(1)) hands back each rank's [2, 2, 16] sequence
    shard, and the residual add broadcasts it with the whole [2, 8, 16] input: torch raises. With
    lin2's default Replicate output the same model runs, and is predicted as CommDebugMode counts."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    model = "test_local_shards:residual"
    assert_refused_where_torch_raises(
        run_commlens, tmp_path, model,
        tp4({"lin1": ColwiseParallel(), "lin2": RowwiseParallel(output_layouts=Shard(1))}),
        "The size of tensor a (8) must match the size of tensor b (2) at non-singleton dimension 1",
        "node 'add' aten::add.Tensor in Residual: on the rank at mesh coordinate [0] this plain pointwise op "
        "broadcasts 'x' [2, 8, 16] (whole on every rank) with 'linear_1_out' [2, 2, 16] (a local shard: [S(1)] of "
        "[2, 8, 16] on DeviceMesh((4,), 'cpu', mesh_dim_names=('tp',)), handed back by a style's use_local_output), "
        "so torch raises (\"The size of tensor a (8) must match the size of tensor b (2) at non-singleton dimension "
        "1\")")
    assert_predicted_as_measured(run_commlens, tmp_path, model,
                                 tp4({"lin1": ColwiseParallel(), "lin2": RowwiseParallel()}))
