"""bench/accuracy/run.py's bookkeeping with a stand-in predictor (fake_predictor.py): exact,
DIFF, predict error and compare error lines, the summary line and the exit status."""
import os
import pathlib
import stat
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN = ROOT / "bench" / "accuracy" / "run.py"
FAKE = pathlib.Path(__file__).with_name("fake_predictor.py")


def test_runner_with_fake_predictor(commlens_bin, tmp_path):
    wrapper = tmp_path / "commlens"
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = predict ]; then exec "{sys.executable}" "{FAKE}" "$@"; fi\n'
                       f'exec "{commlens_bin}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    r = subprocess.run([sys.executable, str(RUN), "--only", "^mlp-tp-tp(2-forward|4-grad-both|4-both|8-grad-backward)$", "--work-dir", str(tmp_path / "work"),
                        "--commlens", str(wrapper)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
    work = tmp_path / "work"
    assert r.stdout.splitlines() == [
        "mlp-tp-tp2-forward        measured=1     predicted=1     exact",
        "mlp-tp-tp4-grad-both      measured=2     predicted=3     DIFF (1 cells)",
        "mlp-tp-tp4-both           measured=1     predicted=-     predict error: commlens: error: "
        f"{work}/models/" + next(p.name for p in (work / "models").iterdir())
        + ": unsupported operator aten.frobnicate.default",
        "mlp-tp-tp8-grad-backward  measured=1     predicted=-     compare error: commlens: error: "
        f"{work}/predicted/mlp-tp-tp8-grad-backward.json: unknown format: neither a CommDebugMode "
        "generate_json_dump tree (no 'fqn') nor a commlens-counts file (no 'format')",
        "bytes: compared on 0/15 cells (a byte mismatch makes a cell differ)",  # the fake predictor records none
        "exact: 1/4 configs, 8/15 cells",
    ], r.stderr[-3000:]
    assert r.returncode == 1
    # --strict does not change a run whose only failures are already failures; predict errors
    # alone are not failures without it.
    r = subprocess.run([sys.executable, str(RUN), "--only", "^mlp-tp-tp4-both$", "--work-dir", str(work),
                        "--commlens", str(wrapper)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "exact: 0/1 configs, 0/3 cells"
    r = subprocess.run([sys.executable, str(RUN), "--only", "^mlp-tp-tp4-both$", "--work-dir", str(work),
                        "--commlens", str(wrapper), "--strict"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 1
