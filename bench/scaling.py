"""Predict cost against world size: the Llama example under FSDP2 x tensor + sequence parallel
(tp 8, dp = world / 8) from 8 to 131,072 ranks, both phases. Prints, measured in this run, per
world size: `commlens predict` wall time (best of --repeat) and peak RSS, the collectives
predicted, and, up to --measure-max ranks, `commlens.measure` (CommDebugMode, fake process group,
one process) time and the ratio. Counts are compared with measure where it runs.

    .venv/bin/python bench/scaling.py [--max 131072] [--measure-max 1024] [--repeat 3]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")
MODEL = "examples.llama:llama"
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchutil import peak_rss_mib, run_timed  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max", type=int, default=131072)
    ap.add_argument("--measure-max", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ns = ap.parse_args(argv)
    binary = str(pathlib.Path(os.environ.get("COMMLENS_BUILD", ROOT / "build")) / "commlens")
    sizes = []
    n = 8
    while n <= ns.max:
        sizes.append(n)
        n *= 4 if n < 2048 else 8
    if sizes[-1] != ns.max and ns.max >= 8:
        sizes.append(ns.max)
    with tempfile.TemporaryDirectory() as tmp:
        pt2 = os.path.join(tmp, "llama.pt2")
        subprocess.run([PY, "-m", "commlens.export", MODEL, "-o", pt2], check=True, capture_output=True)
        print(f"{MODEL} x examples.plans:llama_fsdp_tp(dp=world/8, tp=8), phase both")
        print(f"{'world':>7} {'predict s':>10} {'RSS MiB':>8} {'collectives':>11} {'measure s':>10} {'ratio':>7}  counts")
        base = None
        for world in sizes:
            spec = f"examples.plans:llama_fsdp_tp(dp={world // 8}, tp=8)"
            plan = os.path.join(tmp, f"plan{world}.json")
            subprocess.run([PY, "-m", "commlens.plan", spec, "-o", plan], check=True, capture_output=True)
            pred = os.path.join(tmp, f"pred{world}.json")
            cmd = [binary, "predict", pt2, "--plan", plan, "--phase", "both", "--format", "json", "-o", pred]
            t = min(run_timed(cmd) for _ in range(ns.repeat))
            rss = peak_rss_mib(cmd)
            with open(pred) as f:
                doc = json.load(f)
            total = sum(n for _, n in doc["collectives_forward"]) + sum(n for _, n in doc["collectives_backward"])
            base = base or t
            line = f"{world:>7} {t:>10.3f} {rss:>8.1f} {total:>11}"
            if world <= ns.measure_max:
                m = os.path.join(tmp, f"m{world}.json")
                mt = run_timed([PY, "-m", "commlens.measure", MODEL, "--plan", plan, "--phase", "both", "-o", m,
                            "--noise-level", "0"])
                same = subprocess.run([binary, "compare", pred, m.replace(".json", ".counts.json"), "--phase", "both"],
                                      stdout=subprocess.DEVNULL).returncode == 0
                line += f" {mt:>10.3f} {mt / t:>6.1f}x  {'identical' if same else 'DIFFER'}"
            else:
                line += f" {'-':>10} {'-':>7}  (measure not run)"
            print(line, flush=True)
        print(f"predict time at {sizes[-1]} ranks / at 8: {t / base:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
