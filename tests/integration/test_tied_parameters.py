"""Tied parameters (one nn.Parameter under two names): FSDP2 manages such a parameter once, so ties
change what its units all-gather. The archive shows ties by a shared weight record, except for
meta-device weights: torch.export.save groups tensors by storage pointer, 0 for every meta tensor,
so all of them share one record. commlens.export writes the ties it reads from the program's
state_dict (extra/commlens_tied_parameters.json), and the in-memory API passes them along.

The truth is CommDebugMode on the same model with real weights (commlens.measure, fake process
group): the meta-device export must predict exactly what the real model measures."""
import json
import subprocess
import sys
import warnings

import pytest
import torch

import commlens
from commlens import plan as planlib
from commlens._factory import call_model_factory
from commlens.export import export_model, save_program, tied_parameters
from integration_helpers import compare_with_measure, save_plan

# GPT-2 ties lm_head.weight to tok_embeddings.weight (tie_weights=True); Llama ties nothing, but its
# norms (and its same-shaped projections) would all share one record on the meta device.
CASES = [("examples.gpt2:gpt2", "examples.plans:gpt2_fsdp(dp=8)", [["tok_embeddings.weight", "lm_head.weight"]]),
         ("examples.llama:llama", "examples.plans:llama_fsdp_tp(dp=2, tp=4, sp=False)", [])]


def _meta_program(spec):
    model, args, kwargs = call_model_factory(spec + "(device='meta')")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return export_model(model, args, kwargs)


@pytest.mark.parametrize("spec,plan_spec,ties", CASES, ids=["gpt2-fsdp", "llama-fsdp_tp"])
def test_meta_device_export_predicts_what_the_real_model_measures(run_commlens, tmp_path, spec, plan_spec, ties):
    ep = _meta_program(spec)
    assert tied_parameters(ep) == ties
    pt2 = tmp_path / "meta.pt2"
    save_program(ep, str(pt2))
    plan_path = save_plan(planlib.resolve_plan(plan_spec), tmp_path)

    inspect = json.loads(run_commlens("inspect", pt2, "--json").stdout)
    assert inspect["parameter_aliases"] == {m: g[0] for g in ties for m in g[1:]}

    predicted = tmp_path / "predicted.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    summary = compare_with_measure(run_commlens, predicted, spec, plan_spec, tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"]

    # The in-memory API on the same program.
    in_memory = tmp_path / "in_memory.json"
    in_memory.write_text(commlens.predict(ep, str(plan_path), phase="both").to_json())
    r = run_commlens("compare", in_memory, tmp_path / "measured.counts.json", "--json")
    assert r.returncode == 0, r.stdout


def test_in_memory_api_keeps_the_ties_of_a_real_model(run_commlens, tmp_path):
    # The program JSON alone has no weights: without the tie record GPT-2's root unit would
    # all-gather lm_head.weight as a parameter of its own.
    spec, plan_spec, _ = CASES[0]
    model, args = call_model_factory(spec)[:2]
    ep = export_model(model, args)
    predicted = tmp_path / "predicted.json"
    predicted.write_text(commlens.predict(ep, plan_spec, phase="both").to_json())
    summary = compare_with_measure(run_commlens, predicted, spec, plan_spec, tmp_path)
    assert summary["differ"] == 0


def test_meta_archive_without_the_record_warns(run_commlens, tmp_path):
    # A plain torch.export.save of a meta-device model: ties cannot be known, none are assumed,
    # and a plan whose FSDP units they would change says so.
    ep = _meta_program("examples.gpt2:gpt2")
    pt2 = tmp_path / "plain.pt2"
    torch.export.save(ep, str(pt2))
    assert json.loads(run_commlens("inspect", pt2, "--json").stdout)["parameter_aliases"] == {}
    warning = ("the parameters are on the meta device and the archive has no commlens tie record: tied parameters "
               "cannot be told apart and are taken as untied (export with commlens.export to record ties)")
    fsdp = save_plan(planlib.resolve_plan("examples.plans:gpt2_fsdp(dp=8)"), tmp_path)
    r = run_commlens("predict", pt2, "--plan", fsdp, "--phase", "both")
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == f"warning: {warning}", r.stdout[-2000:]
    tp_dir = tmp_path / "tp"
    tp_dir.mkdir()
    tp = save_plan(planlib.resolve_plan("examples.plans:gpt2_tp(tp=4)"), tp_dir)
    r = run_commlens("predict", pt2, "--plan", tp, "--phase", "both")
    assert r.returncode == 0 and "warning" not in r.stdout


def test_bad_tie_record_is_refused(tmp_path):
    # A record naming a parameter the program lacks: the in-memory API's message names it.
    from commlens._native import core

    ep = _meta_program("examples.gpt2:gpt2")
    from commlens.export import program_json

    with pytest.raises(core().Error) as info:
        core().predict_program_json(program_json(ep), json.dumps(
            {"format": "commlens-tied-parameters", "version": 1, "groups": [["tok_embeddings.weight", "nope"]]}),
            planlib.dumps(planlib.resolve_plan("examples.plans:gpt2_tp(tp=4)")), "plan", "forward", None, None, False)
    assert str(info.value) == "tied parameters: groups[0][1]: 'nope' is not a parameter of the program"
