"""A catalog of bad input: programs, plans, counts files and command lines. Each kind builds its
bad input from good ones (a small exported program, its plan, a counts file), runs the CLI and
expects exactly one line `commlens: error: <file>: <what is wrong>` on stderr, nothing on stdout,
and exit 2: never a crash, a hang or a silent success."""
import copy
import json
import os
import subprocess
import zipfile

import pytest
import torch

from integration_helpers import TwoLinears


PLAN = {
    "format": "commlens-plan", "version": 1, "name": "two_linears_tp", "source": "test",
    "mesh": {"shape": [2], "dim_names": ["tp"], "device_type": "cpu"},
    "parallelize": [{"mesh_dim": "tp", "plan": [
        {"fqn": "fc1", "style": "ColwiseParallel"},
        {"fqn": "fc2", "style": "RowwiseParallel"}]}],
    "src_data_rank": 0, "placements": {},
    "inputs": {"0": {"requires_grad": False, "placements": {"mesh_dims": None, "placements": ["Replicate()"]}}},
    "frozen": [], "loss": {"kind": "sum"}, "loss_parallel": False,
}

COUNTS = {
    "format": "commlens-counts", "version": 1, "phase": "both",
    "modules": [{"fqn": "Global", "forward": {"c10d_functional.all_reduce": 1}, "backward": {}},
                {"fqn": "TwoLinears", "forward": {"c10d_functional.all_reduce": 1}, "backward": {}}],
}

DEEP = 100_000  # far past the readers' nesting limit (256)


@pytest.fixture(scope="module")
def good_pt2(tmp_path_factory):
    path = tmp_path_factory.mktemp("pt2") / "good.pt2"
    ep = torch.export.export(TwoLinears(), (torch.randn(2, 3, 4),), strict=False)  # a rank-3 input
    torch.export.save(ep, str(path))
    return path


class Inputs:
    """Builds bad inputs under tmp_path from the good ones."""

    def __init__(self, tmp_path, good_pt2):
        self.tmp = tmp_path
        self.good_pt2 = good_pt2
        self.plan_path = self.write("plan.json", json.dumps(PLAN))
        self.counts_path = self.write("counts.json", json.dumps(COUNTS))

    def write(self, name, text):
        path = self.tmp / name
        path.write_text(text)
        return path

    def pt2(self, edit=None, text_edit=None, records=None, name="bad.pt2"):
        """A copy of the good archive with models/model.json passed through `edit` (on the
        decoded document) or `text_edit` (on its text), and records (by name under the root
        folder) replaced with `records`' bytes."""
        dst = self.tmp / name
        with zipfile.ZipFile(self.good_pt2) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
            for info in zin.infolist():
                data = zin.read(info)
                if records and info.filename.split("/", 1)[1] in records:
                    data = records[info.filename.split("/", 1)[1]]
                elif info.filename.endswith("/models/model.json"):
                    text = data.decode()
                    if edit:
                        doc = json.loads(text)
                        edit(doc)
                        text = json.dumps(doc)
                    if text_edit:
                        text = text_edit(text)
                    data = text.encode()
                zout.writestr(info, data)
        return dst

    def plan(self, edit=None, text=None, name="bad_plan.json"):
        if text is None:
            doc = copy.deepcopy(PLAN)
            edit(doc)
            text = json.dumps(doc)
        return self.write(name, text)

    def counts(self, doc=None, text=None, name="bad_counts.json"):
        return self.write(name, text if text is not None else json.dumps(doc))


def nodes(doc):
    return doc["graph_module"]["graph"]["nodes"]


def set_in(path, value):
    """An edit that sets doc[path...] = value."""
    def edit(doc):
        *head, last = path
        for key in head:
            doc = doc[key]
        doc[last] = value
    return edit


def edit_node(i, fn):
    def edit(doc):
        fn(nodes(doc)[i])
    return edit


def deep_array(n=DEEP):
    return "[" * n + "]" * n


# ---------------------------------------------------------------------------------------------
# The catalog: kind -> function(inputs) returning (argv, expected message after "commlens: error: ").
# Nodes of the good program: [0] linear (fc1), [1] relu (root), [2] linear_1 (fc2).

M = "models/model.json"
LIN = "(node 'linear' torch.ops.aten.linear.default in TwoLinears.fc1)"
RELU = "(node 'relu' torch.ops.aten.relu.default in TwoLinears)"


def predict(pt2, plan, *extra):
    return ["predict", pt2, "--plan", plan, *extra]


CATALOG = {}


def kind(name):
    def register(fn):
        assert name not in CATALOG
        CATALOG[name] = fn
        return fn
    return register


# --- programs: arguments against the op schema (a node's consumers read them by name and kind)

@kind("linear-one-argument")
def _(b):
    p = b.pt2(edit_node(0, lambda n: n.update(inputs=n["inputs"][:1])))
    return predict(p, b.plan_path), (f"{p}: {M}: graph_module.graph.nodes[0]: aten::linear.default needs argument "
                                     f"'weight' (Tensor), the node has 1 argument {LIN}")


@kind("linear-int-weight")
def _(b):
    p = b.pt2(edit_node(0, lambda n: n["inputs"][1].update(arg={"as_int": 3})))
    return predict(p, b.plan_path), (f"{p}: {M}: graph_module.graph.nodes[0]: argument 'weight' of "
                                     f"aten::linear.default is an int, expected Tensor {LIN}")


@kind("linear-float-list-bias")
def _(b):
    p = b.pt2(edit_node(0, lambda n: n["inputs"][2].update(arg={"as_floats": [1.0]})))
    return ["inspect", p], (f"{p}: {M}: graph_module.graph.nodes[0]: argument 'bias' of aten::linear.default is "
                            f"a float list, expected Tensor? {LIN}")


@kind("module-call-not-contiguous")
def _(b):
    # fc1's linear tagged as fc2's: fc2's call begins at node 0 (linear_view once decomposed), before
    # relu computes its argument
    # (found by fuzz/predict: the plan's rewrite read the argument before it was defined).
    def edit(n):
        n["metadata"]["nn_module_stack"] = n["metadata"]["nn_module_stack"].replace("L__self__fc1,fc1", "L__self__fc2,fc2")
    p = b.pt2(edit_node(0, edit))
    plan = b.plan(lambda d: d["parallelize"][0].update(plan=[{"fqn": "fc2", "style": "RowwiseParallel"}]))
    return predict(p, plan), (f"{p}: TwoLinears.fc2: argument 'relu' of its call 0 is computed after the call begins "
                              "(at node 'linear_view'): the module's nodes are not contiguous")


@kind("unknown-argument-name")
def _(b):
    p = b.pt2(edit_node(1, lambda n: n["inputs"][0].update(name="input")))
    return ["inspect", p], f"{p}: {M}: graph_module.graph.nodes[1]: aten::relu.default has no argument 'input' {RELU}"


@kind("argument-given-twice")
def _(b):
    p = b.pt2(edit_node(1, lambda n: n["inputs"].append(n["inputs"][0])))
    return ["inspect", p], (f"{p}: {M}: graph_module.graph.nodes[1]: argument 'self' of aten::relu.default is "
                            f"given twice {RELU}")


@kind("op-swapped-relu-to-linear")
def _(b):
    p = b.pt2(edit_node(1, lambda n: n.update(target="torch.ops.aten.linear.default")))
    return predict(p, b.plan_path), (f"{p}: {M}: graph_module.graph.nodes[1]: aten::linear.default has no argument "
                                     "'self' (node 'relu' torch.ops.aten.linear.default in TwoLinears)")


@kind("op-swapped-linear-to-mm")
def _(b):
    p = b.pt2(edit_node(0, lambda n: n.update(target="torch.ops.aten.mm.default")))
    return predict(p, b.plan_path), (f"{p}: {M}: graph_module.graph.nodes[0]: aten::mm.default has no argument "
                                     "'input' (node 'linear' torch.ops.aten.mm.default in TwoLinears.fc1)")


@kind("op-swapped-linear-to-split")
def _(b):
    def edit(n):
        n["target"] = "torch.ops.aten.split.Tensor"
        n["inputs"] = [{"name": "self", "arg": {"as_tensor": {"name": "x"}}, "kind": 1},
                       {"name": "split_size", "arg": {"as_int": 2}, "kind": 1}]
    p = b.pt2(edit_node(0, edit))
    return predict(p, b.plan_path), (f"{p}: {M}: graph_module.graph.nodes[0]: result 0 of aten::split.Tensor is a "
                                     "Tensor, expected Tensor[] (node 'linear' torch.ops.aten.split.Tensor in "
                                     "TwoLinears.fc1)")


@kind("too-many-results")
def _(b):
    def edit(doc):
        values = doc["graph_module"]["graph"]["tensor_values"]
        values["extra"] = values["relu"]
        nodes(doc)[1]["outputs"].append({"as_tensor": {"name": "extra"}})
    p = b.pt2(edit)
    return ["inspect", p], (f"{p}: {M}: graph_module.graph.nodes[1]: aten::relu.default returns 1 result, the node "
                            f"has 2 results {RELU}")


@kind("no-results")
def _(b):
    p = b.pt2(edit_node(1, lambda n: n.update(outputs=[])))
    return ["inspect", p], (f"{p}: {M}: graph_module.graph.nodes[1]: aten::relu.default returns 1 result, the node "
                            f"has 0 results {RELU}")


@kind("sym-int-naming-a-tensor")
def _(b):
    p = b.pt2(edit_node(0, lambda n: n["inputs"][1].update(arg={"as_sym_int": {"as_name": "x"}})))
    return ["inspect", p], (f"{p}: {M}: graph_module.graph.nodes[0].inputs[1].arg.as_sym_int.as_name: 'x' is a "
                            f"tensor, expected a SymInt {LIN}")


@kind("duplicate-node-name")
def _(b):
    p = b.pt2(edit_node(1, lambda n: n.update(name="linear")))
    return ["inspect", p], (f"{p}: {M}: graph_module.graph.nodes[1]: node name 'linear' is used twice "
                            "(node 'linear' torch.ops.aten.relu.default in TwoLinears)")


@kind("value-defined-twice")
def _(b):
    p = b.pt2(edit_node(1, lambda n: n["outputs"][0]["as_tensor"].update(name="linear")))
    return ["inspect", p], (f"{p}: {M}: graph_module.graph.nodes[1].outputs[0].as_tensor: value 'linear' is "
                            f"defined twice {RELU}")


@kind("undefined-value")
def _(b):
    p = b.pt2(edit_node(1, lambda n: n["inputs"][0]["arg"]["as_tensor"].update(name="nope")))
    return ["inspect", p], (f"{p}: {M}: graph_module.graph.nodes[1].inputs[0].arg.as_tensor: reference to "
                            f"undefined value 'nope' {RELU}")


@kind("root-class-named-Global")
def _(b):
    def edit(doc):
        for n in nodes(doc):
            n["metadata"]["nn_module_stack"] = n["metadata"]["nn_module_stack"].replace(".TwoLinears", ".Global")
    p = b.pt2(edit)
    return ["inspect", p], (f"{p}: {M}: the root module's class is named 'Global', as CommDebugMode's outermost "
                            "row: rename the class")


@kind("malformed-module-stack")
def _(b):
    p = b.pt2(edit_node(1, lambda n: n["metadata"].update(nn_module_stack="a,b")))
    return ["inspect", p], (f"{p}: {M}: graph_module.graph.nodes[1]: metadata.nn_module_stack: malformed entry "
                            "'a,b' (expected key,path,type)")


@kind("target-not-a-string")
def _(b):
    p = b.pt2(edit_node(1, lambda n: n.update(target=7)))
    return ["inspect", p], f"{p}: {M}: graph_module.graph.nodes[1].target: expected a string"


@kind("commlens-namespace-target")
def _(b):
    # found by fuzz/predict: a commlens:: op in a program reached propagation's boundary-op code
    p = b.pt2(edit_node(0, lambda n: n.update(target="commlens::aten.lin%ar.default")))
    return predict(p, b.plan_path), (f"{p}: {M}: graph_module.graph.nodes[0].target: commlens:: ops are commlens' own "
                                     "plan-boundary ops, not ops of an exported program (node 'linear' "
                                     "commlens::aten.lin%ar.default in TwoLinears.fc1)")


@kind("unknown-argument-variant")
def _(b):
    p = b.pt2(edit_node(0, lambda n: n["inputs"][2].update(arg={"as_widget": 3})))
    return ["inspect", p], (f"{p}: {M}: graph_module.graph.nodes[0].inputs[2].arg: unknown argument variant "
                            f"'as_widget' {LIN}")


@kind("unsupported-higher-order-op")
def _(b):
    p = b.pt2(edit_node(1, lambda n: n.update(target="torch.ops.higher_order.cond")))
    return ["inspect", p], (f"{p}: {M}: graph_module.graph.nodes[1]: higher-order op 'cond' is not supported by "
                            "commlens yet (node 'relu' torch.ops.higher_order.cond in TwoLinears)")


@kind("unknown-scalar-type")
def _(b):
    p = b.pt2(set_in(["graph_module", "graph", "tensor_values", "relu", "dtype"], 99))
    return ["inspect", p], (f"{p}: {M}: graph_module.graph.tensor_values.relu.dtype: unknown scalar type 99 {RELU}")


@kind("unknown-layout")
def _(b):
    p = b.pt2(set_in(["graph_module", "graph", "tensor_values", "relu", "layout"], 42))
    return ["inspect", p], f"{p}: {M}: graph_module.graph.tensor_values.relu.layout: unknown layout 42 {RELU}"


@kind("size-out-of-int64-range")
def _(b):
    p = b.pt2(set_in(["graph_module", "graph", "tensor_values", "relu", "sizes"], [{"as_int": 2**64 - 1}]))
    return ["inspect", p], (f"{p}: {M}: graph_module.graph.tensor_values.relu.sizes[0].as_int: integer "
                            f"18446744073709551615 is out of range {RELU}")


@kind("input-spec-count")
def _(b):
    p = b.pt2(lambda d: d["graph_module"]["signature"]["input_specs"].pop())
    return ["inspect", p], f"{p}: {M}: graph_module.signature.input_specs: 4 input specs for 5 graph inputs"


@kind("unknown-input-spec")
def _(b):
    p = b.pt2(lambda d: d["graph_module"]["signature"]["input_specs"].__setitem__(0, {"widget": {}}))
    return ["inspect", p], (f"{p}: {M}: graph_module.signature.input_specs[0]: unknown input spec variant 'widget'")


@kind("unsupported-schema-major")
def _(b):
    p = b.pt2(set_in(["schema_version", "major"], 9))
    return ["inspect", p], (f"{p}: {M}: unsupported export schema version 9.{json.loads(_model_text(b))['schema_version']['minor']} "
                            "(commlens reads major version 8)")


@kind("missing-tensor-values")
def _(b):
    p = b.pt2(lambda d: d["graph_module"]["graph"].pop("tensor_values"))
    return ["inspect", p], f"{p}: {M}: graph_module.graph: missing required field 'tensor_values'"


@kind("model-json-nested-too-deep")
def _(b):
    p = b.pt2(text_edit=lambda t: t[:-1] + ', "extra": ' + deep_array() + "}")
    return ["inspect", p], f"{p}: {M}: invalid JSON: nested deeper than 256 levels"


@kind("model-json-number-overflow")
def _(b):
    # A number past double's range: nlohmann's parser throws out_of_range, not parse_error.
    p = b.pt2(text_edit=lambda t: '{"overflow": 1e999, ' + t[1:])
    return ["inspect", p], f"{p}: {M}: invalid JSON: number overflow parsing '1e999'"


@kind("model-json-truncated")
def _(b):
    p = b.pt2(text_edit=lambda t: t[:20])
    return ["inspect", p], (f"{p}: {M}: invalid JSON: parse error at line 1, column 21: syntax error while parsing "
                            "object key - invalid string: missing closing quote; last read: '\"g'; expected string "
                            "literal")


@kind("archive-format")
def _(b):
    p = b.pt2(records={"archive_format": b"zip"})
    return ["inspect", p], f"{p}: archive_format is 'zip', expected 'pt2'"


@kind("not-a-zip")
def _(b):
    p = b.write("text.pt2", "hello\n")
    return ["inspect", p], f"{p}: not a zip archive (expected a torch.export.save .pt2 file)"


@kind("model-missing")
def _(b):
    return ["inspect", b.tmp / "absent.pt2"], f"{b.tmp / 'absent.pt2'}: cannot open file"


# --- plans

@kind("input-placement-shard-out-of-range")
def _(b):
    plan = b.plan(lambda d: d["inputs"]["0"]["placements"].update(placements=["Shard(-7)"]))
    return predict(b.good_pt2, plan), (f"{plan}: inputs['0'].placements: Shard(dim=-7) is out of range for a tensor "
                                       "of rank 3")


@kind("input-placement-shard-past-rank")
def _(b):
    plan = b.plan(lambda d: d["inputs"]["0"]["placements"].update(placements=["Shard(3)"]))
    return ["check-plan", b.good_pt2, "--plan", plan], (f"{plan}: inputs['0'].placements: Shard(dim=3) is out of "
                                                         "range for a tensor of rank 3")


@kind("parameter-placement-shard-out-of-range")
def _(b):
    plan = b.plan(lambda d: d["placements"].update({"fc1.*": {"mesh_dims": None, "placements": ["Shard(2)"]}}))
    return predict(b.good_pt2, plan), (f"{plan}: placements['fc1.*'] on 'fc1.weight': Shard(dim=2) is out of range "
                                       "for a tensor of rank 2")


@kind("mesh-size-int64-max")
def _(b):
    plan = b.plan(lambda d: d["mesh"].update(shape=[2**63 - 1]))
    return predict(b.good_pt2, plan), f"{plan}: mesh.shape: the mesh has more than 1048576 devices"


@kind("mesh-size-wraps")
def _(b):
    plan = b.plan(lambda d: d["mesh"].update(shape=[2**32, 2**32], dim_names=["dp", "tp"]))
    return predict(b.good_pt2, plan), f"{plan}: mesh.shape: the mesh has more than 1048576 devices"


@kind("mesh-size-past-uint64")
def _(b):
    plan = b.plan(lambda d: d["mesh"].update(shape=[2**64 - 1]))
    return predict(b.good_pt2, plan), f"{plan}: mesh.shape[0]: integer 18446744073709551615 is out of range"


@kind("mesh-size-zero")
def _(b):
    plan = b.plan(lambda d: d["mesh"].update(shape=[0]))
    return predict(b.good_pt2, plan), f"{plan}: mesh.shape[0]: mesh sizes must be positive"


@kind("mesh-without-dims")
def _(b):
    plan = b.plan(lambda d: d["mesh"].update(shape=[]))
    return predict(b.good_pt2, plan), f"{plan}: mesh.shape: the mesh needs at least one dim"


@kind("mesh-dim-names-count")
def _(b):
    plan = b.plan(lambda d: d["mesh"].update(dim_names=["dp", "tp"]))
    return predict(b.good_pt2, plan), f"{plan}: mesh.dim_names: 2 dim names for a 1-D mesh"


@kind("mesh-device-type")
def _(b):
    plan = b.plan(lambda d: d["mesh"].update(device_type="tpu"))
    return predict(b.good_pt2, plan), f"{plan}: mesh.device_type: device type 'tpu' (expected \"cpu\" or \"cuda\")"


@kind("world-size-mismatch")
def _(b):
    return (["check-plan", b.good_pt2, "--plan", b.plan_path, "--world-size", "8"],
            f"{b.plan_path}: mesh shape DeviceMesh((2,), 'cpu', mesh_dim_names=('tp',)) has 2 devices but the world "
            "size is 8")


@kind("colwise-null-placement")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0]["plan"][0].update(output_layouts=[None]))
    return predict(b.good_pt2, plan), (f"{plan}: parallelize[0].plan[0].output_layouts[0]: null placement (only "
                                       "PrepareModuleInput and PrepareModuleOutput allow null entries)")


@kind("colwise-empty-output-layouts")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0]["plan"][0].update(output_layouts=[]))
    return predict(b.good_pt2, plan), f"{plan}: parallelize[0].plan[0].output_layouts: expected one placement, got 0"


@kind("rowwise-two-input-layouts")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0]["plan"][1].update(input_layouts=["Shard(-1)", "Replicate()"]))
    return predict(b.good_pt2, plan), f"{plan}: parallelize[0].plan[1].input_layouts: expected one placement, got 2"


@kind("sequence-sharding-null")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0]["plan"].append(
        {"fqn": "fc1", "style": "SequenceParallel", "sequence_sharding": [None]}))
    return predict(b.good_pt2, plan), (f"{plan}: parallelize[0].plan[2].sequence_sharding[0]: null placement (only "
                                       "PrepareModuleInput and PrepareModuleOutput allow null entries)")


@kind("bad-placement-string")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0]["plan"][0].update(output_layouts=["Shard(x)"]))
    return predict(b.good_pt2, plan), (f"{plan}: parallelize[0].plan[0].output_layouts[0]: bad placement 'Shard(x)' "
                                       "(expected Shard(d), Replicate(), Partial(op) or _StridedShard(dim=d, sf=k))")


@kind("placement-not-a-string")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0]["plan"][0].update(output_layouts=[0]))
    return predict(b.good_pt2, plan), f"{plan}: parallelize[0].plan[0].output_layouts[0]: expected a string"


@kind("prepare-output-empty")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0]["plan"].append(
        {"fqn": "fc2", "style": "PrepareModuleOutput", "output_layouts": [], "desired_output_layouts": []}))
    return predict(b.good_pt2, plan), f"{plan}: parallelize[0].plan[2].output_layouts: expected at least one placement"


@kind("prepare-output-length-mismatch")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0]["plan"].append(
        {"fqn": "fc2", "style": "PrepareModuleOutput", "output_layouts": ["R"], "desired_output_layouts": ["R", "R"]}))
    return predict(b.good_pt2, plan), (f"{plan}: parallelize[0].plan[2].desired_output_layouts: 2 placements for 1 "
                                       "entries of output_layouts")


@kind("prepare-input-without-desired")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0]["plan"].append(
        {"fqn": "fc2", "style": "PrepareModuleInput", "input_layouts": ["R"]}))
    return predict(b.good_pt2, plan), f"{plan}: parallelize[0].plan[2]: input_layouts needs desired_input_layouts"


@kind("prepare-input-null-desired")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0]["plan"].append(
        {"fqn": "fc2", "style": "PrepareModuleInput", "input_layouts": ["R"], "desired_input_layouts": [None]}))
    return predict(b.good_pt2, plan), (f"{plan}: parallelize[0].plan[2].desired_input_layouts[0]: null placement for "
                                       "a non-null input_layouts entry")


@kind("prepare-input-kwarg-without-desired")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0]["plan"].append(
        {"fqn": "fc2", "style": "PrepareModuleInput", "input_kwarg_layouts": {"mask": "R"},
         "desired_input_kwarg_layouts": {}}))
    return predict(b.good_pt2, plan), (f"{plan}: parallelize[0].plan[2].desired_input_kwarg_layouts: no entry for "
                                       "input_kwarg_layouts key 'mask'")


@kind("unknown-style")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0]["plan"][0].update(style="DiagonalParallel"))
    return predict(b.good_pt2, plan), f"{plan}: parallelize[0].plan[0]: unknown parallel style 'DiagonalParallel'"


@kind("unknown-style-key")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0]["plan"][0].update(colour="blue"))
    return predict(b.good_pt2, plan), f"{plan}: parallelize[0].plan[0]: unknown key 'colour'"


@kind("pattern-matches-nothing")
def _(b):
    # check-plan refuses it; predict skips it with a warning, as torch's parallelize_module does
    # (test_edges.py: test_unmatched_pattern_is_skipped_with_a_warning)
    plan = b.plan(lambda d: d["parallelize"][0]["plan"][0].update(fqn="fc9"))
    return ["check-plan", b.good_pt2, "--plan", plan], f"{plan}: plan pattern 'fc9' matches no module of TwoLinears"


@kind("mesh-dim-not-in-mesh")
def _(b):
    plan = b.plan(lambda d: d["parallelize"][0].update(mesh_dim="dp"))
    return predict(b.good_pt2, plan), (f"{plan}: parallelize[0].mesh_dim: mesh dim 'dp' is not in the mesh (dim "
                                       "names: ['tp'])")


@kind("plan-input-not-in-model")
def _(b):
    plan = b.plan(lambda d: d["inputs"].update({"5": {"requires_grad": True, "placements": None}}))
    return predict(b.good_pt2, plan), f"{plan}: plan input '5' is not an input of TwoLinears (1 user inputs)"


@kind("plan-version-past-int64")
def _(b):
    plan = b.plan(lambda d: d.update(version=2**64 - 1))
    return predict(b.good_pt2, plan), f"{plan}: version: integer 18446744073709551615 is out of range"


@kind("plan-version")
def _(b):
    plan = b.plan(lambda d: d.update(version=2))
    return predict(b.good_pt2, plan), f"{plan}: version: unsupported plan version 2 (commlens reads version 1)"


@kind("plan-format")
def _(b):
    plan = b.plan(lambda d: d.update(format="yaml-plan"))
    return predict(b.good_pt2, plan), f"{plan}: format: not a commlens plan (expected \"commlens-plan\")"


@kind("plan-unknown-loss")
def _(b):
    plan = b.plan(lambda d: d.update(loss={"kind": "hinge"}))
    return predict(b.good_pt2, plan), f"{plan}: loss.kind: unknown loss 'hinge' (expected \"sum\" or \"cross_entropy\")"


@kind("plan-nested-too-deep")
def _(b):
    plan = b.plan(text='{"format": "commlens-plan", "version": 1, "name": ' + deep_array() + "}")
    return predict(b.good_pt2, plan), f"{plan}: plan: invalid JSON: nested deeper than 256 levels"


@kind("plan-number-overflow")
def _(b):
    plan = b.plan(text='{"format": "commlens-plan", "version": 1' + "0" * 400 + "}")
    return predict(b.good_pt2, plan), f"{plan}: plan: invalid JSON: number overflow parsing '1{'0' * 400}'"


@kind("plan-invalid-json")
def _(b):
    plan = b.plan(text='{"format": ')
    return predict(b.good_pt2, plan), (f"{plan}: plan: invalid JSON: parse error at line 1, column 12: syntax error "
                                       "while parsing value - unexpected end of input; expected '[', '{', or a literal")


@kind("plan-missing")
def _(b):
    return predict(b.good_pt2, b.tmp / "absent.json"), f"{b.tmp / 'absent.json'}: cannot open file"


@kind("fully-shard-reshard-group")
def _(b):
    def edit(d):
        d["parallelize"] = []
        d["fully_shard"] = [{"fqn": "", "mesh_dims": ["tp"], "reshard_after_forward": 3}]
    plan = b.plan(edit)
    return predict(b.good_pt2, plan), (f"{plan}: fully_shard[0].reshard_after_forward: reshard_after_forward 3 is not "
                                       "a factor of the shard group size 2")


# --- counts files (compare)

def compare_with(b, bad):
    return ["compare", b.counts_path, bad]


@kind("count-past-int64")
def _(b):
    c = b.counts({**COUNTS, "modules": [{"fqn": "Global", "forward": {"x": 2**64 - 1}, "backward": {}}]})
    return compare_with(b, c), (f"{c}: modules[0].forward.x: count 18446744073709551615 is out of range (at most "
                                "9007199254740991)")


@kind("count-past-cap")
def _(b):
    c = b.counts({**COUNTS, "modules": [{"fqn": "Global", "forward": {"x": 2**53}, "backward": {}}]})
    return compare_with(b, c), (f"{c}: modules[0].forward.x: count 9007199254740992 is out of range (at most "
                                "9007199254740991)")


@kind("count-negative")
def _(b):
    c = b.counts({**COUNTS, "modules": [{"fqn": "Global", "forward": {"x": -1}, "backward": {}}]})
    return compare_with(b, c), f"{c}: modules[0].forward.x: expected a non-negative integer count, got -1"


@kind("count-float")
def _(b):
    c = b.counts({**COUNTS, "modules": [{"fqn": "Global", "forward": {"x": 1.5}, "backward": {}}]})
    return compare_with(b, c), f"{c}: modules[0].forward.x: expected a non-negative integer count, got 1.5"


@kind("tree-count-past-int64")
def _(b):
    c = b.counts({"fqn": "Global", "module_type": "", "children": [], "collectives_forward": [["x", 2**64 - 1]],
                  "collectives_backward": []})
    return compare_with(b, c), (f"{c}: collectives_forward[0][1]: count 18446744073709551615 is out of range (at most "
                                "9007199254740991)")


@kind("counts-nested-too-deep")
def _(b):
    c = b.counts(text='{"fqn": "Global", "phase": ' + deep_array() + "}")
    return compare_with(b, c), f"{c}: invalid JSON: nested deeper than 256 levels"


@kind("counts-tree-too-deep")
def _(b):
    depth = 20_000
    head = "".join(f'{{"fqn": "m{i}", "collectives_forward": [], "collectives_backward": [], "children": ['
                   for i in range(depth))
    c = b.counts(text=head + "]}" * depth)
    return compare_with(b, c), f"{c}: invalid JSON: nested deeper than 256 levels"


@kind("counts-version-past-int64")
def _(b):
    c = b.counts({**COUNTS, "version": 2**64 - 1})
    return compare_with(b, c), (f"{c}: version: unsupported commlens-counts version 18446744073709551615 (commlens "
                                "reads version 1)")


@kind("counts-duplicate-module")
def _(b):
    c = b.counts({**COUNTS, "modules": COUNTS["modules"] + [COUNTS["modules"][1]]})
    return compare_with(b, c), f"{c}: modules[2].fqn: duplicate module 'TwoLinears'"


@kind("counts-unknown-format")
def _(b):
    c = b.counts({"modules": []})
    return compare_with(b, c), (f"{c}: unknown format: neither a CommDebugMode generate_json_dump tree (no 'fqn') nor "
                                "a commlens-counts file (no 'format')")


@kind("counts-number-overflow")
def _(b):
    c = b.counts(text='{"fqn": "Global", "collectives_forward": [["c10d_functional.all_reduce", -2e308]]}')
    return compare_with(b, c), f"{c}: invalid JSON: number overflow parsing '-2e308'"


@kind("counts-invalid-json")
def _(b):
    c = b.counts(text="[1, 2")
    return compare_with(b, c), (f"{c}: invalid JSON: parse error at line 1, column 6: syntax error while parsing "
                                "array - unexpected end of input; expected ']'")


@kind("counts-module-name-with-newline")
def _(b):
    c = b.counts({**COUNTS, "modules": COUNTS["modules"] + [{"fqn": "a\nb", "forward": {}, "backward": {}},
                                                           {"fqn": "a\nb", "forward": {}, "backward": {}}]})
    return compare_with(b, c), f"{c}: modules[3].fqn: duplicate module 'a\\x0ab'"


@kind("counts-missing")
def _(b):
    return compare_with(b, b.tmp / "absent.json"), f"{b.tmp / 'absent.json'}: cannot open file"


@kind("counts-directory")
def _(b):
    return compare_with(b, b.tmp), f"{b.tmp}: is a directory"


# --- command lines and output

@kind("plan-given-twice")
def _(b):
    return predict(b.good_pt2, b.plan_path, "--plan", b.plan_path), "option --plan given twice"


@kind("flag-given-twice")
def _(b):
    return ["inspect", b.good_pt2, "--json", "--json"], "option --json given twice"


@kind("compare-phase-given-twice")
def _(b):
    return compare_with(b, b.counts_path) + ["--phase", "forward", "--phase=both"], "option --phase given twice"


@kind("print-after-empty")
def _(b):
    return predict(b.good_pt2, b.plan_path, "--print-after="), "option --print-after has an empty value"


@kind("output-empty")
def _(b):
    return ["inspect", b.good_pt2, "-o", ""], "option -o has an empty value"


@kind("plan-without-value")
def _(b):
    return ["predict", b.good_pt2, "--plan"], "option --plan needs a value"


@kind("print-after-unknown-pass")
def _(b):
    return (predict(b.good_pt2, b.plan_path, "--print-after=decompose,frobnicate"),
            "--print-after: unknown pass 'frobnicate' (passes: decompose, apply-plan, propagate, estimate-time)")


@kind("unknown-option")
def _(b):
    return ["check-plan", b.good_pt2, "--plan", b.plan_path, "--verbose"], "unknown option '--verbose'"


@kind("bad-phase")
def _(b):
    return predict(b.good_pt2, b.plan_path, "--phase", "sideways"), \
        "--phase must be forward, backward, both or inference, got 'sideways'"


@kind("bad-format")
def _(b):
    return predict(b.good_pt2, b.plan_path, "--format", "xml"), "--format must be table, json or html, got 'xml'"


@kind("bad-noise-level")
def _(b):
    return predict(b.good_pt2, b.plan_path, "--noise-level", "-1"), "--noise-level needs a non-negative integer, got '-1'"


@kind("routing-skew-below-one")
def _(b):
    return (predict(b.good_pt2, b.plan_path, "--routing-skew", "0.5"),
            "--routing-skew: the routing skew needs a number of at least 1 (the busiest expert-parallel rank's routed "
            "rows over the balanced number), got 0.5")


@kind("routing-skew-not-a-number")
def _(b):
    return (["rank", b.good_pt2, "--plan", b.plan_path, "--routing-skew", "two"],
            "--routing-skew needs a number, got 'two'")


@kind("bad-world-size")
def _(b):
    return (["check-plan", b.good_pt2, "--plan", b.plan_path, "--world-size", "99999999999999999999"],
            "--world-size needs a positive integer, got '99999999999999999999'")


@kind("predict-without-plan")
def _(b):
    return ["predict", b.good_pt2], "predict takes MODEL.pt2 and --plan PLAN.json"


@kind("inspect-two-models")
def _(b):
    return ["inspect", b.good_pt2, b.good_pt2], "inspect takes one MODEL.pt2 argument"


@kind("output-to-full-disk")
def _(b):
    return predict(b.good_pt2, b.plan_path, "-o", "/dev/full"), "/dev/full: cannot write file: No space left on device"


@kind("compare-output-to-full-disk")
def _(b):
    return compare_with(b, b.counts_path) + ["-o", "/dev/full"], "/dev/full: cannot write file: No space left on device"


@kind("output-in-missing-directory")
def _(b):
    out = b.tmp / "nodir" / "out.txt"
    return ["inspect", b.good_pt2, "-o", out], f"{out}: cannot write file: No such file or directory"


@kind("output-is-a-directory")
def _(b):
    return ["inspect", b.good_pt2, "-o", b.tmp], f"{b.tmp}: cannot write file: Is a directory"


@kind("stdout-closed")
def _(b):
    return ["inspect", b.good_pt2], "<stdout>: cannot write: Bad file descriptor"


@kind("stdout-full-disk")
def _(b):
    return ["inspect", b.good_pt2], "<stdout>: cannot write: No space left on device"


def _model_text(b):
    with zipfile.ZipFile(b.good_pt2) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/models/model.json"))).decode()


def run_cli(commlens_bin, argv, kind_name):
    argv = [commlens_bin, *map(str, argv)]
    if kind_name == "stdout-closed":
        r = subprocess.run(argv, stdout=None, stderr=subprocess.PIPE, text=True, timeout=120,
                           preexec_fn=lambda: os.close(1))
        return r.returncode, "", r.stderr
    if kind_name == "stdout-full-disk":
        with open("/dev/full", "w") as full:
            r = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
        return r.returncode, "", r.stderr
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def test_catalog_is_large():
    assert len(CATALOG) >= 60


def test_good_inputs_are_accepted(commlens_bin, good_pt2, tmp_path):
    # The inputs every bad one is made from are read, and read right (derived by hand from
    # TwoLinears, x [2, 3, 4], and PLAN): were they refused or misread, each bad input's error
    # could come from the wrong place.
    b = Inputs(tmp_path, good_pt2)

    def run(*argv):
        rc, out, err = run_cli(commlens_bin, argv, "")
        assert (rc, err) == (0, ""), argv
        return out.splitlines()

    inspect = run("inspect", good_pt2)
    assert [line.split()[:4] for line in inspect[3:6]] == [
        ["TwoLinears", "1", "3", "1"], ["TwoLinears.fc1", "1", "1", "1"], ["TwoLinears.fc2", "1", "1", "1"]]
    # fc1.weight [8, 4] + fc1.bias [8] + fc2.weight [4, 8] + fc2.bias [4] = 76 f32, 304 bytes;
    # nodes: linear (fc1), relu, linear_1 (fc2)
    assert inspect[-1] == "totals: 3 nodes, 3 modules, 4 parameters (76 elements, 304 bytes), 0 buffers"
    assert [line.split() for line in inspect if line.startswith("  x ")] == [["x", "[2,", "3,", "4]", "float32"]]
    assert [line.split() for line in run("check-plan", good_pt2, "--plan", b.plan_path)[2:]] == [
        ["fc1", "ColwiseParallel", "TwoLinears.fc1"], ["fc2", "RowwiseParallel", "TwoLinears.fc2"]]
    # Colwise fc1 turns the replicated x into Shard(-1); Rowwise fc2 contracts that dim, so its
    # output is Partial(sum) and its Replicate output layout needs one all_reduce of the whole
    # [2, 3, 4] f32 output, 96 bytes, charged to fc2, TwoLinears and Global (forward only).
    table = run(*predict(good_pt2, b.plan_path, "--noise-level", "1"))
    assert [line.strip() for line in table if "all_reduce" in line] == ["*c10d_functional.all_reduce: 1"] * 3 + [
        "**c10d_functional.all_reduce on mesh dim 0: [P(sum)] -> [R], 96 B/rank, commlens::redistribute_output.default "
        "'linear_1' (TwoLinears.fc2 redistributes its output linear_1 from [P(sum)] to [R])"]
    assert table.index("    TwoLinears.fc2") < table.index("        *c10d_functional.all_reduce: 1")
    assert run("compare", b.counts_path, b.counts_path)[-1] == \
        "summary: 2 cells, 0 differ; collectives predicted 1, measured 1 (forward+backward)"


@pytest.mark.parametrize("kind_name", sorted(CATALOG))
def test_bad_input(commlens_bin, good_pt2, tmp_path, kind_name):
    argv, what = CATALOG[kind_name](Inputs(tmp_path, good_pt2))
    rc, out, err = run_cli(commlens_bin, argv, kind_name)
    assert (rc, out, err) == (2, "", f"commlens: error: {what}\n")


@pytest.mark.parametrize("command", ["inspect", "predict", "check-plan", "compare"])
def test_command_help(run_commlens, command):
    for flag in ("--help", "-h"):
        r = run_commlens(command, flag)
        assert (r.returncode, r.stderr) == (0, "")
        assert r.stdout.startswith(f"usage: commlens {command} ")
