"""The parallel styles commlens models, registered in one table: each module here holds one
``torch.distributed.tensor.parallel`` style's (or transformers' layer's)
:class:`~commlens.plan.styles.entry.StyleEntry` (its plan JSON name, its fields and their
encodings, how to rebuild the object), and :data:`STYLES` lists them. The codec,
:func:`commlens.plan.validate` and plan capture read only this table."""

from commlens.plan.styles import (
    colwise,
    prepare_module_input,
    prepare_module_input_output,
    prepare_module_output,
    rowwise,
    sequence,
    torchtitan_expert_parallel,
    torchtitan_expert_tensor_parallel,
    torchtitan_no_parallel,
    torchtitan_reorderer_sequence_parallel,
    torchtitan_tensor_parallel,
    transformers_ep_dispatch_experts,
    transformers_local_params,
    transformers_mla_kv_a_proj,
    transformers_moe_experts,
    transformers_replicated_with_grad_allreduce,
    transformers_rowwise,
)

# In the order error messages list the styles.
STYLES = (
    colwise.ENTRY,
    rowwise.ENTRY,
    sequence.ENTRY,
    prepare_module_input.ENTRY,
    prepare_module_output.ENTRY,
    prepare_module_input_output.ENTRY,
    transformers_rowwise.ENTRY,
    transformers_replicated_with_grad_allreduce.ENTRY,
    transformers_moe_experts.ENTRY,
    transformers_ep_dispatch_experts.ENTRY,
    transformers_mla_kv_a_proj.ENTRY,
    transformers_local_params.ENTRY,
    torchtitan_expert_parallel.ENTRY,
    torchtitan_expert_tensor_parallel.ENTRY,
    torchtitan_tensor_parallel.ENTRY,
    torchtitan_no_parallel.ENTRY,
    torchtitan_reorderer_sequence_parallel.ENTRY,
)
BY_NAME = {entry.name: entry for entry in STYLES}
# Expert-parallel styles: torchtitan and transformers shard their modules' parameters with FSDP on
# a mesh of their own, so FSDP units may share the mesh dim a step of only these uses.
EXPERT_PARALLEL = (torchtitan_expert_parallel.ENTRY, torchtitan_expert_tensor_parallel.ENTRY,
                   transformers_ep_dispatch_experts.ENTRY)
_BY_CLASS_PATH = {entry.class_path: entry for entry in STYLES}


def entry_of(cls):
    """The entry of a style class (None: not modelled), found by its module and qualified name so
    that classes of libraries commlens.plan does not import need no import here."""
    return _BY_CLASS_PATH.get(f"{cls.__module__}.{cls.__qualname__}")

# Instance attributes of a style that its plan JSON entry does not carry, and why.
NOT_SERIALIZED = {
    "src_data_rank": "parallelize_module(src_data_rank=...) sets it on every style it applies; "
                     "the plan records it once (Plan.src_data_rank)",
}
