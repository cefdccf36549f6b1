"""``SequenceParallel``: the plan codec's entry for ``class SequenceParallel`` of
torch/distributed/tensor/parallel/style.py."""

from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import SequenceParallel

from commlens.plan.model import PlanError
from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    # The constructor takes the dim; the object holds it as sequence_sharding = (Shard(dim),).
    seq = values.get("sequence_sharding", (Shard(1),))
    if len(seq) != 1 or type(seq[0]) is not Shard:
        raise PlanError(subject, f"bad value at {where}.sequence_sharding: expected [\"Shard(d)\"]")
    return SequenceParallel(sequence_dim=seq[0].dim, use_local_output=values.get("use_local_output", False))


ENTRY = StyleEntry(
    name="SequenceParallel",
    cls=SequenceParallel,
    fields=(("sequence_sharding", "pl1"), ("use_local_output", "bool")),
    construct=_construct,
)
