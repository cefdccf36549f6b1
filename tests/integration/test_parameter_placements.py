"""Parameter placements per module in predict's JSON and table equal what CommDebugMode's own
JSON dump lists (its module tracker reads each module's DTensor parameters at pre-forward), for
TP, checkpoint-wrapped and FSDP x TP plans."""
import json

import pytest

from commlens import plan as planlib
from commlens.measure import measure
from integration_helpers import export_pt2, save_plan


def _params(node, out):
    out[node["fqn"]] = [tuple(p) for p in node["parameters"]]
    for child in node["children"]:
        _params(child, out)
    return out


@pytest.mark.parametrize("model, plan_spec", [
    ("examples.mlp:stacked_mlp", "examples.plans:stacked_mlp_tp(tp=2)"),
    ("examples.mlp:stacked_mlp", "examples.plans:with_ac(plan='stacked_mlp_tp', tp=2)"),
    ("examples.llama:llama", "examples.plans:with_ac(plan='llama_tp', tp=4, ac=('layers.1',))"),
    ("examples.gpt2:gpt2", "examples.plans:gpt2_fsdp_tp(dp=2, tp=2)"),
])
def test_parameter_placements_match_comm_debug_mode(run_commlens, tmp_path, model, plan_spec):
    pt2 = export_pt2(model, tmp_path)
    plan_path = save_plan(planlib.resolve_plan(plan_spec), tmp_path)
    predicted = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    dump = tmp_path / "cdm.json"
    measure(model, plan_spec, phase="forward", json_dump=str(dump), noise_level=1)
    expected = _params(json.loads(dump.read_text()), {})
    assert any(expected.values())  # the plan places some parameters
    assert _params(json.loads(predicted.read_text()), {}) == expected
    # the table at noise level 1 lists the same, under each module's name
    table = run_commlens("predict", pt2, "--plan", plan_path, "--noise-level", "1").stdout
    for fqn, params in expected.items():
        if params:
            block = table.split(f" {fqn}\n", 1)[1].split("FORWARD PASS", 1)[0]
            assert [line.strip() for line in block.splitlines()[1:] if line.strip()] == ["*Parameter List"] + [
                f"*{name}: {placements}" for name, placements in params]
