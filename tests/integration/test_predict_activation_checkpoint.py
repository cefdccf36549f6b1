"""Activation checkpointing end to end: `commlens predict` against CommDebugMode (commlens.measure,
fake process group, same run) for checkpoint_wrapper per block and per sub-block, and the
refusals, which name the same modules in Python (measure/plan check) and in C++ (predict)."""
import dataclasses
import json

import pytest
import torch

from commlens import plan as planlib
from commlens._factory import call_model_factory
from commlens.export import export_model
from commlens.measure import measure
from commlens.plan import ActivationCheckpoint, PlanError

LLAMA = "examples.llama:llama"


@pytest.fixture(scope="module")
def llama_pt2(tmp_path_factory):
    d = tmp_path_factory.mktemp("ac")
    model, args, kwargs = call_model_factory(LLAMA)
    pt2 = d / "llama.pt2"
    torch.export.save(export_model(model, args, kwargs), str(pt2))
    return pt2


def _save(plan, tmp_path):
    path = tmp_path / "plan.json"
    planlib.save(plan, str(path))
    return path


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
    measured, _table = _compare(run_commlens, llama_pt2, _save(plan, tmp_path), tmp_path)
    # The recomputation is there: more backward collectives than without checkpointing, forward unchanged.
    plain = measure(LLAMA, llama_tp(tp=4), phase="both")
    ag = "c10d_functional.all_gather_into_tensor"
    assert measured["Global"]["forward"] == plain["Global"]["forward"]
    assert measured["Global"]["backward"][ag] > plain["Global"]["backward"][ag]


def test_wrapped_names_follow_checkpoint_wrapper(run_commlens, llama_pt2, tmp_path):
    from examples.plans import llama_tp

    plan = dataclasses.replace(llama_tp(tp=4), activation_checkpoint=(ActivationCheckpoint("layers.0"),))
    measured, table = _compare(run_commlens, llama_pt2, _save(plan, tmp_path), tmp_path)
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
    path = _save(plan, tmp_path)
    with pytest.raises(PlanError) as info:
        measure(LLAMA, str(path))
    assert str(info.value) == f"{path}: {message}"
    for command in ("check-plan", "predict"):
        r = run_commlens(command, llama_pt2, "--plan", path)
        assert (r.returncode, r.stdout, r.stderr) == (2, "", f"commlens: error: {path}: {message}\n")
