"""Per-module counts of the example transformer plans (fake backend, tp=4),
derived by hand.  Notation and shared rules: see test_measure.py.

Extra rules used here:
* Rowwise nn.Embedding: weight S(0), ids R -> MaskPartial output; the output
  hook's redistribute MaskPartial -> R is an AR, -> S(1) an RS.  Its backward
  (source Partial normalised to R) is nothing for R and an AG for S(1).  ids
  need no grad, so there is no from_local backward.
* A Colwise Linear whose input is a plain tensor runs its own from_local(R):
  its input grad is P (mm contracting over the sharded dim) -> 1 AR in its
  backward.  If the input is already a DTensor R (made once by a parent's
  PrepareModuleInput), the q/k/v (or w1/w3) input grads are first summed as
  DTensors (P + P -> P, no comm) and the parent's single Redistribute
  backward reduces once: P -> R (AR) for an R -> R PrepareModuleInput
  (from_local backward), P -> S(1) (RS) for S(1) -> R.  That collective runs
  after the *first* Colwise module's backward (the last one to get its
  backward pre-hook), so CommDebugMode attributes it to wq / w1.
* SequenceParallel norms: input S(1) (from_local of the local shard) -> output
  S(1) DTensor; norm weight grads are Partial and stay Partial: no comm.
* Colwise output_layouts=R: S(-1) -> R is an AG in forward; its backward
  (R -> S(-1)) is a local chunk.
* cross_entropy on the plain (local, replicated) logits: no comm.  Inside
  loss_parallel() on S(-1) logits: 3 AR in forward (outside any module, so
  only "Global"), 0 in backward.
"""

import pytest

from commlens.measure import measure

AR = "c10d_functional.all_reduce"
AG = "c10d_functional.all_gather_into_tensor"
RS = "c10d_functional.reduce_scatter_tensor"


def add(*ds):
    out = {}
    for d in ds:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return {k: v for k, v in out.items() if v}


def tree(root, rows):
    """rows: [(path, own_fw, own_bw)] in forward order -> inclusive counts per
    module (as CommDebugMode aggregates: each module plus all its ancestors),
    with "Global" and the root first; extra (fw, bw) for Global only can be
    given as a row with path None."""
    paths = [p for p, _, _ in rows if p is not None]
    result = {"Global": {"forward": {}, "backward": {}}, root: {"forward": {}, "backward": {}}}
    for p in paths:
        result[f"{root}.{p}"] = {"forward": {}, "backward": {}}
    for p, fw, bw in rows:
        if p is None:
            targets = ["Global"]
        else:
            parts = p.split(".")
            targets = ["Global", root] + [f"{root}." + ".".join(parts[:i]) for i in range(1, len(parts) + 1)]
            targets = [t for t in targets if t in result]  # e.g. "layers" (ModuleList) never runs
        for t in targets:
            result[t]["forward"] = add(result[t]["forward"], fw)
            result[t]["backward"] = add(result[t]["backward"], bw)
    return result


def llama_rows(n_layers, sp, loss_parallel=False):
    rows = [("tok_embeddings", {RS: 1} if sp else {AR: 1}, {AG: 1} if sp else {})]
    for i in range(n_layers):
        L = f"layers.{i}"
        rows += [
            (L, {}, {}),
            (f"{L}.attention_norm", {}, {}),
            # PrepareModuleInput: S(1) -> R is an AG (sp); R -> R is nothing
            (f"{L}.attention", {AG: 1} if sp else {}, {}),
            # summed q/k/v input grad reduced once, attributed to wq
            (f"{L}.attention.wq", {}, {RS: 1} if sp else {AR: 1}),
            (f"{L}.attention.wk", {}, {}),
            (f"{L}.attention.wv", {}, {}),
            # Rowwise: P -> S(1) RS (sp; backward AG) or P -> R AR (no backward comm)
            (f"{L}.attention.wo", {RS: 1} if sp else {AR: 1}, {AG: 1} if sp else {}),
            (f"{L}.ffn_norm", {}, {}),
            (f"{L}.feed_forward", {AG: 1} if sp else {}, {}),
            # forward order w1, w3, w2; the summed w1/w3 input grad goes to w1
            (f"{L}.feed_forward.w1", {}, {RS: 1} if sp else {AR: 1}),
            (f"{L}.feed_forward.w3", {}, {}),
            (f"{L}.feed_forward.w2", {RS: 1} if sp else {AR: 1}, {AG: 1} if sp else {}),
        ]
    rows.append(("norm", {}, {}))
    # output Colwise: input S(1) -> R is an AG (sp; backward P -> S(1) RS) or
    # from_local R (no sp; backward P -> R AR); output S(-1) -> R is an AG
    # unless loss_parallel keeps S(-1).
    out_fw = add({AG: 1} if sp else {}, {} if loss_parallel else {AG: 1})
    rows.append(("output", out_fw, {RS: 1} if sp else {AR: 1}))
    if loss_parallel:
        rows.append((None, {AR: 3}, {}))
    return rows


def gpt2_rows(n_layers, sp):
    rows = [("tok_embeddings", {RS: 1} if sp else {AR: 1}, {AG: 1} if sp else {}),
            # position embedding: untouched (no sp) or Rowwise -> S(0) (sp)
            ("pos_embeddings", {RS: 1} if sp else {}, {AG: 1} if sp else {}),
            ("dropout", {}, {})]
    for i in range(n_layers):
        L = f"layers.{i}"
        qkv_bw = {AR: 1}  # no sp: each Colwise runs its own from_local(R)
        rows += [
            (L, {}, {}),
            (f"{L}.attn_norm", {}, {}),
            (f"{L}.attn", {AG: 1} if sp else {}, {}),
            (f"{L}.attn.wq", {}, {RS: 1} if sp else qkv_bw),
            (f"{L}.attn.wk", {}, {} if sp else qkv_bw),
            (f"{L}.attn.wv", {}, {} if sp else qkv_bw),
            (f"{L}.attn.attn_dropout", {}, {}),
            (f"{L}.attn.wo", {RS: 1} if sp else {AR: 1}, {AG: 1} if sp else {}),
            (f"{L}.attn.resid_dropout", {}, {}),
            (f"{L}.mlp_norm", {}, {}),
            (f"{L}.mlp", {AG: 1} if sp else {}, {}),
            (f"{L}.mlp.w1", {}, {RS: 1} if sp else {AR: 1}),
            (f"{L}.mlp.w2", {RS: 1} if sp else {AR: 1}, {AG: 1} if sp else {}),
            (f"{L}.mlp.dropout", {}, {}),
        ]
    rows.append(("norm", {}, {}))
    rows.append(("lm_head", {AG: 2} if sp else {AG: 1}, {RS: 1} if sp else {AR: 1}))
    return rows


@pytest.mark.parametrize("sp", [True, False], ids=["sp", "no_sp"])
def test_llama_tp(sp):
    got = measure("examples.llama:llama(n_layers=2)", f"examples.plans:llama_tp(tp=4, sp={sp})")
    assert got == tree("Transformer", llama_rows(2, sp))


def test_llama_tp_loss_parallel():
    got = measure("examples.llama:llama(n_layers=2)", "examples.plans:llama_tp(tp=4, loss_parallel=True)")
    assert got == tree("Transformer", llama_rows(2, True, loss_parallel=True))


def test_llama_tp_cuda_mesh_on_meta():
    # device_type="cuda" without a GPU: measured on meta tensors over a CUDA
    # mesh; no Shard->Shard transition here, so the same counts.
    got = measure("examples.llama:llama(n_layers=2)", "examples.plans:llama_tp(tp=4, device_type='cuda')")
    assert got == tree("Transformer", llama_rows(2, True))


@pytest.mark.parametrize("sp", [True, False], ids=["sp", "no_sp"])
def test_gpt2_tp(sp):
    plan = "examples.plans:gpt2_tp_sp(tp=4)" if sp else "examples.plans:gpt2_tp(tp=4)"
    got = measure("examples.gpt2:gpt2(n_layers=2)", plan)
    assert got == tree("GPT2", gpt2_rows(2, sp))


def test_gpt2_sdpa_same_as_matmul_except_module_list():
    # sdpa never calls attn_dropout; attention itself is local (heads sharded)
    got = measure("examples.gpt2:gpt2(n_layers=2, attn='sdpa')", "examples.plans:gpt2_tp(tp=4)")
    rows = [r for r in gpt2_rows(2, False) if not (r[0] or "").endswith("attn_dropout")]
    assert got == tree("GPT2", rows)
