"""Which attention kernels the GPU really runs, against the ones commlens predicts for it.

For every configuration of the accuracy corpus whose plan has ``device_type="cuda"``, the model
runs under ``commlens.measure`` on this machine's GPU (fake process group, forward and backward) while
a dispatch mode records every ``aten._scaled_dot_product_*`` kernel op ATen chose; ``commlens
predict`` is run for that GPU (``--gpu-arch/--cudnn-version/--cuda-version/--torch-version`` from the measurement)
and the same ops are read from its IR after the ``propagate`` and ``propagate-backward`` passes.
One line per configuration: ``NAME  ran=[...]  predicted=[...]  same | DIFF``. The collectives of
these configurations are compared by ``run.py`` (its GPU column); this checks the kernel choice
itself (issue 15: SDPA as CUDA dispatches it), which no collective count shows.

    python bench/accuracy/sdpa_kernels.py [--work-dir out/accuracy] [--commlens build/commlens]
        [--reuse-exports] [--only REGEX] [-o kernels.json]

Exit status 0 when every configuration ran the predicted kernels, 1 on a difference or error,
2 without a CUDA device (nothing to check here).
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import traceback
import warnings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import run as accuracy  # noqa: E402  (the corpus, its caches and the GPU options)

KERNEL_RE = re.compile(r"\b_scaled_dot_product_\w+?(?=\.default\b)")


def kernels_run(cfg, plan_path):
    """The SDPA kernel ops ATen dispatches when ``cfg`` runs on the GPU, and the measured device."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from commlens.measure import measure

    seen = set()

    class KernelLog(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            m = KERNEL_RE.search(str(func))
            if m:
                seen.add(m.group(0))
            return func(*args, **(kwargs or {}))

    with warnings.catch_warnings(), KernelLog():
        warnings.simplefilter("ignore")
        doc = measure(cfg.model, str(plan_path), backend="fake", phase=cfg.phase, device="cuda",
                      return_document=True)
    return sorted(seen), doc["device"]


def kernels_predicted(commlens, model_path, plan_path, cfg, device):
    passes = "propagate" if cfg.phase in ("forward", "inference") else "propagate,propagate-backward"
    p = subprocess.run([commlens, "predict", str(model_path), "--plan", str(plan_path), "--phase", cfg.phase,
                        f"--print-after={passes}", "-o", "/dev/null",
                        *accuracy.gpu_target_args(device)], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(accuracy._error_line(p.stderr))
    return sorted(set(KERNEL_RE.findall(p.stdout + p.stderr)))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="bench/accuracy/sdpa_kernels.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", default=str(accuracy.ROOT / "out" / "accuracy"))
    parser.add_argument("--commlens", default=str(accuracy.ROOT / "build" / "commlens"))
    parser.add_argument("--only", metavar="REGEX", help="configurations whose name matches (re.search)")
    parser.add_argument("--reuse-exports", action="store_true", help="as run.py's")
    parser.add_argument("-o", "--output", help="write the results as JSON here")
    ns = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(f"sdpa_kernels: no CUDA device (torch {torch.__version__}): nothing to check here", file=sys.stderr)
        return 2
    if ns.reuse_exports:
        os.environ[accuracy.REUSE_EXPORTS_ENV] = "1"
    work = pathlib.Path(ns.work_dir).resolve()
    configs = [c for c in accuracy.select("full", ns.only) if "device_type='cuda'" in c.plan]
    width = max(len(c.name) for c in configs)
    results, failed = [], False
    for cfg in configs:
        r = {"name": cfg.name}
        try:
            plan_path = accuracy.ensure_plan(cfg.plan, work)
            model_path = accuracy.ensure_export(cfg.model, work, cfg.plan, cfg.frontend, cfg.phase == "inference")
            r["ran"], r["device"] = kernels_run(cfg, plan_path)
            r["predicted"] = kernels_predicted(ns.commlens, model_path, plan_path, cfg, r["device"])
            r["status"] = "same" if r["ran"] == r["predicted"] else "DIFF"
        except Exception as err:  # noqa: BLE001 - reported per configuration
            r.update(status=f"error: {type(err).__name__}: {err}".splitlines()[0], traceback=traceback.format_exc())
        failed |= r["status"] != "same"
        results.append(r)
        print(f"{cfg.name:<{width}}  ran={r.get('ran')}  predicted={r.get('predicted')}  {r['status']}", flush=True)
    if ns.output:
        pathlib.Path(ns.output).write_text(json.dumps(results, indent=1) + "\n")
    same = sum(1 for r in results if r["status"] == "same")
    # commlens follows the pinned torch's selection rules: a GPU machine with another torch may differ
    print(f"sdpa kernels: {same}/{len(results)} configs ran the predicted kernels on {torch.cuda.get_device_name()} "
          f"(torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
