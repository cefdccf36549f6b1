"""commlens._export_shortcuts: each shortcut through torch internals leaves the exported program
byte-identical, is taken where it should be, falls back to torch's path where the state or the
torch version differs, and puts torch back afterwards."""

import contextlib
import math

import pytest
import torch

from commlens import _export_shortcuts as shortcuts
from commlens._factory import call_model_factory
from commlens.export import export_model, program_json

SPECS = [
    "examples.mlp:mlp",
    "examples.gpt2:gpt2(n_layers=2, attn='matmul')",
    "examples.gpt2:gpt2(n_layers=1, attn='sdpa', dropout=0.1)",
    "examples.llama:llama(n_layers=2, device='meta')",
    "examples.kwargs:gated",
    "examples.shared:shared_mlp",
    "examples.hf:hf_llama",
]


def _torch_json(ep):
    """The program's JSON from torch's serialiser, no shortcut."""
    from torch._export.serde.serialize import serialize

    return serialize(ep, serialize_state_dict=False, serialize_constants=False,
                     serialize_example_inputs=False).exported_program


def _export_without(monkeypatch, *names, spec=None, made=None):
    for name in names:
        monkeypatch.setattr(shortcuts, name, contextlib.nullcontext)
    try:
        return export_model(*(made or call_model_factory(spec)))
    finally:
        monkeypatch.undo()


class Edges(torch.nn.Module):
    """Infinite and NaN float arguments (the JSON's "Infinity", "-Infinity", "NaN")."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).clamp(min=-math.inf, max=math.inf) + float("nan")


class DataDependent(torch.nn.Module):
    """An output whose size is data-dependent: an unbacked symbol."""

    def forward(self, x):
        return torch.nonzero(x)


@pytest.mark.parametrize("spec", SPECS)
def test_export_shortcuts_leave_the_program_byte_identical(spec, monkeypatch):
    names = ("no_unbacked_rebinding_walk", "lazy_program_module")
    plain = _export_without(monkeypatch, *names, spec=spec)
    assert _torch_json(export_model(*call_model_factory(spec))) == _torch_json(plain)
    for name in names:  # and each one alone
        assert _torch_json(_export_without(monkeypatch, name, spec=spec)) == _torch_json(plain)


@pytest.mark.parametrize("spec, plan", [
    ("examples.mlp:stacked_mlp(n_layers=2)", "examples.plans:stacked_mlp_fsdp(dp=2, mixed_precision='bf16')"),
    ("examples.gpt2:gpt2(n_layers=2)", "examples.plans:gpt2_fsdp_tp(dp=2, tp=4, sp=True, mixed_precision='bf16')"),
])
def test_export_shortcuts_under_fsdp_mixed_precision(spec, plan, monkeypatch):
    """The plan's cast hooks run before the tracepoints' (prepended) and around them: same program."""
    from commlens.plan import resolve_plan

    model, args, kwargs = call_model_factory(spec)
    plan = resolve_plan(plan)
    ep = export_model(model, args, kwargs, plan)
    for name in ("no_unbacked_rebinding_walk", "lazy_program_module"):
        monkeypatch.setattr(shortcuts, name, contextlib.nullcontext)
    assert _torch_json(ep) == _torch_json(export_model(model, args, kwargs, plan))


@pytest.mark.parametrize("spec", SPECS)
def test_lean_serializer_writes_torch_serializers_json(spec):
    ep = export_model(*call_model_factory(spec))
    with shortcuts.lean_serializer(ep):
        lean = _torch_json(ep)
    assert lean == _torch_json(ep)
    assert program_json(ep) == lean


def test_lean_serializer_floats_and_rendering():
    """inf and NaN arguments are written as torch writes them; within the block only the
    serialiser's debug rendering is skipped, str(program) still renders; all is put back after."""
    from torch._export.serde import serialize as serde
    from torch._export.serde.union import _Union

    ep = export_model(Edges(), (torch.randn(2, 4),))
    before = (_Union.__dict__["create"], _Union.__dict__["__post_init__"], serde._dataclass_to_dict)
    expected = _torch_json(ep)
    assert b'"Infinity"' in expected and b'"-Infinity"' in expected and b'"NaN"' in expected
    with shortcuts.lean_serializer(ep):
        assert serde._dataclass_to_dict is not before[2]
        assert _torch_json(ep) == expected
        assert "clamp" in str(ep)
        assert ep.graph_module.print_readable(print_output=False) == ""
    assert (_Union.__dict__["create"], _Union.__dict__["__post_init__"], serde._dataclass_to_dict) == before
    assert "print_readable" not in vars(ep.graph_module)
    assert "clamp" in ep.graph_module.print_readable(print_output=False)


def test_unbacked_symbols_take_torchs_walk(monkeypatch):
    """A trace with an unbacked symbol recomputes its bindings with torch's walk (same program);
    one without does not call it."""
    import torch.export._trace as trace

    calls = []
    walk = trace._replace_unbacked_bindings
    monkeypatch.setattr(trace, "_replace_unbacked_bindings", lambda gm: (calls.append(gm), walk(gm))[1])
    args = (torch.tensor([0.0, 1.0, 0.0, 2.0]),)
    ep = export_model(DataDependent(), args)
    assert len(calls) == 1 and trace._replace_unbacked_bindings is not walk
    assert any("unbacked_bindings" in n.meta for n in ep.graph.nodes)
    export_model(*call_model_factory("examples.mlp:mlp"))
    assert len(calls) == 1
    with monkeypatch.context() as m:
        m.setattr(shortcuts, "no_unbacked_rebinding_walk", contextlib.nullcontext)
        assert _torch_json(export_model(DataDependent(), args)) == _torch_json(ep)


def test_the_programs_graph_module_is_lazy_and_the_same(monkeypatch):
    """The program's graph module generates its code on first use: the same code, output, printout
    and archive as the eager one torch makes; without lazy graph modules it is torch's."""
    from torch.fx._lazy_graph_module import _LazyGraphModule

    model, args, kwargs = made = call_model_factory("examples.gpt2:gpt2(n_layers=2)")
    ep = export_model(*made)
    eager = _export_without(monkeypatch, "lazy_program_module", made=made)
    assert isinstance(ep.graph_module, _LazyGraphModule) and not isinstance(eager.graph_module, _LazyGraphModule)
    assert ep.graph_module.code == eager.graph_module.code and str(ep) == str(eager)
    torch.manual_seed(0)
    out = ep.module()(*args)
    torch.manual_seed(0)
    torch.testing.assert_close(out, eager.module()(*args), rtol=0, atol=0)
    with shortcuts.lazy_program_module():
        ep = torch.export.export(model, tuple(args), strict=False)
    assert not isinstance(ep.graph_module, _LazyGraphModule)


@pytest.mark.parametrize("swap, module, name", [
    ("_swap_canonical_form_check", "torch._export.serde.serialize", "canonicalize"),
    ("_swap_unbacked_rebinding", "torch.export._trace", "_replace_unbacked_bindings"),
    ("_swap_serializer", "torch._export.serde.serialize", "_dataclass_to_dict"),
    ("_swap_serializer", "torch._export.serde.union", "_UnionTag"),
    ("_swap_program_module", "torch.export.exported_program", "_create_graph_module_for_export"),
    ("_swap_program_module", "torch.fx._lazy_graph_module", "_LazyGraphModule"),
])
def test_a_torch_without_the_internal_takes_its_own_path(swap, module, name, monkeypatch):
    """Where the internal a shortcut relies on is missing, it installs nothing and the block runs
    (torch's own path)."""
    import importlib

    monkeypatch.delattr(importlib.import_module(module), name)
    assert getattr(shortcuts, swap)() is None
    key = {"_swap_canonical_form_check": "no_canonical_form_check",
           "_swap_unbacked_rebinding": "no_unbacked_rebinding_walk", "_swap_serializer": "lean_serializer",
           "_swap_program_module": "lazy_program_module"}[swap]
    with shortcuts._swapped(key, getattr(shortcuts, swap)):
        assert key not in shortcuts._SWAPPED


def test_nested_blocks_swap_once_and_restore_at_the_outer_exit():
    import torch.export._trace as trace

    walk = trace._replace_unbacked_bindings
    with shortcuts.no_unbacked_rebinding_walk():
        swapped = trace._replace_unbacked_bindings
        assert swapped is not walk
        with shortcuts.no_unbacked_rebinding_walk():
            assert trace._replace_unbacked_bindings is swapped
        assert trace._replace_unbacked_bindings is swapped
    assert trace._replace_unbacked_bindings is walk
    with pytest.raises(RuntimeError):
        with shortcuts.no_unbacked_rebinding_walk():
            raise RuntimeError("x")
    assert trace._replace_unbacked_bindings is walk
