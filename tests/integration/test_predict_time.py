"""predict --cluster: every collective timed on a cluster, totals per module, mesh dim and step;
collective-time for one collective. Expected times are derived by hand from the NCCL model as
docs/cluster-format.md states it (ring: latency = base + steps x per-step latency, algorithm
bandwidth = bus bandwidth x n / steps; the fastest algorithm and protocol win)."""
import json
import math
import subprocess
import sys

import pytest

from commlens import plan as planlib
from integration_helpers import export_pt2, save_plan

AR = "c10d_functional.all_reduce"


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    d = tmp_path_factory.mktemp("mlp_time")
    return export_pt2("examples.mlp:mlp", d), save_plan(
        planlib.resolve_plan("examples.plans:mlp_tp(tp=4, input_requires_grad=True)"), d), d


def _walk(node):
    yield node
    for c in node["children"]:
        yield from _walk(c)


def test_mlp_all_reduces_on_h100(run_commlens, mlp, tmp_path):
    # Each all_reduce moves the [2, 8, 16] f32 activation: 1024 B on 4 ranks of one H100 node.
    # Ring/LL: 6.6 + 6 * 0.6 = 10.2 us latency; bus min(141, 370 / 2) = 141 GB/s, algorithm
    # 141 * 4 / 6 = 94 GB/s; 10.2 + 1024 / 94000 = 10.21089 us. Forward (w2) and backward (w1).
    pt2, plan, _ = mlp
    out = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", plan, "--phase", "both", "--cluster", "h100-ib-ndr", "--format",
                     "json", "-o", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    one = 10.2 + 1024 / 94000
    records = [c for n in _walk(doc) for p in ("forward", "backward") for c in n.get(f"collectives_{p}_detail", [])]
    assert len(records) == 2
    for rec in records:
        assert rec["time"]["algorithm"] == "ring/ll"
        assert (rec["time"]["ranks"], rec["time"]["nodes"], rec["time"]["message_bytes"]) == (4, 1, 1024)
        assert rec["time"]["us"] == pytest.approx(one, abs=1e-6)
    assert doc["collective_time_us_forward"][AR] == pytest.approx(one, abs=1e-6)
    assert doc["collective_time_us_backward"][AR] == pytest.approx(one, abs=1e-6)
    step = doc["commlens"]["step"]
    assert step["forward"] == {"collectives": 1, "bytes_per_rank": 1024, "time_us": pytest.approx(one, abs=1e-6)}
    assert step["time_us"] == pytest.approx(2 * one, abs=1e-6)
    assert step["mesh_dims"] == [{"dims": "tp", "ranks": 4, "nodes": 1,
                                  "forward": step["forward"], "backward": step["backward"]}]
    assert doc["commlens"]["cluster"].startswith("h100-ib-ndr: hopper, 8 GPUs/node")


def test_timed_json_still_compares_with_commdebugmode(run_commlens, mlp, tmp_path):
    # The extra keys do not disturb readers of CommDebugMode's dump format (compare reads both).
    pt2, plan, _ = mlp
    pred = tmp_path / "pred.json"
    assert run_commlens("predict", pt2, "--plan", plan, "--phase", "both", "--cluster", "a100-ib-hdr",
                        "--format", "json", "-o", pred).returncode == 0
    measured = tmp_path / "m.json"
    r = subprocess.run([sys.executable, "-m", "commlens.measure", "examples.mlp:mlp", "--plan",
                        "examples.plans:mlp_tp(tp=4, input_requires_grad=True)", "-o", measured],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    r = run_commlens("compare", pred, tmp_path / "m.counts.json", "--phase", "both")
    assert r.returncode == 0, r.stdout
    assert "collectives predicted 2, measured 2" in r.stdout


def test_fsdp_tp_groups_follow_the_node_layout(run_commlens, tmp_path):
    # llama FSDP x TP on a (2, 4) dp x tp mesh. With 4 GPUs per node (topology file) tp groups are
    # ranks 0-3 (one node) and dp pairs ranks 0 and 4 (two nodes); with the preset's 8 per node
    # both stay in one node. Per dim, the summed record times are the dim's total.
    pt2 = export_pt2("examples.llama:llama", tmp_path)
    plan = save_plan(planlib.resolve_plan("examples.plans:llama_fsdp_tp(dp=2, tp=4)"), tmp_path)
    topo = tmp_path / "four.json"
    topo.write_text(json.dumps({"format": "commlens-cluster", "version": 1, "base": "h100-ib-ndr",
                                "gpus_per_node": 4}))
    for cluster, dp_nodes in (("h100-ib-ndr", 1), (str(topo), 2)):
        out = tmp_path / "pred.json"
        r = run_commlens("predict", pt2, "--plan", plan, "--phase", "both", "--cluster", cluster, "--format", "json",
                         "-o", out)
        assert r.returncode == 0, r.stderr
        doc = json.loads(out.read_text())
        dims = {d["dims"]: d for d in doc["commlens"]["step"]["mesh_dims"]}
        assert (dims["tp"]["ranks"], dims["tp"]["nodes"]) == (4, 1)
        assert (dims["dp"]["ranks"], dims["dp"]["nodes"]) == (2, dp_nodes)
        records = [c for n in _walk(doc) for p in ("forward", "backward") for c in n.get(f"collectives_{p}_detail", [])]
        for name, d in dims.items():
            mine = [c for c in records if c["time"]["ranks"] == d["ranks"] and c["mesh_dims"] == ([0] if name == "dp" else [1])]
            total = d["forward"]["time_us"] + d["backward"]["time_us"]
            assert math.isclose(sum(c["time"]["us"] for c in mine), total, rel_tol=1e-9)
            assert len(mine) == d["forward"]["collectives"] + d["backward"]["collectives"]
        assert doc["commlens"]["step"]["time_us"] == pytest.approx(sum(
            d["forward"]["time_us"] + d["backward"]["time_us"] for d in dims.values()))
    # the table says the same
    r = run_commlens("predict", pt2, "--plan", plan, "--phase", "both", "--cluster", str(topo))
    assert "communication per step on h100-ib-ndr+file: hopper, 4 GPUs/node" in r.stdout
    assert any(line.strip().startswith("mesh dim dp (2 ranks, 2 nodes)") for line in r.stdout.splitlines())


def test_collective_time_command(run_commlens):
    # 1 GiB all_reduce on 8 H100s in one node: ring/Simple, 8.4 + 14 * 3.4 = 56.0 us latency,
    # 370 * 8 / 14 GB/s: 56.0 + 2^30 / 211428.57 = 5134.509 us.
    r = run_commlens("collective-time", "--cluster", "h100-ib-ndr", "--collective", "all_reduce", "--bytes",
                     str(1 << 30), "--ranks", "8")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("all_reduce of 1073741824 B/rank on 8 ranks over 1 node (h100-ib-ndr): 5134.509 us "
                               "(ring/simple; message 1073741824 B, bus bandwidth ")


@pytest.mark.parametrize("args, message", [
    (("--cluster", "dgx"), "--cluster: unknown cluster 'dgx' (known: h100-ib-ndr, h100-roce, h200-ib-ndr, "
                           "b200-ib-ndr, b200-ib-xdr, gb200-nvl72, a100-ib-hdr, a100-roce, v100-ib-edr, l40s-pcie; "
                           "or a topology JSON file)"),
    (("--cluster", "/nonexistent/topo.json"), "--cluster: /nonexistent/topo.json: cannot open file: No such file or "
                                              "directory"),
])
def test_bad_cluster(run_commlens, mlp, args, message):
    pt2, plan, _ = mlp
    r = run_commlens("predict", pt2, "--plan", plan, *args)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"commlens: error: {message}\n")


@pytest.mark.parametrize("args, message", [
    (("--collective", "broadcast"), "--collective must be all_reduce, all_gather, reduce_scatter or all_to_all, got "
                                    "'broadcast'"),
    (("--collective", "all_gather", "--ranks", "0"), "--ranks needs an integer from 1 to 2^20, got '0'"),
    (("--collective", "all_gather", "--nodes", "9"), "--nodes needs an integer from 1 to --ranks (8), got '9'"),
])
def test_collective_time_errors(run_commlens, args, message):
    base = {"--cluster": "h100-ib-ndr", "--collective": "all_reduce", "--bytes": "1024", "--ranks": "8"}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    r = run_commlens("collective-time", *[x for kv in base.items() for x in kv])
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"commlens: error: {message}\n")
