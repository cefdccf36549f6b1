"""Export of every example model, and commlens.export.describe()."""

import json
import re

import pytest
import torch

from commlens._factory import call_model_factory
from commlens.export import describe, export_model, program_json, save_program
from conftest import error_lines

EXAMPLES = [
    "examples.mlp:linear",
    "examples.mlp:mlp",
    "examples.mlp:mlp(bias=False)",
    "examples.mlp:stacked_mlp(n_layers=2)",
    "examples.gpt2:gpt2(n_layers=1, attn='matmul')",
    "examples.gpt2:gpt2(n_layers=1, attn='sdpa', dropout=0.1)",
    "examples.llama:llama(n_layers=1)",
]


def _export_roundtrip(spec, tmp_path):
    model, args, kwargs = call_model_factory(spec)
    ep = export_model(model, args, kwargs)
    path = tmp_path / "model.pt2"
    torch.export.save(ep, str(path))
    loaded = torch.export.load(str(path))
    return model, args, ep, loaded


@pytest.mark.parametrize("spec", EXAMPLES)
def test_export_loads_back_and_describe_is_consistent(spec, tmp_path):
    model, args, ep, loaded = _export_roundtrip(spec, tmp_path)
    desc = describe(model, ep)
    # describe() reads only what survives serialisation
    assert describe(model, loaded) == desc
    json.dumps(desc)  # JSON-able
    # the loaded program computes what the model computes
    torch.manual_seed(0)
    expected = model(*args)
    torch.manual_seed(0)
    torch.testing.assert_close(loaded.module()(*args), expected)

    mods = desc["modules"]
    root = type(model).__name__
    assert mods[0]["fqn"] == root and mods[0]["path"] == ""
    assert mods[0]["inclusive_nodes"] == desc["total_call_function_nodes"]
    assert desc["total_call_function_nodes"] == sum(1 for n in ep.graph.nodes if n.op == "call_function")
    assert sum(m["own_nodes"] for m in mods) == desc["total_call_function_nodes"]
    # inclusive = own + inclusive of the modules whose nearest listed ancestor
    # is this one (ModuleList containers own no node and are not listed)
    paths = {m["path"] for m in mods}

    def nearest_parent(path):
        while path:
            path = path.rpartition(".")[0]
            if path in paths:
                return path
        return None

    for m in mods:
        kids = [c for c in mods if c["path"] and nearest_parent(c["path"]) == m["path"]]
        assert m["inclusive_nodes"] == m["own_nodes"] + sum(c["inclusive_nodes"] for c in kids)
    assert [p["fqn"] for p in desc["parameters"]] == [n for n, _ in model.named_parameters()]
    assert sorted(desc["parameter_first_use"]) == sorted(p["fqn"] for p in desc["parameters"])


def test_describe_mlp_by_hand(tmp_path):
    # MLP.forward = w2(relu(w1(x))): in export's training IR one aten.linear per
    # Linear and one aten.relu owned by the MLP itself.
    model, _, ep, _ = _export_roundtrip("examples.mlp:mlp(dim=16, hidden=32)", tmp_path)
    d = describe(model, ep)
    assert [(m["fqn"], m["type"], m["own_nodes"], m["inclusive_nodes"]) for m in d["modules"]] == [
        ("MLP", "examples.mlp.MLP", 1, 3),
        ("MLP.w1", "torch.nn.modules.linear.Linear", 1, 1),
        ("MLP.w2", "torch.nn.modules.linear.Linear", 1, 1),
    ]
    assert d["total_call_function_nodes"] == 3
    assert [(p["fqn"], p["shape"]) for p in d["parameters"]] == [
        ("w1.weight", [32, 16]), ("w1.bias", [32]), ("w2.weight", [16, 32]), ("w2.bias", [16])]
    # aten.linear(input, weight, bias): weight before bias, w1 before w2
    assert d["parameter_first_use"] == ["w1.weight", "w1.bias", "w2.weight", "w2.bias"]
    assert d["parameter_aliases"] == {} and d["buffers"] == [] and d["user_inputs"] == ["x"]


def test_describe_gpt2_tied_and_forward_order(tmp_path):
    model, _, ep, _ = _export_roundtrip("examples.gpt2:gpt2(n_layers=1, attn='matmul')", tmp_path)
    d = describe(model, ep)
    assert d["parameter_aliases"] == {"lm_head.weight": "tok_embeddings.weight"}
    assert "lm_head.weight" not in [p["fqn"] for p in d["parameters"]]
    # forward order as written in GPT2.forward / Block.forward / Attention.forward
    # (the ModuleList "layers" runs no forward of its own and owns no node)
    assert [m["path"] for m in d["modules"]] == [
        "", "tok_embeddings", "pos_embeddings", "dropout", "layers.0", "layers.0.attn_norm",
        "layers.0.attn", "layers.0.attn.wq", "layers.0.attn.wk", "layers.0.attn.wv",
        "layers.0.attn.attn_dropout", "layers.0.attn.wo", "layers.0.attn.resid_dropout",
        "layers.0.mlp_norm", "layers.0.mlp", "layers.0.mlp.w1", "layers.0.mlp.w2",
        "layers.0.mlp.dropout", "norm", "lm_head"]
    assert d["parameter_first_use"][:3] == ["tok_embeddings.weight", "pos_embeddings.weight",
                                            "layers.0.attn_norm.weight"]
    assert d["parameter_first_use"][-2:] == ["norm.weight", "norm.bias"]


def test_describe_llama_order_and_buffer(tmp_path):
    model, _, ep, _ = _export_roundtrip("examples.llama:llama(n_layers=1, dim=64, n_heads=8, n_kv_heads=4, seq=8)", tmp_path)
    d = describe(model, ep)
    # feed_forward: w2(silu(w1(x)) * w3(x)) evaluates w1, then w3, then w2
    assert [m["path"] for m in d["modules"]] == [
        "", "tok_embeddings", "layers.0", "layers.0.attention_norm", "layers.0.attention",
        "layers.0.attention.wq", "layers.0.attention.wk", "layers.0.attention.wv",
        "layers.0.attention.wo", "layers.0.ffn_norm", "layers.0.feed_forward",
        "layers.0.feed_forward.w1", "layers.0.feed_forward.w3", "layers.0.feed_forward.w2",
        "norm", "output"]
    assert d["modules"][3]["type"] == "torch.nn.modules.normalization.RMSNorm"
    # rope: [max_seq=seq=8, head_dim/2 = 64/8/2 = 4, (cos, sin)]
    assert d["buffers"] == [{"fqn": "rope", "shape": [8, 4, 2], "dtype": "float32"}]
    shapes = {p["fqn"]: p["shape"] for p in d["parameters"]}
    assert shapes["layers.0.attention.wk.weight"] == [4 * 8, 64]  # n_kv_heads * head_dim
    assert shapes["layers.0.attention.wq.weight"] == [64, 64]
    assert all(not p["fqn"].endswith("bias") for p in d["parameters"])


def test_export_meta_model(tmp_path):
    """A meta-device model exports and saves without data; loads back on meta."""
    model, args, ep, loaded = _export_roundtrip("examples.llama:llama(n_layers=2, device='meta')", tmp_path)
    assert all(t.device.type == "meta" for t in loaded.state_dict.values())
    assert describe(model, loaded) == describe(model, ep)
    assert (tmp_path / "model.pt2").stat().st_size < 1_000_000


def _archive_entries(path):
    """The archive's entries by name below its top folder (which ``torch.export.save`` names after the file)."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        return {name.split("/", 1)[1]: z.read(name) for name in z.namelist()}


# GPT-2 ties its output projection to the token embedding (tie_weights=True); the others tie nothing.
@pytest.mark.parametrize("spec,ties", [("examples.gpt2:gpt2(n_layers=2)", [["tok_embeddings.weight", "lm_head.weight"]]),
                                       ("examples.llama:llama(n_layers=2, device='meta')", []),
                                       ("examples.kwargs:gated", [])])
def test_save_program_writes_what_torch_export_save_writes(spec, ties, tmp_path):
    """save_program skips only the serialiser's discarded canonical-form check and adds the tie
    record: every entry of the archive (program JSON, weights, constants, example inputs, configs,
    the extra file) is byte-identical to torch.export.save's given that extra file, the archive
    loads back, and torch's serialiser is left as it was."""
    from torch._export.serde import serialize as serde

    from commlens.export import TIED_PARAMETERS_FILE, tied_parameters_json

    model, args, kwargs = call_model_factory(spec)
    ep = export_model(model, args, kwargs)
    canonicalize = serde.canonicalize
    torch.export.save(ep, str(tmp_path / "torch.pt2"), extra_files={TIED_PARAMETERS_FILE: tied_parameters_json(ep)})
    save_program(ep, str(tmp_path / "commlens.pt2"))
    assert serde.canonicalize is canonicalize
    expected, got = _archive_entries(tmp_path / "torch.pt2"), _archive_entries(tmp_path / "commlens.pt2")
    assert json.loads(got["extra/commlens_tied_parameters.json"]) == {
        "format": "commlens-tied-parameters", "version": 1, "groups": ties}
    assert sorted(got) == sorted(expected)
    assert [name for name in expected if got[name] != expected[name]] == []
    loaded = torch.export.load(str(tmp_path / "commlens.pt2"))
    assert describe(model, loaded) == describe(model, ep)
    # program_json is the archive's program, without pickling anything
    original = serde.serialize_torch_artifact
    serde.serialize_torch_artifact = None  # would fail if called
    try:
        assert program_json(ep) == expected["models/model.json"]
    finally:
        serde.serialize_torch_artifact = original
    assert serde.canonicalize is canonicalize


@pytest.mark.parametrize("spec", ["examples.gpt2:gpt2(n_layers=2)", "examples.kwargs:gated",
                                  "examples.llama:llama(n_layers=2, device='meta')"])
def test_export_model_is_torch_export_without_stack_traces(spec):
    """export_model's program is torch.export.export's (non-strict, every submodule's call signature
    preserved), byte for byte once serialised, with stack_traces=True; by default only the nodes'
    stack_trace metadata is left out. The program runs as the model does."""
    import torch.fx.config as fx_config

    model, args, kwargs = call_model_factory(spec)
    names = tuple(name for name, _ in model.named_modules() if name)
    reference = program_json(torch.export.export(model, tuple(args), kwargs or {}, strict=False,
                                                 preserve_module_call_signature=names))
    assert program_json(export_model(model, args, kwargs, stack_traces=True)) == reference
    ep = export_model(model, args, kwargs)
    assert fx_config.do_not_emit_stack_traces is False
    without, expected = json.loads(program_json(ep)), json.loads(reference)
    nodes = without["graph_module"]["graph"]["nodes"]
    assert [n["name"] for n in nodes if "stack_trace" in n["metadata"]] == []
    assert sum("stack_trace" in n["metadata"] for n in expected["graph_module"]["graph"]["nodes"]) > len(nodes) // 2
    for n in expected["graph_module"]["graph"]["nodes"]:
        n["metadata"].pop("stack_trace", None)
    assert without == expected
    # every submodule's call is recorded, the root's first
    recorded = [c["fqn"] for c in without["graph_module"]["module_call_graph"]]
    assert recorded[0] == "" and sorted(recorded[1:]) == sorted(names)
    if "meta" not in spec:
        torch.manual_seed(0)
        out = ep.module()(*args, **(kwargs or {}))
        torch.manual_seed(0)
        torch.testing.assert_close(out, model(*args, **(kwargs or {})))


def test_no_cyclic_gc_while_tracing_and_serialising(tmp_path):
    """export_model, save_program and program_json run without the cyclic garbage collector and
    leave it as they found it (enabled or disabled), also when they fail."""
    import gc

    from torch._export.serde import serialize as serde

    seen = []
    model, args, _ = call_model_factory("examples.mlp:mlp")
    model.w1.register_forward_hook(lambda *_: seen.append(gc.isenabled()))
    original = serde.serialize_torch_artifact

    def pickle(*a, **k):
        seen.append(gc.isenabled())
        return original(*a, **k)

    assert gc.isenabled()
    ep = export_model(model, args)
    serde.serialize_torch_artifact = pickle
    try:
        save_program(ep, str(tmp_path / "m.pt2"))
    finally:
        serde.serialize_torch_artifact = original
    assert seen == [False, False] and gc.isenabled()
    gc.disable()
    try:
        program_json(ep)
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(Exception):
        save_program(ep, str(tmp_path / "nodir" / "m.pt2"))
    assert gc.isenabled()


def test_save_program_restores_the_serialiser_on_error(tmp_path):
    from torch._export.serde import serialize as serde

    canonicalize = serde.canonicalize
    model, args, _ = call_model_factory("examples.mlp:mlp")
    with pytest.raises(Exception):
        save_program(export_model(model, args), str(tmp_path / "nodir" / "m.pt2"))
    assert serde.canonicalize is canonicalize


def test_export_cli(cli, tmp_path):
    out, desc = tmp_path / "m.pt2", tmp_path / "d.json"
    r = cli("commlens.export", "examples.mlp:stacked_mlp(n_layers=2)", "-o", out, "--describe", desc)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1
    # 2 layers x (w1, w2 with bias) = 2 * (32*16 + 32 + 16*32 + 16) = 2144 parameters
    # nodes: per layer linear, relu, linear = 6
    assert lines[0].startswith(f"commlens: exported examples.mlp:stacked_mlp(n_layers=2) "
                               f"(StackedMLP, 2144 parameters on cpu, 6 ops) to {out} in ")
    assert re.fullmatch(r".* in \d+\.\ds \(torch\.export \d+\.\ds, save \d+\.\ds\)", lines[0]), lines[0]
    ep = torch.export.load(str(out))
    assert sum(1 for n in ep.graph.nodes if n.op == "call_function") == 6
    d = json.loads(desc.read_text())
    assert d["format"] == "commlens-describe" and d["root"] == "StackedMLP"


def test_export_cli_unwritable(cli, tmp_path):
    r = cli("commlens.export", "examples.mlp:mlp", "-o", tmp_path / "nodir" / "m.pt2")
    assert r.returncode == 2
    lines = error_lines(r.stderr)
    assert lines == [f"commlens: error: {tmp_path}/nodir/m.pt2: cannot write: directory {tmp_path}/nodir does not exist"]


class _Tied(torch.nn.Module):
    """A block with its own unit and a root holding an embedding tied to the head, a float32
    buffer and an integer parameter."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.block = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("scale", torch.ones(4))
        self.steps = torch.nn.Parameter(torch.zeros(1, dtype=torch.long), requires_grad=False)

    def forward(self, ids, extra):
        h = self.block(self.emb(ids) * self.scale + extra)
        return self.head(h.to(self.head.weight.dtype))


def test_fsdp_mixed_precision_follows_fully_shard():
    """By FSDP2's rules: the block unit (bf16, cast_forward_inputs) takes the block's parameters
    first, the root unit (float16, output float32, inputs not cast) the rest; tied parameters stay
    one Parameter, buffers and integer parameters keep their dtype; everything is given back."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from commlens.export import fsdp_mixed_precision
    from commlens.plan import FullyShard, Plan

    plan = Plan(mesh_shape=(2,), mesh_dim_names=("dp",), device_type="cpu", fully_shard=(
        FullyShard("block", ("dp",), mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16)),
        FullyShard("", ("dp",), mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16,
                                                               output_dtype=torch.float32,
                                                               cast_forward_inputs=False))))
    model = _Tied()
    before = dict(model.named_parameters())
    seen = {}
    model.block.register_forward_pre_hook(lambda _m, args: seen.update(block_in=args[0].dtype))
    with fsdp_mixed_precision(model, plan):
        assert {n: p.dtype for n, p in model.named_parameters()} == {
            "emb.weight": torch.float16, "block.weight": torch.bfloat16, "block.bias": torch.bfloat16,
            "steps": torch.int64}
        assert model.head.weight is model.emb.weight and model.scale.dtype == torch.float32
        out = model(torch.tensor([[1, 2]]), torch.zeros(1, 2, 4, dtype=torch.float16))
        assert out.dtype == torch.float32  # the root's output_dtype
        # the block's input (float16 * float32 buffer -> float32) was cast to bf16 before its hooks
        assert seen["block_in"] == torch.bfloat16
    assert dict(model.named_parameters()) == before
    assert all(p.dtype in (torch.float32, torch.int64) for p in model.parameters())
    assert not model._forward_pre_hooks and not model._forward_hooks and len(model.block._forward_pre_hooks) == 1


def test_export_under_plan_records_run_time_dtypes():
    from examples.plans import stacked_mlp_fsdp

    model, args, kwargs = call_model_factory("examples.mlp:stacked_mlp(n_layers=2)")
    ep = export_model(model, args, kwargs, plan=stacked_mlp_fsdp(dp=2, mixed_precision="bf16"))
    linears = [n for n in ep.graph.nodes if n.target == torch.ops.aten.linear.default]
    assert [n.meta["val"].dtype for n in linears] == [torch.bfloat16] * 4
    assert {v.dtype for v in ep.state_dict.values()} == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the model is given back
