#!/usr/bin/env bash
# The GPU checks, on a machine with a CUDA GPU: the accuracy corpus' GPU column (every cuda-plan
# configuration measured with CUDA tensors there and predicted for that GPU), the attention kernels
# ATen chose there against the predicted ones, the GPU tests, and a one-GPU nccl run under torchrun
# compared with its prediction.
#
#   bash scripts/gpu_check.sh                 # after scripts/setup.sh, on the GPU machine itself
#   COMMLENS=dir/commlens WORK=dir PYTHON=python3 LOGS=dir bash scripts/gpu_check.sh
#
# COMMLENS, WORK, REUSE=1 and PYTHON let a GPU machine that cannot build commlens use a CLI built
# elsewhere (with its shared libraries on LD_LIBRARY_PATH), the programs exported elsewhere (a copy
# of out/accuracy's models/ and plans/ after a run there; run.py --reuse-exports) and its own torch.
# Logs, results.json and files.tgz (the measured, predicted and nccl files) go to LOGS (default
# out/gpu-check).
# Exit status: 0 when every step passed; 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
COMMLENS=${COMMLENS:-build/commlens}
WORK=${WORK:-out/accuracy}
LOGS=${LOGS:-out/gpu-check}
LOGS=$(mkdir -p "$LOGS" && cd "$LOGS" && pwd)
[ -n "${REUSE:-}" ] && export COMMLENS_ACCURACY_REUSE_EXPORTS=1
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore PYTHONPATH="$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0

{
  nvidia-smi -L
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
"cudnn", torch.backends.cudnn.version(), "gpu", torch.cuda.get_device_name(), torch.cuda.get_device_capability())'
  "$COMMLENS" --help | head -1
} 2>&1 | tee "$LOGS/env.txt" || status=1

echo "== accuracy corpus, cuda-plan configurations"
"$PY" bench/accuracy/run.py --only cuda --work-dir "$WORK" --commlens "$COMMLENS" ${REUSE:+--reuse-exports} 2>&1 \
  | tee "$LOGS/accuracy.txt" || status=1
cp "$WORK/results.json" "$LOGS/results.json" 2>/dev/null

echo "== attention kernels the GPU runs, against the predicted ones"
"$PY" bench/accuracy/sdpa_kernels.py --work-dir "$WORK" --commlens "$COMMLENS" ${REUSE:+--reuse-exports} \
  -o "$LOGS/sdpa_kernels.json" 2>&1 | tee "$LOGS/sdpa_kernels.txt" || status=1

echo "== GPU tests"
for t in tests/python/test_measure.py tests/compare/test_accuracy_runner.py; do  # each with its own conftest
  COMMLENS_BUILD=$(dirname "$COMMLENS") "$PY" -m pytest -q -p no:cacheprovider "$t" -k "gpu or cuda" 2>&1 \
    | tee -a "$LOGS/pytest.txt" || status=1
done

echo "== nccl under torchrun, one GPU, compared with the prediction"
NCCL="$WORK/nccl"
mkdir -p "$NCCL"
PLAN="examples.plans:gpt2_tp_sp(tp=1, device_type='cuda')"
"$PY" -m commlens.plan "$PLAN" -o "$NCCL/plan.json" 2>&1 | tee "$NCCL/log.txt"
"$PY" -m torch.distributed.run --standalone --nproc-per-node 1 -m commlens.measure \
  "examples.gpt2:gpt2(attn='sdpa')" --plan "$NCCL/plan.json" --backend nccl -o "$NCCL/measured.json" \
  2>&1 | tee -a "$NCCL/log.txt" || status=1
"$PY" - "$WORK" "$NCCL" "$COMMLENS" <<'EOF' 2>&1 | tee -a "$NCCL/log.txt" || status=1
# predict the nccl run from the exported gpt2(attn='sdpa') the corpus uses, for this GPU
import json, pathlib, subprocess, sys
sys.path[:0] = ["bench/accuracy"]
import run as acc
work, nccl, commlens = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]), sys.argv[3]
model = acc.ensure_export(acc.GPT2_SDPA, work)
counts = json.loads((nccl / "measured.counts.json").read_text())
pred = nccl / "predicted.json"
p = subprocess.run([commlens, "predict", str(model), "--plan", str(nccl / "plan.json"), "--phase", "both",
                    "--format", "json", "-o", str(pred), *acc.gpu_target_args(counts["device"])], text=True)
c = subprocess.run([commlens, "compare", str(pred), str(nccl / "measured.counts.json"), "--phase", "both"], text=True)
sys.exit(p.returncode or c.returncode)
EOF

tar czf "$LOGS/files.tgz" -C "$WORK" measured predicted nccl 2>/dev/null
echo "gpu_check: exit $status"
exit $status
