"""Bytes of DTensor collectives in a run under FSDP2's MixedPrecisionPolicy: a program exported under
the plan (`python -m commlens.export --plan`) records the run-time dtypes, so predict knows every
collective's bytes and compare checks them against CommDebugMode; a program exported in float32
gets a warning naming the unit and parameter, and those collectives' bytes stay unknown."""
import dataclasses
import json
import subprocess
import sys

import pytest

from commlens import plan as planlib
from examples.plans import _fsdp_units, stacked_mlp_tp
from integration_helpers import compare_with_measure, save_plan

STACKED = "examples.mlp:stacked_mlp"  # 3 layers, input (2, 8, 16) float32, hidden 32
GPT2_BF16 = "examples.plans:gpt2_fsdp_tp(dp=2, tp=4, sp=True, mixed_precision='bf16')"
LLAMA_BF16_LOSS_PARALLEL = "examples.plans:llama_fsdp_tp(dp=2, tp=4, mixed_precision='bf16', loss_parallel=True)"


def stacked_2d_bf16():
    """stacked_mlp_tp on the tp dim of a (dp=2, tp=2) mesh, FSDP units layers.* and the root on dp,
    bf16 parameters (fp32 gradient reduction), the float32 input requiring grad."""
    tp = stacked_mlp_tp(tp=2, input_requires_grad=True)
    return dataclasses.replace(tp, name="stacked_2d_bf16", mesh_shape=(2, 2), mesh_dim_names=("dp", "tp"),
                               tp_mesh_dim="tp", fully_shard=_fsdp_units(("dp",), None, "bf16"))


def export_cli(model, out, *extra):
    r = subprocess.run([sys.executable, "-m", "commlens.export", model, "-o", str(out), *extra],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def predict_json(run_commlens, pt2, plan_path, out):
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "-o", out)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("model, plan", [(STACKED, "stacked_2d_bf16"), ("examples.gpt2:gpt2", GPT2_BF16),
                                         ("examples.llama:llama", LLAMA_BF16_LOSS_PARALLEL)])
def test_program_exported_under_the_plan_has_exact_bytes(run_commlens, tmp_path, model, plan):
    plan_obj = stacked_2d_bf16() if plan == "stacked_2d_bf16" else planlib.resolve_plan(plan)
    plan_path = save_plan(plan_obj, tmp_path)
    pt2 = export_cli(model, tmp_path / "m.pt2", "--plan", str(plan_path))
    predicted = tmp_path / "pred.json"
    root = predict_json(run_commlens, pt2, plan_path, predicted)
    assert root["commlens"]["warnings"] == []
    if plan == "stacked_2d_bf16":
        # By hand: each layer's Rowwise w2 output (2, 8, 16) is Partial -> one all_reduce per layer
        # in forward, and each Colwise w1 input gradient one in backward, in bf16 (2 bytes), since
        # the root unit casts the float32 input before the first layer: 3 x 2*8*16*2 = 1536 bytes
        # each way (3072 if the program's float32 were taken).
        assert root["collective_bytes_forward"]["c10d_functional.all_reduce"] == 1536
        assert root["collective_bytes_backward"]["c10d_functional.all_reduce"] == 1536
    if plan == LLAMA_BF16_LOSS_PARALLEL:
        # By hand: the only forward all_reduces are loss_parallel's, on the bf16 logits' 2 x 16 = 32
        # rows. _log_softmax reduces the row max and the sum of exponentials in its computation
        # dtype (float32 for bf16: 2 x 32 x 4 bytes), nll_loss the gathered target logits in bf16
        # (32 x 2): 320 bytes (192 if all three were taken in bf16).
        assert root["collective_bytes_forward"]["c10d_functional.all_reduce"] == 320
    summary = compare_with_measure(run_commlens, predicted, model, plan_obj, tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0


def test_float32_program_under_bf16_plan_warns_and_leaves_bytes_unknown(run_commlens, tmp_path):
    plan_path = save_plan(stacked_2d_bf16(), tmp_path)
    pt2 = export_cli(STACKED, tmp_path / "m.pt2")
    root = predict_json(run_commlens, pt2, plan_path, tmp_path / "pred.json")
    why = ("FSDP unit 'layers.*' (FSDPStackedMLP.layers.0) computes in torch.bfloat16 under its "
           "MixedPrecisionPolicy, but the program holds parameter 'layers.0.w1.weight' in torch.float32 (export "
           "with the plan, `python -m commlens.export ... --plan PLAN`, to record the run-time dtypes)")
    assert root["commlens"]["warnings"] == [
        f"bytes of the 3 forward DTensor collectives are unknown: {why}",
        f"bytes of the 3 backward DTensor collectives are unknown: {why}",
    ]
    assert "c10d_functional.all_reduce" not in root["collective_bytes_forward"]
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "forward")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == f"warning: bytes of the 3 forward DTensor collectives are unknown: {why}"
