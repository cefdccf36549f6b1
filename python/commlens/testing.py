"""pytest helpers: check a model's collectives under a plan without GPUs.

    from commlens.testing import assert_comm_counts
    assert_comm_counts(model_factory, "examples.plans:mlp_tp(tp=4)", {"Global": {"forward": {...}}})
    assert_comm_counts(model_factory, plan, "measure")   # against CommDebugMode, fake process group
"""
from commlens.api import predict


def assert_comm_counts(model, plan, expected, *, phase="both", **predict_kwargs):
    """Predict ``model`` (a ``(model, args[, kwargs])`` factory or spec, or an ExportedProgram)
    under ``plan`` and assert the per-module counts. ``expected``: ``{fqn: {"forward": {op: n},
    "backward": {op: n}}}`` for the modules to check (others are not checked), or ``"measure"``
    to compare every module with CommDebugMode on a fake process group."""
    from commlens._factory import call_model_factory
    from commlens.export import export_model

    program = model
    if not hasattr(model, "graph_module"):
        made = call_model_factory(model)
        program = export_model(made[0], made[1], made[2] if len(made) > 2 else None)
    got = predict(program, plan, phase, **predict_kwargs).counts()
    if isinstance(expected, str) and expected == "measure":
        from commlens.measure import measure

        if isinstance(model, str) or callable(model):
            expected = measure(model, plan, phase=phase)
        else:
            raise ValueError("expected='measure' needs a model factory or spec, not an ExportedProgram")
    diffs = []
    for fqn, phases in expected.items():
        if fqn not in got:
            diffs.append(f"{fqn}: not in the prediction (modules: {', '.join(got)})")
            continue
        for p, ops in phases.items():
            have = got[fqn].get(p, {})
            if have != ops:
                diffs.append(f"{fqn} {p}: predicted {have}, expected {ops}")
    assert not diffs, "collective counts differ:\n  " + "\n  ".join(diffs)
