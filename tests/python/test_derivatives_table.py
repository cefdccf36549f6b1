"""autograd/gen_derivatives.py, the compiler of autograd/derivatives.yaml: what it generates for a
formula (the ops in autograd's order, each operand's formula behind its needs-a-gradient test),
and the one-line build error naming the entry for each mistake it checks against torch's schemas.
The shipped table is compiled by every build; the backward oracle (tests/backward) checks what its
formulas run against torch."""
import pathlib
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
GEN = ROOT / "autograd" / "gen_derivatives.py"
TABLE = ROOT / "autograd" / "derivatives.yaml"


def generate(tmp_path, derivatives, non_differentiable=()):
    src = tmp_path / "derivatives.yaml"
    src.write_text(yaml.safe_dump({"derivatives": derivatives, "non_differentiable": [list(non_differentiable)]},
                                  sort_keys=False))  # an entry's operands in autograd's order
    out = tmp_path / "out.cpp"
    p = subprocess.run([sys.executable, str(GEN), str(src), str(out)], capture_output=True, text=True)
    return p.returncode, p.stderr.strip(), out.read_text() if out.exists() else ""


def test_a_formula_runs_its_ops_innermost_first_behind_each_operands_test(tmp_path):
    rc, err, cpp = generate(tmp_path, [
        {"ops": ["aten::cos.default"], "self": "mul.Tensor(grad, neg(sin(self)))"},
        {"ops": ["aten::div.Tensor"], "self": "div.Tensor(grad, other)",
         "other": "mul.Tensor(neg(grad), div.Tensor(div.Tensor(self, other), other))"},
    ])
    assert rc == 0, err
    cos = cpp[cpp.index("// aten::cos.default"):cpp.index("// aten::div.Tensor")]
    emitted = [line.split('"')[1] for line in cos.splitlines() if "c.e.emit(" in line]
    assert emitted == ["aten::sin.default", "aten::neg.default", "aten::mul.Tensor"]
    assert 'GradEmitter::like(c.g()), "grad_mul")' in cos
    div = cpp[cpp.index("// aten::div.Tensor"):]
    # the divisor may be a wrapped number: passed as the node's argument, not as a tensor
    assert 'A("other", *c.n.input("other"))' in div
    assert div.index('if (c.want("self"))') < div.index('if (c.want("other"))')
    assert '{"aten::div.Tensor", formula1}' in cpp


def test_hints_meta_optional_arguments_and_statements(tmp_path):
    rc, err, cpp = generate(tmp_path, [
        {"ops": ["aten::unsqueeze.default"], "self": "squeeze.dim(grad, int(dim), _like=self)"},
        {"ops": ["aten::logit.default"], "self": "logit_backward(grad, self, optional(eps), _hint='grad_logit')"},
        {"ops": ["aten::rsqrt.default"],
         "self": "p = pow.Tensor_Scalar(result, 3.0)\nmul.Tensor(mul.Scalar(grad, -0.5), p)"},
    ])
    assert rc == 0, err
    assert 'GradEmitter::like(c.operand("self")), "grad_squeeze")' in cpp
    assert 'if (const Argument *o = c.n.input("eps"); o && !o->isNone())' in cpp
    assert '"grad_logit"' in cpp
    rsqrt = cpp[cpp.index("// aten::rsqrt.default"):]
    emitted = [line.split('"')[1] for line in rsqrt.splitlines() if "c.e.emit(" in line]
    assert emitted == ["aten::pow.Tensor_Scalar", "aten::mul.Scalar", "aten::mul.Tensor"]
    assert '"grad_scale")' in rsqrt  # mul.Scalar's default name


def test_strings_sizes_and_real_only(tmp_path):
    rc, err, cpp = generate(tmp_path, [
        {"ops": ["aten::remainder.Tensor"], "other": "mul.Tensor(neg(grad), div.Tensor_mode(self, other, rounding_mode='floor'))"},
        {"ops": ["aten::scatter_add.default"], "src": "gather(grad, int(dim), index, _sizes=index)"},
        {"ops": ["aten::angle.default"], "real_only": True,
         "self": "zeros_like(self, memory_format=preserve_format, _hint='grad_zeros')"},
    ])
    assert rc == 0, err
    assert 'K("rounding_mode", Argument(std::string("floor")))' in cpp
    assert 'GradEmitter::withSizes(c.g(), sizesOf(*c.operand("index")->meta()))' in cpp
    angle = cpp[cpp.index("// aten::angle.default"):]
    # the complex check comes before any op
    assert angle.index("isComplex(v->meta()->dtype)") < angle.index('c.e.emit("aten::zeros_like.default"')
    assert 'K("memory_format", Argument(MemoryFormat::Preserve))' in angle


def test_number_arithmetic_divides_as_python_does(tmp_path):
    # celu's input_scale is 1.0 / alpha: true division, a double even for integer operands
    rc, err, cpp = generate(tmp_path, [
        {"ops": ["aten::celu.default"],
         "self": "elu_backward(grad, given(alpha, 1.0), 1, 1.0 / float(alpha, 1.0), False, self)"},
        {"ops": ["aten::sin.default"], "self": "mul.Scalar(grad, 1 / 2)"},
    ])
    assert rc == 0, err
    assert "(double(" in cpp[cpp.index("// aten::celu.default"):cpp.index("// aten::sin.default")]
    assert "(double(int64_t(1)) / double(int64_t(2)))" in cpp[cpp.index("// aten::sin.default"):]


@pytest.mark.parametrize("entry,message", [
    ({"ops": ["aten::sin.nope"], "self": "grad"}, "torch has no operator aten::sin.nope"),
    ({"ops": ["aten::sin.default"], "self": "cosine(self)"}, "torch has no operator aten::cosine.default"),
    ({"ops": ["aten::sin.default"], "self": "mul(grad, cos(self))"},
     "aten::mul.default does not return a tensor (aten::mul(Scalar a, Scalar b) -> Scalar): name the overload"),
    ({"ops": ["aten::sin.default"], "self": "mul.Tensor(grad, cos(input))"},
     "aten::sin.default has no argument 'input'"),
    ({"ops": ["aten::sin.default"], "self": "mul.Tensor(grad, cos(self, alpha=1))"},
     "aten::cos.default has no argument 'alpha'"),
    ({"ops": ["aten::add.Tensor"], "other": "mul.Scalar(grad, alpha)"},
     "'alpha' has a default in the schema: read it through given(), optional(), int() or bool()"),
    ({"ops": ["aten::add.Tensor", "aten::add.Scalar"], "other": "grad"},
     "argument 'other' differs between the entry's ops"),
    ({"ops": ["aten::mul.Scalar"], "other": "grad"}, "'other' is not a tensor argument"),
    ({"ops": ["aten::sin.default"], "self": "gelu_backward(grad, self, 'tanh')"},
     "aten::gelu_backward.default takes at most 2 positional arguments"),
    ({"ops": ["aten::sin.default"], "self": "mul.Tensor(grad, self + 1)"},
     "arithmetic is on numbers only, not tensors (call the op)"),
    ({"ops": ["aten::sin.default"], "code": "sinBackward", "self": "grad"}, "an entry with code: has no formulas"),
])
def test_a_mistake_is_a_build_error_naming_the_entry(tmp_path, entry, message):
    rc, err, _ = generate(tmp_path, [{"ops": ["aten::neg.default"], "self": "neg(grad)"}, entry])
    assert rc != 0
    assert err == f"derivatives.yaml entry 1 ({', '.join(entry['ops'])}): {message}"


def test_an_op_has_one_entry_and_is_not_also_non_differentiable(tmp_path):
    rc, err, _ = generate(tmp_path, [{"ops": ["aten::neg.default"], "self": "neg(grad)"},
                                     {"ops": ["aten::neg.default"], "self": "grad"}])
    assert (rc, err) == (1, "derivatives.yaml entry 1 (aten::neg.default): aten::neg.default has two entries")
    rc, err, _ = generate(tmp_path, [{"ops": ["aten::neg.default"], "self": "neg(grad)"}], ["aten::neg.default"])
    assert (rc, err) == (1, "derivatives.yaml: aten::neg.default is both differentiated and non_differentiable")


def test_the_shipped_table_compiles_with_a_row_per_op(tmp_path):
    doc = yaml.safe_load(TABLE.read_text())
    out = tmp_path / "table.cpp"
    subprocess.run([sys.executable, str(GEN), str(TABLE), str(out)], check=True)
    ops = [op for e in doc["derivatives"] for op in e["ops"]]
    assert len(ops) == len(set(ops)) == out.read_text().count('    {"aten::')
