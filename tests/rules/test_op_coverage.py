"""docs/op-coverage.md is what tests/rules/op_coverage.py generates from the installed torch and the
built rules_driver; regenerate it with `.venv/bin/python tests/rules/op_coverage.py`."""

import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import op_coverage  # noqa: E402


def test_op_coverage_doc_is_current():
    driver = op_coverage.default_driver()
    if not driver.exists():
        pytest.fail(f"{driver} is not built: cmake --build build --target rules_driver")
    want = op_coverage.generate(driver)
    have = op_coverage.DOC.read_text() if op_coverage.DOC.exists() else ""
    assert have == want, "docs/op-coverage.md is out of date: run .venv/bin/python tests/rules/op_coverage.py"


def test_functional_filter_and_totals():
    dt = op_coverage.dtensor_ops()
    # no out / in-place overloads, only aten
    assert all(n.startswith("aten::") for n in dt)
    assert "aten::mm.default" in dt and "aten::add.Tensor" in dt
    assert "aten::add_.Tensor" not in dt and "aten::add.out" not in dt
    text = op_coverage.render(dt, op_coverage.pointwise_names(), {"aten::mm.default", "aten::add_.Tensor"})
    assert f"commlens: 1 of {len(dt)} DTensor functional ops" in text
    assert "`aten::add_.Tensor`" in text  # listed as a rule outside the functional list
