"""Speed and memory of `commlens export` + `commlens predict` against CommDebugMode on the same
configuration, for the 48-layer GPT-2-style example and the 405B-shaped Llama (126 layers, dim
16384, 128 heads, 8 kv heads, vocab 128256; meta device: no weights), in one run:

    .venv/bin/python bench/predict_speed.py [--models gpt2-48,llama-405b] [--phases forward,both]
        [--repeat 3] [--commlens PATH]

Per model, measured in this run: the export (`python -m commlens.export` process: wall time, peak
RSS, and its torch.export and save times), and the one-process path of a user who starts from the
model (`export_model` + in-memory `commlens.predict`). Per phase: each stage of one predict
(process start-up, then `predict --time-passes`: load and decode, every pass, report), predict wall
time (best of --repeat) and peak RSS, `commlens.measure` (CommDebugMode, fake process group, one
process) wall time and peak RSS, their ratio, whether the counts are identical, and export +
predict against measure. A summary table closes the run.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchutil import run_child  # noqa: E402

LLAMA_405B = ("examples.llama:llama(n_layers=126, dim=16384, n_heads=128, n_kv_heads=8, ffn_dim_multiplier=1.2, "
              "multiple_of=4096, vocab=128256, device='meta')")
MODELS = {
    "gpt2-48": ("examples.gpt2:gpt2(n_layers=48, device='meta')", "examples.plans:gpt2_tp_sp(tp=4, dp=2)"),
    "llama-405b": (LLAMA_405B, "examples.plans:llama_tp(tp=8)"),
}
EXPORT_LINE = re.compile(r" in ([\d.]+)s \(torch\.export ([\d.]+)s, save ([\d.]+)s\)$")


def one_process(model, plan, phase, out):
    """The path of a user who starts from the model, in this process: factory, export_model,
    commlens.predict on the ExportedProgram (in memory). Prints its stage times as JSON."""
    t0 = time.perf_counter()
    import torch  # noqa: F401  - counted in the start-up, as in a process of its own

    import commlens
    from commlens._factory import call_model_factory
    from commlens.export import export_model

    t1 = time.perf_counter()
    made = call_model_factory(model)
    t2 = time.perf_counter()
    ep = export_model(*made)
    t3 = time.perf_counter()
    prediction = commlens.predict(ep, plan, phase)
    t4 = time.perf_counter()
    with open(out, "w") as f:
        f.write(prediction.to_json())
    print(json.dumps({"import": t1 - t0, "factory": t2 - t1, "export": t3 - t2, "predict": t4 - t3}))
    return 0


def bench_model(name, ns, work, py):
    model, plan_spec = MODELS[name]
    commlens = ns.commlens
    print(f"== {name}: {model} under {plan_spec}", flush=True)
    pt2, plan = work / f"{name}.pt2", work / f"{name}.plan.json"
    run_child([py, "-m", "commlens.plan", plan_spec, "-o", str(plan)])
    export_s, export_mib, out, _ = run_child([py, "-m", "commlens.export", model, "-o", str(pt2)])
    line = out.strip().splitlines()[-1]
    m = EXPORT_LINE.search(line)
    trace_s, save_s = float(m.group(2)), float(m.group(3))
    n_ops = re.search(r", (\d+) ops\)", line).group(1)
    print(f"export (python -m commlens.export): {export_s:7.2f} s   peak RSS {export_mib:8.1f} MiB   "
          f"(torch.export {trace_s:.2f} s, save {save_s:.2f} s, start-up and factory "
          f"{export_s - trace_s - save_s:.2f} s; {n_ops} ops, {pt2.stat().st_size / 2**20:.1f} MiB archive)")
    rows = []
    for phase in ns.phases:
        print(f"-- phase {phase}")
        predicted, measured = work / f"{name}.{phase}.predicted.json", work / f"{name}.{phase}.measured.json"
        predict = [commlens, "predict", str(pt2), "--plan", str(plan), "--phase", phase, "--format", "json",
                   "-o", str(predicted)]
        runs = [run_child(predict) for _ in range(ns.repeat)]
        predict_s, predict_mib = min(r[0] for r in runs), max(r[1] for r in runs)
        timed_s, _, _, err = run_child(predict + ["--time-passes"])
        stages = [line for line in err.splitlines()
                  if line.strip().endswith(tuple("abcdefghijklmnopqrstuvwxyz)")) and " s  " in line]
        total = float(stages[-1].split()[0])
        print("predict stages (--time-passes):")
        print(f"  {timed_s - total:9.4f} s  process start-up (before main)")
        for line in stages:
            print(line)
        measure_s, measure_mib, _, _ = run_child(
            [py, "-m", "commlens.measure", model, "--plan", str(plan), "--phase", phase, "-o", str(measured),
             "--noise-level", "0"])
        same = subprocess.run([commlens, "compare", str(predicted), str(measured), "--phase", phase],
                              stdout=subprocess.DEVNULL).returncode == 0
        one_out = work / f"{name}.{phase}.in_memory.json"
        one_s, one_mib, out, _ = run_child([py, __file__, "--one-process", model, str(plan), phase, str(one_out)])
        one = json.loads(out.strip().splitlines()[-1])
        one_same = subprocess.run([commlens, "compare", str(one_out), str(measured), "--phase", phase],
                                  stdout=subprocess.DEVNULL).returncode == 0
        print(f"commlens predict:        {predict_s:8.3f} s   peak RSS {predict_mib:8.1f} MiB   (best of {ns.repeat})")
        print(f"CommDebugMode (measure): {measure_s:8.3f} s   peak RSS {measure_mib:8.1f} MiB")
        print(f"ratio measure/predict:   {measure_s / predict_s:8.1f}x time, {measure_mib / predict_mib:.1f}x memory; "
              f"counts identical: {'yes' if same else 'NO'}")
        both_s = export_s + predict_s
        print(f"export + predict:        {both_s:8.3f} s   = {both_s / measure_s:.2f}x measure "
              f"({'faster' if both_s < measure_s else 'slower'})")
        print(f"one process from the model (export_model + commlens.predict): {one_s:.3f} s = "
              f"{one_s / measure_s:.2f}x measure, peak RSS {one_mib:.1f} MiB (start-up {one['import']:.2f} s, "
              f"factory {one['factory']:.2f} s, torch.export {one['export']:.2f} s, "
              f"commlens.predict {one['predict']:.2f} s with the program's JSON); "
              f"counts identical: {'yes' if one_same else 'NO'}", flush=True)
        rows.append((name, phase, export_s, predict_s, both_s, one_s, measure_s, same and one_same))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--phases", default="forward,both")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--commlens", default=str(pathlib.Path(os.environ.get("COMMLENS_BUILD", ROOT / "build"))
                                              / "commlens"))
    ap.add_argument("--work-dir", default=str(ROOT / "out" / "bench"))
    ap.add_argument("--one-process", nargs=4, metavar=("MODEL", "PLAN", "PHASE", "OUT"), help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if ns.one_process:
        return one_process(*ns.one_process)
    if not os.path.exists(ns.commlens):
        ap.error(f"{ns.commlens} is not built (--commlens PATH or COMMLENS_BUILD=DIR)")
    ns.phases = ns.phases.split(",")
    # the one-process child loads the extension built beside this binary
    os.environ["COMMLENS_BUILD"] = str(pathlib.Path(ns.commlens).resolve().parent)
    unknown = [m for m in ns.models.split(",") if m not in MODELS]
    if unknown:
        ap.error(f"unknown model {unknown[0]!r} (known: {', '.join(MODELS)})")
    work = pathlib.Path(ns.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in ns.models.split(","):
        rows += bench_model(name, ns, work, sys.executable)
    print("== summary (wall seconds; ratio = measure / (export + predict), above 1 means commlens is faster)")
    print(f"{'model':<12} {'phase':<8} {'export':>7} {'predict':>8} {'exp+pred':>9} {'1 process':>10} "
          f"{'measure':>8} {'ratio':>6}  same")
    for name, phase, export_s, predict_s, both_s, one_s, measure_s, same in rows:
        print(f"{name:<12} {phase:<8} {export_s:7.2f} {predict_s:8.3f} {both_s:9.2f} {one_s:10.2f} {measure_s:8.2f} "
              f"{measure_s / both_s:6.2f}  {'yes' if same else 'NO'}")
    return 0 if all(r[-1] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
