"""commlens rank: every plan predicted in one process, ranked by communication time per step.
Each ranked plan's figures must be the ones `predict --cluster` gives for that plan alone, and
their collectives and bytes, per phase and mesh dim, CommDebugMode's (measured for two of them)."""
import json
import subprocess
import sys

import pytest

from integration_helpers import export_pt2, measured_fsdp_tp_step

SWEEP = "examples.plans:llama_fsdp_tp(dp={dp}, tp={tp})"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    d = tmp_path_factory.mktemp("rank")
    plans = d / "plans"
    r = subprocess.run([sys.executable, "-m", "commlens.plan", "--sweep", SWEEP, "--world-size", "8", "-o", str(plans)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return export_pt2("examples.llama:llama", d), plans, d


def test_rank_matches_predict_per_plan(run_commlens, llama, tmp_path):
    pt2, plans, _ = llama
    out = tmp_path / "rank.json"
    r = run_commlens("rank", pt2, "--plans", plans, "--cluster", "h100-ib-ndr", "--format", "json", "-o", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["format"] == "commlens-rank" and doc["phase"] == "both" and doc["errors"] == []
    ranked = doc["plans"]
    assert [p["rank"] for p in ranked] == [1, 2, 3, 4]
    assert sorted(p["name"] for p in ranked) == ["llama_fsdp_tp-dp1-tp8", "llama_fsdp_tp-dp2-tp4",
                                                 "llama_fsdp_tp-dp4-tp2", "llama_fsdp_tp-dp8-tp1"]
    times = [p["time_us"] for p in ranked]
    assert times == sorted(times)
    for p in ranked:
        pred = tmp_path / "pred.json"
        r = run_commlens("predict", pt2, "--plan", p["plan"], "--phase", "both", "--cluster", "h100-ib-ndr",
                         "--format", "json", "-o", pred)
        assert r.returncode == 0, r.stderr
        step = json.loads(pred.read_text())["commlens"]["step"]
        assert (p["forward"], p["backward"], p["time_us"], p["mesh_dims"]) == \
            (step["forward"], step["backward"], step["time_us"], step["mesh_dims"])
    # dp8 x tp1: TP styles on a mesh dim of one rank move nothing (the corpus measures it), so
    # only FSDP's all-gathers and reduce-scatters remain, all on dp.
    dp8 = next(p for p in ranked if p["name"].endswith("dp8-tp1"))
    assert [d["dims"] for d in dp8["mesh_dims"]] == ["dp"]
    assert set(dp8["collectives"]) == {"c10d._allgather_base_", "c10d._reduce_scatter_base_"}
    # The counts and bytes against CommDebugMode, for FSDP x TP and that FSDP-only split
    # (measuring all four plans would double the test's time).
    phases = ("forward", "backward")
    for p in (dp8, next(p for p in ranked if p["name"].endswith("dp2-tp4"))):
        measured = measured_fsdp_tp_step("examples.llama:llama", p["plan"])
        assert p["collectives"] == measured["collectives"]
        assert {ph: {k: p[ph][k] for k in ("collectives", "bytes_per_rank")} for ph in phases} == \
            {ph: measured[ph] for ph in phases}
        assert {d["dims"]: {ph: {k: d[ph][k] for k in ("collectives", "bytes_per_rank")} for ph in phases}
                for d in p["mesh_dims"]} == measured["mesh_dims"]


def test_rank_table_and_bad_plans(run_commlens, llama, tmp_path):
    pt2, plans, _ = llama
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    good = plans / "llama_fsdp_tp-dp2-tp4.json"
    r = run_commlens("rank", pt2, "--plan", good, "--plan", bad, "--phase", "forward")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"1 plans for {pt2} on h100-ib-ndr: hopper, 8 GPUs/node")
    assert lines[0].endswith("phase forward, by communication time per step (collectives back to back)")
    assert lines[1].split() == ["rank", "plan", "time/step", "collectives", "bytes/rank", "per", "mesh", "dim",
                                "(ranks", "x", "nodes)"]
    assert lines[2].split()[:2] == ["1", "llama_fsdp_tp-dp2-tp4"]
    assert lines[3].startswith(f"not ranked: {bad}: plan: ")
    assert lines[4].startswith("read and checked the model in ")
    # nothing rankable: exit 2 with the first plan's error
    r = run_commlens("rank", pt2, "--plan", bad)
    assert r.returncode == 2
    assert r.stderr.startswith(f"commlens: error: no plan could be ranked (first: {bad}: plan: ")


def test_rank_copies_the_program_per_plan_and_device(run_commlens, tmp_path):
    # rank decodes the program once and decomposes it once for its CPU plans; a CUDA plan starts
    # from the exported ops (its SDPA lowers to a CUDA kernel). In any order, each ranked plan must
    # be what predict gives for it alone.
    from commlens import plan as planlib
    from integration_helpers import save_plan
    pt2 = export_pt2("examples.gpt2:gpt2(attn='sdpa')", tmp_path)
    plans = []
    for device in ("cpu", "cuda"):
        d = tmp_path / device
        d.mkdir()
        plans.append(save_plan(planlib.resolve_plan(f"examples.plans:gpt2_tp_sp(tp=4, device_type='{device}')"), d))
    order = [plans[0], plans[1], plans[0], plans[1], plans[0]]
    # Three threads: the two CPU plans they start at once share the one decomposition; the
    # output is the same on one thread (the timings aside).
    docs = []
    for jobs in ("3", "1"):
        r = run_commlens("rank", pt2, *[a for p in order for a in ("--plan", p)], "--format", "json", "--jobs", jobs)
        assert r.returncode == 0, r.stderr
        docs.append(json.loads(r.stdout))
    assert (docs[0]["jobs"], docs[1]["jobs"]) == (3, 1)
    for doc in docs:
        for key in ("load_seconds", "predict_seconds", "jobs"):
            del doc[key]
        for p in doc["plans"]:
            del p["predict_seconds"]
    assert docs[0] == docs[1]
    doc = docs[0]
    assert doc["errors"] == [] and len(doc["plans"]) == 5
    for p in doc["plans"]:
        pred = tmp_path / "pred.json"
        r = run_commlens("predict", pt2, "--plan", p["plan"], "--phase", "both", "--cluster", "h100-ib-ndr",
                         "--format", "json", "-o", pred)
        assert r.returncode == 0, r.stderr
        step = json.loads(pred.read_text())["commlens"]["step"]
        assert (p["forward"], p["backward"], p["time_us"]) == (step["forward"], step["backward"], step["time_us"])


@pytest.mark.parametrize("args, message", [
    ((), "rank takes MODEL.pt2 and at least one --plan PLAN.json or --plans DIR"),
    (("--phase", "backward", "--plan", "x.json"), "--phase must be forward, both or inference, got 'backward'"),
    (("--plans", "/nonexistent"), "--plans: /nonexistent: No such file or directory"),
    (("--jobs", "0", "--plan", "x.json"), "--jobs needs an integer from 1 to 1024, got '0'"),
    (("--jobs", "two", "--plan", "x.json"), "--jobs needs an integer from 1 to 1024, got 'two'"),
])
def test_rank_usage_errors(run_commlens, llama, args, message):
    pt2, _, _ = llama
    r = run_commlens("rank", pt2, *args)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"commlens: error: {message}\n")
