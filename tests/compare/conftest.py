"""Fixtures for the `commlens compare` CLI tests: real CommDebugMode dumps (the CLI fixtures are in
tests/conftest.py)."""
import json
import pathlib
import subprocess
import sys

import pytest



@pytest.fixture(scope="session")
def dumps(tmp_path_factory):
    """Directory with mlp_grad / mlp_nograd / mlp_sp `.json` (CommDebugMode dumps) and
    `.counts.json` (commlens-counts), made in a fresh process (fake process group, world 4)."""
    out = tmp_path_factory.mktemp("dumps")
    r = subprocess.run([sys.executable, "-W", "ignore", str(pathlib.Path(__file__).with_name("make_dumps.py")),
                        str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def edit_json(src, dst, fn):
    """Copies JSON file src to dst, passing the document through fn (which edits in place)."""
    doc = json.loads(pathlib.Path(src).read_text())
    fn(doc)
    pathlib.Path(dst).write_text(json.dumps(doc, indent=1))
    return dst
