"""Helpers the integration tests share (a plain module: `conftest` names several files here)."""
import pathlib

import torch


def export_pt2(model_spec, directory, *, eval_mode=False, plan=None):
    """`torch.export.save` of a model factory's program (as commlens.export does, after
    `model.eval()` with `eval_mode`, as its --eval does; under `plan`'s FSDP mixed precision, as
    its --plan does) into directory."""
    import torch

    from commlens._factory import call_model_factory
    from commlens.export import export_model

    model, args, kwargs = call_model_factory(model_spec)
    if eval_mode:
        model.eval()
    pt2 = pathlib.Path(directory) / "model.pt2"
    torch.export.save(export_model(model, args, kwargs, plan), str(pt2))
    return pt2


def save_plan(plan, directory):
    """A commlens.plan.Plan saved as directory/plan.json."""
    from commlens import plan as planlib

    path = pathlib.Path(directory) / "plan.json"
    planlib.save(plan, str(path))
    return path


class TwoLinears(torch.nn.Module):
    """fc1 (4 -> 8), relu, fc2 (8 -> 4): the small program the CLI error tests mutate."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def compare_with_measure(run_commlens, predicted, model_spec, plan, directory):
    """`commlens compare --json`'s summary of a prediction file against CommDebugMode's counts for
    the same model and plan (commlens.measure, both phases); fails when compare does."""
    import json

    from commlens.measure import format_counts, measure

    measured = pathlib.Path(directory) / "measured.counts.json"
    measured.write_text(format_counts(measure(model_spec, plan, phase="both", return_document=True)))
    r = run_commlens("compare", predicted, measured, "--json")
    assert r.returncode == 0, r.stdout
    return json.loads(r.stdout)["summary"]


def assert_prediction_equals_counts(run_commlens, pt2, plan_path, measured_doc, phase, directory):
    """Predicts `pt2` under the plan file in `phase` and checks it against a CommDebugMode counts
    document measured natively (a client's own parallelization): `commlens compare` passes, no
    cell differs, and every cell's bytes were compared."""
    import json

    from commlens.measure import format_counts

    measured = pathlib.Path(directory) / "measured.counts.json"
    measured.write_text(format_counts(measured_doc))
    predicted = pathlib.Path(directory) / "predicted.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", phase, "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    r = run_commlens("compare", predicted, measured, "--phase", phase, "--json")
    summary = json.loads(r.stdout)["summary"]
    assert r.returncode == 0 and summary["differ"] == 0, r.stdout
    assert summary["bytes_compared"] == summary["cells"] > 0


def assert_measure_of_plan_equals(model_spec, plan, phase, measured_doc):
    """commlens.measure applying ``plan`` to the model issues, module by module and in bytes, what
    ``measured_doc`` (the parallelization run natively) counted."""
    from commlens.measure import measure

    def cells(counts):
        return {m["fqn"]: [m[k] for k in ("forward", "backward", "forward_bytes", "backward_bytes")]
                for m in counts["modules"]}

    assert cells(measure(model_spec, plan, phase=phase, return_document=True)) == cells(measured_doc)


def measured_fsdp_tp_step(model_spec, plan):
    """CommDebugMode's totals (commlens.measure, fake process group, both phases) for a plan with
    fully_shard on mesh dim dp and the TP styles on tp, shaped as predict's `commlens.step`:
    collectives and bytes per rank per phase, counts per collective over both phases, and the same
    per mesh dim. The dims come from the kind of op: FSDP2's collectives are c10d ops (on dp),
    DTensor's redistributions funcol ops (on tp)."""
    from commlens.measure import measure

    doc = measure(model_spec, plan, phase="both", return_document=True)
    glob = next(m for m in doc["modules"] if m["fqn"] == "Global")
    step = {"collectives": {}, "mesh_dims": {}}
    for phase in ("forward", "backward"):
        step[phase] = {"collectives": sum(glob[phase].values()), "bytes_per_rank": sum(glob[phase + "_bytes"].values())}
        for op, n in glob[phase].items():
            step["collectives"][op] = step["collectives"].get(op, 0) + n
            dim = step["mesh_dims"].setdefault("dp" if op.startswith("c10d.") else "tp", {
                p: {"collectives": 0, "bytes_per_rank": 0} for p in ("forward", "backward")})
            dim[phase]["collectives"] += n
            dim[phase]["bytes_per_rank"] += glob[phase + "_bytes"][op]
    return step


def module_rows(tree):
    """{fqn: (forward counts, backward counts, forward bytes, backward bytes)} of a predict JSON tree."""
    rows = {}

    def walk(node):
        rows[node["fqn"]] = tuple(dict(node[key]) for key in ("collectives_forward", "collectives_backward",
                                                              "collective_bytes_forward",
                                                              "collective_bytes_backward"))
        for child in node.get("children", ()):
            walk(child)

    walk(tree)
    return rows


def predict_both(run_commlens, pt2, plan, tmp_path):
    """`commlens predict --phase both --format json` of `pt2` under a plan spec: (the file, its JSON)."""
    import json

    from commlens import plan as planlib

    plan_path = save_plan(planlib.resolve_plan(plan), tmp_path)
    out = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "-o", out)
    assert r.returncode == 0, r.stderr
    return out, json.loads(out.read_text())
