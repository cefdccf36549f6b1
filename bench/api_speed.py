"""In-memory prediction (commlens.predict on an ExportedProgram) against the file path a Python
pipeline had before (torch.export.save, then a `commlens predict` process), on the same program
and plan, measured in this run:

    .venv/bin/python bench/api_speed.py [--layers 48] [--plan SPEC] [--phase both] [--repeat 3]

Prints, best of --repeat: torch.export (once, shared), then for each path the time from the
ExportedProgram to the prediction: in memory = serialise to JSON + decode + passes + report in
this process; file = torch.export.save + the CLI (start-up, zip reader, decode, passes,
report), and their ratio. Both must give the same counts.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
for p in (str(ROOT / "python"), str(ROOT)):
    if p not in sys.path:
        sys.path.insert(0, p)


def best(fn, repeat):
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--plan", default="examples.plans:gpt2_tp_sp(tp=4, dp=2)")
    ap.add_argument("--phase", default="both")
    ap.add_argument("--repeat", type=int, default=3)
    ns = ap.parse_args(argv)
    import torch

    import commlens
    from commlens._factory import call_model_factory
    from commlens.export import export_model
    from commlens.plan import resolve_plan, save

    spec = f"examples.gpt2:gpt2(n_layers={ns.layers}, device='meta')"
    model, args, kwargs = call_model_factory(spec)
    t0 = time.perf_counter()
    ep = export_model(model, args, kwargs)
    export_s = time.perf_counter() - t0
    binary = str(pathlib.Path(os.environ.get("COMMLENS_BUILD", ROOT / "build")) / "commlens")
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "plan.json")
        save(resolve_plan(ns.plan), plan)
        commlens.predict(ep, plan, ns.phase)  # loads the extension once, outside the timing

        def in_memory():
            return commlens.predict(ep, plan, ns.phase).counts()

        def via_file():
            pt2 = os.path.join(tmp, "m.pt2")
            out = os.path.join(tmp, "p.json")
            torch.export.save(ep, pt2)
            subprocess.run([binary, "predict", pt2, "--plan", plan, "--phase", ns.phase, "--format", "json", "-o", out],
                           check=True)
            with open(out) as f:
                return json.load(f)

        mem_s, mem_counts = best(in_memory, ns.repeat)
        file_s, file_doc = best(via_file, ns.repeat)
    root = file_doc
    same = mem_counts["Global"] == {"forward": dict(root["collectives_forward"]),
                                    "backward": dict(root["collectives_backward"])}
    print(f"config: {spec} x {ns.plan}, phase {ns.phase}; torch.export {export_s:.3f} s (shared)")
    print(f"in memory (commlens.predict on the ExportedProgram):   {mem_s:8.3f} s")
    print(f"file (torch.export.save + commlens predict process):  {file_s:8.3f} s")
    print(f"ratio file / in memory: {file_s / mem_s:.1f}x; same counts: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
