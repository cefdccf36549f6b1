"""The C++ libraries depend only downward (docs/architecture.md): a source file of one folder's
library includes headers only of that library and of the libraries it links (CMake's
target_link_libraries, transitively), and no two components (X.h with X.cpp) include each other,
however indirectly."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The folders whose library is a layer of the prediction core.
LAYERS = ("ir", "parallel", "comm", "state", "dtensor", "aten", "fsdp", "autograd", "runtime", "passes", "reports", "frontends",
          "api")
INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


def linked_libraries():
    """folder -> the folders whose libraries its library links, transitively."""
    direct = {}
    for folder in LAYERS:
        text = (ROOT / folder / "CMakeLists.txt").read_text()
        links = re.search(rf"target_link_libraries\(commlens_{folder}\s+PUBLIC([^)]*)\)", text)
        names = re.findall(r"commlens_(\w+)", links.group(1)) if links else []
        direct[folder] = {n for n in names if n in LAYERS}

    def closure(folder, seen):
        for dep in direct[folder] - seen:
            seen.add(dep)
            closure(dep, seen)
        return seen

    return {folder: closure(folder, set()) for folder in LAYERS}


def sources(folder):
    return [p for p in (ROOT / folder).rglob("*") if p.suffix in (".h", ".cpp", ".def")]


def test_includes_go_only_to_linked_libraries():
    allowed = linked_libraries()
    upward = []
    for folder in LAYERS:
        for path in sources(folder):
            for header in INCLUDE.findall(path.read_text()):
                target = header.split("/")[0]
                if target in LAYERS and target != folder and target not in allowed[folder]:
                    upward.append(f"{path.relative_to(ROOT)} includes {header}")
    assert not upward, "includes of libraries not linked (an upward or sideways dependency):\n" + "\n".join(upward)


def test_no_include_cycle_between_components():
    # A component is X.h with X.cpp; ir/Graph and ir/Argument (one IR data model) are exempt.
    edges = {}
    for folder in LAYERS:
        for path in sources(folder):
            component = str(path.relative_to(ROOT).with_suffix(""))
            for header in INCLUDE.findall(path.read_text()):
                target = str(pathlib.Path(header).with_suffix(""))
                if target != component and header.split("/")[0] in LAYERS:
                    edges.setdefault(component, set()).add(target)
    exempt = {frozenset({"ir/Graph", "ir/Argument"})}
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycle = stack[stack.index(nxt):]
                if frozenset(cycle) not in exempt:
                    cycles.append(" -> ".join(cycle + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    assert not cycles, "include cycles:\n" + "\n".join(cycles)


def test_the_check_sees_an_upward_include():
    # The rule as the tests apply it: dtensor links ir only, so a dtensor file including a pass
    # header would be reported.
    allowed = linked_libraries()
    assert "passes" not in allowed["dtensor"] and "ir" in allowed["dtensor"]
    assert {"dtensor", "fsdp", "autograd", "state", "comm", "ir"} <= allowed["runtime"]
