"""A plan sweep in one run: every dp x tp split of 64 and of 1,024 ranks for the 405B-shaped Llama
(meta device), ranked by `commlens rank` after one export, against CommDebugMode running each plan:

    .venv/bin/python bench/sweep_speed.py [--worlds 64,1024] [--sample 1] [--phase both]
        [--cluster h100-ib-ndr] [--rank-runs 3] [--jobs N] [--model SPEC] [--sweep SPEC]
        [--moe-worlds 64] [--moe-model ARGS] [--work-dir out/bench/sweep]

commlens' side, timed in this run: export_model and save_program once, the plans of each sweep
written (commlens.plan.sweep), one `commlens rank` process per sweep (its plans on a thread per
core; run --rank-runs times, the median counted). CommDebugMode's side:
commlens.measure (CommDebugMode on a fake process group, the meta-device model built, parallelised
and run forward and backward for each plan) on --sample plans of each sweep, spread over the
ranking (--sample 0 runs every plan). A plan DTensor cannot run (tp above 8 splits the 8 kv heads,
or the 16-token sequence, unevenly) fails under CommDebugMode: its error and time to fail are
printed, it must be one `commlens rank` refused by name (not ranked), and the next plan is tried.
CommDebugMode's total: the plans it can run at the mean time of those it ran, the plans it fails
on at the mean time to fail (the output says how many ran and how many are estimated). Each
measured plan's counts are checked against the ranking's (`commlens rank --format json`).

Prints each sweep's ranking, then per sweep and in total the time of each side and their ratios:
against rank alone (the export is made once and serves every sweep) and against export + rank.
Then the MoE sweep (--moe-worlds, default 64 ranks): torchtitan's MoE layers
(examples.titan:moe_stack, --moe-model its sizes), exported once, and every dp_shard x tp split
parallelized by torchtitan's own apply_moe_ep_tp and apply_fsdp (examples.titan:
parallelize_moe_stack): commlens' side captures each plan from that function (commlens.capture,
the model on the meta device under a fake process group) and ranks them in one `commlens rank`;
CommDebugMode's side runs each split natively (examples.titan:measure_moe_stack, real weights:
routing is data-dependent, so the model is one that runs on CPU rather than a 405B-shaped one).
torchtitan is imported before either side is timed. A split whose parallelize function fails
is captured by neither side and printed.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
for p in (str(ROOT / "python"), str(ROOT), str(ROOT / "bench")):
    if p not in sys.path:
        sys.path.insert(0, p)
from benchutil import cpu_seconds  # noqa: E402
from predict_speed import LLAMA_405B  # noqa: E402

# Tensor (and sequence) parallel on tp, the batch data-parallel on dp. Not FSDP: CommDebugMode's
# side cannot run fully_shard on the meta-device model (FSDP2 needs real parameters) and a real
# 405B model does not fit in memory.
SWEEP = "examples.plans:llama_2d(dp={dp}, tp={tp})"
# torchtitan's MoE layers alone (examples.titan:moe_stack): CommDebugMode's side needs real weights
# (routing is data-dependent), so a model that runs on CPU, not a 405B-shaped one.
MOE_MODEL = "n_layers=16, dim=256, num_experts=16, seq_len=64"



def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="64,1024", help="comma-separated world sizes")
    ap.add_argument("--sample", type=int, default=1,
                    help="plans per sweep CommDebugMode runs (0: all), the rest estimated from their mean")
    ap.add_argument("--phase", default="both", choices=("forward", "both"))
    ap.add_argument("--cluster", default="h100-ib-ndr")
    ap.add_argument("--rank-runs", type=int, default=3, help="runs of commlens rank per sweep, the median counted")
    ap.add_argument("--jobs", type=int, help="commlens rank --jobs (default: its own, one thread per core)")
    ap.add_argument("--moe-worlds", default="64", help="world sizes of the MoE sweep ('' skips it)")
    ap.add_argument("--moe-model", default=MOE_MODEL, help="keyword arguments of examples.titan:moe_stack")
    ap.add_argument("--model", default=LLAMA_405B)
    ap.add_argument("--sweep", default=SWEEP)
    ap.add_argument("--work-dir", default=str(ROOT / "out" / "bench" / "sweep"))
    ap.add_argument("--commlens", default=str(pathlib.Path(os.environ.get("COMMLENS_BUILD", ROOT / "build"))
                                              / "commlens"))
    ns = ap.parse_args(argv)
    import commlens.measure
    from commlens._factory import call_model_factory
    from commlens.export import export_model, save_program
    from commlens.plan import sweep

    work = pathlib.Path(ns.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    pt2 = work / "model.pt2"
    print(f"model: {ns.model}\nsweep: {ns.sweep}, phase {ns.phase}, cluster {ns.cluster}", flush=True)
    t0, c0 = time.perf_counter(), cpu_seconds()
    ep = export_model(*call_model_factory(ns.model))
    save_program(ep, str(pt2))
    export_s, export_cpu = time.perf_counter() - t0, cpu_seconds() - c0
    del ep
    print(f"export_model + save_program (once): {export_s:.2f} s (CPU {export_cpu:.2f} s)", flush=True)

    rows, ok = [], True
    for world in (int(w) for w in ns.worlds.split(",")):
        plans_dir = _fresh_dir(work / f"plans{world}")
        t0, c0 = time.perf_counter(), cpu_seconds()
        paths = sweep(ns.sweep, world, str(plans_dir))
        plans_s, plans_cpu = time.perf_counter() - t0, cpu_seconds() - c0
        row, agrees = _run_sweep(ns, f"{world} ranks", pt2, plans_dir, paths, (plans_s, plans_cpu),
                                 lambda path: commlens.measure.measure(ns.model, path, phase=ns.phase))
        rows.append(("llama", world) + row)
        ok &= agrees

    moe_export = (0.0, 0.0)
    if ns.moe_worlds:
        import examples.titan  # torchtitan imported once, before either side is timed
        from commlens._errors import CommlensError
        from commlens.capture import capture
        from commlens.plan import save

        model_args = dict(eval(f"dict({ns.moe_model})"))  # noqa: S307 - the bench's own option
        moe_spec = f"examples.titan:moe_stack({ns.moe_model})"
        moe_pt2 = work / "moe.pt2"
        print(f"== MoE model: {moe_spec}\nsweep: examples.titan:parallelize_moe_stack(tp=..., dp_shard=...) "
              f"(torchtitan's apply_moe_ep_tp and apply_fsdp), each plan captured from it", flush=True)
        t0, c0 = time.perf_counter(), cpu_seconds()
        save_program(export_model(*call_model_factory(moe_spec)), str(moe_pt2))
        moe_export = (time.perf_counter() - t0, cpu_seconds() - c0)
        print(f"export_model + save_program (once): {moe_export[0]:.2f} s (CPU {moe_export[1]:.2f} s)", flush=True)
        for world in (int(w) for w in ns.moe_worlds.split(",")):
            plans_dir = _fresh_dir(work / f"moe_plans{world}")
            paths, split_of = [], {}
            t0, c0 = time.perf_counter(), cpu_seconds()
            for tp in (d for d in range(1, world + 1) if world % d == 0):
                dp = world // tp
                fn = f"examples.titan:parallelize_moe_stack(tp={tp}, dp_shard={dp})"
                try:
                    plan = capture(moe_spec, fn, world)
                except CommlensError as err:
                    print(f"not captured (the parallelize function fails, so CommDebugMode cannot run it either): "
                          f"{err}")
                    continue
                path = str(plans_dir / f"moe_stack-dp{dp}-tp{tp}.json")
                save(plan, path)
                paths.append(path)
                split_of[path] = (tp, dp)
            plans_s, plans_cpu = time.perf_counter() - t0, cpu_seconds() - c0

            def measure_split(path):
                tp, dp = split_of[path]
                doc = examples.titan.measure_moe_stack(phase=ns.phase, tp=tp, dp_shard=dp, **model_args)
                return {m["fqn"]: {"forward": m["forward"], "backward": m["backward"]} for m in doc["modules"]}

            row, agrees = _run_sweep(ns, f"MoE, {world} ranks", moe_pt2, plans_dir, paths, (plans_s, plans_cpu),
                                     measure_split, written="captured")
            rows.append(("moe", world) + row)
            ok &= agrees

    print("== summary (seconds, wall and CPU; commlens = plans written (Llama) or captured (MoE) + one rank "
          "process per sweep, each model's export once for all its sweeps)")
    print(f"{'model':>6} {'ranks':>6} {'plans':>6} {'commlens':>9} {'CommDebugMode':>14} {'ratio':>7}   "
          f"{'CPU: commlens':>13} {'CommDebugMode':>14} {'ratio':>7}  CommDebugMode")
    for model, world, n, ours, theirs, ours_cpu, theirs_cpu, estimated in rows:
        print(f"{model:>6} {world:>6} {n:>6} {ours:>9.3f} {theirs:>14.1f} {theirs / ours:>6.0f}x   {ours_cpu:>13.3f} "
              f"{theirs_cpu:>14.1f} {theirs_cpu / ours_cpu:>6.0f}x  "
              f"{'all run' if not estimated else f'{n - estimated} run, {estimated} estimated'}")
    for model, export in (("llama", (export_s, export_cpu)), ("moe", moe_export)):
        mine = [r for r in rows if r[0] == model]
        if not mine:
            continue
        ours, theirs = sum(r[3] for r in mine), sum(r[4] for r in mine)
        ours_cpu, theirs_cpu = sum(r[5] for r in mine), sum(r[6] for r in mine)
        print(f"{model} sweeps: commlens {ours:.3f} s, CommDebugMode {theirs:.1f} s: {theirs / ours:.0f}x (CPU "
              f"{theirs_cpu / ours_cpu:.0f}x); with the export ({export[0]:.2f} s, CPU {export[1]:.2f} s): "
              f"{theirs / (ours + export[0]):.1f}x (CPU {theirs_cpu / (ours_cpu + export[1]):.1f}x)")
    return 0 if ok else 1


def _fresh_dir(path):
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("*.json"):
        old.unlink()
    return path


def _run_sweep(ns, label, pt2, plans_dir, paths, plans_time, measure_plan, written="written"):
    """One `commlens rank` of the plans in plans_dir (--rank-runs times, the median counted), then
    CommDebugMode (measure_plan(path) -> its counts per module) on --sample of them. Returns
    ((plans, commlens wall, CommDebugMode wall, commlens CPU, CommDebugMode CPU, plans estimated),
    whether every measured plan agrees with the ranking)."""
    plans_s, plans_cpu = plans_time
    ok = True
    rank = [ns.commlens, "rank", str(pt2), "--plans", str(plans_dir), "--cluster", ns.cluster,
            "--phase", ns.phase, "--format", "json"] + ([] if ns.jobs is None else ["--jobs", str(ns.jobs)])
    # A 0.3 s process is at the mercy of this machine's noise (the first run after the export
    # took up to twice the CPU of the next ones): --rank-runs runs of the same ranking, their
    # median (by wall time) counted, every run printed.
    timed = []
    for _ in range(ns.rank_runs):
        t0, c0 = time.perf_counter(), cpu_seconds()
        done = subprocess.run(rank, capture_output=True, text=True)
        timed.append((time.perf_counter() - t0, cpu_seconds() - c0))
        if done.returncode != 0:
            sys.exit(f"bench: {' '.join(rank)} failed:\n{done.stderr}")
    rank_s, rank_cpu = sorted(timed)[len(timed) // 2]
    ranked = json.loads(done.stdout)
    runs_text = ", ".join(f"{w:.3f} s (CPU {c:.3f} s)" for w, c in timed)
    print(f"== {label}: {len(paths)} plans, ranked by commlens rank on {ranked['jobs']} thread"
          f"{'' if ranked['jobs'] == 1 else 's'} in {rank_s:.3f} s, CPU {rank_cpu:.3f} s "
          f"({'the median of ' + runs_text if len(timed) > 1 else 'one run'}; plans {written} in {plans_s:.3f} s)")
    print(f"{'rank':>4}  {'plan':<28} {'time/step':>12} {'collectives':>12} {'bytes/rank':>15}")
    for entry in ranked["plans"]:
        print(f"{entry['rank']:>4}  {entry['name']:<28} {entry['time_us'] / 1e3:>9.3f} ms "
              f"{sum(entry['collectives'].values()):>12} "
              f"{entry['forward']['bytes_per_rank'] + entry['backward']['bytes_per_rank']:>15}")
    for error in ranked["errors"]:  # {"plan": path, "error": "path: why"}, the why printed once
        print(f"not ranked: {error['error']}")
    sys.stdout.flush()
    # spread over the sweep; a plan CommDebugMode cannot run (its error printed) gives way to the next
    order = sorted(range(len(paths)), key=lambda i: (i * max(ns.sample, 1)) % len(paths))
    wanted = len(paths) if ns.sample <= 0 else min(ns.sample, len(paths))
    refused = {os.path.realpath(e["plan"]) for e in ranked["errors"]}
    runs = {True: [], False: []}  # ran: [(wall, CPU)], failed under DTensor: [(wall, CPU)]
    for path in (paths[i] for i in order):
        if len(runs[True]) == wanted:
            break
        t0, c0 = time.perf_counter(), cpu_seconds()
        try:
            counts = measure_plan(path)
        except Exception as err:  # noqa: BLE001 - the plan does not run under DTensor: timed until it fails
            runs[False].append((time.perf_counter() - t0, cpu_seconds() - c0))
            why = str(err).strip().splitlines()[-1][:200] if str(err).strip() else type(err).__name__
            agrees = os.path.realpath(path) in refused
            ok &= agrees
            print(f"CommDebugMode {pathlib.Path(path).name}: fails after {runs[False][-1][0]:.2f} s: {why}; "
                  f"commlens refused it too: {'yes' if agrees else 'NO'}", flush=True)
            continue
        runs[True].append((time.perf_counter() - t0, cpu_seconds() - c0))
        same = os.path.realpath(path) not in refused and _same_totals(counts, ranked, path)
        ok &= same
        print(f"CommDebugMode {pathlib.Path(path).name}: {runs[True][-1][0]:.2f} s, CPU {runs[True][-1][1]:.2f} s; "
              f"counts equal the ranking's: {'yes' if same else 'NO'}", flush=True)
    if not runs[True]:
        sys.exit("bench: CommDebugMode ran none of the sampled plans")

    # Each plan costs CommDebugMode one run: the plans it can run at the mean of those measured,
    # the ones DTensor fails on (those rank refused) at the mean time to fail, 0 if none was tried.
    def total(k):
        mean = lambda ran: sum(r[k] for r in runs[ran]) / len(runs[ran]) if runs[ran] else 0.0  # noqa: E731
        return mean(True) * (len(paths) - len(refused)) + mean(False) * len(refused)

    cdm_s, cdm_cpu = total(0), total(1)
    tried = len(runs[True]) + len(runs[False])
    estimated = len(paths) - tried
    print(f"CommDebugMode, {len(paths)} plans ({len(refused)} of them fail under DTensor): {cdm_s:.1f} s, CPU "
          f"{cdm_cpu:.1f} s ({'all run' if not estimated else f'{tried} run, {estimated} estimated from the mean of their kind'}"
          f"{'' if runs[False] or not refused else '; the failing ones counted as 0 s: none was tried'})")
    return (len(paths), plans_s + rank_s, cdm_s, plans_cpu + rank_cpu, cdm_cpu, estimated), ok


def _same_totals(counts, ranked, path):
    """CommDebugMode's collectives per op (forward plus backward, the whole model) equal the
    ranking's for this plan."""
    entry = next(p for p in ranked["plans"] if os.path.samefile(p["plan"], path))
    totals = {}
    for ops in counts["Global"].values():
        for op, n in ops.items():
            totals[op] = totals.get(op, 0) + n
    return {op: n for op, n in totals.items() if n} == entry["collectives"]


if __name__ == "__main__":
    sys.exit(main())
