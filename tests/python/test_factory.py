"""Factory spec parsing (MODULE:FACTORY[(k=literal, ...)]) and its errors."""

import pytest

from commlens import CommlensError
from commlens._factory import call_factory, call_model_factory, parse_spec, resolve
from conftest import error_lines


def test_parse_plain():
    assert parse_spec("examples.mlp:mlp") == ("examples.mlp", "mlp", {})


def test_parse_kwargs_literals():
    spec = "examples.gpt2:gpt2(n_layers=3, attn='sdpa', bias=False, dropout=0.1, dims=(1, 2), d={'a': [1]}, x=None)"
    assert parse_spec(spec) == ("examples.gpt2", "gpt2", {
        "n_layers": 3, "attn": "sdpa", "bias": False, "dropout": 0.1,
        "dims": (1, 2), "d": {"a": [1]}, "x": None})


def test_parse_empty_parens_and_spaces():
    assert parse_spec(" examples.mlp : mlp ( ) ") == ("examples.mlp", "mlp", {})


@pytest.mark.parametrize("spec, message", [
    ("examples.mlp", "examples.mlp: expected MODULE:FACTORY or MODULE:FACTORY(key=value, ...)"),
    ("", ": empty factory spec (expected MODULE:FACTORY)"),
    ("examples.mlp:mlp(4)", "examples.mlp:mlp(4): factory arguments must be keyword arguments (key=literal)"),
    ("examples.mlp:mlp(dim=foo)", "examples.mlp:mlp(dim=foo): value of 'dim' is not a Python literal: foo"),
    ("examples.mlp:mlp(dim=__import__('os'))",
     "examples.mlp:mlp(dim=__import__('os')): value of 'dim' is not a Python literal: __import__('os')"),
    ("examples.mlp:mlp(dim=1, dim=2)", "examples.mlp:mlp(dim=1, dim=2): duplicate factory argument 'dim'"),
    ("examples.mlp:mlp(dim=", "examples.mlp:mlp(dim=: unbalanced parentheses in factory arguments"),
    ("examples.mlp:mlp(**{'a': 1})", "examples.mlp:mlp(**{'a': 1}): '**' is not allowed in factory arguments"),
    ("examples..mlp:mlp", "examples..mlp:mlp: bad module name 'examples..mlp'"),
    ("examples.mlp:", "examples.mlp:: bad factory name ''"),
])
def test_parse_errors(spec, message):
    with pytest.raises(CommlensError) as info:
        parse_spec(spec)
    assert str(info.value) == message


@pytest.mark.parametrize("spec, message", [
    ("nosuchmodule_xyz:f", "nosuchmodule_xyz:f: no module named 'nosuchmodule_xyz'"),
    ("examples.nosuch:f", "examples.nosuch:f: no module named 'examples.nosuch'"),
    ("examples.mlp:nope", "examples.mlp:nope: module 'examples.mlp' has no attribute 'nope'"),
    ("examples.mlp:MLP.nope", "examples.mlp:MLP.nope: module 'examples.mlp' has no attribute 'MLP.nope'"),
    ("examples.mlp:torch", "examples.mlp:torch: examples.mlp:torch is not callable"),
])
def test_resolve_errors(spec, message):
    with pytest.raises(CommlensError) as info:
        resolve(spec)
    assert str(info.value) == message


def test_call_factory_bad_kwarg():
    with pytest.raises(CommlensError) as info:
        call_factory("examples.mlp:mlp(nodim=3)")
    assert str(info.value) == ("examples.mlp:mlp(nodim=3): calling the factory failed: "
                               "mlp() got an unexpected keyword argument 'nodim'")


def test_call_model_factory_shapes():
    model, args, kwargs = call_model_factory("examples.mlp:mlp(dim=24, hidden=48, batch=3, seq=5)")
    assert type(model).__name__ == "MLP"
    assert tuple(args[0].shape) == (3, 5, 24)
    assert kwargs == {}
    assert tuple(model.w1.weight.shape) == (48, 24)


def test_call_model_factory_rejects_non_model():
    with pytest.raises(CommlensError) as info:
        call_model_factory("examples.plans:mlp_tp")
    assert str(info.value) == ("examples.plans:mlp_tp: model factory must return "
                               "(model, args) or (model, args, kwargs)")


# The same errors through the CLIs: one line on stderr, exit status 2.
@pytest.mark.parametrize("module, args, line", [
    ("commlens.export", ["examples.mlp", "-o", "x.pt2"],
     "commlens: error: examples.mlp: expected MODULE:FACTORY or MODULE:FACTORY(key=value, ...)"),
    ("commlens.export", ["nosuchmodule_xyz:f", "-o", "x.pt2"],
     "commlens: error: nosuchmodule_xyz:f: no module named 'nosuchmodule_xyz'"),
    ("commlens.plan", ["examples.plans:nope"],
     "commlens: error: examples.plans:nope: module 'examples.plans' has no attribute 'nope'"),
    ("commlens.measure", ["examples.mlp:mlp(dim=foo)", "--plan", "examples.plans:mlp_tp", "-o", "m.json"],
     "commlens: error: examples.mlp:mlp(dim=foo): value of 'dim' is not a Python literal: foo"),
])
def test_cli_factory_errors(cli, tmp_path, module, args, line):
    r = cli(module, *args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert error_lines(r.stderr) == [line]
    assert r.stdout == ""
