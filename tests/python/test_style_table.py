"""The table of parallel styles (python/commlens/plan/styles/): each entry names a real torch
ParallelStyle (or transformers' layer class), the table's styles are the plan schema's, and each
entry's fields are exactly the instance attributes torch (or transformers) gives that class (save
those the table lists as not serialized)."""

import pytest
import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import PrepareModuleInputOutput, PrepareModuleOutput, parallelize_module
from torch.distributed.tensor.parallel.style import ParallelStyle

from commlens.measure import fake_process_group
from commlens.plan.schema import load_schema
from commlens.plan.styles import BY_NAME, NOT_SERIALIZED, STYLES, entry_of
from commlens.plan.styles.entry import StyleEntry

# The constructor arguments a class cannot go without; every other class is built with none.
REQUIRED_ARGS = {
    PrepareModuleOutput: {"output_layouts": Shard(0), "desired_output_layouts": Replicate()},
    PrepareModuleInputOutput: {"output_layouts": Shard(0), "desired_output_layouts": Replicate()},
}
# transformers' layers: not torch ParallelStyles, applied by shard_param + install_forward.
TRANSFORMERS = [entry for entry in STYLES if entry.class_path.startswith("transformers.")]
TORCHTITAN = [entry for entry in STYLES if entry.class_path.startswith("torchtitan.")]
TORCH = [entry for entry in STYLES if entry not in TRANSFORMERS + TORCHTITAN]
IDS = [entry.name for entry in STYLES]
TORCH_IDS = [entry.name for entry in TORCH]


# transformers layers that hold no configuration: their fields (install_forward's keywords, the
# model config's value the layer reads) are set by commlens on the object it builds
BUILT_WITH_FIELDS = {"TransformersEpDispatchExpertsParallel": {},
                     "TransformersMlaKvAProjParallel": {"qk_rope_head_dim": 2}}


def minimal(entry):
    if entry.name in BUILT_WITH_FIELDS:
        return entry.construct(BUILT_WITH_FIELDS[entry.name], "test_style_table", "style")
    return entry.resolve()(**REQUIRED_ARGS.get(entry.resolve(), {}))


def declared(entry):
    return [attribute for attribute, _ in entry.fields]


def schema_styles():
    """Style name -> the field names its plan entry may carry, from plan_entry's oneOf."""
    schema = load_schema()
    out = {}
    for ref in schema["$defs"]["plan_entry"]["oneOf"]:
        body = schema["$defs"][ref["$ref"].rsplit("/", 1)[1]]
        out[body["properties"]["style"]["const"]] = set(body["properties"]) - {"fqn", "style"}
    return out


def test_table_lookups_cover_every_entry_once():
    assert (len(TORCH), len(TRANSFORMERS), len(TORCHTITAN)) == (6, 6, 5)
    assert list(BY_NAME) == [entry.name for entry in STYLES]
    assert [entry_of(entry.resolve()) for entry in STYLES] == list(STYLES)


@pytest.mark.parametrize("entry", TORCH, ids=TORCH_IDS)
def test_entry_is_a_torch_parallel_style_of_its_name(entry):
    assert issubclass(entry.cls, ParallelStyle)
    assert entry.cls.__module__ == "torch.distributed.tensor.parallel.style"
    assert getattr(torch.distributed.tensor.parallel, entry.name) is entry.cls


def test_transformers_entries_are_its_registered_layers():
    """The transformers entries are the classes of the layers capture records as themselves
    (OWN_STYLES, registered in ALL_PARALLEL_STYLES), named in a way commlens.plan can import
    without importing transformers."""
    import transformers.distributed.expert_parallel  # noqa: F401 - registers its EP layers on import
    from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES

    from commlens._transformers import OWN_STYLES

    assert all(isinstance(entry.cls, str) for entry in TRANSFORMERS)
    assert {type(ALL_PARALLEL_STYLES[name]) for name in OWN_STYLES} == {entry.resolve() for entry in TRANSFORMERS}
    for entry in TRANSFORMERS:
        assert entry.resolve().__name__ == entry.name.removeprefix("Transformers")


def test_table_styles_are_the_schema_styles():
    assert sorted(BY_NAME) == sorted(schema_styles())


@pytest.mark.parametrize("entry", STYLES, ids=IDS)
def test_entry_fields_are_the_schema_fields(entry):
    assert set(declared(entry)) == schema_styles()[entry.name]


def test_torchtitan_entries_are_its_moe_styles():
    """torchtitan's ExpertParallel, ExpertTensorParallel, TensorParallel (grouped experts),
    NoParallel and ReordererSequenceParallel (torch ParallelStyles), named so that commlens.plan
    imports them only when a plan uses them. ExpertParallel's instance attributes (and
    ExpertTensorParallel's, its subclass') are its hooks' per-call state, no field; TensorParallel
    and ReordererSequenceParallel have none; NoParallel's are exactly its declared fields."""
    from commlens.plan.styles.torchtitan_expert_parallel import RUNTIME_STATE

    assert [(entry.name, entry.class_path) for entry in TORCHTITAN] == [
        ("TorchtitanExpertParallel", "torchtitan.distributed.expert_parallel.ExpertParallel"),
        ("TorchtitanExpertTensorParallel", "torchtitan.distributed.expert_parallel.ExpertTensorParallel"),
        ("TorchtitanTensorParallel", "torchtitan.distributed.expert_parallel.TensorParallel"),
        ("TorchtitanNoParallel", "torchtitan.distributed.NoParallel"),
        ("TorchtitanReordererSequenceParallel", "torchtitan.distributed.expert_parallel.ReordererSequenceParallel")]
    for entry in TORCHTITAN:
        assert isinstance(entry.cls, str) and issubclass(entry.resolve(), ParallelStyle)
        assert f"{entry.resolve().__module__}.{entry.resolve().__name__}" == entry.class_path
    expert, expert_tensor, tensor, no_parallel, reorderer = TORCHTITAN
    for entry in (expert, expert_tensor):
        assert declared(entry) == [] and sorted(vars(minimal(entry))) == sorted(RUNTIME_STATE)
    assert declared(tensor) == [] and vars(minimal(tensor)) == {}
    assert declared(reorderer) == [] and vars(minimal(reorderer)) == {}
    assert sorted(vars(minimal(no_parallel))) == sorted(declared(no_parallel))


@pytest.mark.parametrize("entry", TORCH + TRANSFORMERS, ids=[entry.name for entry in TORCH + TRANSFORMERS])
def test_constructed_instance_has_exactly_the_declared_fields(entry):
    # A "pl1?" field is set only later, by the style's _apply.
    always = [attribute for attribute, kind in entry.fields if kind != "pl1?"]
    assert sorted(vars(minimal(entry))) == sorted(always)


@pytest.mark.parametrize("entry", TRANSFORMERS, ids=[entry.name for entry in TRANSFORMERS])
def test_applied_transformers_layer_has_only_declared_fields(entry):
    from commlens._transformers import apply_layer

    layer = minimal(entry)
    model = nn.Sequential(nn.Linear(4, 4))
    if entry.name == "TransformersEpDispatchExpertsParallel":  # an experts module: 4 experts' 3-D weights
        model[0] = nn.Module()
        model[0].gate_up_proj, model[0].down_proj = (nn.Parameter(torch.zeros(4, 8, 4)),
                                                     nn.Parameter(torch.zeros(4, 4, 4)))
        model[0].num_experts = 4
    with fake_process_group(2, "test_style_table"):
        apply_layer(model, init_device_mesh("cpu", (2,)), "0", layer)
    assert set(vars(layer)) == set(declared(entry))
    # shard_param: the row-wise layer's weight Shard(-1) (stored as Shard(1)), bias Replicate; the
    # expert-parallel one's grouped_gemm shards both by their first dim; the others leave them plain
    expected = {"TransformersRowwiseParallel": [(Shard(1),), (Replicate(),)],
                "TransformersEpDispatchExpertsParallel": [(Shard(0),), (Shard(0),)]}.get(entry.name, [None, None])
    assert [getattr(p, "placements", None) for p in model[0].parameters()] == expected


@pytest.mark.parametrize("entry", TORCH, ids=TORCH_IDS)
def test_applied_instance_has_only_declared_or_unserialized_fields(entry):
    style = minimal(entry)
    module = nn.Embedding(8, 4) if entry.name == "RowwiseParallel" else nn.Linear(4, 4)
    if entry.name == "SequenceParallel":
        module = nn.LayerNorm(4)
    with fake_process_group(2, "test_style_table"):
        parallelize_module(module, init_device_mesh("cpu", (2,)), style)
    attributes = set(vars(style))
    # Every field is on the object now (RowwiseParallel._apply set desired_input_layouts), and so
    # is every attribute the table says it leaves out: neither list is stale.
    assert attributes == set(declared(entry)) | set(NOT_SERIALIZED)
    if entry.name == "RowwiseParallel":
        assert style.desired_input_layouts == (Replicate(),)


def test_unserialized_attributes_are_parallel_style_attributes_with_a_reason():
    for attribute, reason in NOT_SERIALIZED.items():
        assert hasattr(ParallelStyle, attribute)
        assert reason.strip()


def test_entry_refuses_an_unknown_field_kind():
    with pytest.raises(ValueError, match=r"^Mine\.x: unknown field kind 'pl2' \(expected one of pl1, pl1\?, "):
        StyleEntry(name="Mine", cls=PrepareModuleOutput, fields=(("x", "pl2"),), construct=None)


def test_the_cxx_table_lists_the_same_styles_each_in_its_own_file():
    """ir/ParallelStyles.def (the C++ table) names the same styles in the same order, and each has
    its model in parallel/CLASS.cpp defining CLASS##Model()."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    cxx = re.findall(r"^STYLE\((\w+), (\w+)\)$", (root / "ir" / "ParallelStyles.def").read_text(), re.M)
    assert [cls for _, cls in cxx] == IDS
    for _, cls in cxx:
        source = root / "parallel" / f"{cls}.cpp"
        assert f"const StyleModel &{cls}Model()" in source.read_text(), source
