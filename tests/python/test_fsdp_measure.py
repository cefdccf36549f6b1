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


# ------------------------------------------ explicit prefetching, requires_all_reduce
#
# Two more rules (_fsdp_state.py, _fsdp_param_group.py):
#
# * set_modules_to_forward_prefetch(targets): in the unit's forward pre-hook
#   (``_pre_forward``), right after its own all-gather, ``_prefetch_unshard``
#   of every target's groups in list order: 1 AG per target that is sharded
#   and has no all-gather pending, charged to the unit whose pre-hook runs.
#   The target's own pre_forward then finds the pending all-gather: 0 AG.
#   A target that already ran (and was resharded) is gathered again.
# * set_modules_to_backward_prefetch(targets): in ``_pre_backward`` a
#   non-empty list turns the default prefetch (post_forward_order[i - 1]) off;
#   after the unit's own unshard (1 AG if resharded and nothing pending),
#   every target is gathered (1 AG each, same conditions), charged to the
#   unit whose pre-backward hook fired.  The hook of unit M fires after M's
#   own full-backward pre-hook (FSDP registers its tensor hook on the output
#   before Module._call_impl wraps it in the BackwardHookFunction), so the
#   root's prefetches are charged to the root alone.
# * set_requires_all_reduce(False): the group's ``all_reduce_grads`` is
#   False; foreach_reduce (_fsdp_collectives.py) keeps the reduce-scatter and,
#   for HSDP, accumulates the output instead of all-reducing it: no AR.  Plain
#   FSDP has no all-reduce group: no change.


def stacked_counts(fw_ag, bw_ag, root_fw=0, root_bw=0, red=({RS: 1},) * 3):
    """examples.mlp:stacked_mlp (3 layers) with the layers sharded one unit
    each and a root unit that holds no parameter: ``fw_ag[i]`` / ``bw_ag[i]``
    all-gathers charged to layers.i in forward / backward, ``root_fw`` /
    ``root_bw`` those charged to the root alone (it includes its
    descendants'); layers.i's post_backward reductions ``red[i]`` go to
    layers.i.w1 (and so to layers.i), as in :func:`stacked_mlp_fsdp_counts`."""
    def ag(n):
        return {AG: n} if n else {}

    total_fw = ag(sum(fw_ag) + root_fw)
    total_bw = ag(sum(bw_ag) + root_bw)
    for r in red:
        total_bw = _add(total_bw, r)
    rows = [("Global", total_fw, total_bw), (ROOT, total_fw, total_bw)]
    for i in range(3):
        rows += [(f"{ROOT}.layers.{i}", ag(fw_ag[i]), {**ag(bw_ag[i]), **red[i]}),
                 (f"{ROOT}.layers.{i}.w1", {}, red[i]),
                 (f"{ROOT}.layers.{i}.w2", {}, {})]
    return expect(rows)


def _stacked_plan(*units, shape=(8,), dims=("dp",)):
    from commlens.plan import Plan

    return Plan(mesh_shape=shape, mesh_dim_names=dims, fully_shard=tuple(units))


D = ("dp",)
NEXT_PREV = (FullyShard("layers.0", D, forward_prefetch=("layers.1",)),
             FullyShard("layers.1", D, forward_prefetch=("layers.2",), backward_prefetch=("layers.0",)),
             FullyShard("layers.2", D, backward_prefetch=("layers.1",)),
             FullyShard("", D))


def test_stacked_mlp_per_block_units_default_prefetch():
    # one unit per block instead of one "layers.*" unit: the same calls
    assert measure("examples.mlp:stacked_mlp", _stacked_plan(
        *(FullyShard(f"layers.{i}", D) for i in range(3)), FullyShard("", D))) == stacked_mlp_fsdp_counts()
    assert stacked_counts((1, 1, 1), (0, 1, 2)) == stacked_mlp_fsdp_counts()


PREFETCH_CASES = {
    # torchtitan: block i prefetches i+1 in forward, i-1 in backward.
    # Forward: layers.0 gathers itself and layers.1 (2); layers.1's own
    # all-gather is pending, it gathers layers.2 (1); layers.2: 0.
    # Backward (order l2, l1, l0): layers.2 gathers itself (resharded after
    # forward) and layers.1 (2); layers.1 is pending, gathers layers.0 (1);
    # layers.0 (no list: default prefetch, index 0: none) is pending (0).
    # The backward singleton list does exactly what the default does.
    "next_prev": (NEXT_PREV, stacked_counts((2, 1, 0), (0, 1, 2))),
    # two ahead: layers.0 gathers itself, layers.1 and layers.2 in forward (3);
    # layers.2 gathers itself, layers.1 and layers.0 in backward (3); layers.1
    # keeps the default prefetch (layers.0), which is pending: 0.
    "two_ahead": ((FullyShard("layers.0", D, forward_prefetch=("layers.1", "layers.2")),
                   FullyShard("layers.1", D),
                   FullyShard("layers.2", D, backward_prefetch=("layers.1", "layers.0")),
                   FullyShard("", D)),
                  stacked_counts((3, 0, 0), (0, 0, 3))),
    # the root (no group of its own) prefetches: its forward pre-hook gathers
    # layers.0 (1, root only; layers.0 then 0), its pre-backward hook on the
    # output gathers layers.2 (1, root only); layers.2 then finds its
    # all-gather pending and default-prefetches layers.1 (1); layers.1
    # default-prefetches layers.0 (1).
    "root": ((FullyShard("layers.*", D), FullyShard("", D, forward_prefetch=("layers.0",),
                                                    backward_prefetch=("layers.2",))),
             stacked_counts((0, 1, 1), (0, 1, 1), root_fw=1, root_bw=1)),
    # a backward list whose target has nothing to gather (the group-less root)
    # still turns the default prefetch off: every layer gathers itself (1 each);
    # the forward list gathers nothing either.
    "empty_target": ((FullyShard("layers.*", D, forward_prefetch=("",), backward_prefetch=("",)),
                      FullyShard("", D)),
                     stacked_counts((1, 1, 1), (1, 1, 1))),
    # forward prefetch of a unit that already ran: layers.1 re-gathers the
    # resharded layers.0 (2 on layers.1); that all-gather stays pending until
    # layers.0's backward, so layers.1's default backward prefetch of layers.0
    # is a no-op: layers.2 2, layers.1 0, layers.0 0.
    "forward_prefetch_backwards": ((FullyShard("layers.0", D),
                                    FullyShard("layers.1", D, forward_prefetch=("layers.0",)),
                                    FullyShard("layers.2", D), FullyShard("", D)),
                                   stacked_counts((1, 2, 1), (0, 0, 2))),
    # backward prefetch of a unit whose backward is over: layers.2 (default
    # prefetch of layers.1) 2, layers.1 (default, layers.0) 1; layers.0's
    # list turns its (empty) default off and re-gathers layers.2, resharded by
    # its post_backward: 1 more all-gather than the default.
    "backward_prefetch_done": ((FullyShard("layers.0", D, backward_prefetch=("layers.2",)),
                                FullyShard("layers.1", D), FullyShard("layers.2", D), FullyShard("", D)),
                               stacked_counts((1, 1, 1), (1, 1, 2))),
    # reshard_after_forward=False: the forward prefetches still gather (every
    # unit starts sharded); in backward everything is unsharded: no AG.
    "next_prev_no_reshard": (tuple(dataclasses.replace(u, reshard_after_forward=False) if u.fqn else u
                                   for u in NEXT_PREV),
                             stacked_counts((2, 1, 0), (0, 0, 0))),
}


@pytest.mark.parametrize("case", sorted(PREFETCH_CASES))
def test_stacked_mlp_explicit_prefetch(case):
    units, want = PREFETCH_CASES[case]
    assert measure("examples.mlp:stacked_mlp", _stacked_plan(*units)) == want


def test_gpt2_fsdp_explicit_prefetch():
    """gpt2_fsdp(dp=8, prefetch="explicit"): units layers.0 (forward
    prefetch layers.1), layers.1 (backward prefetch layers.0), root.

    Forward: root 1 AG (root only); layers.0 gathers itself and layers.1 (2);
    layers.1 finds its all-gather pending (0).  Backward: the root (no list)
    default-prefetches layers.1 (1, root only); layers.1's list gathers
    layers.0 (1); layers.0: pending, no list, index 0 (0).  The reductions
    are those of test_gpt2_fsdp_root_prefetches_last_block.  Against the
    default plan, one forward all-gather moves from layers.1 to layers.0.
    """
    got = measure("examples.gpt2:gpt2", "examples.plans:gpt2_fsdp(dp=8, prefetch='explicit')")
    nonempty = {
        "Global": ({AG: 3}, {AG: 2, RS: 3}),
        "FSDPGPT2": ({AG: 3}, {AG: 2, RS: 3}),
        "FSDPGPT2.tok_embeddings": ({}, {RS: 1}),
        "FSDPGPT2.layers.0": ({AG: 2}, {RS: 1}),
        "FSDPGPT2.layers.0.attn_norm": ({}, {RS: 1}),
        "FSDPGPT2.layers.1": ({}, {AG: 1, RS: 1}),
        "FSDPGPT2.layers.1.attn_norm": ({}, {RS: 1}),
    }
    assert set(nonempty) <= set(got)
    for fqn, counts in got.items():
        fw, bw = nonempty.get(fqn, ({}, {}))
        assert counts == {"forward": fw, "backward": bw}, fqn


def test_gpt2_fsdp_explicit_prefetch_four_layers():
    # 4 blocks: forward layers.0 2 (itself, layers.1), layers.1 and layers.2 1
    # each (their own all-gather pending, prefetch the next), layers.3 0;
    # backward root 1 (default: layers.3), layers.3..1 1 each (the previous
    # block), layers.0 0.
    got = measure("examples.gpt2:gpt2(n_layers=4)",
                  "examples.plans:gpt2_fsdp(dp=8, prefetch='explicit', n_layers=4)")
    assert got["Global"] == {"forward": {AG: 5}, "backward": {AG: 4, RS: 5}}
    for i, (fw, bw) in enumerate([(2, 0), (1, 1), (1, 1), (0, 1)]):
        assert got[f"FSDPGPT2.layers.{i}"] == {"forward": {AG: fw} if fw else {},
                                               "backward": {AG: bw, RS: 1} if bw else {RS: 1}}, i


def test_llama_fsdp_tp_explicit_prefetch_moves_one_forward_allgather():
    # Same TP and reduction collectives as llama_fsdp_tp; the forward prefetch
    # moves layers.1's all-gather to layers.0; the backward lists equal the
    # default (root -> layers.1 by default, layers.1 -> layers.0 by its list).
    default = measure("examples.llama:llama", "examples.plans:llama_fsdp_tp(dp=2, tp=4)")
    got = measure("examples.llama:llama", "examples.plans:llama_fsdp_tp(dp=2, tp=4, prefetch='explicit')")
    assert list(got) == list(default)
    want = {k: {"forward": dict(v["forward"]), "backward": v["backward"]} for k, v in default.items()}
    want["FSDPTransformer.layers.0"]["forward"][AG] = 2
    del want["FSDPTransformer.layers.1"]["forward"][AG]
    assert got == want


HSDP = ("dp_replicate", "dp_shard")


def test_hsdp_requires_all_reduce_false_per_unit():
    # HSDP 2x4, one unit per block, layers.1 without all-reduce: its
    # post_backward reduce-scatters (1 RS) and keeps the result; layers.0 and
    # layers.2 reduce-scatter and all-reduce as usual.  All-gathers unchanged.
    units = (FullyShard("layers.0", HSDP), FullyShard("layers.1", HSDP, requires_all_reduce=False),
             FullyShard("layers.2", HSDP), FullyShard("", HSDP))
    got = measure("examples.mlp:stacked_mlp", _stacked_plan(*units, shape=(2, 4), dims=HSDP))
    assert got == stacked_counts((1, 1, 1), (0, 1, 2), red=({RS: 1, AR: 1}, {RS: 1}, {RS: 1, AR: 1}))


def test_requires_all_reduce_false_everywhere():
    # every layer: HSDP loses all its ARs and counts like plain FSDP; on a
    # 1-D FSDP mesh (no all-reduce group) the setter changes nothing.
    hsdp = _stacked_plan(FullyShard("layers.*", HSDP, requires_all_reduce=False), FullyShard("", HSDP),
                         shape=(2, 4), dims=HSDP)
    fsdp = _stacked_plan(FullyShard("layers.*", D, requires_all_reduce=False), FullyShard("", D))
    got = measure_many([("examples.mlp:stacked_mlp", hsdp), ("examples.mlp:stacked_mlp", fsdp)])
    assert got == [stacked_mlp_fsdp_counts(), stacked_mlp_fsdp_counts()]


def test_prefetch_target_errors_from_measure():
    plan = _stacked_plan(FullyShard("layers.*", D, backward_prefetch=("layers.0.w1",)), FullyShard("", D))
    with pytest.raises(PlanError) as info:
        measure("examples.mlp:stacked_mlp", plan)
    assert str(info.value) == ("plan: fully_shard[0]: backward_prefetch target 'layers.0.w1' is not sharded by "
                               "any fully_shard unit (prefetch targets must be FSDP modules)")


@pytest.mark.gloo
def test_explicit_prefetch_and_requires_all_reduce_gloo_matches_fake():
    """4 real gloo ranks (one spawn): torchtitan-style explicit prefetching on
    FSDP dp=4, and HSDP 2x2 with layers.1 not all-reducing."""
    fsdp = _stacked_plan(*NEXT_PREV, shape=(4,))
    hsdp = _stacked_plan(FullyShard("layers.0", HSDP), FullyShard("layers.1", HSDP, requires_all_reduce=False),
                         FullyShard("layers.2", HSDP), FullyShard("", HSDP), shape=(2, 2), dims=HSDP)
    cases = [("examples.mlp:stacked_mlp", fsdp), ("examples.mlp:stacked_mlp", hsdp)]
    gloo = measure_many(cases, backend="gloo")
    assert gloo == measure_many(cases, backend="fake")
    assert gloo == [stacked_counts((2, 1, 0), (0, 1, 2)),
                    stacked_counts((1, 1, 1), (0, 1, 2), red=({RS: 1, AR: 1}, {RS: 1}, {RS: 1, AR: 1}))]
