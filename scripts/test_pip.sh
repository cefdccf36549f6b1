#!/usr/bin/env bash
# pip install . into a fresh venv, then run the README's Python API example (between the
# python-api-example markers) with it, from the repository root (for examples/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$(mktemp -d)/venv}"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "$ROOT"
cd "$ROOT"
SNIPPET="$(sed -n '/<!-- python-api-example -->/,/<!-- \/python-api-example -->/p' README.md | sed '/^```/d;/^<!--/d')"
PYTHONPATH="$ROOT" "$VENV/bin/python" -c "$SNIPPET"
"$VENV/bin/commlens" --help >/dev/null
echo "test_pip: ok ($VENV)"
