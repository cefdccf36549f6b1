"""The full OpInfo sweep (issue 30's bench): every OpInfo of torch's op_db with a CPU sample, on its
first 3 samples with up to 8 placement combinations (Partial("sum") floating inputs included),
predicted by commlens and measured with CommDebugMode: counts and bytes forward and backward, and
the forward's output placements (tests/rules/opinfo_sweep.py). Two sweeps: a 1-D mesh of 4 ranks,
then a 2x2 mesh (dims dp, tp; each input one placement per mesh dim). CI runs the sampled form, 1
sample and 3 placements on 2 ranks without Partial inputs, in tests/rules/test_opinfo_sweep.py.
About five minutes on two cores:

    .venv/bin/python bench/opinfo_full.py [--ops REGEX] [--json out.json]

Prints each case that is not exact, then, for each sweep, its summary line
`opinfo: exact X/N, refused R, dtensor D (commlens refused E of them), data A, wrong W ...`
after the mesh it ran on; exits 1 when any prediction of either sweep is wrong. `--json out.json`
writes out.world4.json and out.2x2.json.
"""
import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "rules"))

import opinfo_sweep  # noqa: E402

SWEEPS = (("1-D mesh of 4", "world4", {"world": 4}), ("2x2 mesh", "2x2", {"mesh": (2, 2)}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", help="regex on OpInfo names (name.variant)")
    ap.add_argument("--json", help="write every case of each sweep to NAME.world4.json and NAME.2x2.json")
    args = ap.parse_args(argv)
    lines, wrong = [], False
    for label, suffix, mesh in SWEEPS:
        print(f"== {label}", flush=True)
        results, skipped = opinfo_sweep.sweep(args.ops, samples=3, placements=8, partial=True, **mesh)
        line = opinfo_sweep.summary(results, skipped)
        print(line, flush=True)
        lines.append(f"{label}: {line}")
        wrong |= any(r["result"] == "wrong" for r in results)
        if args.json:
            path = pathlib.Path(args.json)
            with open(path.with_name(f"{path.stem}.{suffix}{path.suffix or '.json'}"), "w") as f:
                json.dump({"summary": line, "cases": results, "skipped": skipped}, f, indent=1)
    print("\n".join(lines))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
