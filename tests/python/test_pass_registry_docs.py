"""docs/architecture.md's pipeline table lists the passes of the registry (passes/Passes.def):
the same names and classes, in pipeline order, each in the phases whose pipeline runs it."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def registry():
    text = (ROOT / "passes" / "Passes.def").read_text()
    return [(name, cls, "forward, backward" if forward == "true" else "backward")
            for name, cls, forward in re.findall(r'^COMMLENS_PASS\("([^"]+)", (\w+), (true|false), (?:true|false)\)',
                                                 text, re.M)]


def documented():
    text = (ROOT / "docs" / "architecture.md").read_text()
    return re.findall(r"^\| `([a-z-]+)` \| `(\w+)` \| ([a-z, ]+) \|", text, re.M)


def test_registry_is_read():
    names = [name for name, _, _ in registry()]
    assert names[0] == "decompose" and "propagate-backward" in names


def test_docs_list_the_registered_passes():
    assert documented() == registry()
