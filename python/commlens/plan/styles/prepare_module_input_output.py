"""``PrepareModuleInputOutput``: the plan codec's entry for ``class PrepareModuleInputOutput`` of
torch/distributed/tensor/parallel/style.py (a ``PrepareModuleInput`` and a ``PrepareModuleOutput``,
written as nested styles)."""

from torch.distributed.tensor.parallel import PrepareModuleInput, PrepareModuleInputOutput, PrepareModuleOutput

from commlens.plan.model import PlanError
from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    # The constructor takes the two inner styles' arguments flat, not the styles themselves.
    pin = values.get("prepare_module_input")
    pout = values.get("prepare_module_output")
    if not isinstance(pin, PrepareModuleInput) or not isinstance(pout, PrepareModuleOutput):
        raise PlanError(subject, f"PrepareModuleInputOutput at {where} needs prepare_module_input "
                        "(PrepareModuleInput) and prepare_module_output (PrepareModuleOutput)")
    return PrepareModuleInputOutput(
        input_layouts=pin.input_layouts,
        desired_input_layouts=pin.desired_input_layouts,
        input_kwarg_layouts=pin.input_kwarg_layouts if pin.with_kwargs else None,
        desired_input_kwarg_layouts=pin.desired_input_kwarg_layouts,
        use_local_input=pin.use_local_output,
        output_layouts=pout.output_layouts,
        desired_output_layouts=pout.desired_output_layouts,
        use_local_output=pout.use_local_output,
    )


ENTRY = StyleEntry(
    name="PrepareModuleInputOutput",
    cls=PrepareModuleInputOutput,
    fields=(("prepare_module_input", "style"), ("prepare_module_output", "style")),
    construct=_construct,
)
