"""``TorchtitanNoParallel``: the plan codec's entry for ``class NoParallel`` of
torchtitan/distributed/__init__.py (torchtitan 0.2.2), which its ``apply_moe_ep_tp`` applies to
each MoE layer's router gate on the tensor-parallel mesh: the module's parameters replicated, its
input taken as ``input_layout`` and made Replicate, its output redistributed to ``output_layout``
and handed back local (parallel/TorchtitanNoParallel.cpp)."""

from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    kwargs = {k: values[k][0] for k in ("input_layout", "output_layout") if values.get(k) is not None}
    return ENTRY.resolve()(**kwargs, use_local_output=values.get("use_local_output", True))


ENTRY = StyleEntry(
    name="TorchtitanNoParallel",
    cls="torchtitan.distributed:NoParallel",
    fields=(
        ("input_layout", "pl"), ("output_layout", "pl"), ("desired_input_layout", "pl"),
        ("use_local_output", "bool"),
    ),
    construct=_construct,
    before_import="commlens._torchtitan:install",
)
