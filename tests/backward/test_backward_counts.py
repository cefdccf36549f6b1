"""`commlens predict --phase both` against `commlens.measure` (CommDebugMode, fake process group)
on backward situations the accuracy corpus does not cover: frozen parameters, a DTensor leaf
input (its Partial gradient is never reduced), and cross_entropy on DTensor logits without
loss_parallel (the loss's ops run on DTensors at Global; nll_loss_backward and
_log_softmax_backward_data need their strategies). Every cell (module x collective x phase) must
agree."""
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _py(*args):
    r = subprocess.run([sys.executable, "-m", *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return r


def _mlp_dtensor_leaf(plan):
    # x becomes distribute_tensor(x, mesh, [Replicate()]) with requires_grad: w1's Colwise input hook
    # uses it as is (no from_local), so the Partial input gradient stays Partial (0 collectives).
    plan["inputs"] = {"0": {"requires_grad": True, "placements": {"mesh_dims": None, "placements": ["Replicate()"]}}}
    return plan


def _no_loss_parallel(plan):
    # lm_head keeps Shard(-1) DTensor logits (use_local_output=False): cross_entropy then
    # all-gathers the class dim in forward; backward's gradient is sharded back by the output
    # redistribute's backward (a local chunk) and lm_head's input from_local all-reduces.
    plan["loss_parallel"] = False
    return plan


CASES = [
    ("mlp-frozen-w1", "examples.mlp:mlp", "examples.plans:mlp_tp(tp=4, frozen=('w1.*',))", None),
    ("mlp-grad-frozen-w2-weight", "examples.mlp:mlp",
     "examples.plans:mlp_tp(tp=4, input_requires_grad=True, frozen=('w2.weight',))", None),
    ("mlp-dtensor-leaf-input", "examples.mlp:mlp", "examples.plans:mlp_tp(tp=4)", _mlp_dtensor_leaf),
    ("gpt2-cross-entropy-on-dtensor-logits", "examples.gpt2:gpt2", "examples.plans:gpt2_tp_loss_parallel(tp=4)",
     _no_loss_parallel),
]


@pytest.mark.parametrize("name,model,plan,edit", CASES, ids=[c[0] for c in CASES])
def test_predicted_counts_match_commdebugmode(name, model, plan, edit, run_commlens, tmp_path):
    pt2, plan_json, dump, pred = (tmp_path / "m.pt2", tmp_path / "p.json", tmp_path / "dump.json",
                                  tmp_path / "pred.json")
    _py("commlens.export", model, "-o", pt2)
    _py("commlens.plan", plan, "-o", plan_json)
    if edit:
        plan_json.write_text(json.dumps(edit(json.loads(plan_json.read_text())), indent=1))
    _py("commlens.measure", model, "--plan", plan_json, "--phase", "both", "-o", dump, "--counts",
        tmp_path / "counts.json")
    r = run_commlens("predict", pt2, "--plan", plan_json, "--phase", "both", "--format", "json", "-o", pred)
    assert r.returncode == 0, r.stderr
    r = run_commlens("compare", pred, tmp_path / "counts.json", "--json")
    summary = json.loads(r.stdout)["summary"]
    assert summary["differ"] == 0, r.stdout
    assert summary["measured_collectives"] == summary["predicted_collectives"]
