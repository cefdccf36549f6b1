"""The bytes half of measure's oracle: what `_sent_bytes` records for every collective CommDebugMode
counts (its comm_registry and c10d_collective_ops, torch 2.13), each issued once on the fake process
group (world size 4, rank 0) under measure's bytes-recording CommDebugMode.

Every expectation is derived here from the op's schema: the bytes rank 0 hands to the collective
are the sizes of the tensors it sends, numel x element size; for c10d ops that is the input
tensor or list after the outputs they write (allgather_, gather_, ... ), for in-place ones the
tensors reduced or broadcast, for funcol ones their input. Inputs differ in shape and dtype per op
(f32 4 bytes, bf16 2, i64 8), so that a wrong argument or a dtype-blind size shows up."""

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.testing._internal.distributed.fake_pg import FakeStore

from torch.distributed.tensor.debug._comm_mode import NATIVE_TO_PY_MAPPING

from commlens.measure import _bytes_recording_comm_debug_mode

WS = 4
# funcol and c10d name some of these deprecated; they are the ops DTensor and FSDP2 issue.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def group():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WS)
    yield dist.group.WORLD
    dist.destroy_process_group()


def f32(*shape):
    return torch.zeros(shape, dtype=torch.float32)


def bf16(*shape):
    return torch.zeros(shape, dtype=torch.bfloat16)


def i64(*shape):
    return torch.zeros(shape, dtype=torch.int64)


def _c10d_coalesced(group, method, outputs, inputs, *opts):
    """A c10d op the eager API issues only inside a coalescing manager, through the group's method."""
    getattr(group, method)(outputs, inputs, *opts).wait()


# (the key CommDebugMode counts it under, how to issue it once, the bytes rank 0 sends: derivation)
CASES = [
    # ---- funcol (DTensor's redistributions): the input tensor
    ("c10d_functional.all_reduce", lambda g: funcol.all_reduce(f32(3, 5), "sum", g), 3 * 5 * 4),
    ("c10d_functional.all_gather_into_tensor", lambda g: funcol.all_gather_tensor(bf16(2, 6), 0, g), 2 * 6 * 2),
    ("c10d_functional.reduce_scatter_tensor", lambda g: funcol.reduce_scatter_tensor(f32(8, 3), "sum", 0, g),
     8 * 3 * 4),  # the whole input, not the [2, 3] shard it keeps
    ("c10d_functional.all_to_all_single", lambda g: funcol.all_to_all_single(i64(4, 5), None, None, g), 4 * 5 * 8),
    ("c10d_functional.broadcast", lambda g: funcol.broadcast(f32(7), 0, g), 7 * 4),
    ("c10d_functional.all_reduce_coalesced", lambda g: funcol.all_reduce_coalesced([f32(3), bf16(5)], "sum", g),
     3 * 4 + 5 * 2),
    ("c10d_functional.all_gather_into_tensor_coalesced",
     lambda g: funcol.all_gather_into_tensor_coalesced([f32(2, 2), i64(3)], g), 2 * 2 * 4 + 3 * 8),
    ("c10d_functional.reduce_scatter_tensor_coalesced",
     lambda g: funcol.reduce_scatter_tensor_coalesced([f32(4, 2), bf16(8)], "sum", [0, 0], g), 4 * 2 * 4 + 8 * 2),
    # the autograd variant is counted under the same key
    ("c10d_functional.all_to_all_single",
     lambda g: funcol.all_to_all_single_autograd(f32(8, 2), None, None, g), 8 * 2 * 4),
    ("_dtensor.shard_dim_alltoall",
     lambda g: torch.ops._dtensor.shard_dim_alltoall(f32(4, 8), 0, 1, g.group_name), 4 * 8 * 4),
    # ---- c10d (FSDP2's collectives and the eager API): the inputs after the outputs
    ("c10d._allgather_base_", lambda g: dist.all_gather_into_tensor(f32(WS * 3, 2), f32(3, 2), g), 3 * 2 * 4),
    ("c10d._reduce_scatter_base_", lambda g: dist.reduce_scatter_tensor(bf16(5), bf16(WS * 5), group=g),
     WS * 5 * 2),  # the whole padded input, as FSDP2's reduce-scatter
    ("c10d.allgather_", lambda g: dist.all_gather([f32(6) for _ in range(WS)], f32(6), g), 6 * 4),
    ("c10d.allgather_coalesced_",
     lambda g: _c10d_coalesced(g, "allgather_coalesced", [[f32(2), i64(3)] for _ in range(WS)], [f32(2), i64(3)]),
     2 * 4 + 3 * 8),
    ("c10d.allgather_into_tensor_coalesced_",
     lambda g: _c10d_coalesced(g, "allgather_into_tensor_coalesced", [f32(WS * 2), bf16(WS * 3)], [f32(2), bf16(3)]),
     2 * 4 + 3 * 2),
    ("c10d.reduce_scatter_",
     lambda g: dist.reduce_scatter(f32(3), [f32(3) for _ in range(WS)], group=g), WS * 3 * 4),
    ("c10d.reduce_scatter_tensor_coalesced_",
     lambda g: _c10d_coalesced(g, "reduce_scatter_tensor_coalesced", [f32(2), i64(1)], [f32(WS * 2), i64(WS)],
                               dist.ReduceScatterOptions()), WS * 2 * 4 + WS * 8),
    ("c10d.alltoall_", lambda g: dist.all_to_all([f32(2) for _ in range(WS)], [f32(2) for _ in range(WS)], g),
     WS * 2 * 4),
    ("c10d.alltoall_base_", lambda g: dist.all_to_all_single(bf16(WS * 3), bf16(WS * 3), group=g), WS * 3 * 2),
    ("c10d.scatter_",  # rank 0 is the source: it hands out the whole scatter list
     lambda g: dist.scatter(f32(5), [f32(5) for _ in range(WS)], src=0, group=g), WS * 5 * 4),
    ("c10d.gather_",  # rank 0 is the destination: it sends its one input (and receives the list)
     lambda g: dist.gather(f32(5), [f32(5) for _ in range(WS)], dst=0, group=g), 5 * 4),
    # ---- c10d in place: the tensors reduced or broadcast
    ("c10d.allreduce_", lambda g: dist.all_reduce(i64(3, 3), group=g), 3 * 3 * 8),
    ("c10d.allreduce_coalesced_",
     lambda g: g.allreduce_coalesced([f32(4), bf16(6)], dist.AllreduceCoalescedOptions()).wait(), 4 * 4 + 6 * 2),
    ("c10d.broadcast_", lambda g: dist.broadcast(f32(9), 0, g), 9 * 4),
    ("c10d.reduce_", lambda g: dist.reduce(bf16(10), 0, group=g), 10 * 2),
]


def test_every_counted_collective_kind_is_here():
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.debug._comm_mode import c10d_collective_ops

    counted = {str(NATIVE_TO_PY_MAPPING.get(op, op)) for op in CommDebugMode().comm_registry | c10d_collective_ops}
    assert counted == {key for key, _, _ in CASES}


@pytest.mark.parametrize("key, issue, sent", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_sent_bytes(group, key, issue, sent):
    comm_mode = _bytes_recording_comm_debug_mode()
    with comm_mode:
        out = issue(group)
    for t in torch.utils._pytree.tree_leaves(out):  # funcol's results wait as DTensor's do
        if isinstance(t, funcol.AsyncCollectiveTensor):
            t.wait()
    assert {str(NATIVE_TO_PY_MAPPING.get(op, op)): n for op, n in comm_mode.get_comm_counts().items()} == {key: 1}
    assert comm_mode.comm_module_bytes["Global"] == {"forward": {key: sent}, "backward": {}}
