"""The backward ATen ops `commlens predict` builds (the autodiff pass), per module, against the ops
torch 2.13 really runs on DTensors during `loss.backward()`.

How the truth is made: `python -m commlens.measure MODEL --plan PLAN --phase backward -o DUMP
--noise-level 3` runs the forward, the plan's loss and `loss.backward()` inside one
`CommDebugMode` (fake process group, world size = mesh size) and writes CommDebugMode's own
`generate_json_dump`. Its `operations_backward` lists, per module (the module whose full-backward
pre-hook fired last, exactly as collectives are attributed), every ATen op DTensor dispatched
during backward, with the input placements (`input_sharding`) of its DTensor arguments; ops on
plain tensors (e.g. attention on local shards) have an empty `input_sharding` and also appear,
once more, for the local computation DTensor runs under each DTensor op.

What is compared: for every module, the multiset of names of the ops with at least one DTensor
argument, measured vs `commlens predict --phase backward --format json` (whose
`operations_backward` lists the backward runtime ops of the autodiff pass with the placements
propagation gave their operands). This checks the derivative formulas (which ops run), the
engine order (which module each op lands in) and which gradients are DTensors.
"""
import collections
import json
import subprocess
import sys

import pytest

CASES = [
    ("examples.mlp:mlp", "examples.plans:mlp_tp(tp=4, input_requires_grad=True)"),
    ("examples.mlp:stacked_mlp", "examples.plans:stacked_mlp_tp(tp=2)"),
    ("examples.gpt2:gpt2", "examples.plans:gpt2_tp(tp=4)"),
    ("examples.gpt2:gpt2", "examples.plans:gpt2_tp_sp(tp=4)"),
    ("examples.llama:llama", "examples.plans:llama_tp(tp=4)"),
    ("examples.gpt2:gpt2(attn='sdpa')", "examples.plans:gpt2_tp_loss_parallel(tp=4)"),
    ("examples.llama:llama", "examples.plans:llama_tp(tp=2, sp=False, frozen=('tok_embeddings.*',))"),
    # activation checkpointing: the recomputed forward ops, and the backward ops after them until
    # the next module's backward pre-hook, are CommDebugMode's operations_checkpointing; early stop
    # ends recomputation before the last saver when it saved only its inputs (w2's mm)
    ("examples.llama:llama", "examples.plans:with_ac(plan='llama_tp', tp=4)"),
]
# torch.utils.checkpoint's own handling of the DTensors it saves (a detach at each pack and
# unpack, a view of each recomputed parameter) dispatches DTensor ops that commlens does not list:
# they issue no collective. Left out of the checkpointed case's comparison, by name.
CHECKPOINT_INTERNALS = {"aten.detach.default", "aten.view.default"}


def _py(*args, cwd):
    r = subprocess.run([sys.executable, "-m", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return r


def _dtensor_ops(tree, ignored=frozenset()):
    """{(fqn, list): Counter(op name)} over the ops with a DTensor argument not in ``ignored``, for
    the whole tree; list: operations_backward or operations_checkpointing."""
    out = {}

    def walk(node):
        for key in ("operations_backward", "operations_checkpointing"):
            out[node["fqn"], key] = collections.Counter(op["name"] for op in node.get(key, [])
                                                        if op.get("input_sharding") and op["name"] not in ignored)
        for c in node.get("children", []):
            walk(c)

    walk(tree)
    return out


@pytest.mark.parametrize("model,plan", CASES, ids=[p.split(":")[1] for _, p in CASES])
def test_backward_dtensor_ops_per_module_match_commdebugmode(model, plan, run_commlens, tmp_path):
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    pt2, plan_json, dump, pred = (tmp_path / "m.pt2", tmp_path / "p.json", tmp_path / "dump.json",
                                  tmp_path / "pred.json")
    _py("commlens.export", model, "-o", pt2, cwd=root)
    _py("commlens.plan", plan, "-o", plan_json, cwd=root)
    _py("commlens.measure", model, "--plan", plan_json, "--phase", "backward", "-o", dump, "--noise-level", "3",
        cwd=root)
    r = run_commlens("predict", pt2, "--plan", plan_json, "--phase", "backward", "--format", "json", "-o", pred)
    assert r.returncode == 0, r.stderr
    ignored = CHECKPOINT_INTERNALS if "with_ac" in plan else frozenset()
    measured = _dtensor_ops(json.loads(dump.read_text()), ignored)
    predicted = _dtensor_ops(json.loads(pred.read_text()), ignored)
    if "with_ac" in plan:  # recomputation is listed apart, in every checkpointed layer
        assert all(sum(predicted[f"Transformer.layers.{i}._checkpoint_wrapped_module.feed_forward.w1",
                                 "operations_checkpointing"].values()) > 0 for i in range(2))
    diffs = {}
    for fqn in sorted(set(measured) | set(predicted)):
        m, p = measured.get(fqn, collections.Counter()), predicted.get(fqn, collections.Counter())
        if m != p:
            diffs["/".join(fqn)] = {"missing": dict(m - p), "extra": dict(p - m)}
    assert not diffs, json.dumps(diffs, indent=1)
    assert sum(sum(c.values()) for c in measured.values()) > 0
