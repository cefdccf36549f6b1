#!/usr/bin/env bash
# The main job on the embedded example: set-up, build, export the example transformer, inspect it.
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
