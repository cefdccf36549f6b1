"""Runs DTensor redistributions under CommDebugMode on a fake process group and prints what ran.

Used by test_redistribute_oracle.py in a subprocess (one process group per process): reads one JSON
case per line on stdin (same format as redistribute_driver), writes one JSON answer per line:

  {"ok": true, "user_refusal": null | "...", "path": "user" | "internal",
   "collectives": [{"op", "mesh_dims", "input_bytes"}...],   # in issue order (TorchDispatchMode)
   "comm_counts": {"c10d_functional.all_reduce": 1, ...}}    # CommDebugMode.get_comm_counts()
  {"ok": false, "error": "...", "user_refusal": ...}
plus "cost": redistribute_cost(src spec, dst spec) as a string, with num_devices_per_host forced to
the case's "devices_per_host" (default 1, what torch.cpu.device_count() gives).

World size 8, rank 0; smaller meshes use ranks 0..n-1. A case with "device": "cuda" runs on a CPU
mesh with shard_dim_alltoall's CPU fallback switched off (its only device-type branch), so the
CUDA op sequence is observed without a GPU.
"""

import contextlib
import json
import math
import sys
from collections import Counter

import torch
import torch.distributed as dist
import torch.distributed.tensor._collective_utils as collective_utils
from torch.distributed.device_mesh import _mesh_resources, DeviceMesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor._collective_utils import MeshTopoInfo, redistribute_cost
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._redistribute import (
    _gen_transform_infos,
    clear_redistribute_planner_cache,
    DTensorRedistributePlanner,
    redistribute_local_tensor,
    use_min_cost_redistribution_plan,
)
from torch.distributed.tensor._dtensor_spec import ShardOrderEntry
from torch.distributed.tensor.placement_types import _StridedShard
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.debug._comm_mode import NATIVE_TO_PY_MAPPING, c10d_collective_ops
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils._python_dispatch import TorchDispatchMode

WORLD = 8
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}
COLLECTIVES = set(NATIVE_TO_PY_MAPPING) | set(NATIVE_TO_PY_MAPPING.values()) | set(c10d_collective_ops)
COLLECTIVES.add(torch.ops._dtensor.shard_dim_alltoall)


def parse_placement(text):
    text = text.strip()
    if text.startswith("_S(") and text.endswith(")"):
        dim, sf = text[3:-1].split(",")
        return _StridedShard(int(dim), split_factor=int(sf))
    if text == "R":
        return Replicate()
    if text.startswith("S(") and text.endswith(")"):
        return Shard(int(text[2:-1]))
    if text == "P":
        return Partial()
    if text.startswith("P(") and text.endswith(")"):
        return Partial(text[2:-1] or "sum")
    raise ValueError(f"bad placement {text!r}")


class Recorder(TorchDispatchMode):
    """Records every collective op (CommDebugMode's registry) in issue order."""

    def __init__(self, group_dims):
        super().__init__()
        self.group_dims = group_dims
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(t is DTensor for t in types):
            return NotImplemented
        out = func(*args, **(kwargs or {}))
        packet = func._overloadpacket
        if packet in COLLECTIVES:
            packet = NATIVE_TO_PY_MAPPING.get(packet, packet)
            group = next((a for a in args if isinstance(a, str) and a in self.group_dims), None)
            tensor = args[0]
            self.ops.append(
                {
                    "op": str(packet),
                    "mesh_dims": self.group_dims.get(group),
                    "input_bytes": tensor.numel() * tensor.element_size(),
                }
            )
        return out


_meshes = {}

# Whether DTensor's graph-based planner produced the plan (commlens refuses those cases).
_graph_used = [False]
_graph_planner = DTensorRedistributePlanner.generate_graph_based_transform_infos


def _spy_graph_planner(self, *args, **kwargs):
    out = _graph_planner(self, *args, **kwargs)
    _graph_used[0] = True
    return out


DTensorRedistributePlanner.generate_graph_based_transform_infos = _spy_graph_planner


def get_mesh(shape, names, flatten):
    key = (tuple(shape), tuple(names) if names else None, tuple(tuple(g) for g in flatten or ()))
    if key not in _meshes:
        n = math.prod(shape)
        mesh = DeviceMesh("cpu", torch.arange(n).reshape(shape), mesh_dim_names=tuple(names) if names else None)
        group_dims = {mesh.get_group(i).group_name: [i] for i in range(mesh.ndim)}
        for dims in flatten or ():
            flat = mesh[tuple(names[d] for d in dims)]._flatten()
            group_dims[flat.get_group(0).group_name] = sorted(dims)
        _meshes[key] = (mesh, group_dims)
    return _meshes[key]


def _refusal(src, dst):
    for p, q in zip(src, dst):
        if q.is_partial() and p != q:
            return f"Can not redistribute from {p} to {q}, redistributing to Partial is for internal use only!"
    return None


def _normalized(p, ndim):
    if isinstance(p, _StridedShard):
        return _StridedShard(p.dim % ndim, split_factor=p.split_factor)
    if isinstance(p, Shard):
        return Shard(p.dim % ndim)
    return p


def run_case(case):
    mesh, group_dims = get_mesh(case["mesh"], case.get("names"), case.get("flatten"))
    shape = tuple(case["shape"])
    src = [parse_placement(p) for p in case["src"]]
    dst = [parse_placement(p) for p in case["dst"]]
    answer = {"ok": True, "user_refusal": None}
    try:
        src_n = [_normalized(p, len(shape)) for p in src]
        local_shape, _ = compute_local_shape_and_global_offset(shape, mesh, src_n)
        stride = torch.empty(shape).stride()
        dt = DTensor.from_local(
            torch.randn(local_shape, dtype=DTYPES[case.get("dtype", "f32")]), mesh, src, run_check=False, shape=torch.Size(shape), stride=stride
        )
    except Exception as e:  # noqa: BLE001 - invalid source placements
        return {"ok": False, "error": f"setup: {type(e).__name__}: {e}", "user_refusal": None}

    # Fresh planner state per case: DTensor caches planners per (mesh, meta) and their R->P reduce-op
    # sets grow with every redistribution planned.
    _gen_transform_infos.cache_clear()
    clear_redistribute_planner_cache()
    _graph_used[0] = False
    src_spec = dt._spec
    if case.get("src_shard_order") is not None:
        order = tuple(ShardOrderEntry(tensor_dim=d, mesh_dims=tuple(m)) for d, m in case["src_shard_order"])
        src_spec = DTensorSpec(mesh, dt._spec.placements, tensor_meta=dt._spec.tensor_meta, shard_order=order)
    dst_n = [_normalized(p, len(shape)) for p in dst]
    target = DTensorSpec(mesh, tuple(dst_n), tensor_meta=dt._spec.tensor_meta)

    def force():
        return use_min_cost_redistribution_plan() if case.get("force_min_cost") else contextlib.nullcontext()

    # The cost model's devices per host (torch.<device>.device_count()), for the whole case.
    per_host = case.get("devices_per_host", 1)
    saved_per_host = _mesh_resources.num_devices_per_host
    _mesh_resources.num_devices_per_host = lambda device_type: per_host
    MeshTopoInfo.build_from_mesh.cache_clear()
    saved_lt = collective_utils.local_tensor_mode
    if case.get("device") == "cuda":
        collective_utils.local_tensor_mode = lambda: object()
    try:
        try:
            with force():
                answer["cost"] = repr(float(redistribute_cost(src_spec, target)))
        except Exception as e:  # noqa: BLE001
            answer["cost"] = f"error: {type(e).__name__}: {e}"
        return _run(answer, dt, src_spec, target, dst, dst_n, mesh, group_dims, force)
    finally:
        collective_utils.local_tensor_mode = saved_lt
        _mesh_resources.num_devices_per_host = saved_per_host
        MeshTopoInfo.build_from_mesh.cache_clear()


def _run(answer, dt, src_spec, target, dst, dst_n, mesh, group_dims, force):
    rec = Recorder(group_dims)
    _gen_transform_infos.cache_clear()
    clear_redistribute_planner_cache()
    _graph_used[0] = False
    try:
        with CommDebugMode() as comm_mode, rec, force():
            try:
                if src_spec is not dt._spec:  # a shard order only the internal path can carry
                    answer["user_refusal"] = _refusal(src_spec.placements, dst_n)
                    redistribute_local_tensor(dt._local_tensor, src_spec, target)
                    answer["path"] = "internal"
                else:
                    dt.redistribute(mesh, dst)
                    answer["path"] = "user"
            except RuntimeError as e:
                if "for internal use only" not in str(e):
                    raise
                answer["user_refusal"] = str(e)
                # What op dispatch would do (no user-facing check there).
                redistribute_local_tensor(dt._local_tensor, dt._spec, target)
                answer["path"] = "internal"
    except Exception as e:  # noqa: BLE001 - DTensor refuses the redistribution
        answer["graph_planner"] = _graph_used[0]
        answer["ok"] = False
        answer["error"] = f"{type(e).__name__}: {e}"
        return answer
    answer["graph_planner"] = _graph_used[0]
    answer["collectives"] = rec.ops
    answer["comm_counts"] = {str(k): v for k, v in comm_mode.get_comm_counts().items()}
    # Cross-check: the recorder saw exactly what CommDebugMode counted.
    answer["recorder_matches_comm_mode"] = Counter(o["op"] for o in rec.ops) == Counter(answer["comm_counts"])
    return answer


def main():
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    try:
        for line in sys.stdin:
            if line.strip():
                print(json.dumps(run_case(json.loads(line))), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
