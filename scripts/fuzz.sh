#!/usr/bin/env bash
# In-process fuzzing (libFuzzer, ASan+UBSan) of the readers and the predict pipeline (fuzz/).
#
#   bash scripts/fuzz.sh [SECONDS]        # each target for SECONDS (default 60)
#   FUZZ_TARGETS="plan counts" bash scripts/fuzz.sh 30
#   FUZZ_RUNS=1000000 bash scripts/fuzz.sh # a fixed number of executions per target instead
#
# Installs clang-14 and libFuzzer (Debian: clang-14 libclang-rt-14-dev) when missing, configures
# build-fuzz/ with -DCOMMLENS_FUZZ=ON, builds the targets and runs each on its seeds
# (fuzz/corpus/<target>, plus fuzz/corpus-generated/<target> from fuzz/make_seeds.py when
# present) with its dictionary (fuzz/dicts/<target>.dict). New inputs go to
# build-fuzz/corpus/<target>, crashes, leaks and timeouts to build-fuzz/artifacts/<target>/.
# Prints the executions per target; exits 1 if any target failed or left an artifact.
# FUZZ_JOBS sets the build's parallelism (default 2), FUZZ_TIMEOUT the per-input limit in
# seconds (default 30), FUZZ_MAX_LEN the largest input in bytes (default: the largest seed).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECS="${1:-60}"
TARGETS="${FUZZ_TARGETS:-program_json pt2_archive plan counts predict}"
BUILD=build-fuzz

if ! command -v clang++-14 >/dev/null || ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz: installing clang-14 and libFuzzer"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang-14 libclang-rt-14-dev >/dev/null || exit 2
fi
PY=.venv/bin/python
[ -x "$PY" ] || bash scripts/setup.sh || exit 2

if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DPython_EXECUTABLE="$ROOT/$PY" -DCOMMLENS_FUZZ=ON >/dev/null || exit 2
fi
build_targets=""
for t in $TARGETS; do build_targets="$build_targets fuzz_$t"; done
cmake --build "$BUILD" --target $build_targets -- -j"${FUZZ_JOBS:-2}" --quiet || exit 2

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

status=0
summary=""
for t in $TARGETS; do
  corpus="$BUILD/corpus/$t"; artifacts="$BUILD/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  seeds=("fuzz/corpus/$t")
  [ -d "fuzz/corpus-generated/$t" ] && seeds+=("fuzz/corpus-generated/$t")
  limit=(-max_total_time="$SECS")
  [ -n "${FUZZ_RUNS:-}" ] && limit=(-runs="$FUZZ_RUNS")
  # Mutating a whole 100 KB model.json is slow (a few hundred executions a second): FUZZ_MAX_LEN
  # caps the input size (larger seeds are cut), trading the large seeds' coverage for speed.
  [ -n "${FUZZ_MAX_LEN:-}" ] && limit+=(-max_len="$FUZZ_MAX_LEN")
  log="$BUILD/fuzz-$t.log"
  what="${SECS}s"; [ -n "${FUZZ_RUNS:-}" ] && what="$FUZZ_RUNS runs"
  echo "== fuzz_$t ($what, log $log)"
  "$BUILD/fuzz/fuzz_$t" "${limit[@]}" -dict="fuzz/dicts/$t.dict" -timeout="${FUZZ_TIMEOUT:-30}" \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$corpus" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  found=$(find "$artifacts" -type f | wc -l)
  line="fuzz_$t: ${execs:-?} executions, ${rate:-?} exec/s, exit $rc, $found artifact(s)"
  echo "$line"
  summary="$summary$line"$'\n'
  if [ "$rc" != 0 ] || [ "$found" != 0 ]; then
    status=1
    grep -E "ERROR: |runtime error|SUMMARY|Test unit written" "$log" | head -5
    find "$artifacts" -type f | head -5
  fi
done
echo "== summary"
printf '%s' "$summary"
exit $status
