"""OpInfo differential test: every entry of torch's `op_db` (the OpInfo database PyTorch's own
test_dtensor_ops.py runs through DTensor), predicted by commlens and measured with CommDebugMode
on the same DTensor inputs.

For each OpInfo (variants included) and each of its first CPU sample inputs, a one-op module
takes the sample's tensors as its inputs, each tensor of a list or tuple argument (`cat`'s, `stack`'s,
`index_put`'s indices) as an input of its own, the list rebuilt inside `forward`; `commlens.export`
exports it (training IR). The samples are float32 where the OpInfo supports it on CPU, else of the
first CPU dtype of int64, bool, then the others in `DTYPE_PREFERENCE`'s order (bitwise ops,
`view_as_real`, `one_hot`, ...). Each input gets DTensor placements, one per mesh dim, on a 1-D
mesh of `--world` ranks or the mesh `--mesh` names (`--mesh 2x2`: a 2-D mesh, dims dp and tp):
every input Replicate first, then each input sharded alone on each (mesh dim, tensor dim) pair
the mesh dim divides, on a 2-D mesh then each input sharded alone on both mesh dims, and with
`--partial` each floating input alone Partial("sum") on each mesh dim in turn, up to
`--placements` combinations (`placement_combinations`). The plan also asks for gradients of the
floating inputs when the OpInfo supports autograd, with a sum loss: forward and backward are
predicted (`commlens.predict`, in memory) and measured (`commlens.measure`, CommDebugMode on the
fake process group), and compared: the collectives and bytes per rank of each phase, and the
placements of the forward's outputs (predict's `commlens.outputs` against the DTensors measure's
own forward returns).

Each case is one of
  exact     the same collectives and bytes in both phases, and the same output placements;
  refused   commlens refuses it by name (an op or argument form it does not model);
  dtensor   DTensor itself raises: the run has no count (the summary says of how many commlens
            refuses too; a prediction for a run that raises is a defect this sweep lists);
  data      a linear-algebra kernel rejects the run's values (a singular matrix: the fake process
            group's all-gather leaves the other rank's rows zero): no count, and nothing about DTensor;
  wrong     commlens predicts other collectives or bytes than CommDebugMode counts, or (with the
            same counts) other output placements than DTensor's: a bug;
and samples the one-op module cannot run are skipped and counted apart, each with its reason
(`SKIP_REASONS`: a factory with no tensor input has nothing to place; export rejects the op; the op
raises on CPU itself; ...). Prints one line per non-exact case and
`opinfo: exact X/N, refused R, dtensor D (commlens refused E of them), data A, wrong W (skipped S);
exact on P% of the M cases CommDebugMode runs` (M = X + R + W);
exit 1 when W > 0.

    .venv/bin/python tests/rules/opinfo_sweep.py [--ops REGEX] [--samples 1] [--placements 3]
        [--world 2 | --mesh 2x2] [--partial] [--json out.json] [--doc]

The defaults are the sweep CI runs (tests/rules/test_opinfo_sweep.py, under a minute) and
docs/opinfo-coverage.md records (--doc); more samples and placements, Partial inputs and the
2-D mesh make the longer sweeps of bench/opinfo_full.py (`--samples 3 --placements 8 --partial`
with `--world 4`, then with `--mesh 2x2`).
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
# The plan's mesh dim names, by the mesh's number of dims.
MESH_DIM_NAMES = {1: ("tp",), 2: ("dp", "tp")}
DOC_COMMAND = ".venv/bin/python tests/rules/opinfo_sweep.py --doc"
# The samples' dtype: float32 where the OpInfo supports it on CPU, else the first of these it does,
# else the first other CPU dtype it lists (by name).
DTYPE_PREFERENCE = ("float32", "int64", "bool", "float64", "int32", "int16", "int8", "uint8", "complex64",
                    "complex128", "float16", "bfloat16")
# Why a sample is skipped (the first words of each skip's reason; docs/opinfo-coverage.md lists them).
SKIP_REASONS = ("no CPU dtype", "sample_inputs raises", "no tensor input", "tensors nested in lists",
                "the op raises on CPU", "export rejects")


def sample_dtype(op_info):
    """The dtype the sweep runs `op_info`'s samples in (DTYPE_PREFERENCE), or None when the OpInfo
    lists no CPU dtype."""
    supported = op_info.supported_dtypes("cpu")
    by_name = {str(d).removeprefix("torch."): d for d in supported}
    for name in DTYPE_PREFERENCE + tuple(sorted(by_name)):
        if name in by_name:
            return by_name[name]
    return None


def _tensor_slots(sample):
    """The sample's tensors as (where, index/key, element) slots, in order: the input, the
    positional arguments, the keyword arguments; a tensor of a list or tuple is one slot per
    element (element: its index in the list, None for a tensor passed alone). (slots, None), or
    (None, reason) when the sample has no tensor or nests them deeper than one list."""
    import torch

    def nested(x):
        return isinstance(x, (list, tuple)) and any(isinstance(y, torch.Tensor) or nested(y) for y in x)

    slots = []
    values = [("input", None, sample.input)] + [("args", i, a) for i, a in enumerate(sample.args)] + \
        [("kwargs", k, v) for k, v in sample.kwargs.items()]
    for where, key, value in values:
        if isinstance(value, torch.Tensor):
            slots.append((where, key, None))
        elif isinstance(value, (list, tuple)):
            for j, x in enumerate(value):
                if isinstance(x, torch.Tensor):
                    slots.append((where, key, j))
                elif nested(x):
                    return None, "tensors nested in lists"
    return (slots, None) if slots else (None, "no tensor input")


def _sample_value(sample, where, key):
    return sample.input if where == "input" else (sample.args[key] if where == "args" else sample.kwargs[key])


def _call_arguments(sample, slots, tensors):
    """The sample's (input, args, kwargs) with the tensor of each slot replaced by `tensors`' one, the
    lists holding them rebuilt (a tuple stays a tuple)."""
    values = {("input", None): sample.input}
    values.update((("args", i), a) for i, a in enumerate(sample.args))
    values.update((("kwargs", k), v) for k, v in sample.kwargs.items())
    seqs = {}
    for (where, key, elem), t in zip(slots, tensors):
        if elem is None:
            values[(where, key)] = t
        else:
            seqs.setdefault((where, key), list(values[(where, key)]))[elem] = t
    for place, seq in seqs.items():
        values[place] = tuple(seq) if isinstance(values[place], tuple) else seq
    return (values[("input", None)], [values[("args", i)] for i in range(len(sample.args))],
            {k: values[("kwargs", k)] for k in sample.kwargs})


class OneOp:
    """A module calling `op` on the sample with its tensors replaced by the module's inputs (one
    input per tensor, those of a list argument included)."""

    def __new__(cls, op, sample, slots):
        import torch

        class Module(torch.nn.Module):
            def forward(self, *tensors):
                first, args, kwargs = _call_arguments(sample, slots, tensors)
                out = op(first, *args, **kwargs)
                # torch.return_types (topk, sort, ...) as a plain tuple: export and the loss take it
                return tuple(out) if isinstance(out, tuple) else out

        return Module()


def _sample_tensors(sample, slots):
    out = []
    for where, key, elem in slots:
        t = _sample_value(sample, where, key)
        out.append((t if elem is None else t[elem]).detach().clone())
    return out


def _first_line(err, limit=100):
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}"[:limit]


def placement_combinations(tensors, mesh_shape, limit, partial=False):
    """The inputs' placement combinations on a mesh of `mesh_shape` (an int: a 1-D mesh of that many
    ranks), one placement per mesh dim for each input, in order, up to `limit` of them: every input
    Replicate; then each input alone sharded on one mesh dim, Shard(d) for each tensor dim d that
    mesh dim divides (mesh dims, then tensor dims, in order); on a 2-D mesh then each input alone
    sharded on both mesh dims, (Shard(d), Shard(d)) where the whole mesh divides d and (Shard(d1),
    Shard(d2)) for two dims each divides; then, with `partial`, each floating input alone
    Partial("sum") on each mesh dim in turn (measure's distribute_tensor places a Partial input)."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    shape = (mesh_shape,) if isinstance(mesh_shape, int) else tuple(mesh_shape)
    replicate = tuple(Replicate() for _ in shape)

    def divides(t, d, n):
        return t.shape[d] >= n and t.shape[d] % n == 0

    def alone(i, placement):  # input i placed so, every other input Replicate
        return tuple(placement if j == i else replicate for j in range(len(tensors)))

    def on(m, p):  # p on mesh dim m, Replicate on the others
        return tuple(p if k == m else Replicate() for k in range(len(shape)))

    combos = [tuple(replicate for _ in tensors)]
    for i, t in enumerate(tensors):
        for m, n in enumerate(shape):
            combos += [alone(i, on(m, Shard(d))) for d in range(t.dim()) if divides(t, d, n)]
    if len(shape) == 2:
        for i, t in enumerate(tensors):
            for d1 in range(t.dim()):
                for d2 in range(t.dim()):
                    if (divides(t, d1, shape[0] * shape[1]) if d1 == d2
                            else divides(t, d1, shape[0]) and divides(t, d2, shape[1])):
                        combos.append(alone(i, (Shard(d1), Shard(d2))))
    for i, t in enumerate(tensors if partial else ()):
        if t.is_floating_point():
            combos += [alone(i, on(m, Partial("sum"))) for m in range(len(shape))]
    return combos[:limit]


def _global_totals(counts_doc):
    glob = next(m for m in counts_doc["modules"] if m["fqn"] == "Global")
    return {p: (glob[p], glob[p + "_bytes"]) for p in ("forward", "backward")}


def _predicted_totals(prediction):
    """The prediction's Global counts and bytes per phase (its JSON tree's root, as
    `predict --format json` writes it: the loss's collectives are charged to Global alone), and its
    user outputs' placements (`commlens.outputs`: torch's repr strings, None for a plain tensor)."""
    root = json.loads(prediction.to_json())
    totals = {p: (dict(root[f"collectives_{p}"]), dict(root[f"collective_bytes_{p}"])) for p in ("forward", "backward")}
    return totals, root["commlens"]["outputs"]


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


def _output_placements(out):
    """Each pytree leaf of a forward's output: its DTensor placements as torch's repr strings, None
    for a plain tensor or a non-tensor (predict's `commlens.outputs`). An embedding's
    `_MaskPartial` is named by its reduce op alone: its repr also holds the offset shape of the mask
    it keeps, which no placement commlens predicts carries."""
    from torch.distributed.tensor import DTensor
    from torch.utils._pytree import tree_leaves

    def name(p):
        return f"MaskPartial({p.reduce_op})" if type(p).__name__ == "_MaskPartial" else repr(p)

    return [[name(p) for p in t.placements] if isinstance(t, DTensor) else None for t in tree_leaves(out)]


def run_case(op_info, sample, slots, placements, mesh_shape, ep):
    """('exact' | 'refused' | 'dtensor' | 'data' | 'wrong', detail, commlens' refusal or None) for one
    placement combination (one tuple of placements, one per mesh dim, per input). The forward's
    output placements are those of the outputs of measure's own forward (a forward hook reads them)."""
    import commlens
    from commlens import CommlensError
    from commlens.measure import measure
    from commlens.plan import Loss, Plan

    tensors = _sample_tensors(sample, slots)
    model = OneOp(op_info.op, sample, slots)
    differentiable = _differentiable(op_info, model, tensors)
    grads = tuple(i for i, t in enumerate(tensors) if differentiable and t.is_floating_point())
    phase = "both" if grads else "forward"
    plan = Plan(mesh_shape=tuple(mesh_shape), mesh_dim_names=MESH_DIM_NAMES[len(mesh_shape)], loss=Loss.sum(),
                inputs_requires_grad=grads, input_placements=dict(enumerate(placements)))
    try:
        predicted, predicted_outputs = _predicted_totals(commlens.predict(ep, plan, phase=phase))
        refusal = None
    except CommlensError as err:
        predicted, predicted_outputs, refusal = None, None, str(err)[:300]
    outputs = []
    model.register_forward_hook(lambda _module, _args, out: outputs.append(_output_placements(out)))
    try:
        measured = _global_totals(measure(lambda: (model, tuple(t.clone() for t in tensors)), plan, phase=phase,
                                          return_document=True))
    except Exception as err:  # DTensor (or autograd under it) raises: no count to compare
        # A linear-algebra kernel's check of its values (a singular matrix) says nothing of DTensor:
        # the fake process group's all-gather leaves the other rank's rows zero.
        import torch

        singular = isinstance(err, torch.linalg.LinAlgError) or "is zero and using it on lu_solve" in str(err)
        kind = "data" if singular else "dtensor"
        return kind, _first_line(err, 200), refusal
    if refusal:
        return "refused", refusal, refusal
    if predicted != measured:
        return "wrong", f"predicted {predicted}, measured {measured}", None
    if predicted_outputs != outputs[-1]:
        return "wrong", f"output placements: predicted {predicted_outputs}, DTensor {outputs[-1]}", None
    return "exact", "", None


def _placement_text(placements):
    """One input's placements as the cases list them: `S(0)` on a 1-D mesh, a tuple of one per
    mesh dim on a 2-D mesh."""
    return str(placements[0]) if len(placements) == 1 else f"({', '.join(map(str, placements))})"


def sweep(ops_regex=None, samples=1, placements=3, world=2, mesh=None, partial=False, out=print):
    """Every case of the sweep: `results` (one dict per case) and `skipped`. `mesh`: the mesh shape
    (a tuple of 1 or 2 ints; default (world,)); `partial`: add Partial("sum") inputs."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    from commlens.export import export_model

    warnings.filterwarnings("ignore")
    mesh = (world,) if mesh is None else tuple(mesh)
    pattern = re.compile(ops_regex) if ops_regex else None
    results, skipped = [], []  # skipped: {"op", "sample" (None: the whole OpInfo), "reason"}
    for op_info in op_db:
        name = op_info.name + (f".{op_info.variant_test_name}" if op_info.variant_test_name else "")
        if pattern and not pattern.search(name):
            continue
        dtype = sample_dtype(op_info)
        if dtype is None:
            skipped.append({"op": name, "sample": None, "reason": "no CPU dtype"})
            continue
        dtype_name = str(dtype).removeprefix("torch.")
        torch.manual_seed(0)  # the same sample values every run: some DTensor failures depend on them
        try:
            inputs = list(itertools.islice(op_info.sample_inputs("cpu", dtype, requires_grad=False), samples))
        except Exception as err:
            skipped.append({"op": name, "sample": None,
                            "reason": f"sample_inputs raises ({dtype_name}): {_first_line(err)}"})
            continue
        for k, sample in enumerate(inputs):
            slots, why = _tensor_slots(sample)
            if not slots:
                skipped.append({"op": name, "sample": k, "reason": why})
                continue
            tensors = _sample_tensors(sample, slots)
            model = OneOp(op_info.op, sample, slots)
            try:
                ep = export_model(model, tuple(tensors), {})
            except Exception as err:
                try:  # the op itself may raise on CPU (jiterator's): then export is not the one to blame
                    model(*(t.clone() for t in tensors))
                    reason = f"export rejects: {_first_line(err)}"
                except Exception as eager:
                    reason = f"the op raises on CPU: {_first_line(eager)}"
                skipped.append({"op": name, "sample": k, "reason": reason})
                continue
            for combo in placement_combinations(tensors, mesh, placements, partial):
                kind, detail, refusal = run_case(op_info, sample, slots, combo, mesh, ep)
                case = {"op": name, "sample": k, "dtype": dtype_name, "placements": [_placement_text(p) for p in combo],
                        "result": kind, "detail": detail, "commlens_refused": refusal is not None}
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
            f"(commlens refused {dtensor_refused} of them), data {n['data']}, wrong {n['wrong']} (skipped {len(skipped)}); "
            f"exact on {share} of the {runs} cases CommDebugMode runs")


DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "opinfo-coverage.md"


def render_doc(results, skipped, command):
    """docs/opinfo-coverage.md: the summary and, per OpInfo, its cases by result and the first
    reason commlens gave for a refusal; then each skipped OpInfo (or sample) and why."""
    by_op = {}
    for r in results:
        by_op.setdefault(r["op"], []).append(r)
    lines = [
        "# OpInfo coverage: commlens against CommDebugMode, per op",
        "",
        f"Generated by `{command}` (tests/rules/opinfo_sweep.py; `tests/rules/test_opinfo_sweep.py` checks it",
        "is current). Each OpInfo of torch's `op_db` with a CPU sample: a one-op module on its first",
        "sample (float32; an OpInfo without CPU float32 runs the dtype named after it, the first of",
        "int64, bool, then others it supports), each tensor an input (those of a list argument, such as",
        "`cat`'s, too), placed on a 2-rank mesh (all Replicate, then each input sharded alone on each",
        "dim the mesh divides; 3 combinations at most), predicted and measured forward and backward",
        "(backward where a floating input can take a gradient): counts, bytes and the placements of the",
        "forward's outputs (`wrong`: either differs). `dtensor`: DTensor itself raises",
        "(commlens refuses each of these too); `data`: a linear-algebra kernel rejects the values of the",
        "run (a singular matrix: the fake process group's all-gather leaves the other rank's rows zero),",
        "so there is no count to compare. The OpInfos skipped, and why, are listed last.",
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
        dtype = rs[0].get("dtype", "float32")
        cell = f"`{op}`" + ("" if dtype == "float32" else f" ({dtype})")
        lines.append(f"| {cell} | {len(rs)} | {n['exact']} | {n['refused']} | {n['dtensor']} | {n['data']} | {n['wrong']} "
                     f"| {why} |")
    if skipped:
        count = {r: sum(s["reason"].startswith(r) for s in skipped) for r in SKIP_REASONS}
        other = len(skipped) - sum(count.values())
        parts = [f"{r} {c}" for r, c in count.items() if c] + ([f"other {other}"] if other else [])
        lines += [
            "",
            f"## Skipped: {len(skipped)} ({', '.join(parts)})",
            "",
            "No case of these runs: a factory has no tensor input to place; export rejects the op (an",
            "output whose shape or value depends on the data); the op raises on CPU itself.",
            "",
            "| op | sample | reason |",
            "|---|---|---|",
        ]
        for s in sorted(skipped, key=lambda s: (s["op"], -1 if s["sample"] is None else s["sample"])):
            reason = s["reason"].replace("|", "\\|").replace("\n", " ")[:160]
            sample = "all" if s["sample"] is None else s["sample"]
            lines.append(f"| `{s['op']}` | {sample} | {reason} |")
    return "\n".join(lines) + "\n"


def _mesh_shape(text):
    """`--mesh`'s value: "4" -> (4,), "2x2" -> (2, 2)."""
    try:
        shape = tuple(int(n) for n in text.lower().split("x"))
    except ValueError:
        shape = ()
    if len(shape) not in MESH_DIM_NAMES or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected N or AxB (a 1-D or 2-D mesh), got {text!r}")
    return shape


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", help="regex on OpInfo names (name.variant)")
    ap.add_argument("--samples", type=int, default=DOC_SWEEP["samples"], help="sample inputs per OpInfo (default 1)")
    ap.add_argument("--placements", type=int, default=DOC_SWEEP["placements"],
                    help="placement combinations per sample (default 3)")
    ap.add_argument("--world", type=int, default=DOC_SWEEP["world"], help="1-D mesh size (default 2)")
    ap.add_argument("--mesh", type=_mesh_shape, help="mesh shape, N or AxB (a 2-D mesh: dims dp, tp; default --world)")
    ap.add_argument("--partial", action="store_true", help='also place each floating input Partial("sum")')
    ap.add_argument("--json", help="write every case here")
    ap.add_argument("--doc", action="store_true", help=f"rewrite {DOC.relative_to(DOC.parents[1])} (default sweep only)")
    args = ap.parse_args(argv)
    if args.doc and (args.ops or args.mesh or args.partial
                     or {"samples": args.samples, "placements": args.placements, "world": args.world} != DOC_SWEEP):
        ap.error("--doc records the default sweep: no --ops, --samples, --placements, --world, --mesh or --partial")
    results, skipped = sweep(args.ops, args.samples, args.placements, args.world, args.mesh, args.partial)
    line = summary(results, skipped)
    print(line)
    if args.doc:
        DOC.write_text(render_doc(results, skipped, DOC_COMMAND))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": line, "cases": results, "skipped": skipped}, f, indent=1)
    return 1 if any(r["result"] == "wrong" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
