"""The plan format in one place: python/commlens/plan/plan.schema.json.

Both sides are checked against it: every plan commlens.plan writes (each example plan factory, a
captured plan, a plan using every field) is valid under the schema; the C++ reader
(frontends/PlanReader.cpp, driven through ``commlens check-plan``) reads every such plan and refuses,
in one line naming the plan file, each schema-invalid mutation of them (save the reader gaps listed
below); and the keys and names PlanReader.cpp spells are exactly those of the schema."""
import copy
import inspect
import json
import pathlib
import re
import subprocess
import sys

import pytest
import torch
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleInputOutput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
)

import examples.plans
from commlens import plan as planlib
from commlens._factory import call_model_factory
from commlens.capture import capture
from commlens.export import export_model
from commlens.plan import ActivationCheckpoint, FullyShard, Loss, Plan
from commlens.plan.schema import load_schema, schema_errors

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLAN_READER = ROOT / "frontends" / "PlanReader.cpp"

# Every example plan factory, with the options that change what is written.
EXAMPLE_SPECS = [
    "examples.plans:linear_colwise(tp=2)",
    "examples.plans:linear_colwise(tp=4, input_requires_grad=True, use_local_output=False, frozen=('bias',))",
    "examples.plans:linear_rowwise(tp=4)",
    "examples.plans:linear_rowwise(tp=2, output='shard', device_type='cuda')",
    "examples.plans:mlp_tp(tp=4, input_requires_grad=True)",
    "examples.plans:normalized_mlp_tp(tp=2)",
    "examples.plans:stacked_mlp_tp(tp=8)",
    "examples.plans:mlp_2d(dp=2, tp=4)",
    "examples.plans:mlp_nd()",
    "examples.plans:gpt2_tp(tp=4)",
    "examples.plans:gpt2_tp(tp=4, dp=2, loss='sum')",
    "examples.plans:gpt2_tp_loss_parallel(tp=8)",
    "examples.plans:gpt2_tp_sp(tp=4, dp=2)",
    "examples.plans:gpt2_tp_sp(tp=8, loss_parallel=True)",
    "examples.plans:llama_tp(tp=4)",
    "examples.plans:llama_tp(tp=4, sp=False, loss_parallel=True, frozen_after=('layers.0.*',))",
    "examples.plans:llama_2d(dp=2, tp=2)",
    "examples.plans:stacked_mlp_fsdp(dp=8)",
    "examples.plans:stacked_mlp_fsdp(dp=8, reshard_after_forward=2, mixed_precision='bf16', input_requires_grad=True)",
    "examples.plans:stacked_mlp_fsdp_roots(dp=4, input_requires_grad=True)",
    "examples.plans:stacked_mlp_fsdp_tp_nested(dp=2, tp=2)",
    "examples.plans:gpt2_fsdp(dp=8)",
    "examples.plans:gpt2_fsdp(dp=8, prefetch='explicit', reshard_after_forward=False)",
    "examples.plans:gpt2_hsdp(replicate=2, shard=4)",
    "examples.plans:gpt2_fsdp_tp(dp=2, tp=4, sp=True)",
    "examples.plans:llama_fsdp_tp(dp=2, tp=4)",
    "examples.plans:llama_fsdp_tp(dp=4, tp=2, reshard_after_forward=2, mixed_precision='bf16', prefetch='explicit', "
    "embedding_unit=True)",
    "examples.plans:llama_hsdp_tp(replicate=2, shard=2, tp=2)",
    "examples.plans:with_ac(plan='llama_fsdp_tp', dp=2, tp=4)",
    "examples.plans:with_ac(plan='llama_fsdp_tp', dp=2, tp=4, early_stop=False, embedding_unit=True)",
    "examples.plans:with_ac(plan='llama_fsdp_tp', dp=2, tp=4, prefetch='explicit', "
    "save_ops=('aten.mm.default', '_c10d_functional.reduce_scatter_tensor.default'))",
    "examples.plans:with_ac(plan='gpt2_tp', tp=4, wrapper=False)",
    "examples.plans:stacked_mlp_fsdp_tp_nested_ac(dp=2, tp=2)",
    "examples.plans:gated_tp(tp=4)",
    "examples.plans:gated_tp(tp=2, root_kwargs=True, context_requires_grad=True)",
    "examples.plans:shared_mlp_tp(tp=4)",
    "examples.plans:shared_mlp_tp(tp=4, prepare=True, input_requires_grad=True, loss='cross_entropy')",
    "examples.plans:shared_mlp_fsdp(dp=2, tp=2, units=('block.w1', 'block'), reshard_after_forward=2)",
    "examples.plans:shared_mlp_fsdp(dp=4, hsdp=2, requires_gradient_sync=False)",
]

# Plans captured from the parallelize functions of examples/parallelize.py (tests/python/test_capture.py).
CAPTURES = [
    ("examples.mlp:mlp", "examples.parallelize:mlp_placed(dp=2, tp=2)", 4),
    ("examples.llama:llama", "examples.parallelize:llama_fsdp_tp(dp=2, tp=4, ac='sac', prefetch=True)", 8),
]


def every_field_plan():
    """A plan with what no example plan writes: PrepareModuleOutput and PrepareModuleInputOutput,
    Partial and _StridedShard placements, CPU offload, float16, an int reshard_after_forward, a list unit with a
    gradient divide factor, an every-second-mm policy, loss targets from an input and float32
    logits, src_data_rank None, torchtitan's NoParallel with its layouts, transformers' expert dispatch
    and MLA layers with their fields, module subclasses, a unit's shard dims, a flattened mesh dim, a forced sum reduction."""
    from commlens.plan.styles import (torchtitan_no_parallel, transformers_ep_dispatch_experts,
                                      transformers_mla_kv_a_proj)

    no_parallel = torchtitan_no_parallel.ENTRY.resolve()
    dispatch = transformers_ep_dispatch_experts.ENTRY.construct(
        {"shares_batch": True, "ep_implementation": "all_reduce"}, "test", "experts")
    dispatch_tp_inside = transformers_ep_dispatch_experts.ENTRY.construct({"tp_mesh_dim": "dp"}, "test", "experts2")
    mla = transformers_mla_kv_a_proj.ENTRY.construct({"qk_rope_head_dim": 8}, "test", "kv_a")
    rep, s0 = Replicate(), Shard(0)
    return Plan(
        name="every_field", mesh_shape=(2, 4), mesh_dim_names=("dp", "tp"), device_type="cuda", tp_mesh_dim="tp",
        flattened_dims={"world": ("dp", "tp")},
        parallelize_plan={
            "w1": ColwiseParallel(input_layouts=rep, output_layouts=Shard(1), use_local_output=False),
            "w2": RowwiseParallel(input_layouts=Shard(1), output_layouts=Partial("max")),
            "norm": SequenceParallel(sequence_dim=0),
            "blk": PrepareModuleInput(input_layouts=(s0, None), desired_input_layouts=(rep, None),
                                      input_kwarg_layouts={"mask": s0}, desired_input_kwarg_layouts={"mask": rep},
                                      use_local_output=True),
            "head": PrepareModuleOutput(output_layouts=(Partial(), None), desired_output_layouts=(rep, None)),
            "": PrepareModuleInputOutput(input_layouts=(rep,), desired_input_layouts=(rep,), output_layouts=(s0,),
                                         desired_output_layouts=(rep,), use_local_input=True),
            "gate": no_parallel(input_layout=s0, output_layout=Shard(1), use_local_output=False),
            "experts": dispatch,
            "experts2": dispatch_tp_inside,
            "kv_a": mla,
        },
        fully_shard=(
            FullyShard("layers.*", "dp", reshard_after_forward=2, offload_policy=CPUOffloadPolicy(pin_memory=False),
                       mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16, output_dtype=torch.float32,
                                                      cast_forward_inputs=False),
                       requires_gradient_sync=False, requires_all_reduce=False, forward_prefetch=("layers.1",),
                       backward_prefetch=["layers.0"]),
            FullyShard(("norm", "head"), "dp", reshard_after_forward=False, gradient_divide_factor=1.0,
                       force_sum_reduction_for_comms=True),
            FullyShard("", ("dp",), reshard_after_forward=True, shard_dims={"w1.weight": 1})),
        activation_checkpoint=(ActivationCheckpoint("layers.*", save_ops=("aten.mm.default",), early_stop=False,
                                                    recompute_every_second=("aten.mm.default",),
                                                    recompute_mm_rhs_shapes=((128, 8),)),
                               ActivationCheckpoint("out", wrapper=False)),
        placements={"w3.weight": {"tp": s0}, "w3.bias": (rep, Partial("avg")),
                    "w4.weight": {"tp": _StridedShard(1, split_factor=2)}},
        input_placements={0: (s0, rep), "mask": {"dp": s0}},
        inputs_requires_grad=(0,),
        frozen=("w1.bias",), frozen_after_parallelize=("norm.*",),
        loss=Loss.cross_entropy(targets="input:1", seed=3, reduction="sum", ignore_index=-1, logits_dtype="float32"),
        loss_parallel=True, src_data_rank=None,
        module_subclasses={"m.GatedLinear": "torch.nn.modules.linear.Linear",
                           "m.ScaledEmbedding": "torch.nn.modules.sparse.Embedding"},
    )


@pytest.fixture(scope="module")
def written_plans():
    """{spec: the JSON document commlens.plan writes}."""
    docs = {spec: planlib.to_json(planlib.resolve_plan(spec), spec) for spec in EXAMPLE_SPECS}
    docs["every_field_plan()"] = planlib.to_json(every_field_plan())
    return docs


# ------------------------------------------------------------------- commlens.plan writes the schema


def test_every_example_factory_is_written():
    factories = {name for name, f in vars(examples.plans).items()
                 if inspect.isfunction(f) and f.__module__ == "examples.plans" and not name.startswith("_")}
    written = {spec.split(":")[1].split("(")[0] for spec in EXAMPLE_SPECS}
    assert factories == written


def test_every_written_plan_is_schema_valid(written_plans):
    invalid = {spec: schema_errors(doc) for spec, doc in written_plans.items() if schema_errors(doc)}
    assert invalid == {}


@pytest.mark.parametrize("model, parallelize, world_size", CAPTURES)
def test_captured_plans_are_schema_valid(model, parallelize, world_size):
    doc = planlib.to_json(capture(model, parallelize, world_size, loss="cross_entropy"))
    assert schema_errors(doc) == []


def test_checked_in_plans_are_schema_valid():
    """The plan files the lit and C++ tests read (tests/lit/Inputs, ...)."""
    plans = {}
    for path in sorted(ROOT.glob("tests/**/*.json")):
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and doc.get("format") == "commlens-plan":
            plans[str(path.relative_to(ROOT))] = schema_errors(doc)
    assert len(plans) >= 10
    assert {path: errors for path, errors in plans.items() if errors} == {}


def test_the_every_field_plan_writes_every_schema_key(written_plans):
    """Every property the schema names is written by some plan above (so every key is checked
    against both readers)."""
    schema = load_schema()
    seen = set()

    def walk(value):
        if isinstance(value, dict):
            seen.update(value)
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for doc in written_plans.values():
        walk(doc)
    assert set().union(*schema_objects(schema).values()) - seen == set()


def test_the_validator_names_each_problem(written_plans):
    doc = copy.deepcopy(written_plans["examples.plans:gpt2_fsdp_tp(dp=2, tp=4, sp=True)"])
    doc["mesh"]["shape"] = [0, 4]
    doc["parallelize"][0]["plan"][0]["input_layouts"] = ["Shard(x)"]
    doc["fully_shard"][0]["mp_policy"]["param_dtype"] = "float64"
    doc["loss"]["seed"] = True
    doc["colour"] = "red"
    assert schema_errors(doc) == [
        "mesh.shape[0]: 0 is less than 1",
        "parallelize[0].plan[0]: matches 0 of the oneOf alternatives",
        'fully_shard[0].mp_policy.param_dtype: "float64" is not one of ["float32", "bfloat16", "float16", null]',
        "loss.seed: expected integer, got true",
        "/: unknown key 'colour'",
    ]


# ------------------------------------------------------------------------------ schema mutations

WRONG_TYPE = {bool: "yes", int: "7", float: "7", str: 7, list: {"a": 1}, dict: ["a"]}
# Objects whose keys are names the plan chooses (patterns, inputs, keyword arguments).
MAPS = {"placements", "inputs", "input_kwarg_layouts", "desired_input_kwarg_layouts"}


def mutations(doc):
    """``[(kind, path, mutated document)]``: every object of ``doc`` with an unknown key, each key
    removed, each non-null value of the wrong JSON type, each string replaced by ``"bogus"``, each
    Shard placement by Replicate() and each int by 0.  ``path`` names the mutated place, with ``[Style]`` for a plan entry of that
    style and ``[*]`` for other list items."""

    def walk(node, steps, label):
        if isinstance(node, dict):
            yield ("unknown key", label, steps + ["colour"], 1)
            for key, value in node.items():
                child = label + (".*" if label.rsplit(".", 1)[-1] in MAPS else f".{key}" if label else key)
                yield ("missing", child, steps + [key], KeyError)
                yield from value_mutations(value, steps + [key], child)
        elif isinstance(node, list):
            for i, item in enumerate(node):
                child = label + (f"[{item['style']}]" if isinstance(item, dict) and "style" in item else "[*]")
                yield from value_mutations(item, steps + [i], child)

    def value_mutations(value, steps, label):
        if value is not None:
            yield ("wrong type", label, steps, WRONG_TYPE[type(value)])
        if isinstance(value, str):
            yield ("bogus string", label, steps, "bogus")
        if isinstance(value, str) and value.startswith("Shard("):
            yield ("not a Shard", label, steps, "Replicate()")
        if type(value) is int:
            yield ("zero", label, steps, 0)
        yield from walk(value, steps, label)

    return [(kind, label, mutated(doc, steps, new)) for kind, label, steps, new in walk(doc, [], "")]


# Schema-invalid mutations PlanReader.cpp accepts today: (mutation, path) -> why.  The test fails
# when the reader refuses one (drop it here) or accepts another (a new disagreement).
KNOWN_READER_GAPS = {}

# The plans whose mutations are read: together they hold every object kind of the schema.
MUTATED = ["every_field_plan()", "examples.plans:mlp_nd()",
           "examples.plans:gated_tp(tp=2, root_kwargs=True, context_requires_grad=True)",
           "examples.plans:with_ac(plan='llama_fsdp_tp', dp=2, tp=4, prefetch='explicit', "
           "save_ops=('aten.mm.default', '_c10d_functional.reduce_scatter_tensor.default'))"]


@pytest.fixture(scope="module")
def mlp_pt2(tmp_path_factory):
    model, args, kwargs = call_model_factory("examples.mlp:mlp")
    pt2 = tmp_path_factory.mktemp("program") / "mlp.pt2"
    torch.export.save(export_model(model, args, kwargs), str(pt2))
    return pt2


# No mesh has this many devices (PlanReader.cpp refuses more than 2^20): every plan the reader reads
# is then refused by check-plan's next check, the world size, in a line of its own.
WORLD_SIZE = 2**20 + 1


@pytest.fixture(scope="module")
def plan_reader(mlp_pt2, commlens_bin, tmp_path_factory):
    """read(doc): None when PlanReader.cpp reads the plan document ``doc``, else its one-line error.
    Driven through ``commlens check-plan --world-size WORLD_SIZE``: a plan it reads fails the world
    size check that follows."""
    path = tmp_path_factory.mktemp("plan_reader") / "plan.json"
    read_ok = re.compile(rf"mesh shape .* has \d+ devices but the world size is {WORLD_SIZE}")

    def read(doc):
        path.write_text(json.dumps(doc))
        r = subprocess.run([commlens_bin, "check-plan", str(mlp_pt2), "--plan", str(path), "--world-size",
                            str(WORLD_SIZE)], capture_output=True, text=True, timeout=60)
        prefix = f"commlens: error: {path}: "
        assert r.returncode == 2 and r.stdout == "" and r.stderr.startswith(prefix) and r.stderr.count("\n") == 1, r
        message = r.stderr[len(prefix):-1]
        return None if read_ok.fullmatch(message) else message

    return read


def test_plan_reader_reads_every_written_plan(written_plans, plan_reader):
    refused = {spec: plan_reader(doc) for spec, doc in written_plans.items() if plan_reader(doc) is not None}
    assert refused == {}


def test_plan_reader_refuses_every_schema_invalid_mutation(written_plans, plan_reader):
    accepted, counted = set(), 0
    for spec in MUTATED:
        for kind, label, doc in mutations(written_plans[spec]):
            if schema_errors(doc):
                counted += 1
                if plan_reader(doc) is None:
                    accepted.add((kind, label))
    assert counted > 500
    assert accepted == set(KNOWN_READER_GAPS)


def mutated(doc, path, value):
    """``doc`` with the value at ``path`` (keys and indexes) replaced by ``value`` (removed: KeyError)."""
    doc = copy.deepcopy(doc)
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    if value is KeyError:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


# every_field_plan()'s plan entries: 0 w1 Colwise, 1 w2 Rowwise, 4 head PrepareModuleOutput.
READER_MESSAGES = [
    (["version"], 2, "version: unsupported plan version 2 (commlens reads version 1)"),
    (["format"], "plan", 'format: not a commlens plan (expected "commlens-plan")'),
    (["colour"], 1, "unknown key 'colour'"),
    (["mesh", "shape"], [2, 0], "mesh.shape[1]: mesh sizes must be positive"),
    (["mesh", "device_type"], "tpu", "mesh.device_type: device type 'tpu' (expected \"cpu\" or \"cuda\")"),
    (["parallelize", 0, "plan"], KeyError, "parallelize[0]: missing required field 'plan'"),
    (["parallelize", 0, "plan", 0, "style"], "FooParallel",
     "parallelize[0].plan[0]: unknown parallel style 'FooParallel'"),
    (["parallelize", 0, "plan", 0, "input_layouts"], ["Shard(x)"],
     "parallelize[0].plan[0].input_layouts[0]: bad placement 'Shard(x)' (expected Shard(d), Replicate(), "
     "Partial(op) or _StridedShard(dim=d, sf=k))"),
    (["parallelize", 0, "plan", 1, "colour"], 1, "parallelize[0].plan[1]: unknown key 'colour'"),
    (["parallelize", 0, "plan", 0, "use_local_output"], "yes",
     "parallelize[0].plan[0].use_local_output: expected a boolean"),
    (["parallelize", 0, "plan", 4, "output_layouts"], KeyError,
     "parallelize[0].plan[4]: missing required field 'output_layouts'"),
    (["fully_shard", 0, "mesh_dims"], ["dp", "tp", "x"],
     "fully_shard[0].mesh_dims[2]: mesh dim 'x' is not in the mesh (dim names: ['dp', 'tp'])"),
    (["fully_shard", 0, "mp_policy", "param_dtype"], "float64",
     "fully_shard[0].mp_policy.param_dtype: dtype 'float64' (expected \"float32\", \"bfloat16\" or \"float16\")"),
    (["fully_shard", 0, "offload_policy", "kind"], "disk",
     "fully_shard[0].offload_policy.kind: offload policy 'disk' (expected \"none\" or \"cpu\")"),
    (["fully_shard", 0, "reshard_after_forward"], 0,
     "fully_shard[0].reshard_after_forward: reshard_after_forward 0 is not a factor of the shard group size 2"),
    (["activation_checkpoint", 0, "save_ops"], ["mm"],
     "activation_checkpoint[0].save_ops[0]: 'mm' is not an op overload name (namespace.op.overload, e.g. "
     "'aten.mm.default')"),
    (["activation_checkpoint", 0, "early_stop"], "no", "activation_checkpoint[0].early_stop: expected a boolean"),
    (["loss", "kind"], "mse", "loss.kind: unknown loss 'mse' (expected \"sum\" or \"cross_entropy\")"),
    (["loss", "ignore_index"], "7", "loss.ignore_index: expected an integer"),
    (["src_data_rank"], "0", "src_data_rank: expected an integer"),
    (["placements", "w3.bias", "placements"], ["R", "Q"],
     "placements.w3.bias.placements[1]: bad placement 'Q' (expected Shard(d), Replicate(), Partial(op) or _StridedShard(dim=d, sf=k))"),
    (["inputs", "0", "requires_grad"], 1, "inputs.0.requires_grad: expected a boolean"),
]


@pytest.mark.parametrize("path, value, message", READER_MESSAGES)
def test_plan_reader_message_for_a_schema_invalid_plan(written_plans, plan_reader, path, value, message):
    doc = mutated(written_plans["every_field_plan()"], path, value)
    assert schema_errors(doc) != []
    assert plan_reader(doc) == message


# ------------------------------------------------------- the names PlanReader.cpp spells in its source

# Schema names PlanReader.cpp never spells: what it does not read or check.
UNREAD_BY_PLAN_READER = {}
# Schema objects whose keys PlanReader.cpp does not check (rejectUnknownKeys): KNOWN_READER_GAPS.
KEYS_UNCHECKED_BY_PLAN_READER = set()


def plan_reader_source():
    """The C++ plan reader without its // comments: PlanReader.cpp, each style's `decode` (its own
    fields, in parallel/CLASS.cpp) and the style names of ir/ParallelStyles.def, quoted."""
    text = PLAN_READER.read_text()
    for path in sorted((ROOT / "parallel").glob("*.cpp")):
        text += "".join(re.findall(r"  void decode\(.*?\n  \}\n", path.read_text(), re.S))
    styles = re.findall(r"^STYLE\(\w+, (\w+)\)$", (ROOT / "ir" / "ParallelStyles.def").read_text(), re.M)
    text += "".join(f'"{name}"' for name in styles)
    return re.sub(r"//[^\n]*", "", text)


def schema_objects(schema):
    """{name: its property names} for every object the schema describes: ``plan`` (the top level),
    each ``$defs`` entry, and ``<name>[i]`` for the i-th alternative of one."""
    objects = {}

    def visit(name, node):
        if "properties" in node:
            objects[name] = set(node["properties"])
        for i, alternative in enumerate(node.get("oneOf", [])):
            if "properties" in alternative:
                visit(f"{name}[{i}]", alternative)

    visit("plan", schema)
    for name, node in schema["$defs"].items():
        visit(name, node)
    return objects


def schema_names(schema):
    """Every key and string value (const, enum) the schema spells."""
    names = set()

    def walk(node):
        if isinstance(node, dict):
            names.update(node.get("properties", {}))
            names.update(v for v in [node.get("const"), *node.get("enum", [])] if isinstance(v, str))
            for item in node.values():
                walk(item)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(schema)
    return names


def test_plan_reader_spells_the_schema_names():
    """A key or value PlanReader.cpp reads that the schema lacks, or one of the schema's it never
    spells (unless listed as unread), fails here."""
    # names, and the torch classes module_subclasses names
    spelled = set(re.findall(r'"([A-Za-z_][A-Za-z0-9_]*|commlens-plan|torch\.nn\.[A-Za-z0-9_.]+)"',
                             plan_reader_source()))
    assert spelled == schema_names(load_schema()) - set(UNREAD_BY_PLAN_READER)


def test_plan_reader_checks_the_keys_of_the_schema_objects():
    """Each rejectUnknownKeys list of PlanReader.cpp is the key set of a schema object, and every
    schema object has one, but those listed as unchecked."""
    checked = [set(re.findall(r'"([^"]+)"', keys))
               for keys in re.findall(r"rejectUnknownKeys\(\{([^}]*)\}\)", plan_reader_source())]
    objects = schema_objects(load_schema())
    assert sorted(map(sorted, checked)) == sorted(sorted(keys) for name, keys in objects.items()
                                                  if name not in KEYS_UNCHECKED_BY_PLAN_READER)


# ---------------------------------------------------------------------------- docs/plan-format.md


def test_plan_format_field_tables_are_generated_from_the_schema():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_plan_format_tables.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
