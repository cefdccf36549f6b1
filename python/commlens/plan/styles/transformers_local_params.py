"""``TransformersLocalParamsParallel``: the plan codec's entry for ``class LocalParamsParallel`` of
transformers/distributed/tensor_parallel.py (transformers 5.23), registered as ``"local_params"``
(the attention module of models with attention sinks: GraniteSWA, MiMo-V2-Flash, ...). It places no
parameter (the sinks have an entry of their own: the plan's ``placements``) and runs the module's
forward with its own DTensor parameters as local shards
(parallel/TransformersLocalParamsParallel.cpp). It has no fields."""

from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    from transformers.distributed.tensor_parallel import LocalParamsParallel

    return LocalParamsParallel()


ENTRY = StyleEntry(
    name="TransformersLocalParamsParallel",
    cls="transformers.distributed.tensor_parallel:LocalParamsParallel",
    fields=(),
    construct=_construct,
)
