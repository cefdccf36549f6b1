"""commlens._module_calls: the module call graph recorded by hooks is torch's, recorded by its
tracepoints. Where the program has no region export splits out (torch.no_grad, torch.autocast) and
no getitem after a module call, the archive is byte-identical; elsewhere torch's archive differs
only in the names of values (its erased tracepoints used up getitem names, and left their names
on the inputs of region subgraphs): the same program once every value is named by where it is
defined. Where the recorder declines, export takes torch's path."""

import json

import pytest
import torch

from commlens import _module_calls
from commlens._factory import call_model_factory
from commlens.export import export_model, program_json


def _torch_path(monkeypatch, made, plan=None):
    """export_model as with torch's tracepoints: the recorder declines every trace."""
    monkeypatch.setattr(_module_calls.ModuleCallRecorder, "module_call_graph", lambda self, ep: None)
    try:
        return program_json(export_model(*made, plan))
    finally:
        monkeypatch.undo()


def _value_names(graph):
    """Names graph defines, in order: its inputs, then each node's outputs."""
    def names(arg):
        for kind, v in arg.items():
            if kind in ("as_tensor", "as_sym_int", "as_sym_bool", "as_sym_float", "as_custom_obj", "as_token"):
                yield v["name"]
            elif kind == "as_tensors":
                yield from (t["name"] for t in v)
            elif kind == "as_optional_tensors":
                yield from (t["as_tensor"]["name"] for t in v if "as_tensor" in t)
    for arg in graph["inputs"]:
        yield from names(arg)
    for node in graph["nodes"]:
        for arg in node["outputs"]:
            yield from names(arg)


def _canonical(doc):
    """The program JSON with every value renamed after the position of its definition, per graph
    (a region's subgraph has names of its own)."""
    def rename(obj, table):
        if isinstance(obj, dict):
            if "as_graph" in obj:
                sub = obj["as_graph"]["graph"]
                inner = {n: f"{obj['as_graph']['name']}%{i}" for i, n in enumerate(_value_names(sub))}
                return {**obj, "as_graph": {**obj["as_graph"], "graph": rename(sub, inner)}}
            return {table.get(k, k): rename(v, table) for k, v in obj.items()}
        if isinstance(obj, list):
            return [rename(v, table) for v in obj]
        return table.get(obj, obj) if isinstance(obj, str) else obj

    program = json.loads(doc)
    graph = program["graph_module"]["graph"]
    table = {n: f"%{i}" for i, n in enumerate(_value_names(graph))}
    return rename(program, table)


class TwiceAndKeywords(torch.nn.Module):
    """A module called twice (path@1), keyword and constant arguments, a tuple result, a module
    returning its input, one never called, and a getitem after a module call."""

    def __init__(self):
        super().__init__()
        self.block = Block()
        self.same = torch.nn.Identity()
        self.unused = torch.nn.Linear(2, 2)

    def forward(self, x):
        a, b = self.block(x, scale=2, bias=None)
        c, _ = self.block(self.same(a), scale=3, bias=b)
        return torch.split(c + b, 2, dim=-1)[0]


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, *, scale, bias):
        y = self.lin(x) * scale
        return (y if bias is None else y + bias), y.relu()


class Aliased(torch.nn.Module):
    """One module reachable under two names: torch records each call under the name it was made
    with, which the hooks cannot tell, so the recorder declines."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(4, 4)
        self.second = self.first

    def forward(self, x):
        return self.second(self.first(x))


BYTE_IDENTICAL = [
    "examples.mlp:mlp",
    "examples.mlp:identity_mlp",
    "examples.gpt2:gpt2(n_layers=2, attn='sdpa', dropout=0.1)",
    "examples.llama:llama(n_layers=2, device='meta')",
    "examples.kwargs:gated",
    "examples.shared:shared_mlp",
]
RENAMED = [
    "examples.hf:hf_llama",  # a torch.no_grad region (rotary embedding)
    "examples.hf:hf_model(family='glm')",  # getitems after module calls
    "examples.hf:hf_qwen2(gradient_checkpointing=True)",
]


@pytest.mark.parametrize("spec", BYTE_IDENTICAL)
def test_recorded_call_graph_is_torchs_byte_for_byte(spec, monkeypatch):
    recorded = program_json(export_model(*call_model_factory(spec)))
    assert recorded == _torch_path(monkeypatch, call_model_factory(spec))
    assert json.loads(recorded)["graph_module"]["module_call_graph"][1]["signature"] is not None


@pytest.mark.parametrize("spec", RENAMED)
def test_recorded_call_graph_is_torchs_up_to_value_names(spec, monkeypatch):
    recorded = program_json(export_model(*call_model_factory(spec)))
    theirs = _torch_path(monkeypatch, call_model_factory(spec))
    assert recorded != theirs  # the names do differ: this test checks the renaming
    assert _canonical(recorded) == _canonical(theirs)


def test_repeated_calls_keywords_and_constants(monkeypatch):
    made = (TwiceAndKeywords(), (torch.randn(3, 4),), {})
    recorded = program_json(export_model(*made))
    assert _canonical(recorded) == _canonical(_torch_path(monkeypatch, made))
    calls = {e["fqn"]: e["signature"] for e in json.loads(recorded)["graph_module"]["module_call_graph"]}
    assert list(calls) == ["", "block", "block.lin", "same", "unused", "block@1", "block.lin@1"]
    assert calls["unused"] is None
    # block(x, scale=2, bias=None): the tensor, then the keyword constants in call order
    assert [next(iter(a)) for a in calls["block"]["inputs"]] == ["as_tensor", "as_int", "as_none"]
    assert [next(iter(a)) for a in calls["block@1"]["inputs"]] == ["as_tensor", "as_int", "as_tensor"]
    assert calls["same"]["inputs"] == calls["same"]["outputs"]


@pytest.mark.parametrize("spec, plan", [
    ("examples.gpt2:gpt2(n_layers=2)", "examples.plans:gpt2_fsdp_tp(dp=2, tp=4, sp=True, mixed_precision='bf16')"),
    ("examples.llama:llama(n_layers=2)", "examples.plans:llama_fsdp_tp(dp=2, tp=4, mixed_precision='bf16')"),
    ("examples.mlp:stacked_mlp(n_layers=2)", "examples.plans:stacked_mlp_fsdp(dp=2, mixed_precision='bf16')"),
])
def test_under_fsdp_mixed_precision(spec, plan, monkeypatch):
    """The plan's input casts are prepended pre-hooks and its output casts are registered before
    the recorder's hooks: the recorder sees the cast values, as torch's tracepoints did, and the
    casts a block's pre-hook makes (llama's layers take float activations) move out to the
    caller's scope, as torch's walk moves them."""
    from commlens.plan import resolve_plan

    plan = resolve_plan(plan)
    recorded = program_json(export_model(*call_model_factory(spec), plan))
    assert recorded == _torch_path(monkeypatch, call_model_factory(spec), plan)


class CalledUnderNoGrad(torch.nn.Module):
    """A module called inside a torch.no_grad region: its result is a value of the region's
    subgraph only (torch's tracepoints there make the region return more), so the recorder
    declines."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            y = self.inner(x).sigmoid()
        return x * y


@pytest.mark.parametrize("model, reason", [
    (Aliased, "a module is reachable under more than one name"),
    (CalledUnderNoGrad, "a tensor a module call used is not one node of the program's graph"),
])
def test_declines_and_export_takes_torchs_path(model, reason, monkeypatch):
    recorders = []
    plain = _module_calls.ModuleCallRecorder.__init__

    def spy(self, *args):
        plain(self, *args)
        recorders.append(self)

    monkeypatch.setattr(_module_calls.ModuleCallRecorder, "__init__", spy)
    made = (model(), (torch.randn(2, 4),), {})
    recorded = program_json(export_model(*made))
    monkeypatch.undo()
    assert [r.declined for r in recorders] == [reason]
    assert recorded == _torch_path(monkeypatch, made)


def test_marks_do_not_stay_in_the_program():
    ep = export_model(*call_model_factory("examples.hf:hf_llama"))
    for module in ep.graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            assert not any(_module_calls._MARK in n.meta for n in module.graph.nodes)
