#!/usr/bin/env bash
# Idempotent set-up: Debian packages, the project venv (.venv) with the CPU torch 2.13.0,
# and the CMake build in build/ (build-asan/ with COMMLENS_SANITIZE=1).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# chromium + chromium-driver: the HTML report tests run the page in a headless browser.
# zipcmp, zipmerge, ziptool: Debian's libzip-dev CMake package refuses to load without them.
APT_PACKAGES="cmake ninja-build g++ llvm-14-dev llvm-14-tools libfmt-dev nlohmann-json3-dev libgtest-dev zlib1g-dev libzstd-dev libtinfo-dev libzip-dev libsimdjson-dev libdeflate-dev libmimalloc-dev zipcmp zipmerge ziptool unzip chromium chromium-driver"
missing=""
for p in $APT_PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

PY=.venv/bin/python
if [ ! -x "$PY" ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
# Pin torch exactly: a bare 'torch' or a range would let pip fetch a CUDA build.
if ! "$PY" -c "import torch, pytest, lit, numpy; assert torch.__version__.startswith('2.13.0')" 2>/dev/null; then
  echo "setup: installing torch==2.13.0 (CPU), pytest, lit, numpy into .venv"
  "$PY" -m pip install -q --disable-pip-version-check "torch==2.13.0" pytest lit numpy
fi
SELENIUM=4.27.1  # drives Debian's chromium (chromium-driver) in the HTML report tests
NANOBIND=3.1.0   # builds the Python extension commlens._core
XDIST=3.8.0      # scripts/test.sh runs pytest on every core (pytest -n)
EXPECTTEST=0.3.0 # torch.testing._internal imports it: the OpInfo sweep reads torch's op_db
if ! "$PY" -c "import selenium, nanobind, xdist, importlib.metadata as m; assert (selenium.__version__, nanobind.__version__, xdist.__version__, m.version('expecttest')) == ('$SELENIUM', '$NANOBIND', '$XDIST', '$EXPECTTEST')" 2>/dev/null; then
  echo "setup: installing selenium==$SELENIUM, nanobind==$NANOBIND, pytest-xdist==$XDIST and expecttest==$EXPECTTEST into .venv"
  "$PY" -m pip install -q --disable-pip-version-check "selenium==$SELENIUM" "nanobind==$NANOBIND" "pytest-xdist==$XDIST" "expecttest==$EXPECTTEST"
fi
# PyYAML: the build compiles autograd/derivatives.yaml (autograd/gen_derivatives.py) with it.
PYYAML=6.0.4
if ! "$PY" -c "import yaml; assert yaml.__version__ == '$PYYAML'" 2>/dev/null; then
  echo "setup: installing pyyaml==$PYYAML into .venv"
  "$PY" -m pip install -q --disable-pip-version-check "pyyaml==$PYYAML"
fi
# Hugging Face models for the accuracy corpus (examples/hf.py), pinned (it does not depend on
# torch, so pip leaves the CPU build alone), and accelerate, which transformers' from_pretrained
# needs for a tp_plan (examples/hf_real.py; it accepts any torch >= 2.0, so the CPU build stays too).
TRANSFORMERS=5.23.0
ACCELERATE=1.15.0
if ! "$PY" -c "import transformers; assert transformers.__version__ == '$TRANSFORMERS'" 2>/dev/null; then
  echo "setup: installing transformers==$TRANSFORMERS into .venv"
  "$PY" -m pip install -q --disable-pip-version-check "transformers==$TRANSFORMERS"
fi
if ! "$PY" -c "import accelerate; assert accelerate.__version__ == '$ACCELERATE'" 2>/dev/null; then
  echo "setup: installing accelerate==$ACCELERATE into .venv"
  "$PY" -m pip install -q --disable-pip-version-check "accelerate==$ACCELERATE"
fi
# torchtitan for the corpus and tests (examples/titan.py): 0.2.2, the newest release whose
# parallelize functions call torch's parallelize_module / fully_shard / checkpoint_wrapper and run
# against torch 2.13 on CPU (0.3.0 declares sharding through its own layouts and spmd_types, and
# issue 28 found its default backend failing on torch 2.13 for dp or tp above 1). Installed with
# its declared dependencies and torch==2.13.0 named beside it, so pip keeps the CPU build; the two
# shims it needs without a GPU (triton, device type) are in examples/titan.py.
TORCHTITAN=0.2.2
if ! "$PY" -c "import importlib.metadata as m; assert m.version('torchtitan') == '$TORCHTITAN'" 2>/dev/null; then
  echo "setup: installing torchtitan==$TORCHTITAN into .venv"
  "$PY" -m pip install -q --disable-pip-version-check "torchtitan==$TORCHTITAN" "torch==2.13.0"
fi
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
printf '%s\n%s\n' "$ROOT/python" "$ROOT" > "$SITE/commlens-dev.pth"

BUILD=build; SAN=OFF
if [ "${COMMLENS_SANITIZE:-0}" = 1 ]; then BUILD=build-asan; SAN=ON; fi
WERROR=OFF; [ "${CI:-}" = true ] && WERROR=ON
# CI builds without debug information: nobody debugs a CI build, and -g costs a third of the
# compile time (DecomposeToRuntimeOps.cpp: 15 s with -O2 -g, 10 s with -O2). Same code either way.
BUILD_TYPE=RelWithDebInfo; [ "${CI:-}" = true ] && BUILD_TYPE=Release
if [ ! -f "$BUILD/build.ninja" ] || [ "$(cat "$BUILD/.config" 2>/dev/null)" != "$SAN $WERROR $BUILD_TYPE" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=$BUILD_TYPE -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
    -DPython_EXECUTABLE="$ROOT/$PY" \
    -DCOMMLENS_SANITIZE=$SAN -DCOMMLENS_WERROR=$WERROR -DCOMMLENS_PYTHON=$([ $SAN = ON ] && echo OFF || echo ON) \
    >/dev/null
  echo "$SAN $WERROR $BUILD_TYPE" > "$BUILD/.config"
fi
cmake --build "$BUILD" -- --quiet
