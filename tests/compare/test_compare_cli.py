"""`commlens compare PREDICTED MEASURED`: real CommDebugMode dumps (fake process group) and
commlens-counts files, identical (exit 0), different (exit 1, exact rows) and malformed (exit 2,
one line `commlens: error: <file>: <what>`)."""
import json

import pytest

from conftest import edit_json

AR = "c10d_functional.all_reduce"

MLP_GRAD_TABLE = """\
module      collective                  phase     predicted  measured  diff
Global      c10d_functional.all_reduce  forward           1         1     0
Global      c10d_functional.all_reduce  backward          1         1     0
  MLP       c10d_functional.all_reduce  forward           1         1     0
  MLP       c10d_functional.all_reduce  backward          1         1     0
    MLP.w1  c10d_functional.all_reduce  backward          1         1     0
    MLP.w2  c10d_functional.all_reduce  forward           1         1     0
summary: 6 cells, 0 differ; collectives predicted 2, measured 2 (forward+backward)
"""


def find(node, fqn):
    if node["fqn"] == fqn:
        return node
    for child in node["children"]:
        if (hit := find(child, fqn)) is not None:
            return hit
    return None


# ------------------------------------------------------------------------------------------
# identical


def test_identical_dump_vs_itself(run_commlens, dumps):
    r = run_commlens("compare", dumps / "mlp_grad.json", dumps / "mlp_grad.json")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == MLP_GRAD_TABLE


@pytest.mark.parametrize("name", ["mlp_grad", "mlp_nograd", "mlp_sp"])
def test_identical_dump_vs_counts_file(run_commlens, dumps, name):
    # CommDebugMode's tree and commlens.measure's flat file carry the same inclusive counts.
    for a, b in [(f"{name}.json", f"{name}.counts.json"), (f"{name}.counts.json", f"{name}.json")]:
        r = run_commlens("compare", dumps / a, dumps / b)
        assert (r.returncode, r.stderr) == (0, ""), r.stdout
        assert " 0 differ;" in r.stdout.splitlines()[-1]
        assert "MISMATCH" not in r.stdout


def test_sequence_parallel_rows(run_commlens, dumps):
    r = run_commlens("compare", dumps / "mlp_sp.json", dumps / "mlp_sp.counts.json")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[-1] == "summary: 16 cells, 0 differ; collectives predicted 5, measured 5 (forward+backward)"
    assert ("      Block.mlp.w2  c10d_functional.reduce_scatter_tensor   forward           1         1     0"
            in lines)
    assert ("    Block.norm      c10d_functional.reduce_scatter_tensor   backward          1         1     0"
            in lines)


# ------------------------------------------------------------------------------------------
# different


def test_input_requires_grad_differs_in_backward(run_commlens, dumps):
    # Predicting with an input that requires grad vs measuring one that does not: the
    # backward all_reduce of the Colwise w1 (grad of its replicated input) is extra.
    r = run_commlens("compare", dumps / "mlp_grad.json", dumps / "mlp_nograd.json")
    assert (r.returncode, r.stderr) == (1, "")
    assert r.stdout == """\
module      collective                  phase     predicted  measured  diff
Global      c10d_functional.all_reduce  forward           1         1     0
Global      c10d_functional.all_reduce  backward          1         0    +1  MISMATCH
  MLP       c10d_functional.all_reduce  forward           1         1     0
  MLP       c10d_functional.all_reduce  backward          1         0    +1  MISMATCH
    MLP.w1  c10d_functional.all_reduce  backward          1         0    +1  MISMATCH
    MLP.w2  c10d_functional.all_reduce  forward           1         1     0
summary: 6 cells, 3 differ; collectives predicted 2, measured 1 (forward+backward)
"""


def test_phase_selection(run_commlens, dumps):
    r = run_commlens("compare", dumps / "mlp_grad.json", dumps / "mlp_nograd.json", "--phase", "forward")
    assert r.returncode == 0
    assert r.stdout.splitlines()[-1] == "summary: 3 cells, 0 differ; collectives predicted 1, measured 1 (forward)"
    r = run_commlens("compare", dumps / "mlp_grad.json", dumps / "mlp_nograd.json", "--phase=backward")
    assert r.returncode == 1
    assert r.stdout.splitlines()[-1] == "summary: 3 cells, 3 differ; collectives predicted 1, measured 0 (backward)"


def test_edited_counts_and_new_collective(run_commlens, dumps, tmp_path):
    def edit(doc):
        w2 = find(doc, "MLP.w2")
        w2["collectives_forward"] = [[AR, 2], ["_dtensor.shard_dim_alltoall", 1]]
    predicted = edit_json(dumps / "mlp_grad.json", tmp_path / "pred.json", edit)
    r = run_commlens("compare", predicted, dumps / "mlp_grad.counts.json")
    assert r.returncode == 1
    mismatches = [line for line in r.stdout.splitlines() if line.endswith("MISMATCH")]
    assert mismatches == [
        "    MLP.w2  _dtensor.shard_dim_alltoall  forward           1         0    +1  MISMATCH",
        "    MLP.w2  c10d_functional.all_reduce   forward           2         1    +1  MISMATCH",
    ]
    assert r.stdout.splitlines()[-1] == \
        "summary: 7 cells, 2 differ; collectives predicted 2, measured 2 (forward+backward)"


def test_module_only_on_one_side(run_commlens, dumps, tmp_path):
    def edit(doc):
        doc["modules"].insert(3, {"fqn": "MLP.act", "forward": {}, "backward": {AR: 1}})
        del doc["modules"][2]  # MLP.w1
    predicted = edit_json(dumps / "mlp_grad.counts.json", tmp_path / "pred.counts.json", edit)
    r = run_commlens("compare", predicted, dumps / "mlp_grad.json")
    assert r.returncode == 1
    # MLP.act (predicted only) follows its predicted predecessor MLP.
    assert r.stdout.splitlines()[5:8] == [
        "    MLP.act  c10d_functional.all_reduce  backward          1         0    +1  MISMATCH",
        "    MLP.w1   c10d_functional.all_reduce  backward          0         1    -1  MISMATCH",
        "    MLP.w2   c10d_functional.all_reduce  forward           1         1     0",
    ]


def test_approximate_cells(run_commlens, dumps, tmp_path):
    def mark(doc):
        find(doc, "MLP.w2")["approximate_forward"] = [AR]
    predicted = edit_json(dumps / "mlp_grad.json", tmp_path / "approx.json", mark)
    r = run_commlens("compare", predicted, dumps / "mlp_grad.json")
    assert r.returncode == 0  # approximate but equal
    assert "    MLP.w2  c10d_functional.all_reduce  forward          ~1         1     0" in r.stdout.splitlines()
    assert r.stdout.splitlines()[-2:] == [
        "~: approximate prediction (depends on ops commlens does not model)",
        "summary: 6 cells, 0 differ, 1 approximate; collectives predicted 2, measured 2 (forward+backward)",
    ]

    def mark_and_change(doc):
        mark(doc)
        find(doc, "MLP.w2")["collectives_forward"] = [[AR, 3]]
    predicted = edit_json(dumps / "mlp_grad.json", tmp_path / "approx2.json", mark_and_change)
    r = run_commlens("compare", predicted, dumps / "mlp_grad.json")
    assert r.returncode == 1  # approximate and different still counts as a difference
    assert "    MLP.w2  c10d_functional.all_reduce  forward          ~3         1    +2  MISMATCH" in r.stdout


def test_json_output(run_commlens, dumps, tmp_path):
    r = run_commlens("compare", dumps / "mlp_grad.json", dumps / "mlp_nograd.counts.json", "--json")
    assert (r.returncode, r.stderr) == (1, "")
    doc = json.loads(r.stdout)
    assert doc["format"] == "commlens-compare" and doc["version"] == 1
    assert doc["predicted"] == {"file": str(dumps / "mlp_grad.json"), "format": "commdebugmode-tree"}
    assert doc["measured"] == {"file": str(dumps / "mlp_nograd.counts.json"), "format": "commlens-counts"}
    assert doc["phases"] == ["forward", "backward"]
    assert doc["summary"] == {"cells": 6, "differ": 3, "approximate": 0, "bytes_compared": 0, "identical": False,
                              "predicted_collectives": 2, "measured_collectives": 1}
    assert doc["cells"][4] == {"module": "MLP.w1", "depth": 2, "collective": AR, "phase": "backward",
                               "predicted": 1, "measured": 0, "diff": 1, "approximate": False, "match": False}
    out = tmp_path / "cmp.json"
    r = run_commlens("compare", dumps / "mlp_grad.json", dumps / "mlp_nograd.counts.json", "--json", "-o", out)
    assert (r.returncode, r.stdout) == (1, "")
    assert json.loads(out.read_text()) == doc


# ------------------------------------------------------------------------------------------
# bad input: exit 2, one line on stderr, nothing on stdout


def check_error(run_commlens, predicted, measured, expected):
    r = run_commlens("compare", predicted, measured)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"commlens: error: {expected}\n"


def test_missing_file(run_commlens, dumps, tmp_path):
    check_error(run_commlens, tmp_path / "absent.json", dumps / "mlp_grad.json",
                f"{tmp_path / 'absent.json'}: cannot open file")
    check_error(run_commlens, dumps / "mlp_grad.json", tmp_path, f"{tmp_path}: is a directory")


def test_invalid_json(run_commlens, dumps, tmp_path):
    bad = tmp_path / "truncated.json"
    bad.write_text((dumps / "mlp_grad.json").read_text()[:20])
    r = run_commlens("compare", dumps / "mlp_grad.json", bad)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {bad}: invalid JSON: parse error at line 2, column 19: syntax error "
                        "while parsing value - invalid string: missing closing quote; last read: '\"Global'\n")


def test_unknown_format(run_commlens, dumps, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text('{"format": "commlens-plan", "version": 1}')
    check_error(run_commlens, plan, dumps / "mlp_grad.json",
                f'{plan}: format: unknown format "commlens-plan" (expected "commlens-counts")')
    other = tmp_path / "other.json"
    other.write_text('{"modules": []}')
    check_error(run_commlens, dumps / "mlp_grad.json", other,
                f"{other}: unknown format: neither a CommDebugMode generate_json_dump tree (no 'fqn') "
                "nor a commlens-counts file (no 'format')")
    array = tmp_path / "array.json"
    array.write_text("[]")
    check_error(run_commlens, array, dumps / "mlp_grad.json",
                f"{array}: unknown format: expected a JSON object (a CommDebugMode generate_json_dump tree "
                "or a commlens-counts file), got []")


def test_missing_field_in_dump(run_commlens, dumps, tmp_path):
    path = edit_json(dumps / "mlp_grad.json", tmp_path / "missing.json",
                     lambda d: d["children"][0]["children"][1].pop("collectives_backward"))
    check_error(run_commlens, dumps / "mlp_grad.json", path,
                f"{path}: children[0].children[1]: missing required field 'collectives_backward'")


def test_bad_count_in_dump(run_commlens, dumps, tmp_path):
    path = edit_json(dumps / "mlp_grad.json", tmp_path / "count.json",
                     lambda d: d["children"][0]["collectives_forward"][0].__setitem__(1, "one"))
    check_error(run_commlens, path, dumps / "mlp_grad.json",
                f'{path}: children[0].collectives_forward[0][1]: expected a non-negative integer count, got "one"')


def test_bad_counts_file(run_commlens, dumps, tmp_path):
    path = edit_json(dumps / "mlp_grad.counts.json", tmp_path / "c1.counts.json",
                     lambda d: d["modules"][2].pop("fqn"))
    check_error(run_commlens, path, dumps / "mlp_grad.json", f"{path}: modules[2]: missing required field 'fqn'")
    path = edit_json(dumps / "mlp_grad.counts.json", tmp_path / "c2.counts.json",
                     lambda d: d.__setitem__("version", 7))
    check_error(run_commlens, path, dumps / "mlp_grad.json",
                f"{path}: version: unsupported commlens-counts version 7 (commlens reads version 1)")
    path = edit_json(dumps / "mlp_grad.counts.json", tmp_path / "c3.counts.json",
                     lambda d: d["modules"][3]["forward"].__setitem__(AR, 1.5))
    check_error(run_commlens, path, dumps / "mlp_grad.json",
                f'{path}: modules[3].forward["{AR}"]: expected a non-negative integer count, got 1.5')


def test_one_phase_counts_file(run_commlens, dumps, tmp_path):
    # `commlens.measure --phase backward` empties the forward sections and says so in "phase".
    def backward_only(doc):
        doc["phase"] = "backward"
        for m in doc["modules"]:
            m["forward"] = {}
    path = edit_json(dumps / "mlp_grad.counts.json", tmp_path / "bw.counts.json", backward_only)
    r = run_commlens("compare", dumps / "mlp_grad.json", path, "--phase", "backward")
    assert r.returncode == 0
    assert r.stdout.splitlines()[-1] == "summary: 3 cells, 0 differ; collectives predicted 1, measured 1 (backward)"
    for phase in ([], ["--phase", "both"], ["--phase", "forward"]):
        r = run_commlens("compare", dumps / "mlp_grad.json", path, *phase)
        assert (r.returncode, r.stdout) == (2, "")
        assert r.stderr == (f'commlens: error: {path}: holds backward counts only ("phase": "backward"); '
                            "compare with --phase backward\n")


def test_usage_errors(run_commlens, dumps):
    r = run_commlens("compare", dumps / "mlp_grad.json")
    assert (r.returncode, r.stdout, r.stderr) == (2, "", "commlens: error: compare takes two arguments: PREDICTED MEASURED\n")
    r = run_commlens("compare", dumps / "mlp_grad.json", dumps / "mlp_grad.json", "--phase", "sideways")
    assert (r.returncode, r.stderr) == (2, "commlens: error: unknown phase 'sideways' (expected forward, backward, both or inference)\n")
    r = run_commlens("compare", dumps / "mlp_grad.json", dumps / "mlp_grad.json", "--phase")
    assert (r.returncode, r.stderr) == (2, "commlens: error: option --phase needs a value\n")
    r = run_commlens("compare", dumps / "mlp_grad.json", dumps / "mlp_grad.json", "--bogus")
    assert (r.returncode, r.stderr) == (2, "commlens: error: unknown option '--bogus'\n")
    r = run_commlens("--help")
    assert "compare PREDICTED MEASURED [--json|--html] [--phase forward|backward|both|inference]" in r.stdout
