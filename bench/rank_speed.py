"""`commlens rank` over the dp x tp factorisations of 8 and 64 ranks for the Llama example (64
heads so that every tp up to 64 splits whole heads), and what one more plan costs in one rank
process against a `commlens predict` process per plan. Measured in this run:

    .venv/bin/python bench/rank_speed.py [--cluster h100-ib-ndr] [--repeat 3] [--work-dir out/bench/rank]

Prints the ranking of each sweep, then: the wall time of `rank` with one plan and with all of
them (best of --repeat; rank predicts them on a thread per core), the time per extra plan, and
one `predict --cluster` process's time. The plans with tp above 16 (SequenceParallel splits the
16-token sequence unevenly) are refused by rank, as DTensor fails on them; they count among "all"
(a refused plan costs about half a ranked one), and the one-plan runs take the first ranked plan.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")
MODEL = "examples.llama:llama(dim=512, n_heads=64, n_kv_heads=64)"
SWEEP = "examples.plans:llama_fsdp_tp(dp={dp}, tp={tp})"


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench: command failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr}")
    return p.stdout


def best_time(cmd, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        run(cmd)
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", default="h100-ib-ndr")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work-dir", default=str(ROOT / "out" / "bench" / "rank"))
    parser.add_argument("--commlens", default=str(pathlib.Path(os.environ.get("COMMLENS_BUILD", ROOT / "build"))
                                                  / "commlens"))
    ns = parser.parse_args(argv)
    work = pathlib.Path(ns.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    pt2 = work / "llama_64heads.pt2"
    if not pt2.exists():
        run([PY, "-m", "commlens.export", MODEL, "-o", str(pt2)])
    dirs = []
    for world in (8, 64):
        d = work / f"plans{world}"
        run([PY, "-m", "commlens.plan", "--sweep", SWEEP, "--world-size", str(world), "-o", str(d)])
        dirs.append(d)
        print(f"== {MODEL} under {SWEEP}, world size {world}")
        print(run([ns.commlens, "rank", str(pt2), "--plans", str(d), "--cluster", ns.cluster]), end="")
    plans = sorted(str(p) for d in dirs for p in d.glob("*.json"))
    every = [x for d in dirs for x in ("--plans", str(d))]
    ranked = json.loads(run([ns.commlens, "rank", str(pt2), *every, "--cluster", ns.cluster, "--format", "json"]))
    first = sorted(p["plan"] for p in ranked["plans"])[0]
    one = best_time([ns.commlens, "rank", str(pt2), "--plan", first, "--cluster", ns.cluster], ns.repeat)
    allp = best_time([ns.commlens, "rank", str(pt2), *every, "--cluster", ns.cluster], ns.repeat)
    predict = best_time([ns.commlens, "predict", str(pt2), "--plan", first, "--phase", "both", "--cluster",
                         ns.cluster, "--format", "json", "-o", os.devnull], ns.repeat)
    extra = (allp - one) / (len(plans) - 1)
    print(f"== speed ({len(plans)} plans, {len(ranked['plans'])} ranked, {len(ranked['errors'])} refused; rank on "
          f"{ranked['jobs']} threads; best of {ns.repeat})")
    print(f"rank, 1 plan:             {one:8.3f} s")
    print(f"rank, {len(plans)} plans:           {allp:8.3f} s")
    print(f"per extra plan in rank:   {extra:8.3f} s")
    print(f"predict, 1 plan:          {predict:8.3f} s  (a process per plan: {len(plans) * predict:.3f} s for all; "
          f"rank: {predict / extra if extra > 0 else float('inf'):.1f}x less per extra plan)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
