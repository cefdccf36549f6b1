"""The full OpInfo sweep (issue 30's bench): every OpInfo of torch's op_db with a CPU float32
sample, on its first 3 samples with up to 8 placement combinations on a 4-rank mesh, predicted by
commlens and measured with CommDebugMode, forward and backward (tests/rules/opinfo_sweep.py; CI
runs its sampled form, 1 sample and 3 placements on 2 ranks, in tests/rules/test_opinfo_sweep.py).
About ten minutes on two cores:

    .venv/bin/python bench/opinfo_full.py [--json out.json]

Prints each case that is not exact, then the summary line
`opinfo: exact X/N, refused R, dtensor D (commlens refused E of them), data A, wrong W ...`;
exits 1 when any prediction is wrong.
"""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "rules"))

import opinfo_sweep  # noqa: E402

if __name__ == "__main__":
    sys.exit(opinfo_sweep.main(["--samples", "3", "--placements", "8", "--world", "4"] + sys.argv[1:]))
