"""torchtitan as its users run it: its own Llama 3 (torchtitan 0.2.2, scripts/setup.sh pins it),
parallelized by its own ``parallelize_llama`` and one step of its ``forward_backward_step`` counted
natively under CommDebugMode (examples.titan). commlens predicts from the plan
``commlens.capture`` reads off those calls, with no plan written by hand; every cell, count and
bytes, must agree. The corpus runs more settings and dense Qwen3 (bench/accuracy/run.py,
``titan_*``).

What torchtitan does that the plan format had no words for, each checked here: meshes unflattened
from one 1-D world mesh (``ParallelDims.build_mesh``), the list unit ``fully_shard([norm,
output])``, ``set_gradient_divide_factor(1.0)``, its per-op selective checkpointing policy (every
second ``aten.mm`` recomputed), its loss over ``pred.float()``, and ``PrepareModuleInput`` on a
module below a ``checkpoint_wrapper`` (its call signature is recorded under the unwrapped name).

The model (examples.titan): dim 128, 2 blocks, 8 heads of 16 (4 KV heads), vocabulary 256,
batch 2 x 16 tokens, float32."""
import functools
import json
import pathlib

import pytest

from integration_helpers import export_pt2, save_plan

from commlens.measure import format_counts, measure
from examples.titan import measure_moe_stack, measure_titan, model_spec, moe_stack_captured, titan_captured

MODEL = model_spec("llama3")
TOKENS = 2 * 16


def _module(doc, fqn):
    return next(m for m in doc["modules"] if m["fqn"] == fqn)


def _tree(node):
    """Every module of a prediction's CommDebugMode-schema tree, pre-order."""
    yield node
    for child in node.get("children", ()):
        yield from _tree(child)


def _refusal(run_commlens, tmp_path, plan, model):
    """(the program, predict's stderr) for a plan predict refuses: exit 2, nothing on stdout."""
    pt2 = export_pt2(model, tmp_path)
    r = run_commlens("predict", pt2, "--plan", save_plan(plan, tmp_path), "--phase", "both")
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    return pt2, r.stderr


def _compare(run_commlens, tmp_path, plan, doc, *, model=MODEL, export_plan=None):
    """`commlens compare --json`'s summary of the prediction from the plan (on the program exported
    under ``export_plan``'s mixed precision) against the measured document; fails unless exact."""
    measured = tmp_path / "measured.counts.json"
    measured.write_text(format_counts(doc))
    pt2 = export_pt2(model, tmp_path, plan=export_plan)
    predicted = tmp_path / "predicted.json"
    r = run_commlens("predict", pt2, "--plan", save_plan(plan, tmp_path), "--phase", "both",
                     "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    r = run_commlens("compare", predicted, measured, "--json")
    summary = json.loads(r.stdout)["summary"]
    assert r.returncode == 0 and summary["differ"] == 0, r.stdout
    assert summary["bytes_compared"] == summary["cells"] > 0
    return summary


def test_tensor_and_sequence_parallel_with_loss_parallel(tmp_path, run_commlens):
    plan = titan_captured(tp=4)
    # ParallelDims unflattens a ("world",) mesh into (pp, batch, cp, tp) and (pp, dp_replicate,
    # fsdp, tp): only tp is used, with stride 1 over the 4 ranks
    assert (plan.mesh_shape, plan.mesh_dim_names, plan.fully_shard) == ((4,), ("tp",), ())
    assert plan.loss_parallel and plan.loss.logits_dtype == "float32" and plan.loss.reduction == "sum"
    doc = measure_titan(tp=4)
    # RowwiseParallel(input Replicate, output Shard(1)) on the embedding: the partial [2, 16, 128]
    # float32 lookup is reduce-scattered onto the sequence, 2 * 16 * 128 * 4 bytes
    embed = _module(doc, "Transformer.tok_embeddings")
    assert embed["forward"] == {"c10d_functional.reduce_scatter_tensor": 1}
    assert embed["forward_bytes"] == {"c10d_functional.reduce_scatter_tensor": 16384}
    # loss parallel: the cross-entropy over vocabulary-sharded float32 logits all-reduces each
    # token's max, its sum of exponentials and its target logit, 3 all-reduces of 32 floats
    glob = _module(doc, "Global")
    loss_all_reduces = glob["forward"]["c10d_functional.all_reduce"]
    assert (loss_all_reduces, glob["forward_bytes"]["c10d_functional.all_reduce"]) == (3, 3 * TOKENS * 4)
    _compare(run_commlens, tmp_path, plan, doc)


def test_fsdp_tp_list_unit_and_per_op_selective_checkpointing(tmp_path, run_commlens):
    settings = dict(tp=2, dp_shard=2, ac="selective", sac_option="op")
    plan = titan_captured(**settings)
    assert (plan.mesh_shape, plan.mesh_dim_names) == ((2, 2), ("fsdp", "tp"))
    units = {u.fqn: u for u in plan.fully_shard}
    assert list(units) == ["tok_embeddings", "layers.*", ("norm", "output"), ""]
    # torchtitan's apply_fsdp: the last unit is not resharded after forward (backward needs it
    # first), and FSDP's gradient division is off on every unit it made
    assert units[("norm", "output")].reshard_after_forward is False
    assert [u.gradient_divide_factor for u in plan.fully_shard] == [1.0, 1.0, 1.0, None]
    (ac,) = plan.activation_checkpoint
    assert (ac.fqn, ac.early_stop, ac.recompute_every_second) == ("layers.*", False, ("aten.mm.default",))
    assert {"aten.mm.default", "_c10d_functional.reduce_scatter_tensor.default"} <= set(ac.save_ops)

    doc = measure_titan(**settings)
    # One unit, one all-gather, at the first module's pre-forward: norm.weight [128] (replicated
    # on tp) and output.weight [256, 128] (column-sharded on tp: [128, 128]), each halved on fsdp:
    # (64 + 64 * 128) float32 per rank; the output Linear's own pre-forward gathers nothing.
    norm, output = _module(doc, "FSDPTransformer.norm"), _module(doc, "FSDPTransformer.output")
    assert norm["forward_bytes"] == {"c10d._allgather_base_": (64 + 64 * 128) * 4}
    assert "c10d._allgather_base_" not in output["forward"]
    # Its gradients are reduce-scattered once, when backward reaches the first module's inputs
    # (the post-backward wraps norm's inputs): both gradients, unsharded on fsdp, float32.
    assert norm["backward"]["c10d._reduce_scatter_base_"] == 1
    assert norm["backward_bytes"]["c10d._reduce_scatter_base_"] == (128 + 128 * 128) * 4
    assert "c10d._reduce_scatter_base_" not in output["backward"]
    _compare(run_commlens, tmp_path, plan, doc)

    # commlens.measure applying the captured plan (list unit, divide factor, every-second-mm
    # policy) issues what torchtitan's own calls issue, cell for cell
    applied = tmp_path / "applied.counts.json"
    applied.write_text(format_counts(measure(MODEL, plan, phase="both", return_document=True)))
    r = run_commlens("compare", applied, tmp_path / "measured.counts.json", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["summary"]["differ"] == 0, r.stdout


def test_full_checkpointing_of_tensor_parallel_blocks(tmp_path, run_commlens):
    """checkpoint_wrapper around every block, with PrepareModuleInput on the wrapped blocks'
    attention (four inputs: x, freqs_cis, and two None) found by its unwrapped call signature."""
    settings = dict(tp=2, dp_shard=2, ac="full")
    plan = titan_captured(**settings)
    assert [(a.fqn, a.save_ops, a.early_stop) for a in plan.activation_checkpoint] == [("layers.*", (), False)]
    _compare(run_commlens, tmp_path, plan, measure_titan(**settings))


def test_bf16_mixed_precision_loss_over_float32_logits(tmp_path, run_commlens):
    settings = dict(tp=2, dp_shard=2, mixed_precision_param="bfloat16")
    plan = titan_captured(**settings)
    doc = measure_titan(**settings)
    # the logits come out of the bf16 output Linear; pred.float() casts them, so the loss-parallel
    # all-reduces carry float32: 3 all-reduces of 32 floats (bf16 logits would give 64-byte ones)
    glob = _module(doc, "Global")
    assert glob["forward_bytes"]["c10d_functional.all_reduce"] == 3 * TOKENS * 4
    _compare(run_commlens, tmp_path, plan, doc, export_plan=plan)


def test_qwen3_fsdp_with_per_op_checkpointing(tmp_path, run_commlens):
    """torchtitan's dense Qwen3 (q/k RMSNorm per head) through its own parallelize_qwen3: FSDP on 4
    ranks, the same units and policy as Llama 3's."""
    settings = dict(name="qwen3", dp_shard=4, ac="selective", sac_option="op")
    plan = titan_captured(**settings)
    assert (plan.mesh_shape, plan.mesh_dim_names, plan.parallelize_steps()) == ((4,), ("fsdp",), [])
    assert [u.fqn for u in plan.fully_shard] == ["tok_embeddings", "layers.*", ("norm", "output"), ""]
    doc = measure_titan(**settings)
    # 4 units with parameters (tok_embeddings, 2 blocks, [norm, output]; the root has none of its
    # own): each all-gathered once in forward
    assert _module(doc, "Global")["forward"] == {"c10d._allgather_base_": 4}
    _compare(run_commlens, tmp_path, plan, doc, model=model_spec("qwen3"))


def _torchtitans_cpu_permute():
    """torchtitan's own ``generate_permute_indices`` on its CPU path: its kernels module imports
    triton at module level, so it is loaded here with a stand-in ``triton`` whose ``jit`` leaves
    the (unused) kernel undecorated, removed again at once."""
    import importlib.util
    import sys
    import types

    path = pathlib.Path(importlib.util.find_spec("torchtitan").submodule_search_locations[0])
    spec = importlib.util.spec_from_file_location("torchtitan_kernels_cpu", path / "models/moe/kernels.py")
    kernels = importlib.util.module_from_spec(spec)
    triton, language = types.ModuleType("triton"), types.ModuleType("triton.language")
    triton.jit, triton.language, language.constexpr = (lambda fn: fn), language, int
    saved = {name: sys.modules.get(name) for name in ("triton", "triton.language")}
    sys.modules.update({"triton": triton, "triton.language": language})
    try:
        spec.loader.exec_module(kernels)
    finally:
        for name, module in saved.items():
            if module is None:
                del sys.modules[name]
            else:
                sys.modules[name] = module
    return functools.partial(kernels.generate_permute_indices, use_cpu=True)


def test_moe_token_permutation_equals_torchtitans():
    """examples.titan's fixed-shape generate_permute_indices (what the MoE examples run and
    export) returns what torchtitan's own CPU implementation returns: indices, padded group sizes
    and offsets, for 1-4 ranks x 1-4 local experts, empty groups included, alignments 1, 8, 16."""
    import torch

    from examples.titan import generate_permute_indices

    theirs = _torchtitans_cpu_permute()
    g = torch.Generator().manual_seed(0)
    for case in range(200):
        ranks, experts = (int(torch.randint(1, 5, (1,), generator=g)) for _ in range(2))
        counts = torch.randint(0, 7, (ranks * experts,), generator=g) * (torch.rand(ranks * experts, generator=g) > 0.3)
        alignment = (1, 8, 16)[case % 3]
        max_len = (int(counts.sum()) + experts * alignment + alignment - 1) // alignment * alignment
        want = theirs(counts, experts, ranks, max_len, alignment)
        got = generate_permute_indices(counts, experts, ranks, max_len, alignment)
        assert all(torch.equal(w, x) for w, x in zip(want, got)), (counts, experts, ranks, alignment)


def test_qwen3_moe_under_fsdp(tmp_path, run_commlens):
    """torchtitan's Qwen3-MoE (every FFN its MoE layer: router top-2 of 8, histc, argsort,
    token gathers and index_put, three grouped matmuls per layer) through parallelize_qwen3 under
    FSDP on 2 ranks: the backward through the MoE layer (index, index_put, _grouped_mm
    derivatives) reaches each unit's reduce-scatter as torch's does, bytes included."""
    settings = dict(name="qwen3_moe", dp_shard=2)
    plan = titan_captured(**settings)
    assert [u.fqn for u in plan.fully_shard] == ["tok_embeddings", "layers.*", ("norm", "output"), ""]
    doc = measure_titan(**settings)
    glob = _module(doc, "Global")
    # 4 units with parameters, each all-gathered in forward and reduce-scattered in backward; the
    # blocks and tok_embeddings are resharded after forward and gathered again in backward, the
    # last unit ([norm, output]) is not
    assert (glob["forward"], glob["backward"]) == (
        {"c10d._allgather_base_": 4}, {"c10d._allgather_base_": 3, "c10d._reduce_scatter_base_": 4})
    # a block's parameters, halved on 2 ranks, float32: wq, wo [128, 128], wk, wv [64, 128], q/k
    # norms [16], attention/ffn norms [128], the router gate [8, 128] and the experts w1, w3
    # [8, 64, 128] and w2 [8, 128, 64]; the reduce-scatter sends the unsharded gradients
    block = (2 * 128 * 128 + 2 * 64 * 128) + 2 * 16 + 2 * 128 + 8 * 128 + 3 * 8 * 64 * 128
    layer = _module(doc, "FSDPQwen3Model.layers.1")
    assert layer["forward_bytes"] == {"c10d._allgather_base_": block // 2 * 4}
    assert layer["backward_bytes"]["c10d._reduce_scatter_base_"] == block * 4
    _compare(run_commlens, tmp_path, plan, doc, model=model_spec("qwen3_moe"))


def test_expert_parallel_under_fsdp(tmp_path, run_commlens):
    """torchtitan's ExpertParallel on every MoE layer's experts, ep borrowing all of dp_shard (2):
    FSDP shards the experts on their own mesh (efsdp, of size 1 here: no collective), the dense
    units on the same ranks as ep. Per MoE layer the experts' hooks issue, forward, an all-to-all
    of the token counts and two of the tokens (dispatch, combine), and backward one per autograd
    all-to-all."""
    settings = dict(name="qwen3_moe", dp_shard=2, ep=2)
    plan = titan_captured(**settings)
    # ep and fsdp span the same ranks: one plan dim, named as the style's mesh names it
    # (GroupedExperts checks for "ep" in its weights' mesh dim names)
    assert (plan.mesh_shape, plan.mesh_dim_names) == ((1, 2), ("efsdp", "ep"))
    ((dim, styles),) = plan.parallelize_steps()
    assert (dim, list(styles), type(styles["layers.*.moe.experts"]).__name__) == (
        "ep", ["layers.*.moe.experts"], "ExpertParallel")
    # with ep, torchtitan's apply_fsdp sets each block's prefetch targets (its experts among them),
    # so the blocks are units of their own
    assert [(u.fqn, u.mesh_dims, u.forward_prefetch) for u in plan.fully_shard] == [
        ("tok_embeddings", ("ep",), ("layers.0",)), ("layers.*.moe.experts", ("efsdp",), ()),
        ("layers.0", ("ep",), ("layers.1", "layers.1.moe.experts")), ("layers.1", ("ep",), ("norm", "norm")),
        (("norm", "output"), ("ep",), ()), ("", ("ep",), ())]
    doc = measure_titan(**settings)
    experts = _module(doc, "FSDPQwen3Model.layers.0.moe.experts")
    assert (experts["forward"], experts["backward"]) == (
        {"c10d_functional.all_to_all_single": 3}, {"c10d_functional.all_to_all_single": 2})
    summary = _compare(run_commlens, tmp_path, plan, doc, model=model_spec("qwen3_moe"))
    # The prediction: the counts exchange sends 8 int64 counts, the dispatch the rank's 2 x 16
    # tokens x top-2 = 64 rows of 128 float32; the combine sends the rows the rank's experts got,
    # 64 under balanced routing, from none to all 2 x 64 of the group's
    predicted = json.loads((tmp_path / "predicted.json").read_text())
    layer = next(c for c in _tree(predicted) if c["fqn"] == "FSDPQwen3Model.layers.0.moe.experts")
    rows = 64 * 128 * 4
    assert layer["collective_bytes_forward"] == {"c10d_functional.all_to_all_single": 64 + rows + rows}
    assert layer["collective_bytes_bounds_forward"] == {"c10d_functional.all_to_all_single": [64 + rows, 64 + 3 * rows]}
    assert summary["differ"] == 0
    # the table's and the HTML page's detail of the combine say the same
    pt2, plan_path = tmp_path / "model.pt2", tmp_path / "plan.json"
    for fmt, marker in (("table", f"{rows} B/rank (balanced routing; 0 to {2 * rows} by the routing)"),
                        ("html", f"{rows} (balanced routing; 0&ndash;{2 * rows} by the routing)")):
        r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", fmt, "--noise-level", "1")
        # per layer, the combine and the dispatch's backward send routed rows
        assert r.returncode == 0 and r.stdout.count(marker) == 4, r.stdout[-2000:]
    # --routing-skew 1.5: the busiest rank's experts get 1.5 x 64 = 96 rows, which it sends back in
    # the combine (and in the dispatch's backward); the bounds stay the routing's. At 3 the 192 rows
    # are more than the group's 2 x 64: all of them.
    for skew, routed in (("1.5", 96), ("3", 128)):
        r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json",
                         "--routing-skew", skew)
        assert r.returncode == 0, r.stderr
        layer = next(c for c in _tree(json.loads(r.stdout)) if c["fqn"] == "FSDPQwen3Model.layers.0.moe.experts")
        assert layer["collective_bytes_forward"] == {"c10d_functional.all_to_all_single": 64 + rows + routed * 128 * 4}
        assert layer["collective_bytes_bounds_forward"] == {"c10d_functional.all_to_all_single": [64 + rows, 64 + 3 * rows]}
        combine = [c for c in layer["collectives_forward_detail"] if c.get("bytes_per_rank_bounds")]
        assert [(c["bytes_per_rank"], c["routing_skew"]) for c in combine] == [(routed * 128 * 4, float(skew))]
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--noise-level", "1",
                     "--routing-skew", "1.5")
    assert r.stdout.count(f"{96 * 128 * 4} B/rank (routing skew 1.5: the busiest rank; 0 to {2 * rows} by the "
                          "routing)") == 4, r.stdout[-2000:]
    # rank states the routing model it ranked under, and counts the skewed bytes: per layer, 32
    # more rows in the combine and in the dispatch's backward than balanced
    ranked = {}
    for skew in ("1", "1.5"):
        r = run_commlens("rank", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "--routing-skew", skew)
        assert r.returncode == 0, r.stderr
        ranked[skew] = json.loads(r.stdout)
    assert "routing_skew" not in ranked["1"] and ranked["1.5"]["routing_skew"] == 1.5
    step = {skew: doc["plans"][0]["forward"]["bytes_per_rank"] + doc["plans"][0]["backward"]["bytes_per_rank"]
            for skew, doc in ranked.items()}
    assert step["1.5"] - step["1"] == 2 * 2 * 32 * 128 * 4
    r = run_commlens("rank", pt2, "--plan", plan_path, "--phase", "both", "--routing-skew", "1.5")
    assert "phase both, MoE routing skew 1.5 (the busiest expert-parallel rank), by communication time" in r.stdout


def test_expert_parallel_bytes_within_the_routings_bounds(tmp_path, run_commlens):
    """On 4 ranks the fake process group's all-to-all of the token counts hands every rank rank
    0's counts for its own experts, so the measured routing is not balanced: the routed bytes
    differ from the balanced prediction, and compare accepts them within the bounds."""
    settings = dict(name="qwen3_moe", dp_shard=4, ep=4)
    plan, doc = titan_captured(**settings), measure_titan(**settings)
    _compare(run_commlens, tmp_path, plan, doc, model=model_spec("qwen3_moe"))
    r = run_commlens("compare", tmp_path / "predicted.json", tmp_path / "measured.counts.json", "--json")
    routed = [c for c in json.loads(r.stdout)["cells"] if "predicted_bytes_bounds" in c]
    assert routed and all(c["match"] for c in routed)
    assert any(c["measured_bytes"] != c["predicted_bytes"] for c in routed)
    assert all(c["predicted_bytes_bounds"][0] <= c["measured_bytes"] <= c["predicted_bytes_bounds"][1]
               for c in routed)


def test_expert_parallel_on_part_of_dp_shard(tmp_path, run_commlens):
    """dp_shard 4 with ep 2: torchtitan unflattens the 4 ranks into a dense (fsdp) and a sparse
    (efsdp, ep) mesh, fsdp over efsdp x ep. The plan's mesh is (efsdp 2, ep 2) with fsdp their
    flattening: the dense units gather and reduce over all 4 ranks, the experts' units over efsdp
    (2 ranks) the experts' ep shards."""
    settings = dict(name="qwen3_moe", dp_shard=4, ep=2)
    plan = titan_captured(**settings)
    assert (plan.mesh_shape, plan.mesh_dim_names, plan.flattened_dims) == (
        (2, 2), ("efsdp", "ep"), {"fsdp": ("efsdp", "ep")})
    assert [(u.fqn, u.mesh_dims) for u in plan.fully_shard] == [
        ("tok_embeddings", ("fsdp",)), ("layers.*.moe.experts", ("efsdp",)), ("layers.0", ("fsdp",)),
        ("layers.1", ("fsdp",)), (("norm", "output"), ("fsdp",)), ("", ("fsdp",))]
    doc = measure_titan(**settings)
    # Per block, the experts' w1, w3 [8, 64, 128] and w2 [8, 128, 64] float32: ep 2 keeps 4 experts
    # a rank, efsdp 2 halves them: 3 x 4 x 64 x 128 / 2 floats gathered; the reduce-scatter sends
    # the rank's 4 experts' whole gradients
    experts = 3 * 4 * 64 * 128
    layer0 = _module(doc, "FSDPQwen3Model.layers.0.moe.experts")
    assert layer0["forward_bytes"]["c10d._allgather_base_"] == experts // 2 * 4
    assert layer0["backward_bytes"]["c10d._reduce_scatter_base_"] == experts * 4
    # the block's own parameters (attention, norms, router gate) over all 4 ranks of fsdp
    block = (2 * 128 * 128 + 2 * 64 * 128) + 2 * 16 + 2 * 128 + 8 * 128
    norm = _module(doc, "FSDPQwen3Model.layers.0.attention_norm")
    assert norm["backward_bytes"] == {"c10d._reduce_scatter_base_": block * 4}
    _compare(run_commlens, tmp_path, plan, doc, model=model_spec("qwen3_moe"))
    r = run_commlens("predict", tmp_path / "model.pt2", "--plan", tmp_path / "plan.json", "--phase", "both",
                     "--format", "json")
    records = [c for m in _tree(json.loads(r.stdout)) for c in m.get("collectives_backward_detail", ())]
    # the dense units' reduce-scatters on the flattened dim's two mesh dims, the experts' on efsdp
    assert {(c["op"], tuple(c["mesh_dims"])) for c in records} == {
        ("c10d._reduce_scatter_base_", (0, 1)), ("c10d._reduce_scatter_base_", (0,)),
        ("c10d._allgather_base_", (0, 1)), ("c10d._allgather_base_", (0,)),
        ("c10d_functional.all_to_all_single", (1,))}


def test_deepseek_v3_fsdp_tp_and_expert_parallel_borrowing_tp(tmp_path, run_commlens):
    """torchtitan's DeepSeek-V3 (multi-head latent attention, complex RoPE, a dense first block,
    then MoE blocks with a shared expert) by its own parallelize_deepseekv3 on tp 2 x dp_shard 2
    with ep 2, which borrows the tp ranks: TP+SP on the dense layers and the shared expert,
    ReordererSequenceParallel and ExpertParallel on the routed experts (their FSDP units on the
    same ranks as the dense ones)."""
    settings = dict(name="deepseek_v3", tp=2, dp_shard=2, ep=2)
    plan = titan_captured(**settings)
    steps = plan.parallelize_steps()
    styles = {k: type(v).__name__ for _dim, entries in steps for k, v in entries.items()}
    assert (styles["layers.*.moe.reorderer"], styles["layers.*.moe.experts"],
            styles["layers.*.moe.shared_experts.w2"], styles["layers.*.attention.wkv_a"]) == (
        "ReordererSequenceParallel", "ExpertParallel", "RowwiseParallel", "NoParallel")
    doc = measure_titan(**settings)
    # layers.0 is dense; layers.1's experts: the counts (8 int64), then the dispatch of this rank's
    # 2 x 16 / 2 tokens x top-2 = 32 rows of 128 float32 (16384 bytes), then the combine (the
    # routing's rows)
    assert not any(m["fqn"].startswith("FSDPDeepSeekV3Model.layers.0.moe") for m in doc["modules"])
    experts = _module(doc, "FSDPDeepSeekV3Model.layers.1.moe.experts")
    assert experts["forward"] == {"c10d_functional.all_to_all_single": 3}
    summary = _compare(run_commlens, tmp_path, plan, doc, model=model_spec("deepseek_v3"))
    predicted = json.loads((tmp_path / "predicted.json").read_text())
    layer = next(c for c in _tree(predicted) if c["fqn"] == "FSDPDeepSeekV3Model.layers.1.moe.experts")
    dispatch = 32 * 128 * 4
    assert layer["collective_bytes_forward"] == {"c10d_functional.all_to_all_single": 64 + 2 * dispatch}
    assert summary["differ"] == 0


def test_deepseek_v3_expert_parallel_over_fsdp_and_tp(tmp_path, run_commlens):
    """ep 4 on tp 2 x dp_shard 2 borrows all of both (etp 1): torchtitan puts the experts'
    ExpertParallel on its ep dim, flattened from fsdp x tp, and the dense TP on tp, so the plan's
    DTensors live on two meshes; the all-to-alls run over the flattened dim's two mesh dims."""
    settings = dict(name="deepseek_v3", tp=2, dp_shard=2, ep=4)
    plan = titan_captured(**settings)
    fsdp, tp = plan.mesh_dim_names.index("fsdp"), plan.mesh_dim_names.index("tp")
    assert plan.flattened_dims == {"ep": ("fsdp", "tp")}
    steps = {dim: {type(v).__name__ for v in entries.values()} for dim, entries in plan.parallelize_steps()}
    assert steps["ep"] == {"ExpertParallel"} and "ReordererSequenceParallel" in steps["tp"]
    doc = measure_titan(**settings)
    experts = _module(doc, "FSDPDeepSeekV3Model.layers.1.moe.experts")
    assert experts["forward"] == {"c10d_functional.all_to_all_single": 3}
    summary = _compare(run_commlens, tmp_path, plan, doc, model=model_spec("deepseek_v3"))
    assert summary["differ"] == 0
    predicted = json.loads((tmp_path / "predicted.json").read_text())
    layer = next(c for c in _tree(predicted) if c["fqn"] == "FSDPDeepSeekV3Model.layers.1.moe.experts")
    # the rank's 2 x 16 / 2 tokens (the reorderer splits them over tp) x top-2 = 32 rows of 128
    # float32 dispatched, after the 8 experts' int64 counts (64 bytes)
    assert layer["collective_bytes_forward"] == {"c10d_functional.all_to_all_single": 64 + 2 * 32 * 128 * 4}
    assert {tuple(c["mesh_dims"]) for c in layer["collectives_forward_detail"]} == {(fsdp, tp)}


def test_deepseek_v3_expert_tensor_parallel(tmp_path, run_commlens):
    """etp = tp 2 with ep 2 on tp 2 x dp_shard 2: torchtitan applies ExpertTensorParallel to the
    experts on its 2-D [ep, etp] mesh (ep over dp_shard's ranks, etp over tp's): the experts'
    weights [Shard(0), Shard(1 or 2)], the routed tokens' gradient all-reduced over etp, the
    token all-to-alls over ep."""
    settings = dict(name="deepseek_v3", tp=2, dp_shard=2, ep=2, etp=2)
    plan = titan_captured(**settings)
    ep, tp = plan.mesh_dim_names.index("ep"), plan.mesh_dim_names.index("tp")
    steps = {dim: {type(v).__name__ for v in entries.values()} for dim, entries in plan.parallelize_steps()}
    assert steps[("ep", "tp")] == {"ExpertTensorParallel"}
    doc = measure_titan(**settings)
    experts = _module(doc, "FSDPDeepSeekV3Model.layers.1.moe.experts")
    assert (experts["forward"], experts["backward"]) == (
        {"c10d_functional.all_to_all_single": 3},
        {"c10d_functional.all_to_all_single": 2, "c10d_functional.all_reduce": 1})
    summary = _compare(run_commlens, tmp_path, plan, doc, model=model_spec("deepseek_v3"))
    assert summary["differ"] == 0
    predicted = json.loads((tmp_path / "predicted.json").read_text())
    layer = next(c for c in _tree(predicted) if c["fqn"] == "FSDPDeepSeekV3Model.layers.1.moe.experts")
    # every rank routes its 2 x 16 tokens (the MoE input all-gathered over tp) x top-2 = 64 rows of
    # 128 float32 (32768 bytes), after the 8 experts' int64 counts (64 bytes); the rows' gradient,
    # a Partial over etp, is all-reduced whole
    routed = 64 * 128 * 4
    assert layer["collective_bytes_forward"] == {"c10d_functional.all_to_all_single": 64 + 2 * routed}
    assert {(c["op"], tuple(c["mesh_dims"]), c["bytes_per_rank"]) for c in layer["collectives_backward_detail"]
            if c["op"] == "c10d_functional.all_reduce"} == {("c10d_functional.all_reduce", (tp,), routed)}
    assert {tuple(c["mesh_dims"]) for c in layer["collectives_forward_detail"]} == {(ep,)}


def test_qwen3_moe_per_op_checkpointing_recomputes_the_router(tmp_path, run_commlens):
    """torchtitan's per-op SAC on MoE blocks forces the router gate's mm ([128, 8] second operand:
    the gate Linear's in x out features) to be recomputed, and does not count it among the mms of
    which it saves every other one (recompute_mm_rhs_shapes; which mms run again is checked in
    tests/lit/activation-checkpoint/every-second-mm.ir). Under FSDP no op of the block is a
    DTensor op, so recomputation issues no collective. (With expert parallel torchtitan's own run
    raises on CPU: SAC finds the recomputation's ops differ from the forward's.)"""
    settings = dict(name="qwen3_moe", dp_shard=2, ac="selective", sac_option="op")
    plan = titan_captured(**settings)
    (ac,) = plan.activation_checkpoint
    assert (ac.fqn, ac.recompute_every_second, ac.recompute_mm_rhs_shapes) == (
        "layers.*", ("aten.mm.default",), ((128, 8),))
    doc = measure_titan(**settings)
    assert _module(doc, "Global")["backward"] == {"c10d._allgather_base_": 3, "c10d._reduce_scatter_base_": 4}
    _compare(run_commlens, tmp_path, plan, doc, model=model_spec("qwen3_moe"))


def test_moe_tensor_parallel(tmp_path, run_commlens):
    """torchtitan's apply_moe_ep_tp with a tensor-parallel mesh alone (tp=2), on token embeddings
    and two MoE layers (examples.titan:moe_stack: torchtitan's Qwen3-MoE does not run under TP on
    CPU). Per layer: PrepareModuleInputOutput all-gathers the sequence-sharded [2, 16, 64] input
    (rank 0's [2, 8, 64] float32, 4096 bytes) and reduce-scatters the Partial output (8192), the
    router gate is replicated (NoParallel: nothing moves), and TensorParallel's to_local(grad
    Partial) of the routed tokens makes their gradient one all_reduce of 2 x 16 tokens x top-2 =
    64 rows of 64 float32 (16384 bytes)."""
    plan = moe_stack_captured(tp=2)
    ((dim, styles),) = plan.parallelize_steps()
    assert [(k, type(v).__name__) for k, v in styles.items()] == [
        ("tok_embeddings", "RowwiseParallel"), ("layers.*.moe", "PrepareModuleInputOutput"), ("layers.*.moe.router.gate", "NoParallel"),
        ("layers.*.moe.experts", "TensorParallel")]
    doc = measure_moe_stack(tp=2)
    for layer in (0, 1):
        moe = _module(doc, f"MoEStack.layers.{layer}.moe")
        assert (moe["forward"], moe["forward_bytes"]) == (
            {"c10d_functional.all_gather_into_tensor": 1, "c10d_functional.reduce_scatter_tensor": 1},
            {"c10d_functional.all_gather_into_tensor": 4096, "c10d_functional.reduce_scatter_tensor": 8192})
        experts = _module(doc, f"MoEStack.layers.{layer}.moe.experts")
        assert (experts["backward"], experts["backward_bytes"]) == (
            {"c10d_functional.all_reduce": 1}, {"c10d_functional.all_reduce": 64 * 64 * 4})
    _compare(run_commlens, tmp_path, plan, doc, model="examples.titan:moe_stack()")


@pytest.mark.parametrize("tp,dp_shard", [(2, 1), (4, 1), (2, 2)])
def test_moe_expert_parallel_borrowing_the_tp_ranks(tp, dp_shard, tmp_path, run_commlens):
    """apply_moe_ep_tp with ep on the tp mesh and no etp: ReordererSequenceParallel splits each
    MoE layer's 2 x 16 tokens over the tp ranks before routing, so ExpertParallel's dispatch sends
    this rank's 32 / tp tokens x top-2 rows of 64 float32 (and the 8 int64 per-expert counts
    first); the combine sends back the rows its experts got (the routing's). The MoE layer's input
    all-gather and output reduce-scatter are as under TensorParallel."""
    settings = dict(tp=tp, ep=tp, dp_shard=dp_shard)
    plan = moe_stack_captured(**settings)
    ((_dim, styles),) = plan.parallelize_steps()
    assert [(k, type(v).__name__) for k, v in styles.items() if "reorderer" in k or "experts" in k] == [
        ("layers.*.moe.reorderer", "ReordererSequenceParallel"), ("layers.*.moe.experts", "ExpertParallel")]
    doc = measure_moe_stack(**settings)
    root = "FSDPMoEStack" if dp_shard > 1 else "MoEStack"
    rows = 2 * 16 * 2 // tp
    for layer in (0, 1):
        experts = _module(doc, f"{root}.layers.{layer}.moe.experts")
        assert experts["forward"] == {"c10d_functional.all_to_all_single": 3}
    summary = _compare(run_commlens, tmp_path, plan, doc, model="examples.titan:moe_stack()")
    predicted = json.loads((tmp_path / "predicted.json").read_text())
    layer = next(c for c in _tree(predicted) if c["fqn"] == f"{root}.layers.0.moe.experts")
    dispatch = rows * 64 * 4
    # counts, dispatch (fixed) and combine (balanced: the rows sent; bounds: none to the group's)
    assert layer["collective_bytes_forward"] == {"c10d_functional.all_to_all_single": 8 * 8 + 2 * dispatch}
    assert layer["collective_bytes_bounds_forward"] == {
        "c10d_functional.all_to_all_single": [8 * 8 + dispatch, 8 * 8 + dispatch + tp * dispatch]}
    assert summary["differ"] == 0


def test_moe_expert_parallel_refuses_experts_not_dividing_the_ep_ranks(tmp_path, run_commlens):
    """6 experts on 4 expert-parallel ranks: ExpertParallel's Shard(0) of the weights is uneven and
    the dispatch's split sizes do not add up, so torchtitan's run raises; so does predict."""
    with pytest.raises(RuntimeError, match="Split sizes doesn't match total dim 0 size"):
        measure_moe_stack(tp=4, ep=4, num_experts=6)
    pt2, stderr = _refusal(run_commlens, tmp_path, moe_stack_captured(tp=4, ep=4, num_experts=6),
                           "examples.titan:moe_stack(num_experts=6)")
    assert stderr == (f"commlens: error: {pt2}: TorchtitanExpertParallel on MoEStack.layers.0.moe.experts: 6 experts "
                        "do not split evenly over the 4 ranks of the mesh dim (torchtitan's dispatch raises \"Split "
                        "sizes doesn't match total dim 0 size\")\n")


def test_moe_reorderer_refuses_an_uneven_token_split(tmp_path, run_commlens):
    """6 tokens over 4 tp ranks: torchtitan's ReordererSequenceParallel raises on an uneven split
    (in CommDebugMode's run on the fake process group the sequence-sharded input's from_local
    infers 8 tokens, a run whose shapes are not the program's, so it does not get there)."""
    pt2, stderr = _refusal(run_commlens, tmp_path, moe_stack_captured(tp=4, ep=4, batch=1, seq_len=6),
                           "examples.titan:moe_stack(batch=1, seq_len=6)")
    assert stderr == (f"commlens: error: {pt2}: TorchtitanReordererSequenceParallel on MoEStack.layers.0.moe.reorderer: "
                        "6 tokens do not split evenly over the 4 ranks of the mesh dim (torchtitan's "
                        "ReordererSequenceParallel refuses an uneven split)\n")


def test_moe_tensor_parallel_under_fsdp(tmp_path, run_commlens):
    """The same with torchtitan's apply_fsdp on dp_shard=2 of a (dp_shard 2, tp 2) mesh: each block
    is a unit whose parameters FSDP shards on top of their tensor-parallel placements. A block
    holds the replicated gate (8 x 64) and the experts' tp shards (w1, w2, w3: 8 experts x 16 x 64
    each), 512 + 3 x 8192 floats per tp rank; FSDP's all-gather sends half of them (50176 bytes)
    and its reduce-scatter takes all of them (100352 bytes)."""
    settings = dict(tp=2, dp_shard=2)
    plan = moe_stack_captured(**settings)
    assert [(u.fqn, u.mesh_dims) for u in plan.fully_shard] == [
        ("tok_embeddings", ("dp_shard",)), ("layers.*", ("dp_shard",)), ("", ("dp_shard",))]
    doc = measure_moe_stack(**settings)
    block = _module(doc, "FSDPMoEStack.layers.0")
    floats = 8 * 64 + 3 * 8 * 16 * 64
    assert block["forward_bytes"]["c10d._allgather_base_"] == floats * 4 // 2
    assert block["backward_bytes"]["c10d._reduce_scatter_base_"] == floats * 4
    _compare(run_commlens, tmp_path, plan, doc, model="examples.titan:moe_stack()")


def test_moe_tensor_parallel_under_fsdp_eight_layers(tmp_path, run_commlens):
    """The same on eight MoE layers. The hooks' pass-through of a local shard once read its
    placements from a map entry that making the output's entry had freed (when that insert grew
    the map, at the eighth block's FSDP pre-forward here): commlens then refused the plan with a
    local shard of no placements ("DTensor.from_local of 'add_41_post_pre' as [S(1)] infers the
    global shape [2, 32, 64] ..."), which CommDebugMode runs."""
    settings = dict(tp=2, dp_shard=2, n_layers=8)
    plan, doc = moe_stack_captured(**settings), measure_moe_stack(**settings)
    assert sorted(_module(doc, f"FSDPMoEStack.layers.{i}.moe")["forward"]["c10d_functional.all_gather_into_tensor"]
                  for i in range(8)) == [1] * 8
    _compare(run_commlens, tmp_path, plan, doc, model="examples.titan:moe_stack(n_layers=8)")


def test_moe_tensor_parallel_refuses_expert_shards_the_kernel_cannot_take(tmp_path, run_commlens):
    """tp=8 of the 32-wide experts leaves each rank 4 features: torchtitan's TensorParallel runs
    _grouped_mm on the local shards cast to bfloat16, whose 8-byte rows the kernel refuses, so the
    run fails; commlens refuses the plan, naming the operand (the routed rows, as torchtitan pads
    them per expert group, by the experts' hidden features) and its local strides."""
    with pytest.raises(RuntimeError, match="strides should be multiple of 16 bytes"):
        measure_moe_stack(tp=8)
    pt2, stderr = _refusal(run_commlens, tmp_path, moe_stack_captured(tp=8), "examples.titan:moe_stack()")
    assert stderr == (
        f"commlens: error: {pt2}: node '_grouped_mm_2' aten::_grouped_mm.default in MoEStack.layers.0.moe.experts: on "
        "the rank at mesh coordinate [0] this plain grouped matrix product takes self as 'mul_2' [128, 4] (a local "
        "shard: [S(1)] of [128, 32] on DeviceMesh((8,), 'cpu', mesh_dim_names=('tp',)), handed back by a style's "
        "use_local_output) with strides [4, 1] of torch.bfloat16 (2 bytes each), which the kernel needs 16-byte "
        "aligned, so torch raises (\"strides should be multiple of 16 bytes\")\n")


def test_moe_tensor_parallel_full_checkpointing_charges_the_output_hook_to_the_experts(tmp_path, run_commlens):
    """torchtitan's full AC on the blocks (early stop off) recomputes each MoE layer in backward,
    its output hook's reduce-scatter too. CommDebugMode's tracker, in backward, is named by forward
    pre-hooks alone, so that reduce-scatter, which runs after the experts' call, is charged to the
    experts (and their parents), not to the MoE module's own row."""
    settings = dict(tp=2, dp_shard=2, ac="full")
    plan, doc = moe_stack_captured(**settings), measure_moe_stack(**settings)
    experts = _module(doc, "FSDPMoEStack.layers.0._checkpoint_wrapped_module.moe.experts")
    assert experts["backward"] == {"c10d_functional.all_reduce": 1, "c10d_functional.reduce_scatter_tensor": 1}
    _compare(run_commlens, tmp_path, plan, doc, model="examples.titan:moe_stack()")


def test_rank_orders_the_parallelisms_of_deepseek_v3(tmp_path, run_commlens):
    """One `commlens rank` over torchtitan's DeepSeek-V3 parallelized six ways on 4 ranks, each
    plan captured from torchtitan's own parallelize function: FSDP, FSDP x TP, and expert
    parallel on dp_shard, borrowing the tp ranks, over fsdp x tp, and expert tensor parallel.
    Each plan's counts are CommDebugMode's for that split (bytes of routed rows are the routing's,
    so they are compared within bounds by compare), and the order is by predicted step time."""
    splits = {"fsdp4": dict(dp_shard=4), "fsdp2xtp2": dict(tp=2, dp_shard=2),
              "fsdp4xep4": dict(dp_shard=4, ep=4), "fsdp2xtp2xep2": dict(tp=2, dp_shard=2, ep=2),
              "fsdp2xtp2xep4": dict(tp=2, dp_shard=2, ep=4), "fsdp2xtp2xep2xetp2": dict(tp=2, dp_shard=2, ep=2, etp=2)}
    plans = tmp_path / "plans"
    plans.mkdir()
    measured = {}
    for name, settings in splits.items():
        plan = titan_captured(name="deepseek_v3", **settings)
        plan.name = name
        save_plan(plan, plans).rename(plans / f"{name}.json")
        measured[name] = next(m for m in measure_titan(name="deepseek_v3", **settings)["modules"] if m["fqn"] == "Global")
    pt2 = export_pt2(model_spec("deepseek_v3"), tmp_path)
    out = tmp_path / "rank.json"
    r = run_commlens("rank", pt2, "--plans", plans, "--cluster", "h100-ib-ndr", "--format", "json", "-o", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["errors"] == [] and sorted(p["name"] for p in doc["plans"]) == sorted(splits)
    times = [p["time_us"] for p in doc["plans"]]
    assert times == sorted(times) and len(set(times)) == len(times)
    for p in doc["plans"]:
        glob = measured[p["name"]]
        counts = {}
        for phase in ("forward", "backward"):
            assert p[phase]["collectives"] == sum(glob[phase].values()), p["name"]
            for op, n in glob[phase].items():
                counts[op] = counts.get(op, 0) + n
        assert p["collectives"] == counts, p["name"]
