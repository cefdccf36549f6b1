"""Builds the seed corpora of the libFuzzer targets (fuzz/*.cpp) from the repository's examples.

    .venv/bin/python fuzz/make_seeds.py [--small-limit BYTES] [--generated DIR]

Exports small example models (``python -m commlens.export``), serialises example plans
(``python -m commlens.plan``), measures one configuration with the fake backend
(``python -m commlens.measure``: the CommDebugMode dump and the counts file), and writes, per
target, the inputs it reads:

  pt2_archive   the .pt2 archives
  program_json  their models/model.json records
  plan          the plans (those for examples.mlp:mlp pass the plan target's program check)
                and tests/lit/Inputs/*.json
  counts        measure's dump and counts files, and tests/compare's inputs when present
  predict       model.json + "\\n%%plan%%\\n" or "\\n%%plan+backward%%\\n" + plan

A seed up to --small-limit bytes goes to fuzz/corpus/<target>/ (committed; keep the total to a
few hundred KB); a larger one to --generated/<target>/ (fuzz/corpus-generated, git-ignored),
which scripts/fuzz.sh also passes to the fuzzer when it exists. File names say what a seed is,
so a rerun overwrites rather than adds.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (name, model factory): small configurations, so that the predict target stays fast.
MODELS = [
    ("mlp", "examples.mlp:mlp"),
    ("linear", "examples.mlp:linear"),
    ("stacked_mlp", "examples.mlp:stacked_mlp(n_layers=2)"),
    ("gated", "examples.kwargs:gated(n_layers=1)"),
    ("shared_mlp", "examples.shared:shared_mlp"),
    ("gpt2", "examples.gpt2:gpt2(n_layers=1, dim=32, n_heads=4, vocab=64, seq=8)"),
    ("llama", "examples.llama:llama(n_layers=1, dim=32, n_heads=4, n_kv_heads=2, vocab=64, seq=8)"),
]

# (name, plan factory, model name it is written for).
PLANS = [
    ("mlp_tp", "examples.plans:mlp_tp(tp=4)", "mlp"),
    ("mlp_tp_grad", "examples.plans:mlp_tp(tp=2, input_requires_grad=True)", "mlp"),
    ("mlp_2d", "examples.plans:mlp_2d(dp=2, tp=2)", "mlp"),
    ("mlp_nd", "examples.plans:mlp_nd(dp=2, tp=4)", "mlp"),
    ("linear_colwise", "examples.plans:linear_colwise(tp=4)", "linear"),
    ("linear_rowwise", "examples.plans:linear_rowwise(tp=2)", "linear"),
    ("stacked_mlp_tp", "examples.plans:stacked_mlp_tp(tp=4)", "stacked_mlp"),
    ("stacked_mlp_fsdp", "examples.plans:stacked_mlp_fsdp(dp=4)", "stacked_mlp"),
    ("stacked_mlp_fsdp_tp_nested_ac", "examples.plans:stacked_mlp_fsdp_tp_nested_ac(dp=2, tp=2)", "stacked_mlp"),
    ("gated_tp", "examples.plans:gated_tp(tp=4)", "gated"),
    ("shared_mlp_tp", "examples.plans:shared_mlp_tp(tp=4)", "shared_mlp"),
    ("gpt2_tp", "examples.plans:gpt2_tp(tp=4)", "gpt2"),
    ("gpt2_fsdp_tp", "examples.plans:gpt2_fsdp_tp(dp=2, tp=2)", "gpt2"),
    ("llama_tp", "examples.plans:llama_tp(tp=2)", "llama"),
    ("llama_fsdp_tp_ac", "examples.plans:with_ac(plan='llama_fsdp_tp', dp=2, tp=2, n_layers=1)", "llama"),
]

# (model, plan, phase) measured with the fake backend for the counts seeds.
MEASURE = [("mlp", "mlp_tp", "both"), ("stacked_mlp", "stacked_mlp_fsdp", "forward")]

SEPARATOR = {"forward": b"\n%%plan%%\n", "both": b"\n%%plan+backward%%\n"}


def run(args, env):
    print("+", " ".join(args), flush=True)
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        return False
    return True


def model_json(pt2):
    with zipfile.ZipFile(pt2) as z:
        for name in z.namelist():
            if name.endswith("/models/model.json"):
                return z.read(name)
    raise SystemExit(f"{pt2}: no models/model.json record")


class Writer:
    def __init__(self, small_limit, generated):
        self.small_limit = small_limit
        self.generated = generated
        self.sizes = {"committed": 0, "generated": 0}

    def put(self, target, name, data):
        small = len(data) <= self.small_limit
        base = ROOT / "fuzz" / "corpus" if small else self.generated
        path = base / target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.sizes["committed" if small else "generated"] += len(data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small-limit", type=int, default=16 * 1024,
                        help="largest seed written to fuzz/corpus (committed); larger ones go to --generated")
    parser.add_argument("--generated", type=Path, default=ROOT / "fuzz" / "corpus-generated")
    opts = parser.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT), env.get("PYTHONPATH", "")])
    py = sys.executable
    out = Writer(opts.small_limit, opts.generated)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        models, plans = {}, {}
        for name, factory in MODELS:
            pt2 = tmp / f"{name}.pt2"
            if run([py, "-m", "commlens.export", factory, "-o", str(pt2)], env):
                models[name] = pt2
                out.put("pt2_archive", f"{name}.pt2", pt2.read_bytes())
                out.put("program_json", f"{name}.json", model_json(pt2))
        for name, factory, _ in PLANS:
            path = tmp / f"{name}.json"
            if run([py, "-m", "commlens.plan", factory, "-o", str(path)], env):
                plans[name] = path
                out.put("plan", f"{name}.json", path.read_bytes())
        for path in sorted((ROOT / "tests" / "lit" / "Inputs").glob("*.json")):
            out.put("plan", f"lit_{path.name}", path.read_bytes())
        for name, _, model in PLANS:
            if name in plans and model in models:
                for phase, sep in SEPARATOR.items():
                    data = model_json(models[model]) + sep + plans[name].read_bytes()
                    out.put("predict", f"{model}__{name}__{phase}.txt", data)
        for model, plan, phase in MEASURE:
            if model not in models or plan not in plans:
                continue
            dump = tmp / f"{model}_{plan}.json"
            factory = dict((n, f) for n, f in MODELS)[model]
            if run([py, "-m", "commlens.measure", factory, "--plan", str(plans[plan]), "--phase", phase,
                    "--noise-level", "1", "-o", str(dump)], env):
                out.put("counts", f"{model}_{plan}_{phase}.dump.json", dump.read_bytes())
                counts = dump.with_name(dump.stem + ".counts.json")
                if counts.exists():
                    out.put("counts", f"{model}_{plan}_{phase}.counts.json", counts.read_bytes())
    for path in sorted((ROOT / "tests" / "compare").glob("**/*.json")):
        out.put("counts", f"compare_{path.parent.name}_{path.name}", path.read_bytes())
    print(f"seeds: {out.sizes['committed']} bytes in fuzz/corpus (committed), "
          f"{out.sizes['generated']} bytes in {opts.generated} (ignored)")


if __name__ == "__main__":
    main()
