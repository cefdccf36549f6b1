"""Shared helpers for the commlens Python tests."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_cli(module, *args, cwd=None, timeout=300):
    """Run ``python -m <module> args...`` in a fresh interpreter."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=cwd or REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gloo: spawns real gloo process groups (~15 s); deselect with -m 'not gloo'")


@pytest.fixture
def cli():
    return run_cli


def error_lines(stderr):
    """stderr lines, ignoring PyTorch warnings that may precede the error."""
    return [l for l in stderr.splitlines() if l.startswith("commlens:")]
