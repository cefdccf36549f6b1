"""``RowwiseParallel``: the plan codec's entry for ``class RowwiseParallel`` of
torch/distributed/tensor/parallel/style.py."""

from torch.distributed.tensor.parallel import RowwiseParallel

from commlens.plan.styles.entry import StyleEntry, single_placement


def _construct(values, subject, where):
    return RowwiseParallel(
        input_layouts=single_placement(values.get("input_layouts")),
        output_layouts=single_placement(values.get("output_layouts")),
        use_local_output=values.get("use_local_output", True),
    )


ENTRY = StyleEntry(
    name="RowwiseParallel",
    cls=RowwiseParallel,
    fields=(
        ("input_layouts", "pl1"), ("output_layouts", "pl1"),
        ("use_local_output", "bool"),
        # Only RowwiseParallel._apply sets desired_input_layouts (Shard(-1) for Linear,
        # Replicate() for Embedding).
        ("desired_input_layouts", "pl1?"),
    ),
    construct=_construct,
)
