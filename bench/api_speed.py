"""In-memory prediction (commlens.predict on an ExportedProgram) against the CLI on the same program
saved as .pt2, for the 405B-shaped Llama (default) or the 48-layer GPT-2, measured in this run:

    .venv/bin/python bench/api_speed.py [--model llama-405b|gpt2-48] [--plan SPEC] [--phases forward,both]
        [--repeat 3]

The model is exported once (export_model) and saved once (save_program). Per phase, best of
--repeat, the paths taking turns in each round (this machine's load varies) and a full garbage
collection before each, outside the timing:

  CLI            `commlens predict m.pt2 --format json -o FILE`, a process (start-up, archive, decode,
                 passes, report written);
  in memory      commlens.predict(ep, ...).to_json(): the decoder's JSON from commlens' writer of the
                 FX graph (commlens.export.decoder_program_json), decode, passes, report;
  torch JSON     the same from torch's serialiser (commlens.export.program_json): the in-memory path
                 before commlens' writer;
  save + CLI     commlens.export.save_program, then the CLI: the file path of a Python pipeline.

Prints each path's wall time and CPU time (all threads and child processes: on a loaded machine it
varies less), their ratios to the CLI's, the writer's and torch's serialiser's share, and whether
the in-memory counts equal the CLI's.
"""
import argparse
import gc
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
for p in (str(ROOT / "python"), str(ROOT), str(ROOT / "bench")):
    if p not in sys.path:
        sys.path.insert(0, p)
from benchutil import cpu_seconds  # noqa: E402
from predict_speed import MODELS  # noqa: E402



def timed(fn):
    """(wall seconds, CPU seconds, fn's result): on a loaded machine the CPU time varies less."""
    gc.collect()
    t0, c0 = time.perf_counter(), cpu_seconds()
    result = fn()
    return time.perf_counter() - t0, cpu_seconds() - c0, result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-405b", choices=sorted(MODELS))
    ap.add_argument("--plan", help="plan factory spec (default: the model's in bench/predict_speed.py)")
    ap.add_argument("--phases", default="forward,both")
    ap.add_argument("--repeat", type=int, default=3)
    ns = ap.parse_args(argv)

    import commlens
    from commlens._factory import call_model_factory
    from commlens._native import core
    from commlens.export import decoder_program_json, export_model, program_json, save_program, tied_parameters_json
    from commlens.plan import resolve_plan, save

    spec, default_plan = MODELS[ns.model]
    plan_spec = ns.plan or default_plan
    t0 = time.perf_counter()
    ep = export_model(*call_model_factory(spec))
    export_s = time.perf_counter() - t0
    binary = str(pathlib.Path(os.environ.get("COMMLENS_BUILD", ROOT / "build")) / "commlens")
    print(f"config: {ns.model} = {spec} under {plan_spec}; export_model {export_s:.2f} s (once); best of {ns.repeat}",
          flush=True)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        plan, pt2, out = (os.path.join(tmp, name) for name in ("plan.json", "m.pt2", "cli.json"))
        save(resolve_plan(plan_spec), plan)
        save_program(ep, pt2)
        plan_text = open(plan).read()
        tied = tied_parameters_json(ep)
        commlens.predict(ep, plan, "forward")  # loads the extension outside the timing
        for phase in ns.phases.split(","):
            cli = [binary, "predict", pt2, "--plan", plan, "--phase", phase, "--format", "json", "-o", out]

            def via_torch_json():
                t = time.perf_counter()
                text = program_json(ep)
                serialise_s = time.perf_counter() - t
                core().predict_program_json(text, tied, plan_text, plan, phase, None, None, False).json()
                return serialise_s

            def via_writer():
                t = time.perf_counter()
                decoder_program_json(ep)
                return time.perf_counter() - t

            paths = {
                "CLI": lambda: subprocess.run(cli, check=True),
                "in memory": lambda: commlens.predict(ep, plan, phase).to_json(),
                "torch JSON": via_torch_json,
                "save + CLI": lambda: (save_program(ep, pt2), subprocess.run(cli, check=True)),
            }
            best = {name: float("inf") for name in paths}
            cpu = dict(best)
            writer_s, serialiser_s = float("inf"), float("inf")
            for _ in range(ns.repeat):
                for name, fn in paths.items():
                    elapsed, cpu_s, result = timed(fn)
                    best[name], cpu[name] = min(best[name], elapsed), min(cpu[name], cpu_s)
                    if name == "torch JSON":
                        serialiser_s = min(serialiser_s, result)
                writer_s = min(writer_s, timed(via_writer)[0])
            with open(out) as f:
                doc = json.load(f)
            same = commlens.predict(ep, plan, phase).counts()["Global"] == {
                "forward": dict(doc["collectives_forward"]), "backward": dict(doc["collectives_backward"])}
            ok &= same
            cli_s, mem_s, torch_s = best["CLI"], best["in memory"], best["torch JSON"]
            print(f"-- phase {phase} (wall seconds, and CPU seconds of all threads and child processes)")
            for label, name, note in (
                    ("CLI (commlens predict on the .pt2, a process)", "CLI", ""),
                    ("in memory (commlens' writer)", "in memory", f" (writer {writer_s:.3f} s)"),
                    ("in memory with torch's serialiser (before)", "torch JSON", f" (serialiser {serialiser_s:.3f} s)"),
                    ("save_program + CLI (the file path)", "save + CLI", "")):
                print(f"{label + ':':<48} {best[name]:7.3f} s = {best[name] / cli_s:5.2f}x CLI;   CPU {cpu[name]:7.3f} s = "
                      f"{cpu[name] / cpu['CLI']:5.2f}x CLI{note}")
            print(f"in memory: {torch_s / mem_s:.1f}x faster than with torch's serialiser (CPU "
                  f"{cpu['torch JSON'] / cpu['in memory']:.1f}x); counts equal the CLI's: {'yes' if same else 'NO'}",
                  flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
