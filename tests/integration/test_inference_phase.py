"""`--phase inference`: the forward of `model.eval()` under `torch.no_grad()` (the first generate()
step), predicted from a program exported in eval mode and checked against CommDebugMode measuring
the same (commlens.measure phase "inference": model.eval(), the forward under torch.no_grad(), no
loss, no backward). torch's styles, FSDP2 and activation checkpointing issue in a no-grad forward
what they issue in a training forward: FSDP2 registers no backward hooks
(`_register_pre_backward_hook` returns early without grad) and still all-gathers in pre-forward."""
import json
import pathlib
import subprocess
import sys

import pytest

from integration_helpers import assert_prediction_equals_counts, save_plan

ROOT = pathlib.Path(__file__).resolve().parents[2]

CONFIGS = [
    pytest.param("examples.gpt2:gpt2()", "gpt2_tp_sp(tp=4)", id="gpt2-tp-sp"),
    pytest.param("examples.gpt2:gpt2()", "gpt2_tp_loss_parallel(tp=4)", id="gpt2-loss-parallel-plan"),
    pytest.param("examples.llama:llama()", "llama_fsdp_tp(dp=2, tp=2)", id="llama-fsdp-tp"),
    pytest.param("examples.llama:llama()", "with_ac(plan='llama_fsdp_tp', dp=2, tp=2)", id="llama-fsdp-tp-ac"),
    pytest.param("examples.gpt2:gpt2()", "gpt2_hsdp(replicate=2, shard=2, mixed_precision='bf16')",
                 id="gpt2-hsdp-bf16"),
]


def plan_of(call):
    from commlens._factory import call_factory

    return call_factory(f"examples.plans:{call}")


def export_eval(model_spec, directory, *, eval_mode=True):
    """The program of `model_spec` as `python -m commlens.export [--eval]` writes it."""
    pt2 = pathlib.Path(directory) / ("eval.pt2" if eval_mode else "train.pt2")
    cmd = [sys.executable, "-m", "commlens.export", model_spec, "-o", str(pt2)] + (["--eval"] if eval_mode else [])
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return pt2


def measured_inference(model_spec, plan, directory):
    from commlens.measure import format_counts, measure

    path = pathlib.Path(directory) / "measured.counts.json"
    doc = measure(model_spec, plan, phase="inference", return_document=True)
    path.write_text(format_counts(doc))
    return path, doc


@pytest.mark.parametrize("model_spec, plan_call", CONFIGS)
def test_inference_predicted_as_commdebugmode_measures(run_commlens, tmp_path, model_spec, plan_call):
    plan = plan_of(plan_call)
    pt2, plan_path = export_eval(model_spec, tmp_path), save_plan(plan, tmp_path)
    predicted = tmp_path / "predicted.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "inference", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    assert json.loads(predicted.read_text())["phase"] == "inference"
    measured, doc = measured_inference(model_spec, plan, tmp_path)
    assert doc["phase"] == "inference" and all(not m["backward"] for m in doc["modules"])
    r = run_commlens("compare", predicted, measured, "--phase", "inference", "--json")
    assert r.returncode == 0, r.stdout
    summary = json.loads(r.stdout)["summary"]
    assert summary["differ"] == 0
    assert summary["predicted_collectives"] == summary["measured_collectives"] == sum(doc["modules"][0]["forward"].values()) > 0
    assert summary["bytes_compared"] == summary["cells"]


def test_rowwise_all_reduce_derived_by_hand(run_commlens, tmp_path):
    """mlp (x [2, 8, 16] -> w1 16x32 -> relu -> w2 32x16) under ColwiseParallel(w1) +
    RowwiseParallel(w2) on 4 ranks: w2's local product is Partial and its output hook
    all-reduces [2, 8, 16] float32 = 1024 bytes, once, with or without grad."""
    plan = plan_of("mlp_tp(tp=4)")
    pt2, plan_path = export_eval("examples.mlp:mlp()", tmp_path), save_plan(plan, tmp_path)
    predicted = tmp_path / "predicted.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "inference", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    root = json.loads(predicted.read_text())
    assert root["collectives_forward"] == [["c10d_functional.all_reduce", 1]]
    assert root["collectives_backward"] == []
    w2 = root["children"][0]["children"][1]
    assert w2["fqn"] == "MLP.w2"
    assert [(c["op"], c["bytes_per_rank"]) for c in w2["collectives_forward_detail"]] == [
        ("c10d_functional.all_reduce", 1024)]
    _, doc = measured_inference("examples.mlp:mlp()", plan, tmp_path)
    by_fqn = {m["fqn"]: m for m in doc["modules"]}
    assert by_fqn["MLP.w2"]["forward"] == {"c10d_functional.all_reduce": 1}
    assert by_fqn["MLP.w2"]["forward_bytes"] == {"c10d_functional.all_reduce": 1024}


def test_training_mode_program_refused(run_commlens, tmp_path):
    """gpt2's dropout exported in training mode (aten.dropout with train=True) is not what
    model.eval() runs: refused by node and module, with the way out."""
    pt2 = export_eval("examples.gpt2:gpt2()", tmp_path, eval_mode=False)
    plan_path = save_plan(plan_of("gpt2_tp_sp(tp=4)"), tmp_path)
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "inference")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (
        f"commlens: error: {pt2}: node 'dropout' aten::dropout.default in GPT2.dropout runs in training mode "
        "(train=True); --phase inference predicts what model.eval() runs under torch.no_grad(): export the model "
        "in eval mode (python -m commlens.export --eval)\n")


def test_compare_refuses_mixing_inference_and_training(run_commlens, tmp_path):
    plan = plan_of("mlp_tp(tp=4)")
    pt2, plan_path = export_eval("examples.mlp:mlp()", tmp_path), save_plan(plan, tmp_path)
    inference, forward = tmp_path / "inference.json", tmp_path / "forward.json"
    for path, phase in ((inference, "inference"), (forward, "forward")):
        r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", phase, "--format", "json", "-o", path)
        assert r.returncode == 0, r.stderr
    measured, _ = measured_inference("examples.mlp:mlp()", plan, tmp_path)
    r = run_commlens("compare", forward, measured, "--phase", "inference")
    assert (r.returncode, r.stderr) == (
        2, f"commlens: error: {forward}: holds forward counts (\"phase\": \"forward\"); compare with --phase "
           "forward, backward or both\n")
    r = run_commlens("compare", inference, measured, "--phase", "forward")
    assert (r.returncode, r.stderr) == (
        2, f"commlens: error: {inference}: holds inference counts (\"phase\": \"inference\"); compare with "
           "--phase inference\n")
    r = run_commlens("compare", inference, measured, "--phase", "inference")
    assert r.returncode == 0, r.stdout


def test_api_and_rank_take_the_inference_phase(run_commlens, tmp_path):
    import commlens

    pt2 = export_eval("examples.mlp:mlp()", tmp_path)
    prediction = commlens.predict(str(pt2), "examples.plans:mlp_tp(tp=4)", phase="inference")
    assert (prediction.total("inference"), prediction.total("backward")) == (1, 0)
    plans = []
    for name, call in (("tp4", "mlp_tp(tp=4)"), ("tp2", "mlp_tp(tp=2)")):
        (tmp_path / name).mkdir()
        plans.append(save_plan(plan_of(call), tmp_path / name))
    r = run_commlens("rank", pt2, "--plan", plans[0], "--plan", plans[1], "--phase", "inference", "--format", "json")
    assert r.returncode == 0, r.stderr
    ranked = json.loads(r.stdout)
    assert ranked["phase"] == "inference"
    # at tp=4 and tp=2 alike: w2's one output all_reduce (the hand derivation above), no backward
    assert [p["forward"]["collectives"] for p in ranked["plans"]] == [1, 1]
    assert all(p["backward"]["collectives"] == 0 for p in ranked["plans"])


@pytest.mark.parametrize("phase", ["both", "inference"])
def test_transformers_row_wise_layer_applied_by_measure(run_commlens, tmp_path, phase):
    """commlens.measure applies a plan's transformers layer as transformers does (shard_param,
    install_forward) beside torch's styles: ColwiseParallel on w1, transformers' RowwiseParallel on
    w2 (tests/lit/Inputs/transformers_rowwise.json). w2's [8, 16] float32 output is summed once,
    8 * 16 * 4 = 512 bytes: by DTensor's redistribute with grad, by dist.all_reduce in place
    (c10d.allreduce_) without; compare then checks every other cell, backward included."""
    from commlens.measure import measure

    model = "examples.mlp:mlp(batch=8, seq=1, dim=16, hidden=32, bias=False)"
    plan = ROOT / "tests" / "lit" / "Inputs" / "transformers_rowwise.json"
    doc = measure(model, str(plan), phase=phase, return_document=True)
    w2 = next(m for m in doc["modules"] if m["fqn"] == "MLP.w2")
    key = "c10d.allreduce_" if phase == "inference" else "c10d_functional.all_reduce"
    assert (w2["forward"], w2["forward_bytes"]) == ({key: 1}, {key: 512})
    pt2 = export_eval(model, tmp_path, eval_mode=phase == "inference")
    assert_prediction_equals_counts(run_commlens, pt2, plan, doc, phase, tmp_path)
