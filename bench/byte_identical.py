#!/usr/bin/env python3
"""Byte-identity check of two commlens CLIs over the accuracy corpus: a refactoring must not
change one byte of any prediction.

    .venv/bin/python bench/byte_identical.py OLD_CLI NEW_CLI [--work-dir DIR] [--subset ci|full]
        [--only REGEX] [--jobs N]

Every program/plan of the corpus (bench/accuracy/run.py's configurations; exported and serialised
into ``DIR/models`` and ``DIR/plans`` with run.py's caches, nothing measured) is predicted by both
CLIs in every phase (forward, backward, both) and every output: the table at noise levels 0 and
2, the JSON (whose tree ``Prediction.counts()`` reads), the HTML and the JSON with a cluster's
times (``--cluster h100-ib-ndr``); ``check-plan`` and ``rank`` once per program/plan. Each run's
exit status, stdout, stderr and output file must be the same bytes (``rank``'s JSON without the
wall times it records, its ``*_seconds`` keys). Prints one line per difference and
``identical: N/M runs``; exit 0 when all are identical, 1 otherwise.
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
for _p in (str(ROOT / "python"), str(ROOT), str(ROOT / "bench" / "accuracy")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import run as accuracy  # noqa: E402 - bench/accuracy/run.py, after the path set-up

PHASES = ("forward", "backward", "both")
# (name, predict arguments, output file suffix)
OUTPUTS = (
    ("table", ["--format", "table"], ".txt"),
    ("table-noise2", ["--format", "table", "--noise-level", "2"], ".txt"),
    ("json", ["--format", "json"], ".json"),
    ("html", ["--format", "html"], ".html"),
    ("json-cluster", ["--format", "json", "--cluster", "h100-ib-ndr"], ".json"),
)


def export_corpus(configs, work):
    """The (model, plan) paths of every configuration, exported once (run.py's caches)."""
    pairs, failed = {}, []
    for cfg in configs:
        try:
            plan = accuracy.ensure_plan(cfg.plan, work)
            model = accuracy.ensure_export(cfg.model, work, cfg.plan, cfg.frontend)
        except Exception as err:  # noqa: BLE001 - reported, the rest still compared
            failed.append(f"{cfg.name}: {type(err).__name__}: {err}".splitlines()[0])
            continue
        pairs.setdefault((str(model), str(plan)), cfg.name)
    return pairs, failed


def run_cli(cli, args, out_dir, suffix):
    """Exit status, stdout, stderr and the -o file's bytes (when `suffix`) of one CLI run."""
    out = pathlib.Path(out_dir) / f"out{suffix}" if suffix else None
    cmd = [cli, *args] + (["-o", str(out)] if out else [])
    p = subprocess.run(cmd, capture_output=True, timeout=900)
    body = out.read_bytes() if out and out.exists() else b""
    if out and out.exists():
        out.unlink()
    return p.returncode, p.stdout, p.stderr, body


def without_wall_times(output):
    """A rank JSON without its wall-time keys (``*_seconds``), which differ from run to run."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if not k.endswith("_seconds")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    return json.dumps(strip(json.loads(output))).encode() if output else output


def compare_one(job):
    """Runs one job with both CLIs; returns (label, None) when identical, else (label, what differs)."""
    label, old, new, args, suffix = job
    with tempfile.TemporaryDirectory(prefix="byteid-") as tmp:
        # Same output path for both runs: a path in a message must not differ by the directory alone.
        a = run_cli(old, args, tmp, suffix)
        b = run_cli(new, args, tmp, suffix)
    if args[0] == "rank":
        a, b = (x[:3] + (without_wall_times(x[3]),) for x in (a, b))
    parts = ("exit status", "stdout", "stderr", "output file")
    differs = [name for name, x, y in zip(parts, a, b) if x != y]
    return label, (", ".join(differs) if differs else None), a[0]


def jobs_for(pairs, old, new):
    jobs = []
    for (model, plan), name in sorted(pairs.items(), key=lambda kv: kv[1]):
        jobs.append((f"{name} check-plan", old, new, ["check-plan", model, "--plan", plan], None))
        jobs.append((f"{name} rank", old, new, ["rank", model, "--plan", plan, "--format", "json"], ".json"))
        for phase in PHASES:
            for out_name, extra, suffix in OUTPUTS:
                args = ["predict", model, "--plan", plan, "--phase", phase, *extra]
                jobs.append((f"{name} {phase} {out_name}", old, new, args, suffix))
    return jobs


def main(argv=None):
    parser = argparse.ArgumentParser(prog="bench/byte_identical.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("old_cli")
    parser.add_argument("new_cli")
    parser.add_argument("--work-dir", default=str(ROOT / "out" / "byte-identical"),
                        help="where the corpus is exported (run.py's models/ and plans/ caches)")
    parser.add_argument("--subset", choices=("ci", "full"), default="full")
    parser.add_argument("--only", metavar="REGEX", help="only configurations whose name matches (re.search)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    work = pathlib.Path(args.work_dir)
    pairs, failed = export_corpus(accuracy.select(args.subset, args.only), work)
    for line in failed:
        print(f"export error: {line}", file=sys.stderr)
    jobs = jobs_for(pairs, os.path.abspath(args.old_cli), os.path.abspath(args.new_cli))
    different, statuses = 0, {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for label, what, rc in pool.map(compare_one, jobs):
            statuses[rc] = statuses.get(rc, 0) + 1
            if what:
                different += 1
                print(f"DIFFERENT  {label}: {what}")
    print(f"programs/plans: {len(pairs)} ({len(failed)} not exported); exit statuses of the old CLI: "
          + ", ".join(f"{rc}: {n}" for rc, n in sorted(statuses.items())))
    print(f"identical: {len(jobs) - different}/{len(jobs)} runs")
    return 1 if different or failed or not jobs else 0


if __name__ == "__main__":
    sys.exit(main())
