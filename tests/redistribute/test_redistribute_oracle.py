"""Oracle test for the C++ RedistributePlanner: DTensor itself, under CommDebugMode on a fake
process group, against build/tests/redistribute_driver, over a grid of meshes, shapes and
placement pairs.

Per case it checks: the collectives' CommDebugMode keys in issue order, their mesh dims (from the
process group each used), their input bytes on rank 0, that CommDebugMode's counts equal the
planner's, that the planner errors exactly where DTensor raises, and the user-facing refusal of
Partial targets. "cuda" cases force shard_dim_alltoall's non-CPU branch (see dtensor_oracle.py).
"""

import itertools
import json
import math
import os
import pathlib
import subprocess
import sys
from collections import Counter

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
PYTHON = ROOT / ".venv" / "bin" / "python"

P1 = ["R", "S(0)", "S(1)", "P(sum)", "P(avg)", "P(max)", "P(min)", "P(product)"]
P2 = ["R", "S(0)", "S(1)", "P(sum)", "P(max)"]
P2_FLAT = ["R", "S(0)", "S(1)", "P(sum)", "P(avg)"]
P3 = ["R", "S(0)", "S(1)", "P(sum)"]


def _pairs(per_dim, ndim, every=1):
    """All (src, dst) placement-tuple pairs with src != dst; every k-th one when every > 1."""
    tuples = list(itertools.product(per_dim, repeat=ndim))
    pairs = [(list(a), list(b)) for a in tuples for b in tuples if a != b]
    return pairs[::every]


def _groups():
    """(id, base case, placement pairs) for every test group."""
    groups = []
    for n in (2, 4, 8):
        for shape in ([16, 8], [10, 6]):
            groups.append((f"1d-{n}-{'x'.join(map(str, shape))}", {"mesh": [n], "shape": shape}, _pairs(P1, 1)))
    groups.append(("1d-1-10x6", {"mesh": [1], "shape": [10, 6]}, _pairs(P1, 1)))
    groups.append(("1d-4-10x6-bf16", {"mesh": [4], "shape": [10, 6], "dtype": "bf16"}, _pairs(P1, 1)))
    groups.append(("1d-4-cuda", {"mesh": [4], "shape": [10, 6], "device": "cuda"}, _pairs(P1, 1)))
    groups.append(("1d-4-3d-tensor", {"mesh": [4], "shape": [4, 6, 9]}, _pairs(["R", "S(0)", "S(1)", "S(2)", "S(-1)", "P(sum)"], 1)))
    # devices_per_host (redistribute_cost's topology): 4 makes mesh dim 1 of (2, 4) intra-host.
    for mesh, per_host in (([2, 2], 2), ([2, 4], 4), ([1, 4], 1), ([4, 1], 2)):
        for shape in ([16, 8], [10, 6]):
            base = {"mesh": mesh, "shape": shape, "devices_per_host": per_host}
            groups.append((f"2d-{'x'.join(map(str, mesh))}-{'x'.join(map(str, shape))}", base, _pairs(P2, 2)))
    for mesh in ([2, 2], [2, 4]):
        groups.append((f"2d-{'x'.join(map(str, mesh))}-cuda", {"mesh": mesh, "shape": [10, 6], "device": "cuda"}, _pairs(P3, 2)))
    for shape in ([16, 8], [10, 6], [6, 16]):
        base = {"mesh": [2, 4], "shape": shape, "names": ["a", "b"], "flatten": [[0, 1]]}
        groups.append((f"2d-2x4-flat-{'x'.join(map(str, shape))}", base, _pairs(P2_FLAT, 2)))
    groups.append(("3d-2x2x2-6x10", {"mesh": [2, 2, 2], "shape": [6, 10], "devices_per_host": 4}, _pairs(P3, 3, every=2)))
    groups.append(("3d-2x1x4-8x12", {"mesh": [2, 1, 4], "shape": [8, 12]}, _pairs(P3, 3, every=3)))
    # _StridedShard: split factors that do not decode into a shard order take the greedy planner
    # (modelled); decodable ones (e.g. sf 1 on 1-D, [_S(0,2), S(0)] on (2, 2)) the graph planner
    # (refused).
    ss1 = ["R", "S(0)", "S(1)", "P(sum)", "_S(0,2)", "_S(0,3)", "_S(1,2)", "_S(0,1)"]
    for shape in ([12, 8], [10, 6]):
        groups.append((f"1d-4-strided-{'x'.join(map(str, shape))}", {"mesh": [4], "shape": shape}, _pairs(ss1, 1)))
    groups.append(("1d-4-strided-cuda", {"mesh": [4], "shape": [12, 8], "device": "cuda"}, _pairs(ss1, 1)))
    ss2 = ["R", "S(0)", "S(1)", "P(sum)", "_S(0,2)", "_S(0,3)", "_S(1,4)"]
    for shape in ([24, 8], [10, 6]):
        groups.append((f"2d-2x2-strided-{'x'.join(map(str, shape))}", {"mesh": [2, 2], "shape": shape}, _pairs(ss2, 2)))
    # DTensor's graph-based planner on plain placements: forced (use_min_cost_redistribution_plan)
    # or by a non-default source shard order (tensor dim 0 sharded by mesh dim 1 first).
    for mesh, per_host, shape in (([2, 2], 2, [10, 6]), ([2, 4], 4, [16, 8]), ([2, 4], 1, [10, 6])):  # noqa: E501
        base = {"mesh": mesh, "shape": shape, "devices_per_host": per_host, "force_min_cost": True}
        groups.append((f"2d-{'x'.join(map(str, mesh))}-graph-{per_host}-{'x'.join(map(str, shape))}", base, _pairs(P2_FLAT, 2)))
    groups.append(
        ("3d-2x2x2-graph-6x10", {"mesh": [2, 2, 2], "shape": [6, 10], "devices_per_host": 4, "force_min_cost": True}, _pairs(P3, 3, every=7))
    )
    for shape in ([16, 8], [10, 6]):
        ordered = [(["S(0)", "S(0)"], dst) for dst in itertools.product(["R", "S(0)", "S(1)"], repeat=2)]
        base = {"mesh": [2, 4], "shape": shape, "src_shard_order": [[0, [1, 0]]], "devices_per_host": 4}
        groups.append((f"2d-2x4-shard-order-{'x'.join(map(str, shape))}", base, [(s_, list(d)) for s_, d in ordered]))
    names3 = ["a", "b", "c"]
    groups.append(
        ("3d-2x2x2-flat12-8x8", {"mesh": [2, 2, 2], "shape": [8, 8], "names": names3, "flatten": [[1, 2]]}, _pairs(P3, 3, every=2))
    )
    groups.append(
        (
            "3d-2x2x2-flat01-012-8x6",
            {"mesh": [2, 2, 2], "shape": [8, 6], "names": names3, "flatten": [[0, 1], [0, 1, 2]]},
            _pairs(P3, 3, every=2),
        )
    )
    return groups


GROUPS = _groups()


def _cases():
    cases = []
    for gid, base, pairs in GROUPS:
        for src, dst in pairs:
            cases.append((gid, {"dtype": "f32", "devices_per_host": 1, **base, "src": src, "dst": dst}))
    return cases


def _run_lines(cmd, cases):
    payload = "".join(json.dumps(c) + "\n" for _, c in cases)
    proc = subprocess.run(cmd, input=payload, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == len(cases), proc.stderr[-4000:]
    return lines


@pytest.fixture(scope="module")
def results():
    driver = pathlib.Path(os.environ.get("COMMLENS_BUILD", ROOT / "build")) / "tests" / "redistribute_driver"
    if not driver.exists():
        pytest.fail(f"{driver} is not built: cmake --build build --target redistribute_driver")
    cases = _cases()
    predicted = _run_lines([str(driver)], cases)
    python = str(PYTHON) if PYTHON.exists() else sys.executable
    observed = _run_lines([python, str(HERE / "dtensor_oracle.py")], cases)
    by_group = {}
    for (gid, case), pred, obs in zip(cases, predicted, observed):
        by_group.setdefault(gid, []).append((case, pred, obs))
    return by_group


def _same_cost(pred, obs):
    try:
        a, b = float(pred), float(obs)
    except (TypeError, ValueError):
        return False
    return a == b or math.isclose(a, b, rel_tol=1e-12)


def _compare(case, pred, obs):
    """A list of human-readable mismatches for one case (empty when they agree)."""
    extra = "".join(f" {k}={case[k]}" for k in ("src_shard_order", "force_min_cost", "flatten") if k in case)
    label = f"{case['mesh']} {case.get('device', 'cpu')} {case['shape']} {case['src']} -> {case['dst']}{extra}"
    problems = []
    setup_failed = not obs["ok"] and obs["error"].startswith("setup:")  # no such DTensor can exist
    if not setup_failed and pred.get("user_refusal") != obs.get("user_refusal"):
        problems.append(f"{label}: user refusal {pred.get('user_refusal')!r} vs DTensor {obs.get('user_refusal')!r}")
    if "cost" in obs and not _same_cost(pred.get("cost"), obs["cost"]):
        problems.append(f"{label}: redistribute_cost {pred.get('cost')} vs DTensor {obs['cost']}")
    if pred["ok"] != obs["ok"]:
        problems.append(f"{label}: planner {'ok' if pred['ok'] else pred['error']!r} vs DTensor {'ok' if obs['ok'] else obs['error']!r}")
        return problems
    if not obs["ok"]:
        return problems
    if pred.get("graph_planner") != obs.get("graph_planner"):
        problems.append(f"{label}: graph planner used: planner {pred.get('graph_planner')} vs DTensor {obs.get('graph_planner')}")
    if not obs["recorder_matches_comm_mode"]:
        problems.append(f"{label}: oracle recorder and CommDebugMode disagree: {obs}")
    want = [(c["op"], c["mesh_dims"], c["input_bytes"]) for c in obs["collectives"]]
    got = [(c["op"], c["mesh_dims"], c["input_bytes"]) for c in pred["collectives"]]
    if want != got:
        problems.append(f"{label}: planner {got} vs DTensor {want}\n{pred['trace']}")
    if Counter(c["op"] for c in pred["collectives"]) != Counter(obs["comm_counts"]):
        problems.append(f"{label}: counts {Counter(c['op'] for c in pred['collectives'])} vs CommDebugMode {obs['comm_counts']}")
    return problems


@pytest.mark.parametrize("gid", [g[0] for g in GROUPS])
def test_planner_matches_dtensor(results, gid):
    problems = []
    for case, pred, obs in results[gid]:
        problems.extend(_compare(case, pred, obs))
    assert not problems, f"{len(problems)} mismatches in {len(results[gid])} cases:\n" + "\n".join(problems[:15])


def test_grid_covers_collectives_and_refusals(results):
    """The grid really exercises every collective kind, uneven padding, errors and refusals."""
    seen = Counter()
    for rows in results.values():
        for case, pred, obs in rows:
            if obs.get("user_refusal"):
                seen["refusal"] += 1
            if not obs["ok"]:
                seen["error"] += 1
                continue
            for c in obs["collectives"]:
                seen[c["op"]] += 1
                if len(c["mesh_dims"] or []) > 1:
                    seen["flattened"] += 1
    graph = sum(1 for rows in results.values() for _, _, obs in rows if obs.get("graph_planner"))
    assert graph > 0
    for key in (
        "c10d_functional.all_reduce",
        "c10d_functional.all_gather_into_tensor",
        "c10d_functional.reduce_scatter_tensor",
        "_dtensor.shard_dim_alltoall",
        "refusal",
        "error",
        "flattened",
    ):
        assert seen[key] > 0, (key, seen)
