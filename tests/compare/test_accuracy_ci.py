"""The accuracy corpus' ci subset (bench/accuracy/run.py --subset ci, strict) runs to completion,
prints one line per configuration and the summary line, measures every configuration, and every
configuration is predicted exactly (a predict error or a DIFF fails the test command)."""
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN = ROOT / "bench" / "accuracy" / "run.py"
sys.path.insert(0, str(RUN.parent))
import run as accuracy  # noqa: E402

LINE_RE = re.compile(r"^(\S+)\s+measured=(\d+)\s+predicted=(\d+|-)\s+(.*)$")


def test_ci_subset(commlens_bin, run_commlens, tmp_path):
    work = tmp_path / "accuracy"
    r = subprocess.run([sys.executable, str(RUN), "--subset", "ci", "--work-dir", str(work),
                        "--commlens", commlens_bin, "--jobs", "2"], capture_output=True, text=True,
                       timeout=900)
    lines = r.stdout.splitlines()
    assert lines, r.stderr[-3000:]
    m = accuracy.SUMMARY_RE.match(lines[-1])
    assert m, f"no summary line:\n{r.stdout}\n{r.stderr[-3000:]}"
    configs = accuracy.select("ci")
    assert len(configs) >= 8
    assert int(m.group(2)) == len(configs)
    assert len(lines) == len(configs) + 2
    # every cell's bytes were compared too (measure and predict both record them); the subset's
    # expert-parallel config has bytes that depend on the routing, compared against their bounds
    routed = sum(x.get("routed_bytes_cells", 0) for x in json.loads((work / "results.json").read_text())["configs"])
    assert routed > 0
    assert lines[-2] == (f"bytes: compared on {m.group(4)}/{m.group(4)} cells (a byte mismatch makes a cell differ)"
                         f"; {routed} of them depend on MoE routing: predicted under balanced top-k routing, exact "
                         "when the measured bytes lie within the routing's bounds (no token to every token of the "
                         "group sent to one rank)")
    for cfg, line in zip(configs, lines):
        lm = LINE_RE.match(line)
        assert lm and lm.group(1) == cfg.name, line

    results = json.loads((work / "results.json").read_text())["configs"]
    assert [x["name"] for x in results] == [c.name for c in configs]
    problems = []
    for x in results:
        status = x["status"]
        if status not in ("exact", "DIFF"):
            problems.append(f"{x['name']}: {status}: {x['error']}")
            continue
        if status == "DIFF":
            problems.append(f"{x['name']}: prediction differs from CommDebugMode in {x['differ_cells']} cells: "
                            + "; ".join(f"{c['module']} {c['collective']} {c['phase']} predicted {c['predicted']} "
                                        f"measured {c['measured']}" for c in x["diffs"][:5]))
        # The measured side: non-empty, and a well-formed commlens-counts file for `compare`.
        assert x["measured"] > 0 and x["cells"] > 0, x
        assert x["bytes_cells"] == x["cells"], x
        c = run_commlens("compare", x["measured_file"], x["measured_file"], "--phase", x["phase"])
        assert (c.returncode, c.stderr) == (0, ""), (x["name"], c.stderr)
        summary = c.stdout.splitlines()[-1]
        assert summary.startswith("summary: ") and " 0 differ;" in summary, summary
    assert not problems, "\n".join(problems)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
