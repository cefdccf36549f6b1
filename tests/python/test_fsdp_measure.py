"""commlens.measure with fully_shard (FSDP2) units, against counts derived by
hand from FSDP2's rules (torch 2.13, torch/distributed/fsdp/_fully_shard/).

Notation: AG = c10d._allgather_base_, RS = c10d._reduce_scatter_base_,
AR = c10d.allreduce_ (FSDP2 calls torch.distributed directly:
``all_gather_single``, ``reduce_scatter_single`` and, for HSDP,
``all_reduce``; CommDebugMode records the c10d ops underneath).
FAR = c10d_functional.all_reduce (DTensor's redistribute).

FSDP2 rules used below (file names relative to _fully_shard/):

* _fsdp_init.py ``_init_param_group``: a unit whose module holds no parameter
  of its own (everything taken by child units) gets no FSDPParamGroup, so it
  issues nothing.  ``_get_post_forward_mesh_info``: reshard_after_forward
  None means True for non-root units; _fsdp_state.py ``_lazy_init`` turns it
  to False for the root.
* Forward (_fsdp_param_group.py ``pre_forward``): each group all-gathers its
  parameters in its module's forward pre-hook (1 AG), registered after
  CommDebugMode's global pre-hook, so charged to the unit's module.  There is
  no implicit forward prefetch.  ``post_forward`` reshards (when
  reshard_after_forward) and appends the group to ``post_forward_order``.
* Backward: a unit's pre-backward hook (a tensor hook on its outputs) runs
  ``pre_backward``: unshard (1 AG if resharded and not prefetched; a no-op if
  unsharded or a prefetch is pending), then the default prefetch
  ``_backward_prefetch`` of ``post_forward_order[i - 1]`` (1 AG if that unit is
  resharded): the prefetch is charged to the unit whose hook fired.
* ``post_backward`` (RegisterPostBackwardFunction on the unit's inputs that
  require grad, or, when none does, the root's final callback at the end of
  backward) reduce-scatters the gradients of the group's parameters that have
  one (1 RS; none when no parameter has a grad) and, for HSDP, all-reduces
  the result over the replicate dim (1 AR).  CommDebugMode charges both to
  the module whose backward pre-hook fired last: the unit's first child
  (the last module whose backward starts).
* CommDebugMode lists the root as ``FSDP<Class>`` (fully_shard swaps the
  class); child names are attribute paths.
"""

import dataclasses

import pytest

from commlens import CommlensError
from commlens.measure import measure, measure_many
from commlens.plan import FullyShard, PlanError

AG = "c10d._allgather_base_"
RS = "c10d._reduce_scatter_base_"
AR = "c10d.allreduce_"
FAR = "c10d_functional.all_reduce"

ROOT = "FSDPStackedMLP"


def expect(modules):
    return {fqn: {"forward": dict(fw), "backward": dict(bw)} for fqn, fw, bw in modules}


def stacked_mlp_fsdp_counts(backward_allgathers=True, hsdp=False, frozen_layer0=False):
    """examples.mlp:stacked_mlp (3 layers, x does not require grad, loss
    ``out.sum()``) with units layers.0, layers.1, layers.2, then the root.

    Forward: the root holds no parameter (no group: nothing); layers.i: 1 AG
    each in its pre-forward.  post_forward_order = [layers.0, layers.1,
    layers.2].

    Backward (reshard_after_forward None = True for the layers):
    * layers.2's output is the root's output; the root has no group, so
      layers.2's pre-backward is the first FSDP work: unshard layers.2 (1 AG)
      and prefetch post_forward_order[1] = layers.1 (1 AG): 2 AG on layers.2.
      Its post_backward (its input, layers.1's output, requires grad) after
      w2's then w1's backward: 1 RS on layers.2.w1.
    * layers.1: unshard is a no-op (prefetched); prefetch layers.0: 1 AG on
      layers.1; 1 RS on layers.1.w1.
    * layers.0: prefetched; index 0: no prefetch.  x needs no grad, so its
      post_backward runs in the root's final callback, still charged to
      layers.0.w1: 1 RS.
    reshard_after_forward=False: every unshard/prefetch finds the layer
    unsharded: no backward AG.
    HSDP: the same, plus 1 AR after each RS (same module).
    layers.0 frozen: its output needs no grad (no pre-backward hook) but
    layers.1 still prefetches it (1 AG); its post_backward finds no gradient:
    no RS.
    """
    ag2, ag1 = ({AG: 2}, {AG: 1}) if backward_allgathers else ({}, {})
    red = {RS: 1, AR: 1} if hsdp else {RS: 1}
    red0 = {} if frozen_layer0 else red
    n_red = 2 if frozen_layer0 else 3
    total_bw = {RS: n_red, AR: n_red} if hsdp else {RS: n_red}
    if backward_allgathers:
        total_bw[AG] = 3
    fw = {AG: 1}
    return expect([
        ("Global", {AG: 3}, total_bw),
        (ROOT, {AG: 3}, total_bw),
        ("FSDPStackedMLP.layers.0", fw, red0),
        ("FSDPStackedMLP.layers.0.w1", {}, red0),
        ("FSDPStackedMLP.layers.0.w2", {}, {}),
        ("FSDPStackedMLP.layers.1", fw, {**ag1, **red}),
        ("FSDPStackedMLP.layers.1.w1", {}, red),
        ("FSDPStackedMLP.layers.1.w2", {}, {}),
        ("FSDPStackedMLP.layers.2", fw, {**ag2, **red}),
        ("FSDPStackedMLP.layers.2.w1", {}, red),
        ("FSDPStackedMLP.layers.2.w2", {}, {}),
    ])


def test_stacked_mlp_fsdp_dp8():
    got = measure("examples.mlp:stacked_mlp", "examples.plans:stacked_mlp_fsdp(dp=8)", phase="both")
    assert got == stacked_mlp_fsdp_counts()


@pytest.mark.parametrize("spec", [
    # x requiring grad moves layers.0's post_backward from the final callback
    # into autograd (RegisterPostBackwardFunction): same module, same counts.
    "examples.plans:stacked_mlp_fsdp(dp=8, input_requires_grad=True)",
    # bf16 params / fp32 reduction change dtypes, not collectives.
    "examples.plans:stacked_mlp_fsdp(dp=8, mixed_precision='bf16')",
    # an int reshards onto a sub-group of 2: the backward re-gathers run on it.
    "examples.plans:stacked_mlp_fsdp(dp=8, reshard_after_forward=2)",
])
def test_stacked_mlp_fsdp_same_counts(spec):
    assert measure("examples.mlp:stacked_mlp", spec) == stacked_mlp_fsdp_counts()


def test_stacked_mlp_fsdp_no_reshard_after_forward():
    got = measure("examples.mlp:stacked_mlp", "examples.plans:stacked_mlp_fsdp(dp=8, reshard_after_forward=False)")
    assert got == stacked_mlp_fsdp_counts(backward_allgathers=False)


def test_stacked_mlp_hsdp_2x4():
    from examples.plans import stacked_mlp_fsdp

    plan = stacked_mlp_fsdp(dp=8)
    dims = ("dp_replicate", "dp_shard")
    plan = dataclasses.replace(plan, mesh_shape=(2, 4), mesh_dim_names=dims,
                               fully_shard=tuple(dataclasses.replace(u, mesh_dims=dims) for u in plan.fully_shard))
    assert measure("examples.mlp:stacked_mlp", plan) == stacked_mlp_fsdp_counts(hsdp=True)


def test_stacked_mlp_fsdp_frozen_layer():
    got = measure("examples.mlp:stacked_mlp", "examples.plans:stacked_mlp_fsdp(dp=8, frozen=('layers.0.*',))")
    assert got == stacked_mlp_fsdp_counts(frozen_layer0=True)


def test_requires_gradient_sync_false_skips_reduction():
    # set_requires_gradient_sync(False) on the layers: post_backward only
    # accumulates (reduce_grads False): no RS; the all-gathers stay.
    from examples.plans import stacked_mlp_fsdp

    plan = stacked_mlp_fsdp(dp=8)
    plan.fully_shard = (dataclasses.replace(plan.fully_shard[0], requires_gradient_sync=False),
                        plan.fully_shard[1])
    want = stacked_mlp_fsdp_counts()
    for counts in want.values():
        counts["backward"].pop(RS, None)
    assert measure("examples.mlp:stacked_mlp", plan) == want


def test_phase_forward_and_backward():
    full = stacked_mlp_fsdp_counts()
    fw = measure("examples.mlp:stacked_mlp", "examples.plans:stacked_mlp_fsdp(dp=8)", phase="forward")
    assert fw == {k: {"forward": v["forward"], "backward": {}} for k, v in full.items()}
    bw = measure("examples.mlp:stacked_mlp", "examples.plans:stacked_mlp_fsdp(dp=8)", phase="backward")
    assert bw == {k: {"forward": {}, "backward": v["backward"]} for k, v in full.items()}


def test_gpt2_fsdp_root_prefetches_last_block():
    """examples.gpt2:gpt2 (2 layers, int tokens, cross_entropy) with
    gpt2_fsdp(dp=8): units layers.0, layers.1, root (tok/pos embeddings,
    norm, lm_head with the tied weight counted once).

    Forward: root pre-forward 1 AG (root only), layers.0 1 AG, layers.1 1 AG.
    post_forward_order = [layers.0, layers.1, root]; the root is not
    resharded (reshard_after_forward None -> False for the root).
    Backward: the root's pre-backward (on the logits): unshard is a no-op,
    prefetch layers.1: 1 AG charged to the root alone.  layers.1: prefetch
    layers.0 (1 AG); its post_backward after its first child attn_norm's
    backward: 1 RS on attn_norm.  layers.0: no prefetch; 1 RS on attn_norm.
    Root: post_backward in the final callback (tokens need no grad), after
    tok_embeddings' backward started last: 1 RS on tok_embeddings.
    Every other module: nothing.
    """
    got = measure("examples.gpt2:gpt2", "examples.plans:gpt2_fsdp(dp=8)")
    nonempty = {
        "Global": ({AG: 3}, {AG: 2, RS: 3}),
        "FSDPGPT2": ({AG: 3}, {AG: 2, RS: 3}),
        "FSDPGPT2.tok_embeddings": ({}, {RS: 1}),
        "FSDPGPT2.layers.0": ({AG: 1}, {RS: 1}),
        "FSDPGPT2.layers.0.attn_norm": ({}, {RS: 1}),
        "FSDPGPT2.layers.1": ({AG: 1}, {AG: 1, RS: 1}),
        "FSDPGPT2.layers.1.attn_norm": ({}, {RS: 1}),
    }
    assert set(nonempty) <= set(got)
    assert "FSDPGPT2.lm_head" in got and "FSDPGPT2.layers.1.mlp.w2" in got
    for fqn, counts in got.items():
        fw, bw = nonempty.get(fqn, ({}, {}))
        assert counts == {"forward": fw, "backward": bw}, fqn


def _strip_root(counts, root):
    return {(root + k[len("FSDP" + root):] if k.startswith("FSDP" + root) else k): v for k, v in counts.items()}


def _add(a, b):
    out = dict(a)
    for k, n in b.items():
        out[k] = out.get(k, 0) + n
    return out


def test_llama_fsdp_tp_adds_fsdp_and_partial_grad_allreduces():
    """llama_fsdp_tp(dp=2, tp=4) = llama_2d(dp=2, tp=4) (the same TP styles on
    the same mesh) + FSDP units layers.0, layers.1, root on "dp".  Per module,
    the difference is FSDP's own collectives plus one FAR per SequenceParallel
    norm weight: its gradient is Partial on tp (a sum over the Shard(1)
    sequence), which TP alone leaves Partial, but FSDP's post_backward
    redistributes it to the unsharded parameter's Replicate() before the
    reduce-scatter (_fsdp_param.py ``_get_grad_inner_tensor``).

    * forward: 1 AG per group: the root (embeddings, final norm, output) and
      each layer.
    * backward: the root's pre-backward (its output is the logits) prefetches
      layers.1 (1 AG on the root alone; the root is not resharded); layers.1
      prefetches layers.0 (1 AG).  layers.N's post_backward runs after its
      first child attention_norm's backward: 1 RS + 2 FAR (attention_norm,
      ffn_norm weights) there.  The root's post_backward runs in the final
      callback (the tokens need no grad), charged to tok_embeddings, the last
      module whose backward started: 1 RS + 1 FAR (norm.weight).
    """
    tp = _strip_root(measure("examples.llama:llama", "examples.plans:llama_2d(dp=2, tp=4)"), "Transformer")
    got = _strip_root(measure("examples.llama:llama", "examples.plans:llama_fsdp_tp(dp=2, tp=4)"), "Transformer")
    assert list(got) == list(tp)
    diff = {
        "Global": ({AG: 3}, {AG: 2, RS: 3, FAR: 5}),
        "Transformer": ({AG: 3}, {AG: 2, RS: 3, FAR: 5}),
        "Transformer.tok_embeddings": ({}, {RS: 1, FAR: 1}),
        "Transformer.layers.0": ({AG: 1}, {RS: 1, FAR: 2}),
        "Transformer.layers.0.attention_norm": ({}, {RS: 1, FAR: 2}),
        "Transformer.layers.1": ({AG: 1}, {AG: 1, RS: 1, FAR: 2}),
        "Transformer.layers.1.attention_norm": ({}, {RS: 1, FAR: 2}),
    }
    for fqn, counts in tp.items():
        fw, bw = diff.get(fqn, ({}, {}))
        want = {"forward": dict(sorted(_add(counts["forward"], fw).items())),
                "backward": dict(sorted(_add(counts["backward"], bw).items()))}
        assert got[fqn] == want, fqn


def test_placement_on_fsdp_parameter_rejected():
    from torch.distributed.tensor import Replicate

    from examples.plans import stacked_mlp_fsdp

    plan = stacked_mlp_fsdp(dp=8)
    plan.placements = {"layers.0.w1.weight": (Replicate(),)}
    with pytest.raises(PlanError) as info:
        measure("examples.mlp:stacked_mlp", plan)
    assert str(info.value) == ("plan: placements['layers.0.w1.weight']: layers.0.w1.weight is already a "
                               "DTensor (Shard(dim=0),) after fully_shard")


def test_reshard_to_group_with_tp_parameters_rejected():
    # FSDPParam.to_sharded_post_forward refuses DTensor (TP) parameters; an
    # int that fully_shard normalises to True (the shard size, 4 here) is fine.
    spec = "examples.plans:llama_fsdp_tp(dp=4, tp=2, reshard_after_forward=2)"
    with pytest.raises(PlanError) as info:
        measure("examples.llama:llama", spec, phase="forward")
    assert str(info.value) == (
        f"{spec}: fully_shard 'layers.*' on Transformer.layers.0: reshard_after_forward=2 with tensor-parallel "
        "(DTensor) parameters is not supported by torch 2.13 (\"Resharding to smaller mesh is not supported "
        "for DTensor parameters yet\")")
    got = measure("examples.llama:llama", "examples.plans:llama_fsdp_tp(dp=4, tp=2, reshard_after_forward=4)",
                  phase="forward")
    assert got["Global"]["forward"][AG] == 3


def test_fsdp_needs_real_model():
    with pytest.raises(CommlensError) as info:
        measure("examples.mlp:stacked_mlp", "examples.plans:stacked_mlp_fsdp(dp=8)", device="meta")
    assert str(info.value) == ("examples.mlp:stacked_mlp: fully_shard units need a real (non-meta) model: "
                               "FSDP2 refuses meta-device parameters in its first forward")


def test_fsdp_cuda_plan_without_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    spec = "examples.plans:stacked_mlp_fsdp(dp=8, device_type='cuda')"
    with pytest.raises(PlanError) as info:
        measure("examples.mlp:stacked_mlp", spec)
    assert str(info.value) == (f"{spec}: fully_shard units on a 'cuda' mesh need a GPU (FSDP2 moves the "
                               "parameters to the current CUDA device); use device_type 'cpu' here")


def test_fully_shard_pattern_errors_from_measure():
    from examples.plans import stacked_mlp_fsdp

    plan = stacked_mlp_fsdp(dp=8)
    plan.fully_shard = (FullyShard("layers.*", ("dp",)), FullyShard("layers.1", ("dp",)))
    with pytest.raises(PlanError) as info:
        measure("examples.mlp:stacked_mlp", plan)
    assert str(info.value) == ("plan: fully_shard pattern 'layers.1' matches module 'layers.1' already "
                               "sharded by pattern 'layers.*'")


@pytest.mark.gloo
def test_fsdp_gloo_matches_fake():
    """2 real gloo ranks (one spawn): FSDP with and without resharding, bf16."""
    cases = [("examples.mlp:stacked_mlp", "examples.plans:stacked_mlp_fsdp(dp=2)"),
             ("examples.mlp:stacked_mlp",
              "examples.plans:stacked_mlp_fsdp(dp=2, reshard_after_forward=False, mixed_precision='bf16')")]
    gloo = measure_many(cases, backend="gloo")
    assert gloo == measure_many(cases, backend="fake")
    assert gloo == [stacked_mlp_fsdp_counts(), stacked_mlp_fsdp_counts(backward_allgathers=False)]
