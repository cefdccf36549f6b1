"""The OpInfo differential sweep (tests/rules/opinfo_sweep.py) in the form CI runs: every OpInfo of
torch's op_db with a CPU sample (float32, else the dtype opinfo_sweep.sample_dtype picks; the tensors
of a list argument each an input), on its first sample and up to 3 placements on a 2-rank mesh,
predicted by commlens and measured with CommDebugMode: counts and bytes of both phases and the
forward's output placements. No case may be silently wrong, every
case DTensor itself raises on must be refused by commlens too, and docs/opinfo-coverage.md must be
what this sweep gives (regenerate it with `.venv/bin/python tests/rules/opinfo_sweep.py --doc`)."""

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import opinfo_sweep  # noqa: E402


def test_opinfo_sweep_has_no_wrong_prediction_and_its_doc_is_current():
    lines = []
    results, skipped = opinfo_sweep.sweep(**opinfo_sweep.DOC_SWEEP, out=lines.append)
    assert len(results) > 900, opinfo_sweep.summary(results, skipped)  # the sweep ran op_db, not a few ops
    wrong = [line for line in lines if ": wrong: " in line]
    assert wrong == []
    predicted_where_dtensor_raises = [f"{r['op']} {r['placements']}: {r['detail']}" for r in results
                                      if r["result"] == "dtensor" and not r["commlens_refused"]]
    assert predicted_where_dtensor_raises == []
    want = opinfo_sweep.render_doc(results, skipped, opinfo_sweep.DOC_COMMAND)
    have = opinfo_sweep.DOC.read_text() if opinfo_sweep.DOC.exists() else ""
    assert have == want, f"docs/opinfo-coverage.md is out of date: run {opinfo_sweep.DOC_COMMAND}"
