"""``TransformersRowwiseParallel``: the plan codec's entry for ``class RowwiseParallel`` of
transformers/distributed/tensor_parallel.py (transformers 5.23), the layer that
``from_pretrained(tp_plan="auto")`` registers as ``"rowwise"`` and ``"rowwise_split_input"``.
It is not a torch ``ParallelStyle``: transformers applies it with ``shard_param`` and
``install_forward`` (:func:`commlens._transformers.apply_layer`), and without grad its Linear runs
on local shards and sums them with ``dist.all_reduce`` in place (parallel/TransformersRowwiseParallel.cpp).
transformers is imported only when such an entry is built."""

from commlens.plan.styles.entry import StyleEntry


def _construct(values, subject, where):
    from transformers.distributed.tensor_parallel import RowwiseParallel

    return RowwiseParallel(
        input_layouts=values.get("input_layouts"),
        output_layouts=values.get("output_layouts"),
        use_local_output=values.get("use_local_output", True),
    )


ENTRY = StyleEntry(
    name="TransformersRowwiseParallel",
    cls="transformers.distributed.tensor_parallel:RowwiseParallel",
    fields=(("input_layouts", "pl"), ("output_layouts", "pl"), ("use_local_output", "bool")),
    construct=_construct,
)
