"""Backward coverage of the autodiff pass over the ops commlens has sharding rules for.

Reads the ops with a commlens rule from docs/op-coverage.md (generated from the rule registry and
kept fresh by tests/rules/test_op_coverage.py, plus its list of rules outside DTensor's table) and
the derivative table autograd/derivatives.yaml (its entries' ops and their formulas or the
autograd/Derivatives.cpp procedures they name, and its non-differentiable list), and writes docs/backward-coverage.md: per op, whether autodiff has a
formula (checked by the per-op oracle when op_cases.py has a case), is non-differentiable, or not
yet, with a reason.

  .venv/bin/python tests/backward/backward_coverage.py            # rewrite the doc
  .venv/bin/python tests/backward/backward_coverage.py --check    # exit 1 if it is stale
"""
import argparse
import pathlib
import re
import sys

import yaml

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DOC = ROOT / "docs" / "backward-coverage.md"
RULES_DOC = ROOT / "docs" / "op-coverage.md"
REGISTRY = ROOT / "autograd" / "derivatives.yaml"
DECOMPOSER = ROOT / "aten" / "Decomposer.cpp"


def rule_ops():
    text = RULES_DOC.read_text()
    ops = set(re.findall(r"^\| `(aten::[^`]+)` \|[^|]*\| yes \|", text, re.M))
    extra = re.search(r"commlens rules for ops outside this list[^:]*:(.*?)\n\n", text, re.S)
    if extra:
        ops |= set(re.findall(r"`(aten::[^`]+)`", extra.group(1)))
    return ops


def registry():
    """op -> its formula as the doc shows it (the procedure's name, or each operand's formula), and
    the non-differentiable ops."""
    doc = yaml.safe_load(REGISTRY.read_text())
    formulas = {}
    for entry in doc["derivatives"]:
        if "code" in entry:
            shown = f"`{entry['code']}` (Derivatives.cpp)"
        else:
            shown = "; ".join(f"{operand}: `{' ; '.join(str(f).strip().splitlines())}`"
                              for operand, f in entry.items() if operand != "ops")
        for op in entry["ops"]:
            formulas[op] = shown
    nondiff = {op for group in doc["non_differentiable"] for op in group}
    return formulas, nondiff


_INT_RESULT = re.compile(
    r"^aten::(eq|ne|lt|gt|le|ge|logical_\w+|bitwise_\w+|__\w+__|argmax|argmin|isnan|isinf|isfinite|isneginf|"
    r"isposinf|isreal|signbit|is_\w+|nonzero\w*|bucketize|searchsorted|count_nonzero|equal|allclose|any|all|"
    r"remainder|fmod|floor_divide|gcd|lcm|histc|bincount|unique\w*)\.")
_CREATION = re.compile(r"^aten::(\w+_like|new_\w+|zeros|ones|full|empty\w*|arange|randint\w*|rand\w*|bernoulli|"
                       r"scalar_tensor|linspace|logspace|eye|tril_indices|triu_indices|sym_\w+)\.")


# Ops whose formula waits on something else than writing it (each checked against torch 2.13 with
# a DTensor backward under CommDebugMode).
_RAISES = "torch 2.13's DTensor raises in backward: no sharding strategy for "
_DECOMPOSED = ("DTensor runs its backward op ({}) through a decomposition, not a registered strategy; "
               "commlens' rules mirror registered strategies only")
_MIXED = "torch 2.13 raises in backward: the formula mixes a plain zeros/ones tensor with DTensors ({})"
_NO_DERIVATIVE = "torch 2.13's autograd has no derivative for it (backward raises 'not implemented')"
BLOCKED = {
    "aten::index_select.default": _DECOMPOSED.format("index_add"),
    "aten::index.Tensor": "no forward sharding rule for index.Tensor yet (its backward is new_zeros + index_put)",
    "aten::hardtanh.default": _RAISES + "hardtanh_backward",
    "aten::relu6.default": _RAISES + "hardtanh_backward",
    "aten::hardsigmoid.default": _RAISES + "hardsigmoid_backward",
    "aten::hardswish.default": _RAISES + "hardswish_backward",
    "aten::hardshrink.default": _RAISES + "hardshrink_backward",
    "aten::softshrink.default": _RAISES + "softshrink_backward",
    "aten::leaky_relu.default": _DECOMPOSED.format("leaky_relu_backward"),
    "aten::elu.default": _DECOMPOSED.format("elu_backward"),
    "aten::selu.default": _DECOMPOSED.format("elu_backward"),
    "aten::celu.default": _DECOMPOSED.format("elu_backward"),
    "aten::softplus.default": _DECOMPOSED.format("softplus_backward"),
    "aten::mish.default": _DECOMPOSED.format("mish_backward"),
    "aten::diagonal.default": _DECOMPOSED.format("diagonal_backward"),
    "aten::cumprod.default": _MIXED.format("where"),
    "aten::prod.dim_int": _MIXED.format("cat"),
    "aten::prod.default": _MIXED.format("cat"),
    "aten::zeta.default": _NO_DERIVATIVE,
    "aten::special_zeta.default": _NO_DERIVATIVE,
    "aten::special_zeta.other_scalar": _NO_DERIVATIVE,
    "aten::igamma.default": _NO_DERIVATIVE,
    "aten::igammac.default": _NO_DERIVATIVE,
    "aten::heaviside.default": _NO_DERIVATIVE,
    "aten::cummax.default": _MIXED.format("scatter_add"),
    "aten::cummin.default": _MIXED.format("scatter_add"),
    "aten::select_scatter.default": _MIXED.format("select_scatter"),
    "aten::slice_scatter.default": _MIXED.format("slice_scatter"),
    "aten::diagonal_scatter.default": _MIXED.format("diagonal_scatter"),
    "aten::mvlgamma.default": _MIXED.format("add"),
    "aten::sgn.default": "its gradient is a plain _efficientzerotensor: no DTensor op runs",
}


def decomposed_ops():
    """Ops the decomposition pass rewrites into runtime ops before autodiff runs (its
    `op == "aten::..."` tests and `op.startswith("aten::to.")`)."""
    src = DECOMPOSER.read_text()
    exact = set(re.findall(r'op == "(aten::[^"]+)"', src))
    prefixes = re.findall(r'op\.startswith\("(aten::[^"]+)"\)', src)
    return lambda op: op in exact or any(op.startswith(p) for p in prefixes)


def classify(op, formulas, nondiff, decomposed=lambda op: False):
    if decomposed(op) and op not in formulas:
        return "formula", "decomposed before autodiff (aten/Decomposer.cpp) into ops that have formulas"
    if op in BLOCKED and op not in formulas:
        return "not yet", BLOCKED[op]
    if op in formulas:
        return "formula", formulas[op]
    if op in nondiff:
        return "non-differentiable", "registry: no gradient flows (creation, detach, comparison; results autograd gives no grad_fn)"
    name = op.split("::", 1)[1].split(".", 1)[0]
    if _INT_RESULT.match(op):
        return "non-differentiable", "integer / bool result (or piecewise-constant)"
    if _CREATION.match(op):
        return "non-differentiable", "creates a tensor without autograd history"
    if name.endswith("_") and not name.endswith("__"):
        return "not yet", "in-place variant: exported programs are functional"
    if "backward" in name:
        return "not yet", "backward op: double backward is not modelled"
    if name.startswith("_foreach") or name.startswith("_fused"):
        return "not yet", "optimizer / fused op, not in a forward program"
    return "not yet", "no formula yet"


def render():
    formulas, nondiff = registry()
    ops = sorted(rule_ops() | set(formulas) | nondiff)
    decomposed = decomposed_ops()
    rows = [(op, *classify(op, formulas, nondiff, decomposed)) for op in ops]
    count = collections_counter(r[1] for r in rows if r[0] in rule_ops())
    lines = [
        "# Backward coverage: autodiff derivative formulas",
        "",
        "Generated by `tests/backward/backward_coverage.py` from the ops commlens has sharding rules for",
        "(`docs/op-coverage.md`) and the derivative table (`autograd/derivatives.yaml`);",
        "`tests/backward/test_backward_coverage.py` fails when this file is out of date. Every formula",
        "exercised by a case of `tests/backward/op_cases.py` is checked against torch 2.13 (CommDebugMode,",
        "`loss.backward()`) by `tests/backward/test_backward_op_oracle.py`.",
        "",
        f"Of {sum(count.values())} ops with a sharding rule: {count.get('formula', 0)} have a formula, "
        f"{count.get('non-differentiable', 0)} are non-differentiable, {count.get('not yet', 0)} not yet.",
        f"The registry has {len(formulas)} formulas ({len(set(formulas) - rule_ops())} for ops outside the rule list)",
        f"and lists {len(nondiff)} non-differentiable ops.",
        "",
        "| op | sharding rule | autodiff | formula / reason |",
        "|---|---|---|---|",
    ]
    rules = rule_ops()
    for op, status, why in rows:
        lines.append(f"| `{op}` | {'yes' if op in rules else 'no'} | {status} | {why} |")
    return "\n".join(lines) + "\n"


def collections_counter(it):
    import collections
    return collections.Counter(it)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC} is out of date: run {pathlib.Path(__file__).relative_to(ROOT)}", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
