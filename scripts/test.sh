#!/usr/bin/env bash
# The test command: set-up, build, then every test (GoogleTest and lit through ctest, pytest).
# COMMLENS_SANITIZE=1 builds and runs the C++ tests under ASan+UBSan (build-asan/).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh || exit 2
BUILD=build
[ "${COMMLENS_SANITIZE:-0}" = 1 ] && BUILD=build-asan
status=0
echo "== C++ tests (ctest, $BUILD)"
(cd "$BUILD" && ctest --output-on-failure -j"$(nproc)") || status=1
echo "== Python tests (pytest)"
COMMLENS_BUILD="$ROOT/$BUILD" .venv/bin/python -m pytest -q tests || status=1
exit $status
