"""Fixtures shared by every pytest suite under tests/: the built `commlens` CLI."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def commlens_bin():
    path = pathlib.Path(os.environ.get("COMMLENS_BUILD", ROOT / "build")) / "commlens"
    if not path.exists():
        pytest.fail(f"{path} is not built: run scripts/setup.sh first")
    return str(path)


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


@pytest.fixture(scope="session")
def run_commlens(commlens_bin):
    def run(*args):
        return subprocess.run([commlens_bin, *map(str, args)], capture_output=True, text=True, timeout=120)
    return run
