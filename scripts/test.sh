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
# One pytest worker per core; a file's tests stay on one worker (--dist loadfile), so each file's
# module-scoped fixtures (exports, measurements) run once. --durations lists the slowest tests, so
# that CI's log says where its time goes (2026-11-27, fourth session, on this machine: the rules
# oracle's grid 260 s, the OpInfo sweep 211 s, the redistribute oracle's grid 177 s of 1072 s).
PYTEST_PARALLEL="-n $(nproc) --dist loadfile"
# shellcheck disable=SC2086
COMMLENS_BUILD="$ROOT/$BUILD" .venv/bin/python -m pytest -q $PYTEST_PARALLEL --durations=25 tests || status=1

# The CI sanitizer stage must fit beside the plain stages in CI's 30-minute budget. A fresh clone
# with CI=true on this 2-core machine, nothing else running (2026-11-27, second session): 23m20s in
# all, of which pytest 488 s on two workers and this stage 459 s (build-asan from scratch 420 s at
# -O0 -g1, its tests 39 s); the landing before took 1838 s on CI. Third session, the same machine
# running every stage about a third slower (set-up and build 608 s against about 450 s): 34m15s,
# pytest 823 s (the OpInfo sweep, tests/rules/test_opinfo_sweep.py, is about 130 s of one worker),
# this stage 624 s (build 577 s, tests 47 s). The same stage at -O2 -g took
# 727 s for a much smaller tree: GCC's UBSan under the optimizer compiles each file ~5x slower.
# SANITIZE_PYTEST is therefore a subset: the error paths, where the readers meet hostile input
# (every bad input and command line: test_bad_inputs.py, test_cli_errors.py), and the predict
# tests that drive the whole pipeline, forward and backward, with FSDP and activation
# checkpointing (test_predict_cli.py, test_predict_fsdp.py, test_predict_activation_checkpoint.py),
# FSDP units called more than once (test_fsdp_repeated_calls.py) and torchtitan's own parallelize
# functions, whose MoE runs on eight layers once read a freed map entry (test_torchtitan.py).
# The other integration files run the same readers and passes on more models and options.
# COMMLENS_SANITIZE=1 bash scripts/test.sh runs every test under the sanitizers.
SANITIZE_PYTEST="tests/integration/test_bad_inputs.py tests/integration/test_cli_errors.py
  tests/integration/test_predict_cli.py tests/integration/test_predict_fsdp.py
  tests/integration/test_predict_activation_checkpoint.py tests/integration/test_fsdp_repeated_calls.py
  tests/integration/test_torchtitan.py"
if [ "${CI:-}" = true ] && [ "$BUILD" = build ]; then
  echo "== sanitizer stage: build (build-asan, ASan+UBSan)"
  start=$SECONDS
  COMMLENS_SANITIZE=1 bash scripts/setup.sh || status=1
  built=$SECONDS
  echo "== sanitizer stage: C++ tests (ctest, build-asan)"
  (cd build-asan && ctest --output-on-failure -j"$(nproc)") || status=1
  echo "== sanitizer stage: integration tests (pytest, build-asan)"
  # shellcheck disable=SC2086
  COMMLENS_BUILD="$ROOT/build-asan" .venv/bin/python -m pytest -q $PYTEST_PARALLEL $SANITIZE_PYTEST || status=1
  echo "== sanitizer stage: build $((built - start))s, tests $((SECONDS - built))s"
fi
exit $status
