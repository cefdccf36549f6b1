"""torchtitan's complex RoPE (``view_as_complex``, a complex multiply by ``freqs_cis``,
``view_as_real``) through predict's forward and backward, against CommDebugMode in the same run.
The per-op backward formulas and sharding rules are checked one op at a time in
tests/backward/op_cases.py (``complex-rope*``) and tests/rules (``view_as_complex``,
``view_as_real``)."""
import pytest

from commlens import plan as planlib
from commlens.measure import measure
from integration_helpers import compare_with_measure, export_pt2, save_plan

LLAMA = "examples.llama:llama"
LLAMA_COMPLEX_ROPE = "examples.llama:llama(complex_rope=True)"


@pytest.mark.parametrize("plan_spec", [
    "examples.plans:llama_tp(tp=4)",
    "examples.plans:with_ac(plan='llama_fsdp_tp', dp=2, tp=4, early_stop=False, embedding_unit=True)",
])
def test_complex_rope_predicts_both_phases(run_commlens, tmp_path, plan_spec):
    plan = planlib.resolve_plan(plan_spec)
    pt2 = export_pt2(LLAMA_COMPLEX_ROPE, tmp_path)
    predicted = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", save_plan(plan, tmp_path), "--phase", "both", "--format", "json",
                     "-o", predicted)
    assert r.returncode == 0, r.stderr
    summary = compare_with_measure(run_commlens, predicted, LLAMA_COMPLEX_ROPE, plan, tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0
    # By hand: the styles hand attention local q and k (ColwiseParallel's use_local_output), so the
    # rotation, real or complex, runs on plain tensors and moves nothing: the complex model issues
    # exactly the real-RoPE model's collectives.
    assert measure(LLAMA_COMPLEX_ROPE, plan, phase="both") == measure(LLAMA, plan, phase="both")
