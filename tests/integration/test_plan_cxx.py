"""Every example plan, serialised by `commlens.plan` from the real ParallelStyle objects, is read
by the C++ plan reader (`commlens check-plan`), and the modules it says each style applies to
are the modules torch's `parallelize_module` applies that style to, recorded while it runs on
the fake process group."""
import copy
import re

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore

from commlens import plan as planlib
from commlens._factory import call_factory, call_model_factory
from commlens.export import export_model
from commlens.measure import _submesh

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


def _recording_copy(style, record):
    """A copy of a ParallelStyle (one per plan entry, should two entries share a style) that
    calls record(module) on every module parallelize_module applies it to, then applies it."""
    recorder = copy.copy(style)

    def apply(module, mesh):
        record(module)
        return type(style)._apply(recorder, module, mesh)

    recorder._apply = apply
    return recorder


def applied_styles(model_spec, plan):
    """[(pattern, style class, sorted module names)] per plan entry: the modules torch 2.13's
    parallelize_module calls each style's _apply on, on a fresh model, in a fake process group
    of the plan's world size (named as CommDebugMode names them: root class, attribute path)."""
    model = call_model_factory(model_spec)[0]
    names = {id(m): f"{type(model).__name__}.{p}" if p else type(model).__name__ for p, m in model.named_modules()}
    applied = []
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=plan.world_size)
    try:
        mesh = init_device_mesh(plan.device_type, tuple(plan.mesh_shape), mesh_dim_names=plan.mesh_dim_names)
        for mesh_dim, styles in plan.parallelize_steps():
            recording = {}
            for pattern, style in styles.items():
                modules = []
                recording[pattern] = _recording_copy(style, lambda module, modules=modules: modules.append(
                    names[id(module)]))
                applied.append((pattern, type(style).__name__, modules))
            target = mesh if mesh_dim is None else _submesh(mesh, (mesh_dim,))
            parallelize_module(model, target, recording, src_data_rank=plan.src_data_rank)
    finally:
        dist.destroy_process_group()
    return [(pattern, cls, sorted(modules)) for pattern, cls, modules in applied]


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
    got = [line.split() for line in r.stdout.splitlines() if line.startswith("  ")]
    expected = applied_styles(model_spec, plan)
    assert all(modules for _, _, modules in expected)  # every entry applies somewhere
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
