#!/usr/bin/env bash
# The main job on the embedded example: set-up, build, export the example transformer, inspect
# it, serialise a tensor+sequence parallel plan, predict its collectives, measure them with
# CommDebugMode (fake process group, one CPU process) and compare counts and bytes: exit 1 on any
# mismatch.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
mkdir -p out
PY=.venv/bin/python
echo "== export examples.gpt2:gpt2 -> out/gpt2.pt2"
$PY -m commlens.export "examples.gpt2:gpt2" -o out/gpt2.pt2
echo "== commlens inspect out/gpt2.pt2"
build/commlens inspect out/gpt2.pt2
PLAN="examples.plans:gpt2_tp_sp(tp=4)"
echo "== plan $PLAN -> out/gpt2_tp_sp.json"
$PY -m commlens.plan "$PLAN" -o out/gpt2_tp_sp.json
PHASE="${COMMLENS_PHASE:-both}"
echo "== commlens predict out/gpt2.pt2 --plan out/gpt2_tp_sp.json --phase $PHASE"
build/commlens predict out/gpt2.pt2 --plan out/gpt2_tp_sp.json --phase "$PHASE" --noise-level 1
build/commlens predict out/gpt2.pt2 --plan out/gpt2_tp_sp.json --phase "$PHASE" --format json -o out/predicted.json
echo "== measure with CommDebugMode (fake process group, world size 4)"
$PY -m commlens.measure "examples.gpt2:gpt2" --plan out/gpt2_tp_sp.json --phase "$PHASE" -o out/measured.json
# out/measured.json is CommDebugMode's own dump; out/measured.counts.json adds the bytes each
# collective sent, so compare checks counts and bytes
echo "== commlens compare out/predicted.json out/measured.counts.json"
build/commlens compare out/predicted.json out/measured.counts.json
