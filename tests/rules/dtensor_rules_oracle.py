"""Runs one ATen op on DTensors (fake process group, world size 4, rank 0) and prints what
DTensor's sharding propagation chose and which collectives ran.

Used by test_rules_oracle.py in a subprocess (one process group per process). Reads one JSON case
per line on stdin (the rules_driver format, see tests/rules/rules_driver.cpp, without "outputs"),
writes one JSON answer per line:

  {"ok": true, "outputs": [{"shape": [...], "dtype": "f32"} | {"list": [...]}],   # global metas
   "operands": [["S(0)"], null, ...],   # placements DTensor redistributes each tensor operand to
                                         # (null for plain tensors)
   "results": [["P(sum)"] | null, ...], # placements of each tensor result (lists flattened)
   "collectives": 3}                     # CommDebugMode total for running the op
  {"ok": false, "error": "...", "outputs": ...}

Meshes of 2 ranks use ranks 0..1.
"""

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._ops._math_ops import _NormPartial
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.placement_types import _StridedShard
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils._pytree import tree_leaves

WORLD = 4
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64,
          "i64": torch.int64, "i32": torch.int32, "b8": torch.bool, "c64": torch.complex64,
          "f8e4m3fn": torch.float8_e4m3fn, "u8": torch.uint8}
SHORT = {v: k for k, v in DTYPES.items()}

try:
    from torch.distributed.tensor.placement_types import MaskPartial as _MaskPartial
except ImportError:  # pragma: no cover
    from torch.distributed.tensor.placement_types import _MaskPartial


def parse_placement(text):
    text = text.strip()
    if text == "R":
        return Replicate()
    if text.startswith("S(") and text.endswith(")"):
        return Shard(int(text[2:-1]))
    if text.startswith("P(") and text.endswith(")"):
        return Partial(text[2:-1] or "sum")
    if text.startswith("NP(") and text.endswith(")"):
        return _NormPartial(float(text[3:-1]))
    raise ValueError(f"bad placement {text!r}")


def short(p):
    if isinstance(p, _StridedShard):
        return f"_S({p.dim},{p.split_factor})"
    if isinstance(p, Shard):
        return f"S({p.dim})"
    if isinstance(p, Replicate):
        return "R"
    if isinstance(p, _MaskPartial):
        return f"MP({p.reduce_op})"
    if isinstance(p, _NormPartial):
        return f"NP({float(p.norm_type):g})"  # p-norm partial; 2 and 2.0 alike, as commlens prints them
    if isinstance(p, Partial):
        return f"P({p.reduce_op})"
    return repr(p)


_meshes = {}


def mesh_of(shape):
    key = tuple(shape)
    if key not in _meshes:
        n = 1
        for s in shape:
            n *= s
        _meshes[key] = DeviceMesh("cpu", torch.arange(n).reshape(key))
    return _meshes[key]


def make_tensor(t, mesh, device=None):
    shape = tuple(t["shape"])
    dtype = DTYPES[t.get("dtype", "f32")]
    pl = t.get("placements")
    # "eye": identity matrices (positive definite), "ones": valid LU pivots, "prob": values in (0, 1)
    # (binary_cross_entropy's kernel checks them); "colmajor": a matrix stored column-major (the
    # second operand of _scaled_mm), its local shard too
    init = t.get("init")

    def empty(sizes):
        if init == "colmajor":
            return torch.empty(tuple(sizes)[::-1], dtype=dtype).t()
        return torch.empty(tuple(sizes), dtype=dtype)

    def fill(x):
        if dtype == torch.float8_e4m3fn:
            x.copy_(torch.randn(x.shape))
        elif init == "eye":
            x.copy_(torch.eye(x.shape[-2], x.shape[-1], dtype=dtype).expand(x.shape))
        elif init == "ones":
            x.fill_(1)
        elif init == "prob":
            x.uniform_(0.1, 0.9)
        elif dtype.is_floating_point or dtype.is_complex:
            x.normal_()
        else:
            x.zero_()  # indices: all zeros are valid everywhere
        return x

    full = fill(empty(shape))
    if pl is None:
        return full, full
    placements = [parse_placement(p) for p in pl]
    local_shape, _ = compute_local_shape_and_global_offset(shape, mesh, placements)
    local = fill(empty(local_shape))
    if device is not None:
        local = local.to(device)
    d = DTensor.from_local(local, mesh, placements, run_check=False, shape=torch.Size(shape),
                           stride=full.stride())
    return d, full


def build(case, mesh, kind):
    """Positional args and kwargs of `case`: tensors as DTensors (kind "dtensor"), or as their
    global values on the meta device ("meta") or on CPU ("full"). A case with "device": "meta"
    (kernels with no CPU implementation: the CUDA attention kernels) gets meta local tensors."""

    def pick(dt, full):
        return dt if kind == "dtensor" else full.to("meta") if kind == "meta" else full

    args, kwargs = [], {}
    metas = []
    for a in case.get("args", []):
        if "tensor" in a:
            dt, full = make_tensor(a["tensor"], mesh, case.get("device"))
            v = pick(dt, full)
        elif "tensors" in a:
            v = []
            for t in a["tensors"]:
                if t is None:  # an optional list's None (index's untouched dims)
                    v.append(None)
                    continue
                dt, full = make_tensor(t, mesh, case.get("device"))
                v.append(pick(dt, full))
        elif "int" in a:
            v = a["int"]
        elif "ints" in a:
            v = list(a["ints"])
        elif "floats" in a:
            v = list(a["floats"])
        elif "bools" in a:
            v = list(a["bools"])
        elif "bool" in a:
            v = a["bool"]
        elif "float" in a:
            v = float(a["float"])  # "inf" / "-inf" as strings (JSON has no infinity)
        elif "dtype" in a:
            v = DTYPES[a["dtype"]]
        elif "str" in a:
            v = a["str"]
        else:
            v = None
        if a.get("keyword"):
            kwargs[a["name"]] = v
        else:
            args.append(v)
    return args, kwargs


def out_meta(o):
    if isinstance(o, (int, torch.SymInt)) and not isinstance(o, bool):
        return {"int": int(o)}  # SymInt results (flash attention's max_q / max_k)
    if isinstance(o, torch.Tensor):
        return {"shape": list(o.shape), "dtype": SHORT.get(o.dtype, "f32")}
    if isinstance(o, (list, tuple)):
        items = [out_meta(x) for x in o]
        return items
    return None


def op_of(name):
    ns, rest = name.split("::")
    packet, overload = rest.split(".")
    return getattr(getattr(getattr(torch.ops, ns), packet), overload)


def run(case):
    op = op_of(case["op"])
    mesh = mesh_of(case["mesh"])
    # global output metas, from a meta-device run
    margs, mkwargs = build(case, mesh, "meta")
    try:
        mout = op(*margs, **mkwargs)
    except (NotImplementedError, RuntimeError):
        # no meta kernel (_fused_adam.tensor_lr) or a value needed (_local_scalar_dense): run on
        # the global values
        margs, mkwargs = build(case, mesh, "full")
        mout = op(*margs, **mkwargs)
    if isinstance(mout, torch.Tensor):
        outputs = [out_meta(mout)]
    elif not isinstance(mout, (tuple, list)):  # None (_linalg_check_errors), a number (_local_scalar_dense)
        outputs = []
    elif all(isinstance(r.type, torch.ListType) for r in op._schema.returns):
        # one or several tensor-list results (_fused_adam returns five lists)
        lists = [mout] if len(op._schema.returns) == 1 else list(mout)
        outputs = [{"list": out_meta(x)} for x in lists]
    else:
        outputs = [out_meta(x) for x in mout]
    answer = {"outputs": outputs}

    args, kwargs = build(case, mesh, "dtensor")
    dispatcher = DTensor._op_dispatcher
    try:
        info = dispatcher.unwrap_to_op_info(op, tuple(args), kwargs)
        dispatcher.sharding_propagator.propagate(info)
        os_ = info.output_sharding
        schema = os_.redistribute_schema if os_.redistribute_schema is not None else info.schema
        # every DTensorSpec of the positional args, tensor lists flattened (args_spec only
        # flattens them for ops registered with needs_pytree, not for the foreach single-dim ones)
        chosen = [list(map(short, s.placements)) for s in tree_leaves(schema.args_schema)
                  if isinstance(s, DTensorSpec)]
        # keyword tensors (linalg_pinv's atol, rtol) are never redistributed: they run as they are
        chosen += [list(map(short, v.placements)) for v in kwargs.values() if isinstance(v, DTensor)]
        # plain tensors (promoted to Replicate specs) report null, as the C++ decision does
        flat_tensors = []
        for a in args:
            if isinstance(a, (list, tuple)):
                flat_tensors.extend(x for x in a if isinstance(x, torch.Tensor))
            elif isinstance(a, torch.Tensor):
                flat_tensors.append(a)
        flat_tensors.extend(v for v in kwargs.values() if isinstance(v, torch.Tensor))
        operands = [c if isinstance(t, DTensor) else None for c, t in zip(chosen, flat_tensors)]
        spec = os_.output_spec
        results = []

        def add(s):
            if isinstance(s, (list, tuple)):
                for x in s:
                    add(x)
            elif s is None:
                results.append(None)
            else:
                results.append(list(map(short, s.placements)))

        if any("Tensor" in str(r.type) for r in op._schema.returns):  # not for None or a number
            add(spec)
        if isinstance(mout, (tuple, list)) and len(results) == len(mout) > 1:
            # results the kernel leaves undefined or returns as numbers (flash attention's
            # cum_seq_q, max_q) have no placement; the C++ node has no tensor there
            results = [r for r, m in zip(results, mout) if isinstance(m, (torch.Tensor, list, tuple))]
        answer.update({"ok": True, "operands": operands, "results": results})
    except Exception as e:  # DTensor refuses: the C++ side must error too
        answer.update({"ok": False, "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]})
        return answer
    try:
        with CommDebugMode() as comm:
            op(*args, **kwargs)
        answer["collectives"] = comm.get_total_counts()
    except Exception as e:
        answer["run_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return answer


def main():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    torch.manual_seed(0)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            ans = run(json.loads(line))
        except Exception as e:
            ans = {"ok": False, "error": f"oracle: {type(e).__name__}: {e}".splitlines()[0][:300]}
        print(json.dumps(ans), flush=True)


if __name__ == "__main__":
    main()
