"""The 405B-shaped Llama (bench/predict_speed.py's, at seq 2048) under llama_tp(tp=8), forward:
export, `commlens predict`, `commlens.measure` (CommDebugMode, fake process group, meta device)
and `commlens compare`, whose Global cells pass 2^32 bytes (the all-gather sends 8,751,939,584
bytes per rank). Prints compare's summary line and the Global cells; exits with compare's status.
About a minute on two cores.

    .venv/bin/python bench/compare_405b.py
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
PY = sys.executable
MODEL = ("examples.llama:llama(n_layers=126, dim=16384, n_heads=128, n_kv_heads=8, ffn_dim_multiplier=1.2, "
         "multiple_of=4096, vocab=128256, seq=2048, device='meta')")
PLAN = "examples.plans:llama_tp(tp=8)"


def main():
    binary = str(pathlib.Path(os.environ.get("COMMLENS_BUILD", ROOT / "build")) / "commlens")
    with tempfile.TemporaryDirectory() as tmp:
        pt2, plan, pred, meas = (os.path.join(tmp, n) for n in ("model.pt2", "plan.json", "pred.json", "meas.json"))
        subprocess.run([PY, "-m", "commlens.export", MODEL, "-o", pt2], check=True, capture_output=True)
        subprocess.run([PY, "-m", "commlens.plan", PLAN, "-o", plan], check=True, capture_output=True)
        subprocess.run([binary, "predict", pt2, "--plan", plan, "--phase", "forward", "--format", "json", "-o", pred],
                       check=True)
        subprocess.run([PY, "-m", "commlens.measure", MODEL, "--plan", plan, "--phase", "forward", "-o", meas],
                       check=True, capture_output=True)
        counts = meas.removesuffix(".json") + ".counts.json"
        text = subprocess.run([binary, "compare", pred, counts, "--phase", "forward"], capture_output=True, text=True)
        print(f"{MODEL}\nunder {PLAN}, forward")
        print(text.stdout.splitlines()[-1] if text.stdout else text.stderr.strip())
        if text.returncode in (0, 1):
            doc = json.loads(subprocess.run([binary, "compare", pred, counts, "--phase", "forward", "--json"],
                                            capture_output=True, text=True).stdout)
            for c in doc["cells"]:
                if c["module"] == "Global":
                    print(f"  Global {c['collective']}: {c['predicted']} predicted, {c['measured']} measured; "
                          f"bytes {c['predicted_bytes']:,} predicted, {c['measured_bytes']:,} measured")
        return text.returncode


if __name__ == "__main__":
    sys.exit(main())
