#!/usr/bin/env bash
# The threads of `commlens rank` (plans predicted at once on copies of one decoded program, the
# CPU decomposition made once by whichever thread needs it first) under ThreadSanitizer.
#
#   bash scripts/tsan.sh
#
# Configures build-tsan/ with -DCOMMLENS_TSAN=ON (never over build/), builds the CLI, exports two
# programs (the small Llama and GPT-2 with SDPA) and ranks their plans (FSDP x TP splits of 8
# ranks; TP+SP on CPU and on CUDA, each plan twice; a bad plan) on 4 threads. Exits 1 on any
# ThreadSanitizer report, or when the 4-thread ranking differs from the 1-thread one (timings
# aside). TSAN_JOBS sets the build's parallelism (default 2).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD=build-tsan
PY=.venv/bin/python
[ -x "$PY" ] || bash scripts/setup.sh || exit 2

if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython_EXECUTABLE="$ROOT/$PY" \
    -DCOMMLENS_TSAN=ON -DCOMMLENS_PYTHON=OFF >/dev/null || exit 2
fi
cmake --build "$BUILD" --target commlens -- -j"${TSAN_JOBS:-2}" --quiet || exit 2

WORK="$BUILD/rank-threads"
rm -rf "$WORK" && mkdir -p "$WORK" || exit 2
PYTHONPATH="$ROOT/python:$ROOT" "$PY" - "$WORK" <<'EOF' || exit 2
import pathlib, sys
from commlens import plan as planlib
from commlens._factory import call_model_factory
from commlens.export import export_model, save_program

work = pathlib.Path(sys.argv[1])
for name, spec in (("llama", "examples.llama:llama"), ("gpt2", "examples.gpt2:gpt2(attn='sdpa')")):
    save_program(export_model(*call_model_factory(spec)), str(work / f"{name}.pt2"))
planlib.sweep("examples.plans:llama_fsdp_tp(dp={dp}, tp={tp})", 8, str(work / "llama-plans"))
for device in ("cpu", "cuda"):
    plan = planlib.resolve_plan(f"examples.plans:gpt2_tp_sp(tp=4, device_type='{device}')")
    planlib.save(plan, str(work / f"gpt2-{device}.json"))
(work / "bad.json").write_text("{")
EOF

export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1"
status=0
rank() { # NAME JOBS ARGS...: the ranking as JSON, without its timings
  local name=$1 jobs=$2
  shift 2
  "$BUILD/commlens" rank "$@" --format json --jobs "$jobs" -o "$WORK/$name-$jobs.json" 2>"$WORK/$name-$jobs.log"
  local rc=$?
  if [ $rc != 0 ]; then
    echo "tsan: rank $name --jobs $jobs exited $rc:"; cat "$WORK/$name-$jobs.log"; status=1; return
  fi
  "$PY" -c '
import json, sys
doc = json.load(open(sys.argv[1]))
for key in ("load_seconds", "predict_seconds", "jobs"):
    doc.pop(key)
for p in doc["plans"]:
    p.pop("predict_seconds")
print(json.dumps(doc, indent=1, sort_keys=True))' "$WORK/$name-$jobs.json" >"$WORK/$name-$jobs.txt"
}
for jobs in 4 1; do
  rank llama $jobs "$WORK/llama.pt2" --plans "$WORK/llama-plans" --plan "$WORK/bad.json"
  rank gpt2 $jobs "$WORK/gpt2.pt2" --plan "$WORK/gpt2-cpu.json" --plan "$WORK/gpt2-cuda.json" \
    --plan "$WORK/gpt2-cpu.json" --plan "$WORK/gpt2-cuda.json"
done
for name in llama gpt2; do
  if ! cmp -s "$WORK/$name-4.txt" "$WORK/$name-1.txt"; then
    echo "tsan: rank $name: 4 threads and 1 differ:"; diff "$WORK/$name-1.txt" "$WORK/$name-4.txt" | head -20
    status=1
  else
    echo "tsan: rank $name: $("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d["plans"]), "plans ranked,", len(d["errors"]), "not ranked")' "$WORK/$name-4.json") on 4 threads, no report, same as on 1"
  fi
done
exit $status
