"""``ColwiseParallel``: the plan codec's entry for ``class ColwiseParallel`` of
torch/distributed/tensor/parallel/style.py."""

from torch.distributed.tensor.parallel import ColwiseParallel

from commlens.plan.styles.entry import StyleEntry, single_placement


def _construct(values, subject, where):
    return ColwiseParallel(
        input_layouts=single_placement(values.get("input_layouts")),
        output_layouts=single_placement(values.get("output_layouts")),
        use_local_output=values.get("use_local_output", True),
    )


ENTRY = StyleEntry(
    name="ColwiseParallel",
    cls=ColwiseParallel,
    fields=(
        ("input_layouts", "pl1"), ("output_layouts", "pl1"),
        ("desired_input_layouts", "pl1"), ("use_local_output", "bool"),
    ),
    construct=_construct,
)
