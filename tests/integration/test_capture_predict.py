"""commlens.capture end to end: the user's own parallelize function runs natively on a real CPU
model under a fake process group and CommDebugMode counts one training step; `commlens predict`
predicts the plan capture wrote for the same function; `commlens compare` finds no cell that
differs (counts and bytes)."""
import pathlib

import pytest

from commlens._factory import call_model_factory, resolve
from commlens.capture import capture
from commlens.measure import count_collectives, counts_document, fake_process_group, format_counts, plan_mesh
from commlens.plan import save
from integration_helpers import export_pt2

LLAMA = "examples.llama:llama"
CASES = [
    (LLAMA, "examples.parallelize:llama_tp_sp(tp=4)", 4, "cross_entropy", ()),
    (LLAMA, "examples.parallelize:llama_fsdp_tp(dp=2, tp=4)", 8, "cross_entropy", ()),
    (LLAMA, "examples.parallelize:llama_fsdp_tp(dp=2, tp=4, ac=True)", 8, "cross_entropy", ()),
    (LLAMA, "examples.parallelize:llama_fsdp_tp(dp=2, tp=4, ac='sac', prefetch=True)", 8, "cross_entropy", ()),
    (LLAMA, "examples.parallelize:llama_fsdp_tp(dp=2, tp=4, ac=True, early_stop=False, embedding_unit=True)", 8,
     "cross_entropy", ()),
    ("examples.mlp:stacked_mlp", "examples.parallelize:stacked_mlp_fsdp", 4, "sum", (0,)),
    ("examples.mlp:mlp", "examples.parallelize:mlp_placed(dp=2, tp=2)", 4, "sum", (0,)),
]


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    cache = {}

    def get(model_spec):
        if model_spec not in cache:
            cache[model_spec] = export_pt2(model_spec, tmp_path_factory.mktemp("capture"))
        return cache[model_spec]
    return get


def measure_natively(model_spec, parallelize, world_size, plan):
    """CommDebugMode's counts of one step of the model as the user's function parallelizes it
    (real CPU tensors); the step (loss, inputs requiring grad) is the plan's."""
    fn, kwargs = resolve(parallelize)
    with fake_process_group(world_size, parallelize):
        model, args, model_kwargs = call_model_factory(model_spec)
        fn(model, **kwargs)
        args = tuple(a.detach().requires_grad_(True) if i in plan.inputs_requires_grad else a
                     for i, a in enumerate(args))
        modules = count_collectives(model, args, model_kwargs, "both", plan.loss, loss_parallel=plan.loss_parallel)
    return counts_document(modules, backend="fake", world_size=world_size, phase="both", model=model_spec,
                           mesh=plan_mesh(plan), plan_source=parallelize, device={"type": "cpu"})


@pytest.mark.parametrize("model_spec, parallelize, world_size, loss, requires_grad", CASES,
                         ids=[c[1].split(":")[1] for c in CASES])
def test_prediction_from_the_captured_plan_matches_the_native_run(run_commlens, programs, tmp_path, model_spec,
                                                                  parallelize, world_size, loss, requires_grad):
    plan = capture(model_spec, parallelize, world_size, loss=loss, inputs_requires_grad=requires_grad)
    plan_path = tmp_path / "captured.json"
    save(plan, plan_path)
    predicted = tmp_path / "predicted.json"
    r = run_commlens("predict", programs(model_spec), "--plan", plan_path, "--phase", "both", "--format", "json",
                     "-o", predicted)
    assert r.returncode == 0, r.stderr
    measured = tmp_path / "measured.counts.json"
    doc = measure_natively(model_spec, parallelize, world_size, plan)
    measured.write_text(format_counts(doc))
    total = doc["modules"][0]
    assert total["fqn"] == "Global" and (total["forward"] or total["backward"])  # the step communicated
    r = run_commlens("compare", predicted, measured)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ", 0 differ;" in r.stdout.splitlines()[-1], r.stdout
