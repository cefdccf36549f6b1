"""Every example plan, serialised by `commlens.plan` from the real ParallelStyle objects, is read
by the C++ plan reader (`commlens check-plan`), and the modules it says each style applies to
are the modules `parallelize_module` matches in Python (`commlens.plan.match_modules`)."""
import re

import pytest
import torch

from commlens import plan as planlib
from commlens._factory import call_factory, call_model_factory
from commlens.export import export_model

CASES = [
    ("examples.mlp:mlp", "examples.plans:mlp_tp(tp=4)"),
    ("examples.mlp:stacked_mlp", "examples.plans:stacked_mlp_tp(tp=2)"),
    ("examples.mlp:mlp", "examples.plans:mlp_2d(dp=2, tp=4)"),
    ("examples.gpt2:gpt2(n_layers=2)", "examples.plans:gpt2_tp(tp=4)"),
    ("examples.gpt2:gpt2(n_layers=2)", "examples.plans:gpt2_tp_sp(tp=2, dp=2)"),
    ("examples.gpt2:gpt2(n_layers=2)", "examples.plans:gpt2_tp_loss_parallel(tp=8)"),
    ("examples.llama:llama(n_layers=2)", "examples.plans:llama_tp(tp=4)"),
    ("examples.llama:llama(n_layers=2)", "examples.plans:llama_2d(dp=2, tp=2)"),
]


@pytest.mark.parametrize("model_spec,plan_spec", CASES)
def test_cxx_plan_reader_matches_parallelize_module(model_spec, plan_spec, tmp_path, run_commlens):
    model, args, kwargs = call_model_factory(model_spec)
    pt2 = tmp_path / "model.pt2"
    torch.export.save(export_model(model, args, kwargs), str(pt2))
    plan = call_factory(plan_spec)
    plan_path = tmp_path / "plan.json"
    planlib.save(plan, str(plan_path), source=plan_spec)

    r = run_commlens("check-plan", pt2, "--plan", plan_path, "--world-size", plan.world_size)
    assert r.returncode == 0, r.stderr
    root = type(model).__name__
    got = [line.split() for line in r.stdout.splitlines() if line.startswith("  ")]
    expected = []
    for mesh_dim, styles in plan.parallelize_steps():
        for pattern, style in styles.items():
            # match_modules returns attribute paths in named_modules order; keep those the
            # exported graph executes (forward order of first use is the C++ side's order).
            paths = [p for p in planlib.match_modules(model, pattern)]
            expected.append((pattern, type(style).__name__, sorted(f"{root}.{p}" if p else root for p in paths)))
    assert [(g[0], g[1], sorted(g[2:])) for g in got] == expected

    r = run_commlens("check-plan", pt2, "--plan", plan_path, "--world-size", plan.world_size * 2)
    assert r.returncode == 2
    assert re.fullmatch(rf"commlens: error: {plan_path}: mesh shape DeviceMesh\(.*\) has {plan.world_size} devices "
                        rf"but the world size is {plan.world_size * 2}\n", r.stderr)


def test_pattern_matching_no_module_is_an_error(tmp_path, run_commlens):
    model, args, kwargs = call_model_factory("examples.mlp:mlp")
    pt2 = tmp_path / "model.pt2"
    torch.export.save(export_model(model, args, kwargs), str(pt2))
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(planlib.dumps(call_factory("examples.plans:mlp_tp(tp=2)")).replace('"w2"', '"w3"'))
    r = run_commlens("check-plan", pt2, "--plan", plan_path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"commlens: error: {plan_path}: plan pattern 'w3' matches no module of MLP\n"
