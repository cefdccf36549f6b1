"""`commlens inspect --json` against facts computed in Python from the same model and exported
program (`commlens.export.describe`, whose docstring says how each number is computed):
module FQNs, types and forward order, per-module own/inclusive node counts, parameter FQNs and
shapes (`named_parameters()`), and the parameter first-use order."""
import json

import pytest
import torch

from commlens._factory import call_model_factory
from commlens.export import describe, export_model

EXAMPLES = [
    "examples.mlp:mlp",
    "examples.mlp:mlp(bias=False)",
    "examples.mlp:stacked_mlp(n_layers=3)",
    "examples.gpt2:gpt2(attn='matmul', n_layers=2)",
    "examples.gpt2:gpt2(attn='sdpa', n_layers=2)",
    "examples.llama:llama(n_layers=2)",
]


@pytest.mark.parametrize("spec", EXAMPLES)
def test_inspect_matches_python(spec, tmp_path, run_commlens):
    model, args, kwargs = call_model_factory(spec)
    ep = export_model(model, args, kwargs)
    path = tmp_path / "model.pt2"
    torch.export.save(ep, str(path))
    expected = describe(model, ep)

    r = run_commlens("inspect", path, "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)

    assert [(m["fqn"], m["type"]) for m in got["modules"]] == [(m["fqn"], m["type"]) for m in expected["modules"]]
    assert got["forward_order"] == [m["fqn"] for m in expected["modules"]]
    assert [(m["fqn"], m["nodes_own"], m["nodes_inclusive"]) for m in got["modules"]] == \
        [(m["fqn"], m["own_nodes"], m["inclusive_nodes"]) for m in expected["modules"]]
    assert got["totals"]["nodes"] == expected["total_call_function_nodes"]

    # Parameters in signature order are named_parameters() (tied weights once, canonical name).
    assert [(p["fqn"], p["shape"], p["dtype"]) for p in got["parameters"]] == \
        [(p["fqn"], p["shape"], p["dtype"]) for p in expected["parameters"]]
    assert got["parameter_aliases"] == expected["parameter_aliases"]
    assert got["parameter_execution_order"] == expected["parameter_first_use"]
    assert [(b["fqn"], b["shape"]) for b in got["buffers"]] == [(b["fqn"], b["shape"]) for b in expected["buffers"]]
    assert [i["name"] for i in got["user_inputs"]] == expected["user_inputs"]
