"""Activation checkpointing end to end: `commlens predict` against CommDebugMode (commlens.measure,
fake process group, same run) for checkpoint_wrapper per block and per sub-block, and the
refusals, which name the same modules in Python (measure/plan check) and in C++ (predict)."""
import dataclasses

import pytest
import torch

from commlens import plan as planlib
from commlens.measure import measure
from commlens.plan import ActivationCheckpoint, PlanError
from integration_helpers import export_pt2, save_plan

LLAMA = "examples.llama:llama"


@pytest.fixture(scope="module")
def llama_pt2(tmp_path_factory):
    return export_pt2(LLAMA, tmp_path_factory.mktemp("ac"))


def _compare(run_commlens, pt2, path, tmp_path):
    """predict vs measure (same plan file), through `commlens compare`: the measured counts."""
    from commlens.measure import format_counts

    predicted = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", path, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    doc = measure(LLAMA, str(path), phase="both", return_document=True)
    measured = tmp_path / "measured.counts.json"
    measured.write_text(format_counts(doc))
    r = run_commlens("compare", predicted, measured)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ", 0 differ;" in r.stdout.splitlines()[-1]
    return {m["fqn"]: m for m in doc["modules"]}, r.stdout


@pytest.mark.parametrize("ac", [("layers.*",), ("layers.*.attention", "layers.*.feed_forward"), ("layers.1",)])
def test_checkpoint_wrapper_counts_match_comm_debug_mode(run_commlens, llama_pt2, tmp_path, ac):
    from examples.plans import llama_tp

    plan = dataclasses.replace(llama_tp(tp=4), activation_checkpoint=tuple(ActivationCheckpoint(p) for p in ac))
    measured, _table = _compare(run_commlens, llama_pt2, save_plan(plan, tmp_path), tmp_path)
    # The recomputation is there: more backward collectives than without checkpointing, forward unchanged.
    plain = measure(LLAMA, llama_tp(tp=4), phase="both")
    ag = "c10d_functional.all_gather_into_tensor"
    assert measured["Global"]["forward"] == plain["Global"]["forward"]
    assert measured["Global"]["backward"][ag] > plain["Global"]["backward"][ag]


@pytest.mark.parametrize("plan_spec, blocks", [
    ("examples.plans:with_ac(plan='llama_tp', tp=4, early_stop=False)", "Transformer.layers"),
    ("examples.plans:with_ac(plan='llama_fsdp_tp', dp=2, tp=4, early_stop=False)", "FSDPTransformer.layers"),
])
def test_without_early_stop_the_whole_block_is_recomputed(run_commlens, llama_pt2, tmp_path, plan_spec, blocks):
    """torchtitan's full AC passes early_stop=False to checkpoint_wrapper: recomputation runs each
    block's whole forward, so the ops after the last tensor the block saved run again too."""
    plan = planlib.resolve_plan(plan_spec)
    measured, _table = _compare(run_commlens, llama_pt2, save_plan(plan, tmp_path), tmp_path)
    early = measure(LLAMA, dataclasses.replace(plan, activation_checkpoint=tuple(
        dataclasses.replace(u, early_stop=True) for u in plan.activation_checkpoint)), phase="both")
    # By hand: the last op of a block is feed_forward.w2's RowwiseParallel output hook, Partial ->
    # Shard(1) (sequence parallel): one reduce_scatter_tensor more per block (2 blocks) in backward,
    # charged to feed_forward.w2; with early stop recomputation ends at w2's matmul, which saved.
    rs = "c10d_functional.reduce_scatter_tensor"
    assert measured["Global"]["backward"][rs] == early["Global"]["backward"][rs] + 2
    for i in range(2):
        w2 = f"{blocks}.{i}._checkpoint_wrapped_module.feed_forward.w2"
        assert measured[w2]["backward"].get(rs, 0) == early[w2]["backward"].get(rs, 0) + 1


def test_wrapped_names_follow_checkpoint_wrapper(run_commlens, llama_pt2, tmp_path):
    from examples.plans import llama_tp

    plan = dataclasses.replace(llama_tp(tp=4), activation_checkpoint=(ActivationCheckpoint("layers.0"),))
    measured, table = _compare(run_commlens, llama_pt2, save_plan(plan, tmp_path), tmp_path)
    for names in (measured, table):
        assert "Transformer.layers.0._checkpoint_wrapped_module.attention.wo" in names
        assert "Transformer.layers.0.attention.wo" not in names
        assert "Transformer.layers.1.attention.wo" in names  # not checkpointed: its name is unchanged


@pytest.mark.parametrize("ac, message", [
    (("layers.*", "layers.0.attention"),
     "activation_checkpoint pattern 'layers.0.attention': module 'layers.0.attention' overlaps checkpointed "
     "module 'layers.0' (nested checkpointing is not supported)"),
    (("",), "activation_checkpoint pattern '' matches the root module Transformer (checkpoint its children)"),
    (("blocks.*",), "activation_checkpoint pattern 'blocks.*' matches no module of Transformer"),
])
def test_refused_checkpointing_names_the_modules(run_commlens, llama_pt2, tmp_path, ac, message):
    from examples.plans import llama_tp

    plan = dataclasses.replace(llama_tp(tp=4), activation_checkpoint=tuple(ActivationCheckpoint(p) for p in ac))
    path = save_plan(plan, tmp_path)
    with pytest.raises(PlanError) as info:
        measure(LLAMA, str(path))
    assert str(info.value) == f"{path}: {message}"
    for command in ("check-plan", "predict"):
        r = run_commlens(command, llama_pt2, "--plan", path)
        assert (r.returncode, r.stdout, r.stderr) == (2, "", f"commlens: error: {path}: {message}\n")


class MmBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        return torch.mm(x, self.w).relu()


class MmNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blk = MmBlock()

    def forward(self, x):
        return self.blk(x)


def mm_net():
    torch.manual_seed(0)
    return MmNet(), (torch.randn(8, 8),)


@pytest.mark.parametrize("save_ops, backward_all_gathers", [
    # mm(x Shard(0), w Shard(0)): DTensor all-gathers w inside mm's dispatch; mm saves x and w,
    # relu its result, so recomputation (mm, then relu: the last save) repeats that all-gather,
    # and mm's backward needs one more (grad_x = grad @ w^T with w Shard(0)).
    ((), 2),
    # A kept mm is not run again, nor its redistribution.
    (("aten.mm.default",), 1),
    # The all-gather DTensor issues inside mm's dispatch is below the policy: listing it keeps nothing.
    (("_c10d_functional.all_gather_into_tensor.default",), 2),
])
def test_selective_policy_sees_dtensor_ops_not_their_redistributions(run_commlens, tmp_path, save_ops,
                                                                     backward_all_gathers):
    from commlens.measure import format_counts
    from torch.distributed.tensor import Shard

    pt2 = export_pt2(f"{__name__}:mm_net", tmp_path)
    plan = planlib.Plan(mesh_shape=(4,), mesh_dim_names=("tp",), placements={"blk.w": (Shard(0),)},
                        input_placements={0: (Shard(0),)}, inputs_requires_grad=(0,),
                        activation_checkpoint=(ActivationCheckpoint("blk", save_ops=save_ops),))
    path = save_plan(plan, tmp_path)
    predicted = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", path, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    doc = measure(f"{__name__}:mm_net", str(path), phase="both", return_document=True)
    ag = "c10d_functional.all_gather_into_tensor"
    by_fqn = {m["fqn"]: m for m in doc["modules"]}
    assert by_fqn["MmNet.blk._checkpoint_wrapped_module"]["backward"] == {ag: backward_all_gathers}
    measured = tmp_path / "measured.counts.json"
    measured.write_text(format_counts(doc))
    r = run_commlens("compare", predicted, measured)
    assert r.returncode == 0, r.stdout + r.stderr
