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


@pytest.fixture(scope="session")
def run_commlens(commlens_bin):
    def run(*args):
        return subprocess.run([commlens_bin, *map(str, args)], capture_output=True, text=True, timeout=120)
    return run
