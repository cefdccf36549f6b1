"""OpInfo differential test: every entry of torch's `op_db` (the OpInfo database PyTorch's own
test_dtensor_ops.py runs through DTensor), predicted by commlens and measured with CommDebugMode
on the same DTensor inputs.

For each OpInfo (variants included) and each of its first CPU float32 sample inputs, a one-op
module takes the sample's tensors as its inputs; `commlens.export` exports it (training IR). Each
input gets a DTensor placement on a mesh of `--world` ranks (Replicate, or Shard of a dim the mesh
divides: every input Replicate first, then each input sharded alone on each dim, up to
`--placements` combinations). The plan also asks for gradients of the floating inputs when the
OpInfo supports autograd, with a sum loss: forward and backward are predicted
(`commlens.predict`, in memory) and measured (`commlens.measure`, CommDebugMode on the fake
process group), and compared: the collectives and bytes per rank of each phase.

Each case is one of
  exact     the same collectives and bytes in both phases;
  refused   commlens refuses it by name (an op or argument form it does not model);
  dtensor   DTensor itself raises: the run has no count (the summary says of how many commlens
            refuses too; a prediction for a run that raises is a defect this sweep lists);
  data      a linear-algebra kernel rejects the run's values (a singular matrix: the fake process
            group's all-gather leaves the other rank's rows zero): no count, and nothing about DTensor;
  wrong     commlens predicts other collectives or bytes than CommDebugMode counts: a bug;
and cases export rejects, or whose sample the one-op module cannot pass (tensor lists), are
skipped and counted apart. Prints one line per non-exact case and
`opinfo: exact X/N, refused R, dtensor D (commlens refused E of them), data A, wrong W (skipped S);
exact on P% of the M cases CommDebugMode runs` (M = X + R + W);
exit 1 when W > 0.

    .venv/bin/python tests/rules/opinfo_sweep.py [--ops REGEX] [--samples 1] [--placements 3]
        [--world 2] [--json out.json] [--doc]

The defaults are the sweep CI runs (tests/rules/test_opinfo_sweep.py, about a minute and a half)
and docs/opinfo-coverage.md records (--doc); more samples and placements make the longer sweep
(`--samples 3 --placements 8 --world 4`).
"""

import argparse
import itertools
import json
import pathlib
import re
import sys
import warnings

# What a case can end as (the module docstring says what each means).
RESULTS = ("exact", "refused", "dtensor", "data", "wrong")
# The sweep docs/opinfo-coverage.md records, and the one the CI test runs.
DOC_SWEEP = {"samples": 1, "placements": 3, "world": 2}
DOC_COMMAND = ".venv/bin/python tests/rules/opinfo_sweep.py --doc"


def _tensor_slots(sample):
    """The sample's top-level tensors as (where, index/key) slots, or None when it passes tensors
    inside lists (which the one-op module does not unpack)."""
    import torch

    slots = [("input", None)] if isinstance(sample.input, torch.Tensor) else None
    if slots is None:
        return None
    for i, a in enumerate(sample.args):
        if isinstance(a, torch.Tensor):
            slots.append(("args", i))
        elif isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a):
            return None
    for k, v in sample.kwargs.items():
        if isinstance(v, torch.Tensor):
            slots.append(("kwargs", k))
        elif isinstance(v, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in v):
            return None
    return slots


class OneOp:
    """A module calling `op` on the sample with its tensors replaced by the module's inputs."""

    def __new__(cls, op, sample, slots):
        import torch

        class Module(torch.nn.Module):
            def forward(self, *tensors):
                args, kwargs = list(sample.args), dict(sample.kwargs)
                first = sample.input
                for (where, key), t in zip(slots, tensors):
                    if where == "input":
                        first = t
                    elif where == "args":
                        args[key] = t
                    else:
                        kwargs[key] = t
                out = op(first, *args, **kwargs)
                # torch.return_types (topk, sort, ...) as a plain tuple: export and the loss take it
                return tuple(out) if isinstance(out, tuple) else out

        return Module()


def _sample_tensors(sample, slots):
    out = []
    for where, key in slots:
        t = sample.input if where == "input" else (sample.args[key] if where == "args" else sample.kwargs[key])
        out.append(t.detach().clone())
    return out


def placement_combinations(tensors, world, limit):
    """Every input Replicate, then each input alone Shard(d) for each dim d the mesh divides, in
    order, up to `limit` combinations."""
    from torch.distributed.tensor import Replicate, Shard

    combos = [tuple(Replicate() for _ in tensors)]
    for i, t in enumerate(tensors):
        for d in range(t.dim()):
            if t.shape[d] % world == 0 and t.shape[d] >= world:
                combos.append(tuple(Shard(d) if j == i else Replicate() for j in range(len(tensors))))
    return combos[:limit]


def _global_totals(counts_doc):
    glob = next(m for m in counts_doc["modules"] if m["fqn"] == "Global")
    return {p: (glob[p], glob[p + "_bytes"]) for p in ("forward", "backward")}


def _predicted_totals(prediction):
    """The prediction's Global counts and bytes per phase (its JSON tree's root, as
    `predict --format json` writes it: the loss's collectives are charged to Global alone)."""
    root = json.loads(prediction.to_json())
    return {p: (dict(root[f"collectives_{p}"]), dict(root[f"collective_bytes_{p}"])) for p in ("forward", "backward")}


def _differentiable(op_info, model, tensors):
    """Whether the sum loss can run backward: the OpInfo supports autograd and, run eagerly on the
    sample with its floating inputs requiring grad, the op's outputs include a real floating
    tensor, no complex one, and their sum's backward runs (some inputs, such as batch norm's
    running statistics, may not require grad)."""
    import torch
    from torch.utils._pytree import tree_leaves

    if not op_info.supports_autograd:
        return False
    inputs = [t.clone().requires_grad_(t.is_floating_point()) for t in tensors]
    try:
        leaves = [t for t in tree_leaves(model(*inputs)) if isinstance(t, torch.Tensor)]
        if not any(t.is_floating_point() for t in leaves) or any(t.is_complex() for t in leaves):
            return False
        sum(t.sum() for t in leaves if t.is_floating_point()).backward()
    except Exception:
        return False
    return True


def run_case(op_info, sample, slots, placements, world, ep):
    """('exact' | 'refused' | 'dtensor' | 'wrong', detail, commlens' refusal or None) for one
    placement combination."""
    import commlens
    from commlens import CommlensError
    from commlens.measure import measure
    from commlens.plan import Loss, Plan

    tensors = _sample_tensors(sample, slots)
    model = OneOp(op_info.op, sample, slots)
    differentiable = _differentiable(op_info, model, tensors)
    grads = tuple(i for i, t in enumerate(tensors) if differentiable and t.is_floating_point())
    phase = "both" if grads else "forward"
    plan = Plan(mesh_shape=(world,), mesh_dim_names=("tp",), loss=Loss.sum(), inputs_requires_grad=grads,
                input_placements={i: (p,) for i, p in enumerate(placements)})
    try:
        predicted, refusal = _predicted_totals(commlens.predict(ep, plan, phase=phase)), None
    except CommlensError as err:
        predicted, refusal = None, str(err)[:300]
    try:
        measured = _global_totals(measure(lambda: (model, tuple(t.clone() for t in tensors)), plan, phase=phase,
                                          return_document=True))
    except Exception as err:  # DTensor (or autograd under it) raises: no count to compare
        # A linear-algebra kernel's check of its values (a singular matrix) says nothing of DTensor:
        # the fake process group's all-gather leaves the other rank's rows zero.
        import torch

        singular = isinstance(err, torch.linalg.LinAlgError) or "is zero and using it on lu_solve" in str(err)
        kind = "data" if singular else "dtensor"
        return kind, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200], refusal
    if refusal:
        return "refused", refusal, refusal
    if predicted != measured:
        return "wrong", f"predicted {predicted}, measured {measured}", None
    return "exact", "", None


def sweep(ops_regex=None, samples=1, placements=3, world=2, out=print):
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    from commlens.export import export_model

    warnings.filterwarnings("ignore")
    pattern = re.compile(ops_regex) if ops_regex else None
    results, skipped = [], 0
    for op_info in op_db:
        name = op_info.name + (f".{op_info.variant_test_name}" if op_info.variant_test_name else "")
        if pattern and not pattern.search(name):
            continue
        if torch.float32 not in op_info.supported_dtypes("cpu"):
            skipped += 1
            continue
        torch.manual_seed(0)  # the same sample values every run: some DTensor failures depend on them
        try:
            inputs = list(itertools.islice(op_info.sample_inputs("cpu", torch.float32, requires_grad=False), samples))
        except Exception:
            skipped += 1
            continue
        for k, sample in enumerate(inputs):
            slots = _tensor_slots(sample)
            if not slots:
                skipped += 1
                continue
            tensors = _sample_tensors(sample, slots)
            try:
                ep = export_model(OneOp(op_info.op, sample, slots), tuple(tensors), {})
            except Exception:
                skipped += 1
                continue
            for combo in placement_combinations(tensors, world, placements):
                kind, detail, refusal = run_case(op_info, sample, slots, combo, world, ep)
                case = {"op": name, "sample": k, "placements": [str(p) for p in combo], "result": kind,
                        "detail": detail, "commlens_refused": refusal is not None}
                results.append(case)
                if kind != "exact":
                    out(f"{name} sample {k} {case['placements']}: {kind}: {detail}")
    return results, skipped


def summary(results, skipped):
    n = {k: sum(r["result"] == k for r in results) for k in RESULTS}
    dtensor_refused = sum(r["result"] == "dtensor" and r["commlens_refused"] for r in results)
    runs = n["exact"] + n["refused"] + n["wrong"]  # the cases CommDebugMode counts
    share = f"{100.0 * n['exact'] / runs:.1f}%" if runs else "-"
    return (f"opinfo: exact {n['exact']}/{len(results)}, refused {n['refused']}, dtensor {n['dtensor']} "
            f"(commlens refused {dtensor_refused} of them), data {n['data']}, wrong {n['wrong']} (skipped {skipped}); "
            f"exact on {share} of the {runs} cases CommDebugMode runs")


DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "opinfo-coverage.md"


def render_doc(results, skipped, command):
    """docs/opinfo-coverage.md: the summary and, per OpInfo, its cases by result and the first
    reason commlens gave for a refusal."""
    by_op = {}
    for r in results:
        by_op.setdefault(r["op"], []).append(r)
    lines = [
        "# OpInfo coverage: commlens against CommDebugMode, per op",
        "",
        f"Generated by `{command}` (tests/rules/opinfo_sweep.py; `tests/rules/test_opinfo_sweep.py` checks it",
        "is current). Each OpInfo of torch's `op_db` with a CPU float32 sample: a one-op module on",
        "its first sample, its inputs placed on a 2-rank mesh (all Replicate, then each input sharded",
        "alone on each dim the mesh divides; 3 combinations at most), predicted and measured forward",
        "and backward. `dtensor`: DTensor itself raises (commlens refuses each of these too); `data`: a",
        "linear-algebra kernel rejects the values of the run (a singular matrix: the fake process group's",
        "all-gather leaves the other rank's rows zero), so there is no count to compare.",
        "",
        summary(results, skipped),
        "",
        "| op | cases | exact | refused | dtensor | data | wrong | first refusal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for op in sorted(by_op):
        rs = by_op[op]
        n = {k: sum(r["result"] == k for r in rs) for k in RESULTS}
        why = next((r["detail"] for r in rs if r["result"] == "refused"), "")
        why = why.replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| `{op}` | {len(rs)} | {n['exact']} | {n['refused']} | {n['dtensor']} | {n['data']} | {n['wrong']} "
                     f"| {why} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", help="regex on OpInfo names (name.variant)")
    ap.add_argument("--samples", type=int, default=DOC_SWEEP["samples"], help="sample inputs per OpInfo (default 1)")
    ap.add_argument("--placements", type=int, default=DOC_SWEEP["placements"],
                    help="placement combinations per sample (default 3)")
    ap.add_argument("--world", type=int, default=DOC_SWEEP["world"], help="mesh size (default 2)")
    ap.add_argument("--json", help="write every case here")
    ap.add_argument("--doc", action="store_true", help=f"rewrite {DOC.relative_to(DOC.parents[1])} (default sweep only)")
    args = ap.parse_args(argv)
    if args.doc and (args.ops or {"samples": args.samples, "placements": args.placements, "world": args.world}
                     != DOC_SWEEP):
        ap.error("--doc records the default sweep: no --ops, --samples, --placements or --world")
    results, skipped = sweep(args.ops, args.samples, args.placements, args.world)
    line = summary(results, skipped)
    print(line)
    if args.doc:
        DOC.write_text(render_doc(results, skipped, DOC_COMMAND))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": line, "cases": results}, f, indent=1)
    return 1 if any(r["result"] == "wrong" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
