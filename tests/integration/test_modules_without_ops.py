"""Modules that run no op (nn.Identity placeholders) are in the predicted tree where CommDebugMode
lists them, found from the program's recorded call signatures; a style on one is refused, since
its hooks would have nowhere to go."""
import dataclasses
import json

from commlens import plan as planlib
from commlens.measure import measure
from integration_helpers import export_pt2, save_plan

MODEL = "examples.mlp:identity_mlp"


def _tree_order(node, out):
    out.append(node["fqn"])
    for child in node["children"]:
        _tree_order(child, out)
    return out


def test_identity_modules_are_listed_in_call_order(run_commlens, tmp_path):
    pt2 = export_pt2(MODEL, tmp_path)
    plan_spec = "examples.plans:mlp_tp(tp=4, input_requires_grad=True)"
    plan_path = save_plan(planlib.resolve_plan(plan_spec), tmp_path)
    predicted = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    measured = [m["fqn"] for m in measure(MODEL, plan_spec, phase="both", return_document=True)["modules"]]
    # CommDebugMode lists every module whose forward ran, in the order its pre-hook fired
    assert measured == ["Global", "IdentityMLP", "IdentityMLP.pre", "IdentityMLP.w1", "IdentityMLP.act",
                        "IdentityMLP.w2", "IdentityMLP.post"]
    assert _tree_order(json.loads(predicted.read_text()), []) == measured
    inspect = run_commlens("inspect", pt2).stdout
    assert "    IdentityMLP.act                                          0     0      1  \n" in inspect


def test_a_style_on_a_module_without_ops(run_commlens, tmp_path):
    """post (nn.Identity) runs no op and its argument, w2's output, reaches no op: its hooks go after
    the last node and the program returns what they give. pre's argument, the input, is read by w1
    too: the graph does not tell which use reads pre's return value, so that is refused."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, PrepareModuleOutput

    from integration_helpers import compare_with_measure

    pt2 = export_pt2(MODEL, tmp_path)
    base = planlib.resolve_plan("examples.plans:mlp_tp(tp=2)")
    plan = dataclasses.replace(base, parallelize_plan=dict(
        base.parallelize_plan, post=PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(-1),
                                                       use_local_output=False)))
    predicted = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", save_plan(plan, tmp_path), "--phase", "both", "--format", "json", "-o",
                     predicted)
    assert r.returncode == 0, r.stderr
    summary = compare_with_measure(run_commlens, predicted, MODEL, plan, tmp_path)
    assert summary["differ"] == 0 and summary["predicted_collectives"] == summary["measured_collectives"], summary

    plan = dataclasses.replace(base, parallelize_plan=dict(
        base.parallelize_plan, pre=PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),))))
    r = run_commlens("predict", pt2, "--plan", save_plan(plan, tmp_path))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {pt2}: PrepareModuleInput 'pre' on IdentityMLP.pre: the module runs no op, "
                        "and its argument 'x' is read by ops too: commlens cannot tell which of them read the "
                        "module's return value\n")
