"""bench/accuracy/run.py's bookkeeping with a stand-in predictor (fake_predictor.py): exact,
DIFF, predict error and compare error lines, the summary line, strictness and the exit status."""
import json
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
        f"{work}/models/" + next(p.name for p in (work / "models").glob("*.pt2"))
        + ": unsupported operator aten.frobnicate.default",
        "mlp-tp-tp8-grad-backward  measured=1     predicted=-     compare error: commlens: error: "
        f"{work}/predicted/mlp-tp-tp8-grad-backward.json: unknown format: neither a CommDebugMode "
        "generate_json_dump tree (no 'fqn') nor a commlens-counts file (no 'format')",
        "bytes: compared on 0/15 cells (a byte mismatch makes a cell differ)",  # the fake predictor records none
        "exact: 1/4 configs, 8/15 cells",
    ], r.stderr[-3000:]
    assert r.returncode == 1
    # Strict (the default): a predict error fails the run, and so does an exact line whose bytes
    # were not compared (the stand-in records none); --no-strict lets both pass.
    args = [sys.executable, str(RUN), "--only", "^mlp-tp-tp(2-forward|4-both)$", "--work-dir", str(work),
            "--commlens", str(wrapper)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout
    strict = [line for line in r.stderr.splitlines() if line.startswith("strict: ")]
    assert [line.split(": ", 2)[:2] for line in strict] == [["strict", "mlp-tp-tp2-forward"],
                                                            ["strict", "mlp-tp-tp4-both"]], r.stderr[-3000:]
    assert strict[0] == "strict: mlp-tp-tp2-forward: bytes compared on 0/3 cells"  # Global, MLP, MLP.w2
    assert strict[1].startswith("strict: mlp-tp-tp4-both: commlens: error: ")
    r = subprocess.run(args + ["--no-strict"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "strict: " not in r.stderr, r.stdout + r.stderr[-3000:]
    assert r.stdout.splitlines()[-1] == "exact: 1/2 configs, 3/6 cells"


def test_strict_problems():
    # What a strict run fails that a non-strict one lets pass: each would be a run that checks
    # nothing (no cell) or less than it says (bytes on fewer cells than counted).
    sys.path.insert(0, str(RUN.parent))
    import run as accuracy

    exact = {"status": "exact", "cells": 3, "exact_cells": 3, "bytes_cells": 3}
    assert accuracy.strict_problem(exact) is None and not accuracy.is_failure(exact, strict=True)
    for r, why in [(dict(exact, cells=0, exact_cells=0, bytes_cells=0), "no cell measured or predicted"),
                   (dict(exact, bytes_cells=2), "bytes compared on 2/3 cells"),
                   ({"status": "predict error", "cells": 3, "error": "commlens: error: m.pt2: x"},
                    "commlens: error: m.pt2: x")]:
        assert accuracy.strict_problem(r) == why
        assert accuracy.is_failure(r, strict=True) and not accuracy.is_failure(r, strict=False)
    # A configuration declared to issue no collective is exact with no cell (it is the check).
    empty = dict(exact, cells=0, exact_cells=0, bytes_cells=0, no_collectives=True)
    assert accuracy.strict_problem(empty) is None and not accuracy.is_failure(empty, strict=True)
    gpu = dict(exact, gpu=dict(exact, bytes_cells=0))
    assert accuracy.is_failure(gpu, strict=True) and not accuracy.is_failure(gpu, strict=False)


def test_gpu_column_without_a_gpu(commlens_bin, tmp_path):
    # A cuda plan's line is measured on meta tensors; its GPU column is skipped here, counted
    # nowhere (the CPU summary keeps 1 config and the GPU line says why).
    import torch

    if torch.cuda.is_available():
        import pytest

        pytest.skip("this machine has a GPU: the column runs (bench/accuracy/run.py --only cuda)")
    r = subprocess.run([sys.executable, str(RUN), "--only", "^gpt2-tp_sp-tp4-cuda-forward$", "--work-dir",
                        str(tmp_path / "work"), "--commlens", str(commlens_bin)], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    why = f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False)"
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["gpt2-tp_sp-tp4-cuda-forward", "measured=12", "predicted=12", "exact"], r.stdout
    assert lines[1] == f"  gpu: skipped: {why}"
    result = json.loads((tmp_path / "work" / "results.json").read_text())["configs"][0]
    assert lines[-2:] == [f"gpu: skipped 1 cuda-plan configs, not counted: {why}",
                          f"exact: 1/1 configs, {result['cells']}/{result['cells']} cells"]
    assert r.returncode == 0
    assert result["device"] == {"type": "meta"}
    assert (result["gpu"]["status"], result["gpu"]["cells"], result["gpu"]["exact_cells"]) == ("skipped", 0, 0)


def test_gpu_predict_options_and_summary():
    # What a GPU run adds, from a counts file's device record: predict's target options and the
    # summary line (H100, cuDNN 9.10.2, CUDA 12.8, torch 2.11).
    sys.path.insert(0, str(RUN.parent))
    import run as accuracy

    h100 = {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
            "cudnn_version": 91002, "cuda_version": "12.8", "torch_version": "2.11.0+cu128"}
    assert accuracy.gpu_target_args(h100) == ["--gpu-arch", "9.0", "--cudnn-version", "91002",
                                              "--cuda-version", "12.8", "--torch-version", "2.11.0+cu128"]
    results = [{"gpu": {"status": "exact", "cells": 24, "exact_cells": 24, "device": h100}},
               {"gpu": {"status": "DIFF", "cells": 50, "exact_cells": 48, "device": h100}},
               {"status": "exact"}]
    assert accuracy.format_gpu_summary(results) == \
        "gpu: exact 1/2 configs, 72/74 cells on NVIDIA H100 80GB HBM3 (sm90, cuDNN 91002, CUDA 12.8, torch 2.11.0+cu128)"
    assert accuracy.is_failure({"status": "exact", "gpu": results[1]["gpu"]}, strict=False)
    assert not accuracy.is_failure({"status": "exact", "gpu": {"status": "skipped"}}, strict=False)
    assert accuracy.format_gpu_summary([{"status": "exact"}]) is None


def _no_gpu():
    import torch

    if torch.cuda.is_available():
        import pytest

        pytest.skip("this machine has a GPU: the GPU column runs (scripts/gpu_check.sh)")
    return torch


def test_gpu_only_config_without_a_gpu(commlens_bin, tmp_path):
    # FSDP2 on a cuda mesh has no meta-tensor measurement: the configuration's CPU line says so and
    # counts nowhere, its GPU column is skipped here like any cuda plan's.
    torch = _no_gpu()
    r = subprocess.run([sys.executable, str(RUN), "--only", "^gpt2-fsdp-dp8-bf16-cuda-both$", "--work-dir",
                        str(tmp_path / "work"), "--commlens", str(commlens_bin)], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    why = f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False)"
    assert r.stdout.splitlines() == [
        "gpt2-fsdp-dp8-bf16-cuda-both  measured=?     predicted=-     gpu only: fully_shard on a cuda mesh, "
        "measured in the GPU column alone",
        f"  gpu: skipped: {why}",
        "bytes: compared on 0/0 cells (a byte mismatch makes a cell differ)",
        f"gpu: skipped 1 cuda-plan configs, not counted: {why}",
        "exact: 0/0 configs, 0/0 cells",
    ], r.stderr[-3000:]
    assert r.returncode == 0


def test_reuse_exports_takes_the_recorded_versions(commlens_bin, tmp_path):
    # --reuse-exports keys the cached programs on the torch/transformers versions recorded in
    # models/versions.json by the machine that exported them, and exports nothing itself.
    import torch
    import transformers

    work = tmp_path / "work"
    args = [sys.executable, str(RUN), "--only", "^mlp-tp-tp2-forward$", "--work-dir", str(work),
            "--commlens", str(commlens_bin)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert r.stdout.splitlines()[-1].startswith("exact: 1/1 configs, "), r.stdout + r.stderr[-3000:]
    record = work / "models" / "versions.json"
    assert json.loads(record.read_text()) == {"torch": torch.__version__, "transformers": transformers.__version__}
    (model,) = [p for p in (work / "models").iterdir() if p.suffix == ".pt2"]

    # the same record: the cached program is found, nothing is exported
    model.rename(model.with_name("moved.pt2"))
    r = subprocess.run(args + ["--reuse-exports"], capture_output=True, text=True, timeout=600, env=env)
    assert r.stdout.splitlines()[0].split(None, 3)[3] == (
        f"export error: FileNotFoundError: {model}: not exported (--reuse-exports exports nothing)")
    assert r.returncode == 1 and not model.exists()
    model.with_name("moved.pt2").rename(model)
    r = subprocess.run(args + ["--reuse-exports"], capture_output=True, text=True, timeout=600, env=env)
    assert r.stdout.splitlines()[-1].startswith("exact: 1/1 configs, ") and r.returncode == 0

    # another machine's versions: another key, so this machine's program is not taken for it
    record.write_text(json.dumps({"torch": "2.11.0+cu130", "transformers": transformers.__version__}))
    r = subprocess.run(args + ["--reuse-exports"], capture_output=True, text=True, timeout=600, env=env)
    assert "export error: FileNotFoundError" in r.stdout.splitlines()[0] and r.returncode == 1
    assert json.loads(record.read_text())["torch"] == "2.11.0+cu130"  # a reuse run keeps the record


def test_sdpa_kernels_needs_a_gpu():
    torch = _no_gpu()
    r = subprocess.run([sys.executable, str(RUN.with_name("sdpa_kernels.py"))], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (f"sdpa_kernels: no CUDA device (torch {torch.__version__}): "
                                         "nothing to check here")


def test_cache_keys_cover_what_the_cached_files_depend_on(tmp_path, monkeypatch):
    # An exported program depends on the python/commlens/plan package (mixed-precision plans are exported
    # under their plan); a serialised plan on the torch and transformers versions (it is read from
    # torch's ParallelStyle objects and the TP plans transformers ships).
    sys.path.insert(0, str(RUN.parent))
    import run as accuracy

    read = []
    digest = accuracy._sources_digest
    monkeypatch.setattr(accuracy, "_sources_digest", lambda paths: read.extend(paths) or digest(paths))
    accuracy._model_digest(tmp_path)
    assert ROOT / "python/commlens/plan/codec.py" in read and ROOT / "python/commlens/plan/document.py" in read
    plan_key = accuracy._plan_digest()
    versions = accuracy._export_versions()
    for name in ("torch", "transformers"):
        monkeypatch.setattr(accuracy, "_export_versions", lambda name=name: {**versions, name: "0.0.0"})
        assert accuracy._plan_digest() != plan_key, name
