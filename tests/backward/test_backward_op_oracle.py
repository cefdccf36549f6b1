"""Per-op backward oracle: for every single-op program of op_cases.py, the backward ATen ops and
collectives `commlens predict --phase backward` gives (the autodiff pass's derivative formulas,
autograd/derivatives.yaml) against what torch 2.13 runs for `loss.backward()` under CommDebugMode
(fake process group, mesh of 2), made in the same test run by one `op_cases.py` subprocess.

Compared per module: the multiset of names of the backward ops with a DTensor argument, and the
backward collective counts. Not compared: the ops AccumulateGrad runs on a leaf's gradient
(`detach`, or `new_empty_strided` + `copy_` when the gradient's strides differ from the leaf's),
nor the `detach` of a saved tensor's unpacking; the model-level oracle (test_backward_ops.py)
checks those on real models. Nor cat / stack, which CommDebugMode's op log cannot show (LIST_OPERAND_OPS).
"""
import collections
import json
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import op_cases  # noqa: E402

IGNORED = {"aten.detach.default", "aten.new_empty_strided.default", "aten.copy_.default"}
# CommDebugMode logs an op's input sharding from its top-level DTensor arguments only, so ops that
# take their tensors as one list (split's and unbind's gradients: cat, stack) never show in its op
# log; commlens' report lists them. Their collectives are still compared.
LIST_OPERAND_OPS = {"aten.cat.default", "aten.stack.default"}


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    out = tmp_path_factory.mktemp("op_oracle")
    r = subprocess.run([sys.executable, str(HERE / "op_cases.py"), str(out)], capture_output=True, text=True,
                       cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    return out


def _summary(tree):
    ops, coll = {}, {}

    def walk(node):
        ops[node["fqn"]] = collections.Counter(op["name"] for op in node.get("operations_backward", [])
                                               if op.get("input_sharding") and op["name"] not in IGNORED | LIST_OPERAND_OPS)
        coll[node["fqn"]] = collections.Counter({str(k): int(v) for k, v in node.get("collectives_backward", [])})
        for c in node.get("children", []):
            walk(c)

    walk(tree)
    return ops, coll


@pytest.mark.parametrize("case", [c[0] for c in op_cases.CASES])
def test_backward_ops_of_one_op_match_torch(case, truth, run_commlens):
    pred = truth / f"{case}.pred.json"
    r = run_commlens("predict", truth / f"{case}.pt2", "--plan", truth / f"{case}.plan.json", "--phase", "backward",
                     "--format", "json", "-o", pred)
    assert r.returncode == 0, r.stderr
    m_ops, m_coll = _summary(json.loads((truth / f"{case}.dump.json").read_text()))
    p_ops, p_coll = _summary(json.loads(pred.read_text()))
    diffs = {}
    for fqn in sorted(set(m_ops) | set(p_ops)):
        m, p = m_ops.get(fqn, collections.Counter()), p_ops.get(fqn, collections.Counter())
        if m != p:
            diffs[f"{fqn} ops"] = {"missing": dict(m - p), "extra": dict(p - m)}
        m, p = m_coll.get(fqn, collections.Counter()), p_coll.get(fqn, collections.Counter())
        if m != p:
            diffs[f"{fqn} collectives"] = {"measured": dict(m), "predicted": dict(p)}
    assert not diffs, json.dumps(diffs, indent=1)
    assert sum(sum(c.values()) for c in m_ops.values()) > 0


@pytest.mark.parametrize("name, fn, shapes, torch_raises, refusal", [
    # soft_margin_loss has no derivative for its target, the binary cross entropies none for their
    # weights: torch raises when they require grad, so a prediction refuses rather than give
    # them no gradient.
    ("soft_margin_loss", "F.soft_margin_loss", [(4, 6), (4, 6)], True,
     " is not differentiable with respect to 'target' (torch raises when it requires grad)"),
    ("binary_cross_entropy_with_logits", "lambda a, b, w: F.binary_cross_entropy_with_logits(a, b.detach(), weight=w)",
     [(4, 6), (4, 6), (6,)], True,
     " is not differentiable with respect to 'weight' (torch raises when it requires grad)"),
    ("binary_cross_entropy",
     "lambda a, b, w: F.binary_cross_entropy(torch.sigmoid(a), torch.sigmoid(b).detach(), weight=w)",
     [(4, 6), (4, 6), (6,)], True,
     " is not differentiable with respect to 'weight' (torch raises when it requires grad)"),
    # torch differentiates the target with a pos_weight through log_sigmoid of both signs; not modelled.
    ("binary_cross_entropy_with_logits", "lambda a, b, pw: F.binary_cross_entropy_with_logits(a, b, pos_weight=pw.detach())",
     [(4, 6), (4, 6), (6,)], False,
     ": the target's gradient with a pos_weight (log_sigmoid of both signs) is not modelled"),
    # the linalg derivatives are modelled for 2-D matrices, where torch's at::matmul runs as mm
    ("linalg_inv_ex", "lambda a: torch.ops.aten.linalg_inv_ex(a)[0].sum()", [(2, 4, 4)], False,
     ": the derivative of a batched (3-D) 'A' is not modelled (2-D matrices only)"),
    ("linalg_inv_ex", "lambda a: torch.ops.aten.linalg_inv_ex(a.to(torch.complex64))[0].abs().sum()", [(4, 4)], False,
     ": the derivative of a complex 'A' is not modelled (real matrices only)"),
    # triangular_solve's cloned coefficient alone: torch gives the solution's part a plain at::zeros
    ("triangular_solve", "lambda b, a: torch.ops.aten.triangular_solve(b, a)[1].sum()", [(4, 3), (4, 4)], False,
     ": a gradient of the cloned coefficient alone (torch fills the solution's with a plain at::zeros) is not "
     "modelled"),
    # native_group_norm's mean and rstd with gradients: torch takes its double-backward formula
    ("native_group_norm", "lambda a: sum(o.sum() for o in torch.ops.aten.native_group_norm(a, None, None, 2, 4, 3, 2, "
     "1e-5))", [(2, 4, 3)], False,
     ": a gradient of the mean or rstd (torch's double-backward formula, whose in-place unsqueeze_ DTensor has no "
     "strategy for) is not modelled"),
    # lu_unpack of a wide LU without U's gradient: torch cats a plain zeros with the DTensor gradient
    ("lu_unpack", "lambda a: torch.ops.aten.lu_unpack(*torch.ops.aten.linalg_lu_factor_ex(a)[:2])[1].sum()", [(4, 6)], False,
     ": without a gradient of U torch cats a plain at::zeros with the DTensor gradient (DTensor raises)"),
])
def test_a_gradient_commlens_cannot_give_is_refused_by_name(name, fn, shapes, torch_raises, refusal, tmp_path,
                                                            run_commlens):
    import torch
    import torch.nn.functional as F

    from commlens.export import export_model
    from commlens.plan import save

    fn = eval(fn, {"F": F, "torch": torch})
    xs = [op_cases.f32(*shape) for shape in shapes]
    grads = [x.clone().requires_grad_() for x in xs]
    if torch_raises:
        with pytest.raises(RuntimeError, match="not differentiable with respect to argument"):
            fn(*grads)
    else:
        fn(*grads).backward()
    inputs = [(x, op_cases.R) for x in xs]
    torch.export.save(export_model(op_cases.Op(fn), xs), str(tmp_path / "m.pt2"))
    save(op_cases.plan_of(inputs), tmp_path / "p.json")
    r = run_commlens("predict", tmp_path / "m.pt2", "--plan", tmp_path / "p.json", "--phase", "backward")
    assert (r.returncode, r.stderr) == (2, f"commlens: error: {tmp_path / 'm.pt2'}: autodiff: node '{name}' "
                                           f"aten::{name}.default in Op{refusal}\n")


@pytest.mark.parametrize("fn, shapes, refusal", [
    ("lambda a, w: F.group_norm(a, 2, w)", [(2, 4, 3), (4,)],
     "with a gradient not asked for (output_mask [True, True, False]) DTensor raises: the decomposition it derives "
     "the strategy from returns fewer outputs than the op's 3"),
    ("lambda a: F.group_norm(a, 2)", [(2, 4, 3)],
     "without a weight DTensor has no strategy for it (the decomposition it would derive one from multiplies by a "
     "plain torch.ones; DTensor raises \"does not have a sharding strategy registered\")"),
])
def test_group_norm_backward_dtensor_cannot_run_is_refused(fn, shapes, refusal, tmp_path, run_commlens):
    """native_group_norm_backward has no DTensor strategy: DTensor derives one from torch._decomp's
    decomposition, which fails without a weight (a plain torch.ones) or with a gradient masked off
    (fewer outputs than the op's). CommDebugMode's run raises; commlens refuses by name."""
    import torch
    import torch.nn.functional as F

    from commlens.export import export_model
    from commlens.measure import measure_many
    from commlens.plan import save

    fn = eval(fn, {"F": F, "torch": torch})
    xs = [op_cases.f32(*shape) for shape in shapes]
    inputs = [(x, op_cases.R) for x in xs]
    plan = op_cases.plan_of(inputs)
    with pytest.raises((NotImplementedError, RuntimeError), match="native_group_norm_backward"):
        measure_many([(lambda: (op_cases.Op(fn), [x.clone() for x in xs]), plan, "backward",
                       str(tmp_path / "dump.json"))], backend="fake", phase="backward")
    torch.export.save(export_model(op_cases.Op(fn), xs), str(tmp_path / "m.pt2"))
    save(plan, tmp_path / "p.json")
    r = run_commlens("predict", tmp_path / "m.pt2", "--plan", tmp_path / "p.json", "--phase", "backward")
    assert r.returncode == 2
    assert r.stderr.endswith(f"aten::native_group_norm_backward.default: {refusal}\n"), r.stderr

