"""Module call signatures: keyword inputs through PrepareModuleInput(input_kwarg_layouts=...),
plan inputs named by keyword, and modules called more than once, predicted exactly against
CommDebugMode (fake process group)."""
import dataclasses
import json

import pytest
import torch

from commlens import plan as planlib
from commlens._factory import call_model_factory
from commlens.export import export_model
from commlens.measure import format_counts, measure

GATED = "examples.kwargs:gated"
SHARED = "examples.shared:shared_mlp"


def _export(spec, path, **export_kwargs):
    model, args, kwargs = call_model_factory(spec)
    ep = export_model(model, args, kwargs) if not export_kwargs else torch.export.export(
        model, args, kwargs, **export_kwargs)
    torch.export.save(ep, str(path))
    return path


@pytest.fixture(scope="module")
def gated_pt2(tmp_path_factory):
    return _export(GATED, tmp_path_factory.mktemp("sig") / "gated.pt2")


def _predict_and_compare(run_commlens, model_spec, pt2, plan_spec, tmp_path):
    plan_path = tmp_path / "plan.json"
    planlib.save(planlib.resolve_plan(plan_spec), str(plan_path))
    predicted = tmp_path / "predicted.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    doc = measure(model_spec, plan_spec, return_document=True)
    doc.pop("rank")
    measured = tmp_path / "measured.counts.json"
    measured.write_text(format_counts(doc))
    r = run_commlens("compare", predicted, measured, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)["summary"], {m["fqn"]: m for m in doc["modules"]}


@pytest.mark.parametrize("plan_spec", [
    "examples.plans:gated_tp(tp=4)",
    "examples.plans:gated_tp(tp=2, root_kwargs=True, context_requires_grad=True)",
])
def test_keyword_inputs_are_exact(run_commlens, gated_pt2, plan_spec, tmp_path):
    summary, measured = _predict_and_compare(run_commlens, GATED, gated_pt2, plan_spec, tmp_path)
    assert summary["differ"] == 0, summary
    # the gate is a keyword argument of every mixer call: its Shard(1) -> Replicate all-gather
    mixer = measured["GatedNet.layers.0.mixer"]["forward"]
    assert mixer["c10d_functional.all_gather_into_tensor"] == 1
    # context (a keyword user input) requiring grad adds the gradient's all-gather under ctx_proj
    grad = "context_requires_grad" in plan_spec
    assert measured["GatedNet.ctx_proj"]["backward"] == {"c10d_functional.all_gather_into_tensor": 2 if grad else 1}


def test_kwarg_layouts_need_the_call_signature(run_commlens, tmp_path):
    pt2 = _export(GATED, tmp_path / "plain.pt2", strict=False)  # torch.export without preserved signatures
    plan_path = tmp_path / "plan.json"
    planlib.save(planlib.resolve_plan("examples.plans:gated_tp(tp=4)"), str(plan_path))
    r = run_commlens("predict", pt2, "--plan", plan_path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {pt2}: PrepareModuleInput on GatedNet.layers.0.mixer: input_kwarg_layouts "
                        "need the module's call signature, which the program does not record (export with python -m "
                        "commlens.export, which preserves every submodule's)\n")


def test_plan_input_keyword_must_exist(run_commlens, gated_pt2, tmp_path):
    plan = dataclasses.replace(planlib.resolve_plan("examples.plans:gated_tp(tp=4)"), inputs_requires_grad=("ctx",))
    plan_path = tmp_path / "plan.json"
    planlib.save(plan, str(plan_path))
    r = run_commlens("check-plan", gated_pt2, "--plan", plan_path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"commlens: error: {plan_path}: plan input 'ctx' is not an input of GatedNet (2 user inputs)\n"


def test_commdebugmode_alone_still_fails_on_a_module_called_twice():
    # The reason measure fixes the tracker (measure.py:_fix_repeated_call_tracking): if a torch
    # release fixes it, this fails and the fix can go.
    from torch.distributed.tensor.debug import CommDebugMode
    linear = torch.nn.Linear(4, 4)
    with pytest.raises(IndexError), CommDebugMode():
        linear(linear(torch.randn(2, 4)))


@pytest.mark.parametrize("plan_spec", [
    "examples.plans:shared_mlp_tp(tp=4)",
    "examples.plans:shared_mlp_tp(tp=4, prepare=True, input_requires_grad=True)",
])
def test_module_called_twice_is_exact_per_call(run_commlens, tmp_path, plan_spec):
    pt2 = _export(SHARED, tmp_path / "shared.pt2")
    summary, measured = _predict_and_compare(run_commlens, SHARED, pt2, plan_spec, tmp_path)
    assert summary["differ"] == 0, summary
    # Each call of block runs w1's (Colwise) and w2's (Rowwise) hooks: w2's Partial output is
    # all-reduced in forward and w1's input gradient in backward, once per call; head (Colwise,
    # Replicate output) all-gathers once in forward and all-reduces its input grad once.
    ar, ag = "c10d_functional.all_reduce", "c10d_functional.all_gather_into_tensor"
    assert measured["SharedMLPNet.block"]["forward"] == {ar: 2}
    assert measured["SharedMLPNet.block"]["backward"] == {ar: 2}
    assert measured["SharedMLPNet.head"]["forward"] == {ag: 1}
    assert measured["SharedMLPNet.head"]["backward"] == {ar: 1}


def test_module_called_twice_is_predicted_with_a_warning(run_commlens, tmp_path):
    pt2 = _export(SHARED, tmp_path / "shared.pt2")
    plan_path = tmp_path / "plan.json"
    planlib.save(planlib.resolve_plan("examples.plans:shared_mlp_tp(tp=4)"), str(plan_path))
    out = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--format", "json", "-o", out)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["commlens"]["warnings"] == [
        "SharedMLPNet.block is called 2 times per forward: its calls' counts are added up under its name, "
        "as CommDebugMode does"]


def test_kwarg_layout_on_a_non_tensor_is_refused_like_torch(run_commlens, gated_pt2, tmp_path):
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import PrepareModuleInput

    plan = planlib.resolve_plan("examples.plans:gated_tp(tp=4)")
    styles = dict(plan.parallelize_plan)
    styles["layers.*.mixer"] = PrepareModuleInput(input_kwarg_layouts={"scale": Replicate()},
                                                  desired_input_kwarg_layouts={"scale": Replicate()})
    bad = dataclasses.replace(plan, parallelize_plan=styles)
    # torch: PrepareModuleInput._prepare_input_arg asserts the argument is a tensor
    with pytest.raises(AssertionError, match="expecting input to be a torch.Tensor"):
        measure(GATED, bad)
    plan_path = tmp_path / "plan.json"
    planlib.save(bad, str(plan_path))
    r = run_commlens("predict", gated_pt2, "--plan", plan_path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {gated_pt2}: PrepareModuleInput on GatedNet.layers.0.mixer: keyword argument "
                        "'scale' is not a tensor but has an input layout\n")
