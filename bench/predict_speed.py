"""Speed and memory of `commlens predict` against CommDebugMode on the same configuration.

Default: the 48-layer GPT-2-style example (meta device: no weights) under a 2-D plan, data
parallel 2 x tensor+sequence parallel 4, forward phase. Prints, measured in this run: each
stage of one predict (process start-up, then `predict --time-passes`: load, every pass, report),
predict wall time (best of --repeat runs) and peak RSS, `commlens.measure` (CommDebugMode, fake
process group, one process) wall time and peak RSS, and their ratios.

    .venv/bin/python bench/predict_speed.py [--layers 48] [--plan SPEC] [--phase forward] [--repeat 3]
"""
import argparse
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchutil import peak_rss_mib, run_timed  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--plan", default="examples.plans:gpt2_tp_sp(tp=4, dp=2)")
    ap.add_argument("--phase", default="forward")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work-dir", default=str(ROOT / "out" / "bench"))
    args = ap.parse_args()

    work = pathlib.Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    model = f"examples.gpt2:gpt2(n_layers={args.layers}, device='meta')"
    pt2, plan = work / f"gpt2_{args.layers}.pt2", work / "plan.json"
    commlens = str(ROOT / "build" / "commlens")
    if not pt2.exists():
        subprocess.run([PY, "-m", "commlens.export", model, "-o", str(pt2)], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([PY, "-m", "commlens.plan", args.plan, "-o", str(plan)], check=True, stdout=subprocess.DEVNULL)

    predict = [commlens, "predict", str(pt2), "--plan", str(plan), "--phase", args.phase, "--format", "json",
               "-o", str(work / "predicted.json")]
    measure = [PY, "-m", "commlens.measure", model, "--plan", str(plan), "--phase", args.phase,
               "-o", str(work / "measured.json"), "--noise-level", "0"]

    predict_s = min(run_timed(predict) for _ in range(args.repeat))
    measure_s = min(run_timed(measure) for _ in range(max(1, args.repeat // 3)))
    predict_mib, measure_mib = peak_rss_mib(predict), peak_rss_mib(measure)
    same = subprocess.run([commlens, "compare", str(work / "predicted.json"), str(work / "measured.json"),
                           "--phase", args.phase],
                          stdout=subprocess.DEVNULL).returncode == 0

    t0 = time.perf_counter()
    timed = subprocess.run(predict + ["--time-passes"], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    stages = [line for line in timed.stderr.splitlines() if line.strip().endswith(tuple("abcdefghijklmnopqrstuvwxyz)"))
              and " s  " in line]
    total = float(stages[-1].split()[0])
    print(f"config: {model} x {args.plan}, phase {args.phase}")
    print("predict stages (--time-passes):")
    print(f"  {wall - total:9.4f} s  process start-up (before main)")
    for line in stages:
        print(line)
    print(f"commlens predict:        {predict_s:8.3f} s   peak RSS {predict_mib:8.1f} MiB")
    print(f"CommDebugMode (measure): {measure_s:8.3f} s   peak RSS {measure_mib:8.1f} MiB")
    print(f"ratio measure/predict:   {measure_s / predict_s:8.1f}x time, {measure_mib / predict_mib:.1f}x memory")
    print(f"predict under 1 s: {'yes' if predict_s < 1.0 else 'NO'}; counts identical: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
