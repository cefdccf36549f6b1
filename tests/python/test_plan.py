"""Plan JSON: round trips, exact encoding, placement strings, and errors."""

import dataclasses
import json
import re

import pytest
import torch
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleInputOutput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
)

from commlens import CommlensError
from commlens._factory import call_factory
from commlens.plan import (
    FullyShard,
    Loss,
    Plan,
    PlanError,
    check_against_model,
    dumps,
    from_json,
    load,
    match_modules,
    placement_from_str,
    style_fields,
    style_from_json,
    style_to_json,
    to_json,
    validate,
)
from conftest import error_lines

EXAMPLE_PLANS = [
    "examples.plans:linear_colwise(tp=2)",
    "examples.plans:linear_rowwise(tp=8, output='shard', input_requires_grad=True)",
    "examples.plans:mlp_tp(tp=4, input_requires_grad=True)",
    "examples.plans:mlp_tp(tp=4, frozen=('w1.*',))",
    "examples.plans:stacked_mlp_tp(tp=8)",
    "examples.plans:mlp_2d(dp=2, tp=4)",
    "examples.plans:gpt2_tp(tp=4)",
    "examples.plans:gpt2_tp(tp=4, dp=2, loss='sum')",
    "examples.plans:gpt2_tp_loss_parallel(tp=4)",
    "examples.plans:gpt2_tp_sp(tp=8, loss_parallel=True)",
    "examples.plans:llama_tp(tp=4)",
    "examples.plans:llama_tp(tp=4, sp=False, device_type='cuda')",
    "examples.plans:llama_tp(tp=2, loss_parallel=True)",
    "examples.plans:llama_2d(dp=2, tp=4)",
    "examples.plans:stacked_mlp_fsdp(dp=8)",
    "examples.plans:stacked_mlp_fsdp(dp=4, reshard_after_forward=2, mixed_precision='bf16', "
    "input_requires_grad=True, frozen=('layers.0.*',))",
    "examples.plans:gpt2_fsdp(dp=8)",
    "examples.plans:gpt2_fsdp(dp=4, reshard_after_forward=False, mixed_precision='bf16', loss='sum')",
    "examples.plans:gpt2_hsdp(replicate=2, shard=4)",
    "examples.plans:gpt2_hsdp(replicate=4, shard=2, reshard_after_forward=True, mixed_precision='bf16')",
    "examples.plans:gpt2_fsdp_tp(dp=2, tp=4)",
    "examples.plans:gpt2_fsdp_tp(dp=2, tp=2, sp=True, loss_parallel=True, mixed_precision='bf16')",
    "examples.plans:llama_fsdp_tp(dp=2, tp=4)",
    "examples.plans:llama_fsdp_tp(dp=4, tp=2, sp=False, loss_parallel=True, reshard_after_forward=False)",
    "examples.plans:llama_hsdp_tp(replicate=2, shard=2, tp=2)",
    "examples.plans:llama_hsdp_tp(replicate=2, shard=4, tp=2, sp=False, mixed_precision='bf16')",
    "examples.plans:gpt2_fsdp(dp=8, prefetch='explicit')",
    "examples.plans:gpt2_fsdp(dp=4, prefetch='explicit', n_layers=4, reshard_after_forward=False)",
    "examples.plans:llama_fsdp_tp(dp=2, tp=4, prefetch='explicit')",
    "examples.plans:llama_fsdp_tp(dp=4, tp=2, sp=False, prefetch='explicit', n_layers=1, mixed_precision='bf16')",
    "examples.plans:mlp_nd()",
    "examples.plans:mlp_nd(dp=4, tp=2, device_type='cuda')",
]


def _plan_fields(plan):
    """Everything in a Plan, styles expanded to their instance fields."""
    steps = [(dim, {k: style_fields(v) for k, v in d.items()}) for dim, d in plan.parallelize_steps()]
    return dict(
        steps=steps, mesh_shape=tuple(plan.mesh_shape),
        mesh_dim_names=None if plan.mesh_dim_names is None else tuple(plan.mesh_dim_names),
        device_type=plan.device_type, placements=plan.placements,
        input_placements=plan.input_placements, inputs_requires_grad=tuple(plan.inputs_requires_grad),
        frozen=tuple(plan.frozen), loss=plan.loss, loss_parallel=plan.loss_parallel,
        src_data_rank=plan.src_data_rank, name=plan.name,
        fully_shard=[_unit_fields(u) for u in plan.fully_shard])


def _unit_fields(unit):
    """A FullyShard's fields, the policy objects with their exact classes."""
    return dict(fqn=unit.fqn, mesh_dims=unit.mesh_dims, reshard_after_forward=unit.reshard_after_forward,
                reshard_type=type(unit.reshard_after_forward),
                mp_policy=(type(unit.mp_policy), unit.mp_policy),
                offload_policy=(type(unit.offload_policy), vars(unit.offload_policy)),
                requires_gradient_sync=unit.requires_gradient_sync,
                requires_all_reduce=unit.requires_all_reduce,
                forward_prefetch=unit.forward_prefetch, backward_prefetch=unit.backward_prefetch)


def _roundtrip(plan, source=None):
    text = dumps(plan, source)
    loaded = from_json(json.loads(text), "test")
    assert dumps(loaded) == text  # serialise -> load -> serialise is identical
    assert _plan_fields(loaded) == _plan_fields(plan)  # loaded objects' fields equal the originals'
    return text, loaded


@pytest.mark.parametrize("spec", EXAMPLE_PLANS)
def test_example_plans_roundtrip(spec, tmp_path):
    plan = call_factory(spec)
    text, _ = _roundtrip(plan, spec)
    path = tmp_path / "plan.json"
    path.write_text(text)
    assert dumps(load(str(path))) == text


NON_DEFAULT_STYLES = {
    "colwise": ColwiseParallel(input_layouts=Shard(0), output_layouts=Replicate(), use_local_output=False),
    "rowwise": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False),
    "sequence": SequenceParallel(sequence_dim=0, use_local_output=True),
    "prep_in": PrepareModuleInput(
        input_layouts=(Shard(0), None), desired_input_layouts=(Replicate(), None),
        input_kwarg_layouts={"mask": Shard(1)}, desired_input_kwarg_layouts={"mask": Replicate()},
        use_local_output=True),
    "prep_in_single": PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=Replicate()),
    "prep_out": PrepareModuleOutput(output_layouts=(Partial("avg"), None),
                                    desired_output_layouts=(Replicate(), None), use_local_output=False),
    "prep_inout": PrepareModuleInputOutput(
        input_layouts=Shard(0), desired_input_layouts=Replicate(),
        input_kwarg_layouts={"y": Shard(0)}, desired_input_kwarg_layouts={"y": Replicate()},
        use_local_input=True, output_layouts=(Replicate(), None),
        desired_output_layouts=(Shard(0), None), use_local_output=False),
}


@pytest.mark.parametrize("key", sorted(NON_DEFAULT_STYLES))
def test_style_roundtrip_non_default(key):
    style = NON_DEFAULT_STYLES[key]
    enc = style_to_json(style)
    back = style_from_json(json.loads(json.dumps(enc)))
    assert type(back) is type(style)
    assert style_fields(back) == style_fields(style)
    assert style_to_json(back) == enc


def test_rowwise_desired_input_layouts_kept_when_present():
    # RowwiseParallel._apply sets desired_input_layouts (Replicate for nn.Embedding)
    style = RowwiseParallel(input_layouts=Replicate())
    style.desired_input_layouts = (Replicate(),)
    enc = style_to_json(style)
    assert enc["desired_input_layouts"] == ["Replicate()"]
    assert style_fields(style_from_json(enc)) == style_fields(style)
    assert "desired_input_layouts" not in style_to_json(RowwiseParallel())


def test_style_encoding_exact():
    # Field names and defaults from torch/distributed/tensor/parallel/style.py:
    # ColwiseParallel: input (Replicate(),), output (Shard(-1),), desired input (Replicate(),)
    assert style_to_json(ColwiseParallel()) == {
        "style": "ColwiseParallel", "input_layouts": ["Replicate()"], "output_layouts": ["Shard(-1)"],
        "desired_input_layouts": ["Replicate()"], "use_local_output": True}
    # RowwiseParallel: input (Shard(-1),), output (Replicate(),)
    assert style_to_json(RowwiseParallel(output_layouts=Shard(1))) == {
        "style": "RowwiseParallel", "input_layouts": ["Shard(-1)"], "output_layouts": ["Shard(1)"],
        "use_local_output": True}
    # SequenceParallel: sequence_sharding = (Shard(sequence_dim),), use_local_output False
    assert style_to_json(SequenceParallel()) == {
        "style": "SequenceParallel", "sequence_sharding": ["Shard(1)"], "use_local_output": False}
    assert style_to_json(NON_DEFAULT_STYLES["prep_in"]) == {
        "style": "PrepareModuleInput", "input_layouts": ["Shard(0)", None],
        "desired_input_layouts": ["Replicate()", None], "input_kwarg_layouts": {"mask": "Shard(1)"},
        "desired_input_kwarg_layouts": {"mask": "Replicate()"}, "use_local_output": True,
        "with_kwargs": True}
    assert style_to_json(PrepareModuleInput()) == {
        "style": "PrepareModuleInput", "input_layouts": None, "desired_input_layouts": None,
        "input_kwarg_layouts": {}, "desired_input_kwarg_layouts": {}, "use_local_output": False,
        "with_kwargs": False}
    assert style_to_json(NON_DEFAULT_STYLES["prep_out"]) == {
        "style": "PrepareModuleOutput", "output_layouts": ["Partial(avg)", None],
        "desired_output_layouts": ["Replicate()", None], "use_local_output": False}
    enc = style_to_json(NON_DEFAULT_STYLES["prep_inout"])
    assert enc["style"] == "PrepareModuleInputOutput"
    assert enc["prepare_module_input"]["use_local_output"] is True  # = use_local_input
    assert enc["prepare_module_output"]["desired_output_layouts"] == ["Shard(0)", None]


def test_full_plan_roundtrip_all_features():
    plan = Plan(
        mesh_shape=(2, 4), mesh_dim_names=("dp", "tp"), device_type="cuda",
        parallelize_plan=[("tp", {k: v for k, v in NON_DEFAULT_STYLES.items()}),
                          ("dp", {"head": ColwiseParallel()})],
        placements={"w1.weight": (Replicate(), Shard(0)), "layers.*.bias": {"tp": Partial("max")}},
        input_placements={0: {"dp": Shard(0)}, "mask": (Replicate(), Replicate())},
        inputs_requires_grad=(0, "extra"), frozen=("emb.*", "norm.weight"),
        loss=Loss.cross_entropy(targets="input:1", seed=7, reduction="sum", ignore_index=3),
        loss_parallel=True, src_data_rank=None, name="everything")
    text, loaded = _roundtrip(plan, "my.spec:f(a=1)")
    obj = json.loads(text)
    assert obj["parallelize"][1] == {"mesh_dim": "dp", "plan": [{"fqn": "head", **style_to_json(ColwiseParallel())}]}
    assert obj["placements"] == {
        "w1.weight": {"mesh_dims": None, "placements": ["Replicate()", "Shard(0)"]},
        "layers.*.bias": {"mesh_dims": ["tp"], "placements": ["Partial(max)"]}}
    assert obj["inputs"] == {
        "0": {"requires_grad": True, "placements": {"mesh_dims": ["dp"], "placements": ["Shard(0)"]}},
        "mask": {"requires_grad": False, "placements": {"mesh_dims": None, "placements": ["Replicate()", "Replicate()"]}},
        "extra": {"requires_grad": True, "placements": None}}
    assert obj["loss"] == {"kind": "cross_entropy", "targets": "input:1", "seed": 7,
                           "reduction": "sum", "ignore_index": 3}
    assert obj["source"] == "my.spec:f(a=1)" and obj["src_data_rank"] is None


def test_a_two_dimensional_step_mesh_roundtrips():
    """parallelize_module on mesh["dp", "tp"] (torchtitan's ExpertTensorParallel on [ep, etp]): the
    step's mesh_dim is the list of its dims in JSON, a tuple in the Plan."""
    plan = Plan(mesh_shape=(2, 4), mesh_dim_names=("dp", "tp"),
                parallelize_plan=[("tp", {"w1": ColwiseParallel()}), (("dp", "tp"), {"w2": ColwiseParallel()})])
    text, loaded = _roundtrip(plan, "two_d")
    assert [step["mesh_dim"] for step in json.loads(text)["parallelize"]] == ["tp", ["dp", "tp"]]
    assert [dim for dim, _styles in loaded.parallelize_steps()] == ["tp", ("dp", "tp")]
    for dims in (("tp", "tp"), ("dp", "tp", "dp")):
        with pytest.raises(PlanError, match=re.escape(f"parallelize_plan mesh dims {dims!r}: a sub-mesh is two "
                                                      "distinct dims")):
            validate(dataclasses.replace(plan, parallelize_plan=[(dims, {"w2": ColwiseParallel()})]))
    with pytest.raises(PlanError, match=re.escape("parallelize_plan mesh dims ('tp', 'dp'): not in the mesh's order "
                                                  "(torch raises \"Mesh dim indices should be in ascending order\")")):
        validate(dataclasses.replace(plan, parallelize_plan=[(("tp", "dp"), {"w2": ColwiseParallel()})]))


def test_mlp_plan_json_exact():
    obj = to_json(call_factory("examples.plans:mlp_tp(tp=4, input_requires_grad=True)"))
    assert obj == {
        "format": "commlens-plan", "version": 1, "name": "mlp_tp", "source": None,
        "mesh": {"shape": [4], "dim_names": ["tp"], "device_type": "cpu"},
        "parallelize": [{"mesh_dim": "tp", "plan": [
            {"fqn": "w1", "style": "ColwiseParallel", "input_layouts": ["Replicate()"],
             "output_layouts": ["Shard(-1)"], "desired_input_layouts": ["Replicate()"],
             "use_local_output": True},
            {"fqn": "w2", "style": "RowwiseParallel", "input_layouts": ["Shard(-1)"],
             "output_layouts": ["Replicate()"], "use_local_output": True}]}],
        "fully_shard": [],
        "src_data_rank": 0, "placements": {},
        "inputs": {"0": {"requires_grad": True, "placements": None}},
        "frozen": [], "frozen_after_parallelize": [], "loss": {"kind": "sum"}, "loss_parallel": False}


@pytest.mark.parametrize("text, placement", [
    ("Shard(0)", Shard(0)), ("S(2)", Shard(2)), ("Shard(dim=-1)", Shard(-1)), ("Shard( 1 )", Shard(1)),
    ("Replicate()", Replicate()), ("R", Replicate()),
    ("Partial()", Partial()), ("P", Partial()), ("Partial(sum)", Partial("sum")),
    ("P(max)", Partial("max")), ("Partial(reduce_op='avg')", Partial("avg")),
])
def test_placement_strings(text, placement):
    p = placement_from_str(text)
    assert type(p) is type(placement) and p == placement


@pytest.mark.parametrize("text, message", [
    ("Shard(x)", "t: bad placement 'Shard(x)' at w (expected Shard(d), Replicate(), Partial(op) or _StridedShard(dim=d, sf=k))"),
    ("Replicated", "t: bad placement 'Replicated' at w (expected Shard(d), Replicate(), Partial(op) or _StridedShard(dim=d, sf=k))"),
    ("Partial(mean)", "t: bad placement 'Partial(mean)' at w: unknown reduce op 'mean' "
                      "(expected one of sum, avg, max, min, product)"),
    (3, "t: bad placement 3 at w: expected a string"),
])
def test_placement_string_errors(text, message):
    with pytest.raises(PlanError) as info:
        placement_from_str(text, "t", "w")
    assert str(info.value) == message


def test_match_modules_like_parallelize_module():
    model, _ = call_factory("examples.gpt2:gpt2(n_layers=3)")
    assert match_modules(model, "layers.*.attn.wq") == ["layers.0.attn.wq", "layers.1.attn.wq", "layers.2.attn.wq"]
    assert match_modules(model, "layers.[02].mlp") == ["layers.0.mlp", "layers.2.mlp"]
    assert match_modules(model, "") == [""]
    assert match_modules(model, "layers.*.attn.w9") == []


class MyColwise(ColwiseParallel):
    pass


def test_unsupported_style_subclass():
    plan = Plan(mesh_shape=(2,), parallelize_plan={"w1": MyColwise()})
    with pytest.raises(PlanError) as info:
        dumps(plan, "examples.plans:custom")
    assert str(info.value) == ("examples.plans:custom: unsupported parallel style class "
                               "test_plan.MyColwise for 'w1'")


def _write_plan(tmp_path, mutate):
    obj = to_json(call_factory("examples.plans:mlp_tp(tp=4)"))
    mutate(obj)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(obj))
    return path


def _set_style(name):
    def f(obj):
        obj["parallelize"][0]["plan"][0]["style"] = name
    return f


def _set_entry(**fields):
    def f(obj):
        obj["parallelize"][0]["plan"][0] = {"fqn": "w1", **fields}
    return f


def _set_input_layout(value):
    def f(obj):
        obj["parallelize"][0]["plan"][0]["input_layouts"] = [value]
    return f


def _set_mesh_dim(value):
    def f(obj):
        obj["parallelize"][0]["mesh_dim"] = value
    return f


KNOWN = ("ColwiseParallel, RowwiseParallel, SequenceParallel, PrepareModuleInput, "
         "PrepareModuleOutput, PrepareModuleInputOutput, TransformersRowwiseParallel, "
         "TransformersReplicatedWithGradAllReduce, TransformersMoeExpertsParallel, "
         "TransformersEpDispatchExpertsParallel, TransformersMlaKvAProjParallel, TransformersLocalParamsParallel, TorchtitanExpertParallel, TorchtitanExpertTensorParallel, "
         "TorchtitanTensorParallel, TorchtitanNoParallel, TorchtitanReordererSequenceParallel")

LOAD_ERRORS = [
    (_set_style("FooParallel"),
     "unknown parallel style 'FooParallel' at parallelize[0].plan[0] ('w1') (known: " + KNOWN + ")"),
    (_set_input_layout("Shard(x)"),
     "bad placement 'Shard(x)' at parallelize[0].plan[0] ('w1').input_layouts[0] "
     "(expected Shard(d), Replicate(), Partial(op) or _StridedShard(dim=d, sf=k))"),
    (_set_mesh_dim("dp"), "mesh dim 'dp' (parallelize_plan) is not in the mesh (dim names: ['tp'])"),
    (lambda o: o.update(version=2), "unsupported plan version 2 (this commlens reads version 1)"),
    (lambda o: o.update(format="other"), "not a commlens plan (format is 'other', expected 'commlens-plan')"),
    (lambda o: o.update(bogus=1), "unknown top-level field 'bogus'"),
    (lambda o: o["parallelize"][0]["plan"][0].update(colour="red"),
     "unknown field 'colour' for ColwiseParallel at parallelize[0].plan[0] ('w1')"),
    (lambda o: o.update(mesh={"shape": [2, 2], "dim_names": ["dp", "tp"], "device_type": "cpu"},
                        placements={"w1.weight": {"mesh_dims": None, "placements": ["Shard(0)"]}}),
     "placements['w1.weight'] has 1 placements for a 2-D mesh"),
    (_set_entry(style="TransformersEpDispatchExpertsParallel", ep_implementation="megamoe"),
     "invalid TransformersEpDispatchExpertsParallel at parallelize[0].plan[0] ('w1'): ep_implementation 'megamoe' "
     "is not one of auto, all_to_all, all_reduce"),
    (_set_entry(style="TransformersEpDispatchExpertsParallel", ep_implementation="all_reduce"),
     "invalid TransformersEpDispatchExpertsParallel at parallelize[0].plan[0] ('w1'): ep_implementation 'all_reduce' "
     "needs shares_batch (every rank of the expert group holding the same batch)"),
    (_set_entry(style="TransformersEpDispatchExpertsParallel", shares_batch=True, tp_mesh_dim="tp"),
     "invalid TransformersEpDispatchExpertsParallel at parallelize[0].plan[0] ('w1'): with shares_batch the TP "
     "group is the expert group itself; tp_mesh_dim names a TP group inside it (1 < tp_size < ep_size): give one "
     "or the other"),
    (_set_entry(style="TransformersEpDispatchExpertsParallel", tp_mesh_dim="ep"),
     "mesh dim 'ep' ('w1''s tp_mesh_dim) is not in the mesh (dim names: ['tp'])"),
    (_set_entry(style="TransformersEpDispatchExpertsParallel", tp_mesh_dim=2),
     "bad value at parallelize[0].plan[0] ('w1').tp_mesh_dim: expected a string"),
    (lambda o: o.update(loss={"kind": "mse"}), "unknown loss kind 'mse' (expected one of sum, cross_entropy)"),
    (lambda o: o.update(loss_parallel=True), "loss_parallel needs loss kind 'cross_entropy'"),
]


@pytest.mark.parametrize("mutate, message", LOAD_ERRORS)
def test_load_errors(tmp_path, mutate, message):
    path = _write_plan(tmp_path, mutate)
    with pytest.raises(PlanError) as info:
        load(str(path))
    assert str(info.value) == f"{path}: {message}"


def test_load_invalid_json(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text('{"format": ')
    with pytest.raises(CommlensError) as info:
        load(str(path))
    assert str(info.value) == f"{path}: invalid JSON: Expecting value at line 1 column 12"


def test_mesh_dim_errors_from_factory_plan():
    plan = Plan(mesh_shape=(2, 2), mesh_dim_names=("dp", "tp"), parallelize_plan={"w1": ColwiseParallel()})
    with pytest.raises(PlanError) as info:
        dumps(plan, "spec")
    assert str(info.value) == "spec: parallelize_plan needs a mesh dim name: the mesh is 2-D (2, 2)"
    plan.tp_mesh_dim = "model"
    with pytest.raises(PlanError) as info:
        dumps(plan, "spec")
    assert str(info.value) == "spec: mesh dim 'model' (parallelize_plan) is not in the mesh (dim names: ['dp', 'tp'])"


# ------------------------------------------------------------------ CLI (exit 2)

@pytest.mark.parametrize("index", [0, 1, 2])
def test_plan_check_cli_errors(cli, tmp_path, index):
    mutate, message = LOAD_ERRORS[index]
    path = _write_plan(tmp_path, mutate)
    r = cli("commlens.plan", "--check", path, cwd=tmp_path)
    assert r.returncode == 2
    assert error_lines(r.stderr) == [f"commlens: error: {path}: {message}"]


def test_plan_check_pattern_matches_no_module(cli, tmp_path):
    def mutate(obj):
        obj["parallelize"][0]["plan"][1]["fqn"] = "w3"
    path = _write_plan(tmp_path, mutate)
    r = cli("commlens.plan", "--check", path, "--model", "examples.mlp:mlp", cwd=tmp_path)
    assert r.returncode == 2
    assert error_lines(r.stderr) == [f"commlens: error: {path}: plan pattern 'w3' matches no module of MLP"]


def test_plan_cli_writes_and_checks(cli, tmp_path):
    out = tmp_path / "p.json"
    spec = "examples.plans:gpt2_tp_sp(tp=2)"
    r = cli("commlens.plan", spec, "-o", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # 2 embeddings + 10 per-layer patterns (attn_norm, attn, wq, wk, wv, wo, mlp_norm,
    # mlp, w1, w2) + norm + lm_head = 14 entries
    assert r.stdout == f"commlens: wrote {out} (14 plan entries, mesh (2,) ('tp',), cpu)\n"
    assert out.read_text() == dumps(call_factory(spec), spec)
    r = cli("commlens.plan", "--check", out, "--model", "examples.gpt2:gpt2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"commlens: {out}: ok\n"


# ------------------------------------------------------------- fully_shard units

BF16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def test_fsdp_factory_units():
    plan = call_factory("examples.plans:llama_hsdp_tp(replicate=2, shard=2, tp=2, reshard_after_forward=2, "
                        "mixed_precision='bf16')")
    dims = ("dp_replicate", "dp_shard")
    assert plan.mesh_shape == (2, 2, 2) and plan.mesh_dim_names == dims + ("tp",)
    assert [(d, sorted(styles)[:2]) for d, styles in plan.parallelize_steps()] == [
        ("tp", ["layers.*.attention", "layers.*.attention.wk"])]
    # reshard_after_forward goes to the blocks only; the root keeps None
    assert plan.fully_shard == (FullyShard("layers.*", dims, reshard_after_forward=2, mp_policy=BF16),
                                FullyShard("", dims, mp_policy=BF16))
    plan = call_factory("examples.plans:gpt2_fsdp_tp(dp=2, tp=4, sp=True)")
    assert plan.tp_mesh_dim == "tp" and plan.mesh_dim_names == ("dp", "tp")
    assert [u.fqn for u in plan.fully_shard] == ["layers.*", ""]
    assert all(u.mesh_dims == ("dp",) and type(u.mp_policy) is MixedPrecisionPolicy
               and u.mp_policy == MixedPrecisionPolicy() and type(u.offload_policy) is OffloadPolicy
               for u in plan.fully_shard)


def test_fsdp_plan_json_exact():
    obj = to_json(call_factory("examples.plans:stacked_mlp_fsdp(dp=8, mixed_precision='bf16')"))
    assert list(obj) == ["format", "version", "name", "source", "mesh", "parallelize", "fully_shard",
                         "src_data_rank", "placements", "inputs", "frozen", "frozen_after_parallelize",
                         "loss", "loss_parallel"]
    assert obj["mesh"] == {"shape": [8], "dim_names": ["dp"], "device_type": "cpu"}
    assert obj["parallelize"] == []
    mp = {"param_dtype": "bfloat16", "reduce_dtype": "float32", "output_dtype": None, "cast_forward_inputs": True}
    tail = {"requires_gradient_sync": True, "requires_all_reduce": True, "forward_prefetch": [],
            "backward_prefetch": []}
    assert obj["fully_shard"] == [
        {"fqn": "layers.*", "mesh_dims": ["dp"], "reshard_after_forward": None, "mp_policy": mp,
         "offload_policy": {"kind": "none"}, **tail},
        {"fqn": "", "mesh_dims": ["dp"], "reshard_after_forward": None, "mp_policy": mp,
         "offload_policy": {"kind": "none"}, **tail}]
    assert [list(u) for u in obj["fully_shard"]] == [
        ["fqn", "mesh_dims", "reshard_after_forward", "mp_policy", "offload_policy", "requires_gradient_sync",
         "requires_all_reduce", "forward_prefetch", "backward_prefetch"]] * 2
    assert list(obj["fully_shard"][0]["mp_policy"]) == [
        "param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs"]


def test_fully_shard_roundtrip_non_default():
    units = (
        FullyShard("layers.*", ("dp",), reshard_after_forward=2,
                   mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                                                  output_dtype=torch.float16, cast_forward_inputs=False),
                   offload_policy=CPUOffloadPolicy(pin_memory=False), requires_gradient_sync=False,
                   requires_all_reduce=False, forward_prefetch=("norm", ""), backward_prefetch=("",)),
        FullyShard("norm", "dp", reshard_after_forward=False, offload_policy=CPUOffloadPolicy(),
                   backward_prefetch="layers.0"),
        FullyShard("", ["dp"], reshard_after_forward=True, forward_prefetch=["layers.0", "layers.1"]),
    )
    plan = Plan(mesh_shape=(8,), mesh_dim_names=("dp",), fully_shard=units)
    text, loaded = _roundtrip(plan)
    assert loaded.fully_shard == units
    assert units[1].mesh_dims == ("dp",) and units[2].mesh_dims == ("dp",)  # str / list normalised
    obj = json.loads(text)
    assert obj["fully_shard"][0] == {
        "fqn": "layers.*", "mesh_dims": ["dp"], "reshard_after_forward": 2,
        "mp_policy": {"param_dtype": "bfloat16", "reduce_dtype": "float32", "output_dtype": "float16",
                      "cast_forward_inputs": False},
        "offload_policy": {"kind": "cpu", "pin_memory": False}, "requires_gradient_sync": False,
        "requires_all_reduce": False, "forward_prefetch": ["norm", ""], "backward_prefetch": [""]}
    assert obj["fully_shard"][1]["offload_policy"] == {"kind": "cpu", "pin_memory": True}
    # a single string / a list of prefetch targets is taken as a tuple
    assert units[1].backward_prefetch == ("layers.0",) and units[2].forward_prefetch == ("layers.0", "layers.1")
    assert obj["fully_shard"][1]["backward_prefetch"] == ["layers.0"]
    assert obj["fully_shard"][2]["forward_prefetch"] == ["layers.0", "layers.1"]
    assert [u.requires_all_reduce for u in loaded.fully_shard] == [False, True, True]
    # JSON booleans stay booleans (True == 1 in Python)
    assert [type(u.reshard_after_forward) for u in loaded.fully_shard] == [int, bool, bool]
    assert type(loaded.fully_shard[0].offload_policy) is CPUOffloadPolicy
    assert type(loaded.fully_shard[2].offload_policy) is OffloadPolicy


def test_fully_shard_missing_optional_keys_take_defaults():
    obj = to_json(call_factory("examples.plans:stacked_mlp_fsdp(dp=8)"))
    obj["fully_shard"] = [{"fqn": "layers.*", "mesh_dims": ["dp"]}, {"fqn": "", "mesh_dims": ["dp"],
                                                                      "mp_policy": {"param_dtype": "bfloat16"}}]
    plan = from_json(obj)
    assert plan.fully_shard == (FullyShard("layers.*", ("dp",)),
                                FullyShard("", ("dp",), mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16)))


def test_units_without_prefetch_and_all_reduce_keys_load():
    # a unit written before requires_all_reduce / forward_prefetch /
    # backward_prefetch existed: every other key present, these absent
    obj = to_json(call_factory("examples.plans:gpt2_hsdp(replicate=2, shard=4)"))
    for unit in obj["fully_shard"]:
        for key in ("requires_all_reduce", "forward_prefetch", "backward_prefetch"):
            del unit[key]
    assert list(obj["fully_shard"][0])[-1] == "requires_gradient_sync"
    plan = from_json(obj)
    assert plan.fully_shard == call_factory("examples.plans:gpt2_hsdp(replicate=2, shard=4)").fully_shard
    assert all(u.requires_all_reduce is True and u.forward_prefetch == () and u.backward_prefetch == ()
               for u in plan.fully_shard)
    again = json.loads(dumps(plan))["fully_shard"][0]
    assert list(again)[-4:] == ["requires_gradient_sync", "requires_all_reduce", "forward_prefetch",
                                "backward_prefetch"]
    assert (again["requires_all_reduce"], again["forward_prefetch"], again["backward_prefetch"]) == (True, [], [])


def test_plan_without_fully_shard_key_loads():
    obj = to_json(call_factory("examples.plans:mlp_tp(tp=4)"))
    del obj["fully_shard"]
    plan = from_json(obj)
    assert plan.fully_shard == ()
    assert json.loads(dumps(plan))["fully_shard"] == []


def _fsdp_obj(mutate, spec="examples.plans:stacked_mlp_fsdp(dp=8)"):
    obj = to_json(call_factory(spec))
    mutate(obj)
    return obj


def _unit0(**kv):
    def f(obj):
        obj["fully_shard"][0].update(kv)
    return f


FSDP_LOAD_ERRORS = [
    (_unit0(colour="red"), "unknown field 'colour' at fully_shard[0]"),
    (lambda o: o["fully_shard"][1]["mp_policy"].update(param_dtype="int8"),
     'bad dtype "int8" at fully_shard[1].mp_policy.param_dtype (expected "float32", "bfloat16", "float16" or null)'),
    (lambda o: o["fully_shard"][0]["mp_policy"].update(reduce_dtype="torch.float32"),
     'bad dtype "torch.float32" at fully_shard[0].mp_policy.reduce_dtype '
     '(expected "float32", "bfloat16", "float16" or null)'),
    (lambda o: o["fully_shard"][0]["mp_policy"].update(keep_low_precision_grads=True),
     "unknown field 'keep_low_precision_grads' at fully_shard[0].mp_policy"),
    (_unit0(offload_policy={"kind": "nvme"}),
     'unknown offload_policy kind "nvme" at fully_shard[0].offload_policy (expected "none" or "cpu")'),
    (_unit0(offload_policy={"kind": "none", "pin_memory": True}),
     "unknown field 'pin_memory' at fully_shard[0].offload_policy"),
    (_unit0(mesh_dims=["tp"]), "mesh dim 'tp' (fully_shard[0]) is not in the mesh (dim names: ['dp'])"),
    (_unit0(mesh_dims="dp"), "bad mesh_dims at fully_shard[0]: expected a list of mesh dim names"),
    (_unit0(mesh_dims=["dp", "dp"]), "fully_shard[0]: mesh dim 'dp' given twice"),
    (_unit0(mesh_dims=[]), "fully_shard[0]: 0 mesh dims [] (fully_shard takes a 1-D mesh, or a 2-D "
                           "(replicate, shard) mesh for HSDP)"),
    (_unit0(reshard_after_forward=3),
     "fully_shard[0]: reshard_after_forward 3 is not a factor of the shard group size 8 (mesh dim 'dp')"),
    (_unit0(reshard_after_forward=0),
     "fully_shard[0]: reshard_after_forward 0 is not a factor of the shard group size 8 (mesh dim 'dp')"),
    (_unit0(reshard_after_forward=2.0),
     "bad reshard_after_forward at fully_shard[0]: expected true, false, null or a positive int"),
    (_unit0(requires_gradient_sync=0), "bad value at fully_shard[0].requires_gradient_sync: expected true or false"),
    (_unit0(requires_all_reduce="no"), "bad value at fully_shard[0].requires_all_reduce: expected true or false"),
    (_unit0(requires_all_reduce=None), "bad value at fully_shard[0].requires_all_reduce: expected true or false"),
    (_unit0(forward_prefetch="layers.1"), "bad forward_prefetch at fully_shard[0]: expected a list of module FQNs"),
    (_unit0(forward_prefetch=None), "bad forward_prefetch at fully_shard[0]: expected a list of module FQNs"),
    (lambda o: o["fully_shard"][1].update(backward_prefetch=["layers.2", 0]),
     "bad backward_prefetch at fully_shard[1]: expected a list of module FQNs"),
    (lambda o: o.update(fully_shard={"fqn": ""}), "bad fully_shard: expected a list of units"),
    (lambda o: o["fully_shard"].append("layers.*"), "bad fully_shard[2]: expected an object"),
]


@pytest.mark.parametrize("mutate, message", FSDP_LOAD_ERRORS)
def test_fully_shard_load_errors(tmp_path, mutate, message):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_fsdp_obj(mutate)))
    with pytest.raises(PlanError) as info:
        load(str(path))
    assert str(info.value) == f"{path}: {message}"


def test_fully_shard_dim_shared_with_tp():
    def mutate(obj):
        obj["fully_shard"][0]["mesh_dims"] = ["dp", "tp"]
    obj = _fsdp_obj(mutate, "examples.plans:llama_fsdp_tp(dp=2, tp=4)")
    with pytest.raises(PlanError) as info:
        from_json(obj, "p.json")
    assert str(info.value) == ("p.json: fully_shard[0]: mesh dim 'tp' is used by a parallelize step too "
                               "(FSDP and tensor parallel dims must differ)")
    # a 1-D mesh used whole by TP (mesh_dim null) has no dim left for FSDP
    plan = Plan(mesh_shape=(4,), mesh_dim_names=("x",), parallelize_plan={"w1": ColwiseParallel()},
                fully_shard=(FullyShard("", ("x",)),))
    with pytest.raises(PlanError) as info:
        dumps(plan, "spec")
    assert str(info.value) == ("spec: fully_shard[0]: mesh dim 'x' is used by a parallelize step too "
                               "(FSDP and tensor parallel dims must differ)")


def test_fully_shard_three_mesh_dims():
    plan = call_factory("examples.plans:llama_hsdp_tp()")
    plan.fully_shard = (FullyShard("", ("dp_replicate", "dp_shard", "tp")),)
    plan.parallelize_plan = {}
    with pytest.raises(PlanError) as info:
        dumps(plan, "spec")
    assert str(info.value) == ("spec: fully_shard[0]: 3 mesh dims ['dp_replicate', 'dp_shard', 'tp'] "
                               "(fully_shard takes a 1-D mesh, or a 2-D (replicate, shard) mesh for HSDP)")


@pytest.mark.parametrize("unit, message", [
    # HSDP: the shard dim is the last one (size 4 here)
    (FullyShard("", ("r", "s"), reshard_after_forward=8),
     "fully_shard[0]: reshard_after_forward 8 is not a factor of the shard group size 4 (mesh dim 's')"),
    (FullyShard("", ("r",), reshard_after_forward="yes"),
     "fully_shard[0]: reshard_after_forward must be True, False, None or a positive int, got 'yes'"),
    (FullyShard("", ("r",), mp_policy=MixedPrecisionPolicy(param_dtype=torch.float64)),
     'bad dtype torch.float64 at fully_shard[0].mp_policy.param_dtype '
     '(expected "float32", "bfloat16", "float16" or null)'),
    (FullyShard("", ("r",), offload_policy=None),
     "fully_shard[0].offload_policy is NoneType, not torch.distributed.fsdp.OffloadPolicy or CPUOffloadPolicy"),
    (FullyShard("", ("r",), mp_policy={"param_dtype": "bfloat16"}),
     "fully_shard[0].mp_policy is dict, not torch.distributed.fsdp.MixedPrecisionPolicy"),
    ("layers.*", "fully_shard[0] is str, not commlens.plan.FullyShard"),
    (FullyShard("", ("r", "s"), requires_all_reduce=0), "fully_shard[0]: requires_all_reduce must be True or False"),
    (FullyShard("", ("r", "s"), forward_prefetch=("layers.0", 1)),
     "fully_shard[0]: forward_prefetch must be a tuple of module FQNs, got ('layers.0', 1)"),
    (FullyShard("", ("r", "s"), backward_prefetch=None),
     "fully_shard[0]: backward_prefetch must be a tuple of module FQNs, got None"),
])
def test_fully_shard_python_errors(unit, message):
    plan = Plan(mesh_shape=(2, 4), mesh_dim_names=("r", "s"), fully_shard=(unit,))
    with pytest.raises(PlanError) as info:
        dumps(plan, "spec")
    assert str(info.value) == f"spec: {message}"


def test_fully_shard_needs_mesh_dim_names():
    plan = Plan(mesh_shape=(8,), fully_shard=(FullyShard("", ("dp",)),))
    with pytest.raises(PlanError) as info:
        dumps(plan, "spec")
    assert str(info.value) == "spec: fully_shard[0]: the mesh has no dim names (fully_shard units name their mesh dims)"


@pytest.mark.parametrize("patterns, message", [
    (("blocks.*", ""), "fully_shard pattern 'blocks.*' matches no module of StackedMLP"),
    (("layers.*", "layers.1"),
     "fully_shard pattern 'layers.1' matches module 'layers.1' already sharded by pattern 'layers.*'"),
    (("layers.*", "", "*"),
     "fully_shard pattern '*' matches module 'layers' inside 'StackedMLP', sharded earlier by pattern '' "
     "(fully_shard children before their parents)"),
    (("", "layers.*"),
     "fully_shard pattern 'layers.*' matches module 'layers.0' inside 'StackedMLP', sharded earlier by pattern '' "
     "(fully_shard children before their parents)"),
    (("layers.*.w1", "layers.0"), None),  # children first: fine
    (("layers",),
     "fully_shard pattern 'layers' matches 'layers', a ModuleList without forward (fully_shard rejects containers)"),
    (("",), None),
])
def test_fully_shard_against_model(patterns, message):
    model, args = call_factory("examples.mlp:stacked_mlp")
    plan = Plan(mesh_shape=(8,), mesh_dim_names=("dp",), fully_shard=tuple(FullyShard(p, ("dp",)) for p in patterns))
    if message is None:
        check_against_model(plan, model, "spec", args)
        return
    with pytest.raises(PlanError) as info:
        check_against_model(plan, model, "spec", args)
    assert str(info.value) == f"spec: {message}"


def _stacked_units(*units):
    return Plan(mesh_shape=(8,), mesh_dim_names=("dp",), fully_shard=tuple(units))


@pytest.mark.parametrize("units, message", [
    # a target must be a module of the model ...
    ((FullyShard("layers.*", "dp", forward_prefetch=("layers.3",)), FullyShard("", "dp")),
     "fully_shard[0]: forward_prefetch target 'layers.3' is not a module of StackedMLP"),
    # ... given by its exact FQN, not a pattern ...
    ((FullyShard("layers.0", "dp", forward_prefetch=("layers.*",)), FullyShard("layers.1", "dp")),
     "fully_shard[0]: forward_prefetch target 'layers.*' is not a module of StackedMLP"),
    # ... and a module some unit shards (set_modules_to_*_prefetch takes FSDP modules only)
    ((FullyShard("layers.*", "dp"), FullyShard("", "dp", backward_prefetch=("layers.2", "layers.1.w1"))),
     "fully_shard[1]: backward_prefetch target 'layers.1.w1' is not sharded by any fully_shard unit "
     "(prefetch targets must be FSDP modules)"),
    ((FullyShard("layers.*", "dp", backward_prefetch=("",)),),
     "fully_shard[0]: backward_prefetch target '' is not sharded by any fully_shard unit "
     "(prefetch targets must be FSDP modules)"),
    ((FullyShard("layers.0", "dp", backward_prefetch=("layers",)), FullyShard("layers.1", "dp")),
     "fully_shard[0]: backward_prefetch target 'layers' is not sharded by any fully_shard unit "
     "(prefetch targets must be FSDP modules)"),
    # fine: a pattern matching several modules lists targets (each match gets them),
    # a target sharded by a later unit, the root as a target, a module prefetching itself
    ((FullyShard("layers.*", "dp", forward_prefetch=("layers.2", ""), backward_prefetch=("layers.0",)),
      FullyShard("", "dp", forward_prefetch=("layers.0",))), None),
    ((FullyShard("layers.0", "dp", forward_prefetch=("layers.1", "layers.0")), FullyShard("layers.1", "dp")), None),
])
def test_prefetch_targets_against_model(units, message):
    model, args = call_factory("examples.mlp:stacked_mlp")
    plan = _stacked_units(*units)
    dumps(plan)  # model-independent validation passes
    if message is None:
        check_against_model(plan, model, "spec", args)
        return
    with pytest.raises(PlanError) as info:
        check_against_model(plan, model, "spec", args)
    assert str(info.value) == f"spec: {message}"


def test_explicit_prefetch_factory_units():
    plan = call_factory("examples.plans:gpt2_fsdp(dp=8, prefetch='explicit', n_layers=3, "
                        "reshard_after_forward=False, mixed_precision='bf16')")
    assert plan.name == "gpt2_fsdp_explicit_prefetch"
    d = ("dp",)
    assert plan.fully_shard == (
        FullyShard("layers.0", d, reshard_after_forward=False, mp_policy=BF16, forward_prefetch=("layers.1",)),
        FullyShard("layers.1", d, reshard_after_forward=False, mp_policy=BF16, forward_prefetch=("layers.2",),
                   backward_prefetch=("layers.0",)),
        FullyShard("layers.2", d, reshard_after_forward=False, mp_policy=BF16, backward_prefetch=("layers.1",)),
        FullyShard("", d, mp_policy=BF16))
    obj = to_json(plan)
    assert [(u["fqn"], u["forward_prefetch"], u["backward_prefetch"]) for u in obj["fully_shard"]] == [
        ("layers.0", ["layers.1"], []), ("layers.1", ["layers.2"], ["layers.0"]),
        ("layers.2", [], ["layers.1"]), ("", [], [])]
    # the default stays one "layers.*" unit
    assert [u.fqn for u in call_factory("examples.plans:gpt2_fsdp(dp=8)").fully_shard] == ["layers.*", ""]
    plan = call_factory("examples.plans:llama_fsdp_tp(dp=2, tp=4, prefetch='explicit')")
    assert plan.name == "llama_fsdp_tp_sp_explicit_prefetch"
    assert plan.fully_shard == (FullyShard("layers.0", d, forward_prefetch=("layers.1",)),
                                FullyShard("layers.1", d, backward_prefetch=("layers.0",)),
                                FullyShard("", d))
    assert call_factory("examples.plans:llama_fsdp_tp(prefetch='explicit', n_layers=1)").fully_shard == (
        FullyShard("layers.0", d), FullyShard("", d))
    # the n_layers default (2) matches the example models' default
    for model_spec, plan_spec in [("examples.gpt2:gpt2", "examples.plans:gpt2_fsdp(prefetch='explicit')"),
                                  ("examples.llama:llama", "examples.plans:llama_fsdp_tp(prefetch='explicit')")]:
        model, args = call_factory(model_spec)
        check_against_model(call_factory(plan_spec), model, plan_spec, args)


@pytest.mark.parametrize("spec, message", [
    ("examples.plans:gpt2_fsdp(prefetch='implicit')", "prefetch must be None or 'explicit', got 'implicit'"),
    ("examples.plans:llama_fsdp_tp(prefetch='explicit', n_layers=0)", "n_layers must be a positive int, got 0"),
])
def test_explicit_prefetch_factory_errors(spec, message):
    with pytest.raises(CommlensError) as info:
        call_factory(spec)
    assert str(info.value) == f"{spec}: calling the factory failed: {message}"


def test_mlp_nd_plan():
    plan = call_factory("examples.plans:mlp_nd()")
    assert (plan.mesh_shape, plan.mesh_dim_names, plan.parallelize_steps()) == ((2, 4), ("dp", "tp"), [])
    obj = to_json(plan)
    assert obj["parallelize"] == [] and obj["fully_shard"] == []
    assert obj["placements"] == {
        "w1.weight": {"mesh_dims": None, "placements": ["Replicate()", "Shard(0)"]},
        "w1.bias": {"mesh_dims": None, "placements": ["Replicate()", "Shard(0)"]},
        "w2.weight": {"mesh_dims": None, "placements": ["Shard(0)", "Shard(1)"]},
        "w2.bias": {"mesh_dims": None, "placements": ["Replicate()", "Replicate()"]}}
    assert obj["inputs"] == {"0": {"requires_grad": True,
                                   "placements": {"mesh_dims": None, "placements": ["Shard(0)", "Shard(2)"]}}}
    assert obj["loss"] == {"kind": "sum"}
    model, args = call_factory("examples.mlp:mlp")
    check_against_model(plan, model, "mlp_nd", args)


def test_plan_cli_counts_fully_shard_units(cli, tmp_path):
    out = tmp_path / "p.json"
    spec = "examples.plans:llama_fsdp_tp(dp=2, tp=2)"
    r = cli("commlens.plan", spec, "-o", out, "--model", "examples.llama:llama", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # llama_tp with sp: tok_embeddings, norm, output + 11 per-layer patterns = 14 entries
    assert r.stdout == f"commlens: wrote {out} (14 plan entries, 2 fully_shard units, mesh (2, 2) ('dp', 'tp'), cpu)\n"
    assert out.read_text() == dumps(call_factory(spec), spec)
    obj = json.loads(out.read_text())
    obj["fully_shard"][0]["fqn"] = "blocks.*"
    out.write_text(json.dumps(obj))
    r = cli("commlens.plan", "--check", out, "--model", "examples.llama:llama", cwd=tmp_path)
    assert r.returncode == 2
    assert error_lines(r.stderr) == [
        f"commlens: error: {out}: fully_shard pattern 'blocks.*' matches no module of Transformer"]


def test_activation_checkpoint_roundtrip_and_bytes():
    from commlens.plan import ActivationCheckpoint

    base = Plan(mesh_shape=(4,), mesh_dim_names=("tp",))
    plan = dataclasses.replace(base, activation_checkpoint=(ActivationCheckpoint("layers.*", save_ops=["aten.mm.default"]),
                                                            ActivationCheckpoint("blk", wrapper=False),
                                                            ActivationCheckpoint("head", early_stop=False)))
    obj = json.loads(dumps(plan, "spec"))
    assert obj["activation_checkpoint"] == [{"fqn": "layers.*", "wrapper": True, "save_ops": ["aten.mm.default"]},
                                            {"fqn": "blk", "wrapper": False, "save_ops": []},
                                            {"fqn": "head", "wrapper": True, "save_ops": [], "early_stop": False}]
    assert from_json(obj).activation_checkpoint == plan.activation_checkpoint
    # Plans without checkpointing keep their bytes (no empty key).
    assert "activation_checkpoint" not in json.loads(dumps(base, "spec"))


@pytest.mark.parametrize("entry, message", [
    ({"fqn": "layers.*", "impl": "reentrant"}, "unknown field 'impl' at activation_checkpoint[0]"),
    ({"wrapper": True}, 'bad activation_checkpoint[0]: expected an object with a string "fqn"'),
    ({"fqn": "layers.*", "wrapper": "yes"}, "activation_checkpoint[0]: wrapper must be True or False"),
    ({"fqn": "layers.*", "save_ops": ["aten.mmm.default"]},
     "activation_checkpoint[0]: save_ops entry 'aten.mmm.default' is not an op torch knows"),
    ({"fqn": "layers.*", "save_ops": ["mm"]},
     "activation_checkpoint[0]: save_ops entry 'mm' is not an op overload name (namespace.op.overload, e.g. "
     "'aten.mm.default')"),
    ({"fqn": "layers.*", "wrapper": False, "save_ops": ["aten.mm.default"]},
     "activation_checkpoint[0]: save_ops needs wrapper=True (a selective policy is passed to checkpoint_wrapper)"),
    ({"fqn": "layers.*", "early_stop": "no"}, "activation_checkpoint[0]: early_stop must be True or False"),
    ({"fqn": "layers.*", "wrapper": False, "early_stop": False},
     "activation_checkpoint[0]: early_stop=False needs wrapper=True (it is passed to checkpoint_wrapper)"),
])
def test_activation_checkpoint_load_errors(entry, message):
    obj = json.loads(dumps(Plan(mesh_shape=(4,), mesh_dim_names=("tp",)), "spec"))
    obj["activation_checkpoint"] = [entry]
    with pytest.raises(PlanError) as info:
        from_json(obj, "spec")
    assert str(info.value) == f"spec: {message}"


# ---------------------------------------------------------------- sweeps

def test_factorizations_enumerate_every_ordered_split():
    from commlens.plan import factorizations

    assert factorizations(8, 2) == [(1, 8), (2, 4), (4, 2), (8, 1)]
    assert factorizations(12, 1) == [(12,)]
    # 64 = 2^6 over 3 dims: C(6 + 2, 2) = 28 ordered splits of the six factors of 2
    assert len(factorizations(64, 3)) == 28 and (4, 4, 4) in factorizations(64, 3)


def test_sweep_writes_one_plan_per_factorisation(cli, tmp_path):
    out = tmp_path / "plans"
    r = cli("commlens.plan", "--sweep", "examples.plans:llama_fsdp_tp(dp={dp}, tp={tp})", "--world-size", "8",
            "-o", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    names = ["llama_fsdp_tp-dp1-tp8.json", "llama_fsdp_tp-dp2-tp4.json", "llama_fsdp_tp-dp4-tp2.json",
             "llama_fsdp_tp-dp8-tp1.json"]
    assert r.stdout == f"commlens: wrote 4 plans to {out}: {', '.join(names)}\n"
    assert sorted(p.name for p in out.iterdir()) == names
    doc = json.loads((out / "llama_fsdp_tp-dp2-tp4.json").read_text())
    assert doc["mesh"]["shape"] == [2, 4] and doc["source"] == "examples.plans:llama_fsdp_tp(dp=2, tp=4)"


def test_sweep_errors(cli, tmp_path):
    r = cli("commlens.plan", "--sweep", "examples.plans:llama_fsdp_tp(dp=2, tp=4)", "--world-size", "8",
            "-o", tmp_path / "p", cwd=tmp_path)
    assert r.returncode == 2
    assert error_lines(r.stderr) == ["commlens: error: examples.plans:llama_fsdp_tp(dp=2, tp=4): a sweep spec needs distinct "
                              "{name} placeholders, e.g. 'examples.plans:llama_fsdp_tp(dp={dp}, tp={tp})'"]


@pytest.mark.parametrize("drop, field", [
    (lambda o: o["mesh"].pop("device_type"), "mesh.device_type"),
    (lambda o: o.pop("parallelize"), "parallelize"),
    (lambda o: o["mesh"].pop("shape"), "mesh.shape"),
])
def test_the_fields_the_schema_requires_are_required(tmp_path, drop, field):
    """The Python reader refuses a plan without a field plan.schema.json requires, as the C++ reader
    does (it used to take a missing device_type as "cpu" and a missing parallelize as none)."""
    obj = json.loads(dumps(Plan(mesh_shape=(2,), mesh_dim_names=("tp",), parallelize_plan={"w1": ColwiseParallel()})))
    drop(obj)
    with pytest.raises(PlanError) as info:
        from_json(obj, "p.json")
    assert str(info.value) == f"p.json: missing {field}"
