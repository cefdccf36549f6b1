"""``PrepareModuleOutput``: the plan codec's entry for ``class PrepareModuleOutput`` of
torch/distributed/tensor/parallel/style.py."""

from torch.distributed.tensor.parallel import PrepareModuleOutput

from commlens.plan.model import PlanError
from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    # Both layouts are required constructor arguments.
    if "output_layouts" not in values or "desired_output_layouts" not in values:
        raise PlanError(subject, f"PrepareModuleOutput at {where} needs output_layouts and desired_output_layouts")
    return PrepareModuleOutput(
        output_layouts=values["output_layouts"],
        desired_output_layouts=values["desired_output_layouts"],
        use_local_output=values.get("use_local_output", True),
    )


ENTRY = StyleEntry(
    name="PrepareModuleOutput",
    cls=PrepareModuleOutput,
    fields=(
        ("output_layouts", "pltup"), ("desired_output_layouts", "pltup"),
        ("use_local_output", "bool"),
    ),
    construct=_construct,
)
