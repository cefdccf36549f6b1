"""Helpers the integration tests share (a plain module: `conftest` names several files here)."""
import pathlib


def export_pt2(model_spec, directory):
    """`torch.export.save` of a model factory's program (as commlens.export does) into directory."""
    import torch

    from commlens._factory import call_model_factory
    from commlens.export import export_model

    model, args, kwargs = call_model_factory(model_spec)
    pt2 = pathlib.Path(directory) / "model.pt2"
    torch.export.save(export_model(model, args, kwargs), str(pt2))
    return pt2


def save_plan(plan, directory):
    """A commlens.plan.Plan saved as directory/plan.json."""
    from commlens import plan as planlib

    path = pathlib.Path(directory) / "plan.json"
    planlib.save(plan, str(path))
    return path
