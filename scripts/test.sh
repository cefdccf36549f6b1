#!/usr/bin/env bash
# The test command: set-up, build, then every test (GoogleTest and lit through ctest, pytest).
# COMMLENS_SANITIZE=1 builds and runs the C++ tests under ASan+UBSan (build-asan/).
# In CI (CI=true) a sanitizer stage follows: build-asan/ is built too, and its ctest suite and a
# subset of the integration tests (SANITIZE_PYTEST below) run under ASan+UBSan.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh || exit 2
BUILD=build
[ "${COMMLENS_SANITIZE:-0}" = 1 ] && BUILD=build-asan

# Sanitizer runs: stop at the first UBSan report. Harmless for the plain build.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

status=0
echo "== C++ tests (ctest, $BUILD)"
(cd "$BUILD" && ctest --output-on-failure -j"$(nproc)") || status=1
echo "== Python tests (pytest)"
COMMLENS_BUILD="$ROOT/$BUILD" .venv/bin/python -m pytest -q tests || status=1

# The CI sanitizer stage, measured on the 2-core CI machine (shared with a fuzzer, so on the
# slow side): the build-asan build from scratch 727 s (782 s CPU), its ctest 10-20 s, the whole
# integration suite under ASan 197 s (80 s without), this subset 110-130 s; the plain stages already
# take most of the 30-minute budget (every pytest suite alone: 712 s, plus set-up and build).
# SANITIZE_PYTEST is therefore a subset: the error paths, where the readers meet hostile input
# (every bad input and command line: test_bad_inputs.py, test_cli_errors.py), and the predict
# tests that drive the whole pipeline, forward and backward, with FSDP and activation
# checkpointing (test_predict_cli.py, test_predict_fsdp.py, test_predict_activation_checkpoint.py).
# The other integration files run the same readers and passes on more models and options.
# COMMLENS_SANITIZE=1 bash scripts/test.sh runs every test under the sanitizers.
SANITIZE_PYTEST="tests/integration/test_bad_inputs.py tests/integration/test_cli_errors.py
  tests/integration/test_predict_cli.py tests/integration/test_predict_fsdp.py
  tests/integration/test_predict_activation_checkpoint.py"
if [ "${CI:-}" = true ] && [ "$BUILD" = build ]; then
  echo "== sanitizer stage: build (build-asan, ASan+UBSan)"
  start=$SECONDS
  COMMLENS_SANITIZE=1 bash scripts/setup.sh || status=1
  built=$SECONDS
  echo "== sanitizer stage: C++ tests (ctest, build-asan)"
  (cd build-asan && ctest --output-on-failure -j"$(nproc)") || status=1
  echo "== sanitizer stage: integration tests (pytest, build-asan)"
  # shellcheck disable=SC2086
  COMMLENS_BUILD="$ROOT/build-asan" .venv/bin/python -m pytest -q $SANITIZE_PYTEST || status=1
  echo "== sanitizer stage: build $((built - start))s, tests $((SECONDS - built))s"
fi
exit $status
