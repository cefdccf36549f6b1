"""commlens._program_json, the in-memory program's JSON for the decoder: torch's serialiser's
document less exactly the keys the decoder does not read, predictions byte-identical to those
from torch's serialiser and from the saved .pt2, no cyclic garbage, torch's serialiser where the
writer declines.

Over the accuracy corpus' exported programs (bench/accuracy/run.py: every model spec, exported under
the plan's FSDP mixed precision where it has one) with every configuration's plan: a sample by
default, all of them with COMMLENS_PROGRAM_JSON_CORPUS=all (several minutes)."""
import gc
import json
import logging
import math
import os
import pathlib
import sys

import pytest
import torch

from commlens import _program_json
from commlens._factory import call_model_factory
from commlens._native import core
from commlens.export import decoder_program_json, export_model, program_json, save_program, tied_parameters_json
from commlens.plan import dumps, resolve_plan

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "accuracy"))
import run as accuracy  # noqa: E402

# Keys of torch's document that the decoder (frontends/ExportedProgramReader.cpp) never reads.
UNREAD_TOP = ("opset_version", "guards_code")
UNREAD_GRAPH_MODULE = ("metadata", "treespec_namedtuple_fields")
UNREAD_GRAPH = ("sym_bool_values", "sym_float_values", "custom_obj_values", "is_single_tensor_return")
UNREAD_NODE = ("is_hop_single_tensor_return",)
UNREAD_CALL_SIGNATURE = ("outputs", "out_spec", "forward_arg_names")


def _without_unread_graph(graph):
    for key in UNREAD_GRAPH:
        del graph[key]
    for node in graph["nodes"]:
        for key in UNREAD_NODE:
            del node[key]
        for named in node["inputs"]:
            if "as_graph" in named["arg"]:
                _without_unread_graph(named["arg"]["as_graph"]["graph"])


def torch_document_less_unread(ep):
    """torch's serialiser's document with the keys the decoder does not read removed."""
    doc = json.loads(program_json(ep))
    for key in UNREAD_TOP:
        del doc[key]
    graph_module = doc["graph_module"]
    for key in UNREAD_GRAPH_MODULE:
        del graph_module[key]
    _without_unread_graph(graph_module["graph"])
    for entry in graph_module["module_call_graph"]:
        for key in UNREAD_CALL_SIGNATURE if entry["signature"] else ():
            del entry["signature"][key]
    return doc


def _corpus_exports():
    """(model spec, plan spec of its FSDP mixed precision or None, eval mode, [(plan spec, phase)])
    per program the accuracy corpus exports with torch.export (in eval mode for its inference
    configurations)."""
    exports = {}
    for cfg in accuracy.CONFIGS:
        if cfg.frontend != "export":
            continue
        mp = cfg.plan if accuracy.mixed_precision_key(cfg.plan) else None
        eval_mode = cfg.phase == "inference"
        key = (cfg.model, accuracy.mixed_precision_key(cfg.plan), eval_mode)
        exports.setdefault(key, (cfg.model, mp, eval_mode, []))[3].append((cfg.plan, cfg.phase))
    return list(exports.values())


CORPUS = _corpus_exports()
SAMPLE = ("examples.mlp:mlp", "examples.gpt2:gpt2", "examples.gpt2:gpt2(attn='sdpa', dtype='bfloat16', dropout=0.1)",
          "examples.llama:llama(complex_rope=True)", "examples.kwargs:gated", "examples.shared:shared_mlp",
          "examples.hf:hf_qwen2(gradient_checkpointing=True)", "examples.hf:hf_model(family='gemma2')")
SAMPLED = ([e for e in CORPUS if e[0] in SAMPLE and e[1] is None]
           + [next(e for e in CORPUS if e[1] is not None and not e[2])])
SELECTED = CORPUS if os.environ.get("COMMLENS_PROGRAM_JSON_CORPUS") == "all" else SAMPLED


def _predict(program_bytes, ep, plan_json, phase):
    native = core().predict_program_json(program_bytes, tied_parameters_json(ep), plan_json, "plan", phase,
                                         "h100-ib-ndr", None, False)
    return native.json(), native.table(1)


def test_the_sample_covers_what_it_names():
    assert len(CORPUS) > 40
    assert {e[0] for e in SAMPLED if e[1] is None} == set(SAMPLE)
    assert any(e[2] for e in SAMPLED)  # an eval-mode program, predicted in the inference phase


@pytest.mark.parametrize("model, mp_plan, eval_mode, configs", SELECTED, ids=[
    e[0].split(":")[1] + ("-mixed_precision" if e[1] else "") + ("-eval" if e[2] else "") for e in SELECTED])
def test_corpus_program_document_and_predictions(model, mp_plan, eval_mode, configs, tmp_path):
    made = call_model_factory(model)
    if eval_mode:
        made[0].eval()
    ep = export_model(*made, resolve_plan(mp_plan) if mp_plan else None)
    ours = _program_json.program_json(ep)  # no fallback: the corpus is covered
    assert json.loads(ours) == torch_document_less_unread(ep)
    assert decoder_program_json(ep) == ours
    theirs = program_json(ep)
    pt2 = tmp_path / "m.pt2"
    save_program(ep, str(pt2))
    for plan, phase in configs:
        plan_json = dumps(resolve_plan(plan), source=plan)
        expected = _predict(theirs, ep, plan_json, phase)
        assert _predict(ours, ep, plan_json, phase) == expected, plan
        from_pt2 = core().predict_pt2(str(pt2), plan_json, "plan", phase, "h100-ib-ndr", None, False)
        assert (from_pt2.json(), from_pt2.table(1)) == expected, plan


class Edges(torch.nn.Module):
    """Infinite and NaN floats, a multi-result op, a list of optional
    tensors, a lifted tensor constant, a keyword argument, an empty int list, a dtype, a device
    and a memory format."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x).clamp(min=-math.inf, max=math.inf) + float("nan")
        values = torch.max(y, dim=1)[0]
        z = y[:, torch.tensor([0, 1])]
        w = y.to(torch.float64, memory_format=torch.contiguous_format).to(device="cpu")
        return values, z.sum(dim=[]), w.permute(1, 0).contiguous().sum(), x.new_zeros([2, 2], dtype=torch.int8)


class DataDependent(torch.nn.Module):
    """Unbacked symbols: a data-dependent size, symbolic sizes in tensor metadata."""

    def forward(self, x):
        nz = torch.nonzero(x)
        return nz * 2, nz.shape[0] + 1


class GradMode(torch.nn.Module):
    """Higher-order ops around subgraphs: wrap_with_set_grad_enabled, wrap_with_autocast."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            y = self.lin(x) * 2
        with torch.autocast("cpu", enabled=False):
            z = self.lin(y).relu()
        return z + x


class NonAscii(torch.nn.Module):
    """Module paths and node names beyond ASCII (escaped as json.dumps does: \\u00e9, and a
    surrogate pair for an astral character)."""

    def __init__(self):
        super().__init__()
        self.café = torch.nn.Linear(4, 4)
        setattr(self, "𝛼", torch.nn.Linear(4, 4))

    def forward(self, x):
        return getattr(self, "𝛼")(self.café(x))


@pytest.mark.parametrize("module, args, has", [
    (Edges, (torch.randn(3, 4),), ['"Infinity"', '"NaN"', "as_optional_tensors", "tensor_constant", "getitem_1",
                                   '"kind":2', '"as_ints":[]', "as_scalar_type", "as_device", "as_memory_format"]),
    (DataDependent, (torch.tensor([1, 0, 2, 0]),), ["as_expr", "torch.ops.aten.sym_size.int", "as_sym_int"]),
    (GradMode, (torch.randn(3, 4),), ["wrap_with_set_grad_enabled", "wrap_with_autocast", "as_graph"]),
    (NonAscii, (torch.randn(3, 4),), ["caf\\u00e9", "\\ud835\\udefc"]),
], ids=["edges", "unbacked", "hops", "non-ascii"])
def test_edge_programs(module, args, has):
    ep = export_model(module(), args)
    ours = _program_json.program_json(ep)
    assert json.loads(ours) == torch_document_less_unread(ep)
    assert [text for text in has if text not in ours.decode()] == []


def test_dynamic_shapes():
    """A symbolic batch size: SymInt sizes with hints, range constraints, sym_size nodes."""
    model, args = call_model_factory("examples.mlp:mlp(batch=4)")[:2]
    batch = torch.export.Dim("batch", min=2, max=64)
    ep = torch.export.export(model, tuple(args), dynamic_shapes=({0: batch},), strict=False)
    doc = json.loads(_program_json.program_json(ep))
    assert doc == torch_document_less_unread(ep)
    assert doc["range_constraints"] and doc["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]["as_expr"]


NO_CYCLIC_GARBAGE = """
import gc
import commlens
from commlens._factory import call_model_factory
from commlens.export import decoder_program_json, export_model, program_json
ep = export_model(*call_model_factory("examples.gpt2:gpt2(n_layers=2)"))
gc.collect()
decoder_program_json(ep)
after_writer = gc.collect()
p = commlens.predict(ep, "examples.plans:gpt2_tp_sp(tp=4)", phase="both")
p.counts()
del p
after_predict = gc.collect()
program_json(ep)
print(after_writer, after_predict, gc.collect())
"""


def test_no_cyclic_garbage():
    """In a fresh interpreter (other tests leave cycles whose last outside reference may go at any
    time): the writer and commlens.predict leave no cyclic garbage, torch's serialiser does."""
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), str(ROOT)]))
    done = subprocess.run([sys.executable, "-c", NO_CYCLIC_GARBAGE], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    after_writer, after_predict, after_torch = map(int, done.stdout.split())
    assert (after_writer, after_predict) == (0, 0)
    assert after_torch > 0


def test_what_the_writer_declines_goes_through_torchs_serialiser(monkeypatch, caplog):
    ep = export_model(*call_model_factory("examples.mlp:mlp"))

    def decline(target):
        raise _program_json.Unsupported(f"call target {target} (a test)")

    monkeypatch.setattr(_program_json._CONTEXT, "operator_info", decline)
    with caplog.at_level(logging.INFO, logger="commlens"):
        assert decoder_program_json(ep) == program_json(ep)
    assert [r.getMessage() for r in caplog.records if r.name == "commlens"] == [
        "commlens: the program is serialised by torch's serialiser: call target aten.linear.default (a test)"]
