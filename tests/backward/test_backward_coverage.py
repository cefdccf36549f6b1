"""docs/backward-coverage.md is what tests/backward/backward_coverage.py generates now."""
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent


def test_backward_coverage_doc_is_fresh():
    r = subprocess.run([sys.executable, str(HERE / "backward_coverage.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_formula_op_has_a_rule_or_is_listed():
    sys.path.insert(0, str(HERE))
    import backward_coverage as bc

    formulas, nondiff = bc.registry()
    assert len(formulas) > 45 and "aten::mm.default" in formulas
    assert not set(formulas) & nondiff
