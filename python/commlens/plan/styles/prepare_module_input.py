"""``PrepareModuleInput``: the plan codec's entry for ``class PrepareModuleInput`` of
torch/distributed/tensor/parallel/style.py."""

from torch.distributed.tensor.parallel import PrepareModuleInput

from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    # The object's with_kwargs records whether input_kwarg_layouts was passed at all.
    with_kwargs = values.get("with_kwargs", bool(values.get("input_kwarg_layouts")))
    return PrepareModuleInput(
        input_layouts=values.get("input_layouts"),
        desired_input_layouts=values.get("desired_input_layouts"),
        input_kwarg_layouts=values.get("input_kwarg_layouts", {}) if with_kwargs else None,
        desired_input_kwarg_layouts=values.get("desired_input_kwarg_layouts"),
        use_local_output=values.get("use_local_output", False),
    )


ENTRY = StyleEntry(
    name="PrepareModuleInput",
    cls=PrepareModuleInput,
    fields=(
        ("input_layouts", "pltup"), ("desired_input_layouts", "pltup"),
        ("input_kwarg_layouts", "pldict"), ("desired_input_kwarg_layouts", "pldict"),
        ("use_local_output", "bool"), ("with_kwargs", "bool"),
    ),
    construct=_construct,
)
