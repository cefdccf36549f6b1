"""The exported program's JSON that commlens' decoder reads (``frontends/ExportedProgramReader.cpp``),
written straight from the in-memory FX graph: what :func:`commlens.export.program_json` gives
``commlens._core.predict_program_json``.

torch's serialiser (``torch._export.serde.serialize``) builds a schema dataclass or tagged union
for every value of the program (each node, argument, tensor metadata and size), walks them back
into dicts and dumps those: for the 405B-shaped Llama, seconds, and hundreds of thousands of
objects for the cyclic collector to walk afterwards. This writer makes the same JSON values as
torch's serialiser, with torch 2.13's rules (the same argument variants in the same order of
tests, the same names for outputs, ``getitem`` users and unused results, the same metadata
strings), as plain dicts and lists dumped once, and a tensor metadata made once per distinct
(dtype, sizes, strides, offset, device, layout, requires_grad). It leaves out what the decoder
does not read: ``opset_version``, ``guards_code``, the graph module's ``metadata`` and
``treespec_namedtuple_fields``, the graph's ``sym_bool_values``, ``sym_float_values``,
``custom_obj_values`` and ``is_single_tensor_return``, each node's ``is_hop_single_tensor_return``,
and of each module call signature its ``outputs``, ``out_spec`` and ``forward_arg_names``
(``tests/python/test_program_json.py`` checks that the document is torch's with exactly those
keys removed, and that predictions from it are byte-identical).

What it does not cover raises :class:`Unsupported` (custom objects, call_module nodes,
extension-registry or Python-function targets, AOTI and Triton higher-order ops, dict arguments,
nested or list-of-list arguments, symbolic floats as results of multi-result ops, ...):
:func:`commlens.export.program_json` then uses torch's serialiser for that program, and logs why.
Nothing it makes refers back to itself, so it leaves no cyclic garbage.
"""
import inspect
import json
import math
import operator

import torch
from torch._export.serde import serialize as serde
from torch.export import graph_signature as sig
from torch.fx.experimental.symbolic_shapes import is_concrete_int

from commlens._errors import CommlensError

POSITIONAL, KEYWORD = 1, 2  # torch._export.serde.schema.ArgumentKind


class Unsupported(Exception):
    """Something of the program this writer does not cover (torch's serialiser writes it instead)."""


def program_json(exported_program):
    """The program's JSON document, as UTF-8 bytes (raises :class:`Unsupported`)."""
    writer = _Writer()
    doc = writer.program(exported_program)
    # The top graph's tensor metadata, a third of the text, is encoded once per distinct value.
    graph_module = doc.pop("graph_module")
    graph = graph_module.pop("graph")
    tensor_values = graph.pop("tensor_values")
    texts = {}  # id of a metadata dict (each lives in the writer's cache or tensor_values) -> its text

    def text_of(meta):
        text = texts.get(id(meta))
        if text is None:
            text = texts[id(meta)] = _dumps(meta)
        return text

    values = ",".join(f"{_dumps(name)}:{text_of(meta)}" for name, meta in tensor_values.items())
    graph_text = f'{_dumps(graph)[:-1]},"tensor_values":{{{values}}}}}'
    graph_module_text = f'{{"graph":{graph_text},{_dumps(graph_module)[1:]}'
    return f'{{"graph_module":{graph_module_text},{_dumps(doc)[1:]}'.encode("utf-8")


def _dumps(value):
    # Nothing refers back to itself (no circular check); no spaces (less to write and to parse).
    return json.dumps(value, allow_nan=False, check_circular=False, separators=(",", ":"))


_CONSTANTS = {int: "as_int", bool: "as_bool", str: "as_string", float: "as_float"}  # ConstantValue
_DTYPES = {dtype: int(v) for dtype, v in serde._TORCH_TO_SERIALIZE_DTYPE.items()}
_LAYOUTS = {layout: int(v) for layout, v in serde._TORCH_TO_SERIALIZE_LAYOUT.items()}
_MEMORY_FORMATS = {fmt: int(v) for fmt, v in serde._TORCH_TO_SERIALIZE_MEMORY_FORMAT.items()}


def _float(x):
    """A float as torch's ``_dataclass_to_dict`` writes it (infinities and NaN as strings)."""
    if x == math.inf:
        return "Infinity"
    if x == -math.inf:
        return "-Infinity"
    if math.isnan(x):
        return "NaN"
    return x


def _sym_int(s):
    """``serialize_sym_int``."""
    if not isinstance(s, (torch.SymInt, int)):
        raise Unsupported(f"size {s!r} of type {type(s).__name__}")
    if is_concrete_int(s):
        return {"as_int": int(s)}
    hint = s.node.hint
    return {"as_expr": {"expr_str": serde._print_sympy(s), "hint": None if hint is None else {"as_int": hint}}}


def _operator_name(target):
    """``GraphModuleSerializer.serialize_operator``."""
    if isinstance(target, str):
        return target
    if target.__module__.startswith("torch._ops"):
        return f"{target.__module__.replace('torch._ops', 'torch.ops')}.{target.__name__}"
    return f"{target.__module__}.{target.__name__}"


class _Operator:
    """What the writer needs of one call target, found once per target."""

    __slots__ = ("target", "name", "sym_op", "arguments", "returns", "tensor_list_return")

    def __init__(self, target):
        self.target = target  # kept alive: the writer's table is keyed by its id
        self.name = _operator_name(target)
        self.sym_op = not isinstance(target, torch._ops.OpOverload) and target in serde._SYM_OPS
        schema = target._schema if isinstance(target, torch._ops.OpOverload) else None
        self.arguments = [(a.name, a.kwarg_only, a.type) for a in schema.arguments] if schema else None
        self.returns = [r.real_type for r in schema.returns] if schema else None
        self.tensor_list_return = bool(schema) and len(self.returns) == 1 and isinstance(
            self.returns[0], torch.ListType) and isinstance(self.returns[0].getElementType(), torch.TensorType)


class _Graph:
    """One graph's values (torch's ``GraphState``): the top graph or a higher-order op's subgraph."""

    __slots__ = ("inputs", "outputs", "nodes", "tensor_values", "sym_int_values", "sym_floats", "sym_bools")

    def __init__(self):
        self.inputs, self.outputs, self.nodes = [], [], []
        self.tensor_values, self.sym_int_values = {}, {}
        self.sym_floats, self.sym_bools = set(), set()  # names (their values are not read)


class _Writer:
    def __init__(self):
        self.operators = {}  # id of a call target -> _Operator
        self.metas = {}  # tensor metadata by its fields (concrete sizes only)
        self.treespecs = {}
        self.duplicate_getitems = {}  # a getitem's name -> the first getitem of the same result
        self.graph = None

    def program(self, ep):
        # torch serialises the graph first, then the signature and module calls in its graph state
        self.graph = _Graph()
        graph = self.fill(ep.graph_module)
        module_call_graph = [{"fqn": e.fqn, "signature": self.call_signature(e.signature) if e.signature else None}
                             for e in ep.module_call_graph]
        return {
            "graph_module": {
                "graph": graph,
                "signature": {"input_specs": [self.input_spec(s) for s in ep.graph_signature.input_specs],
                              "output_specs": [self.output_spec(s) for s in ep.graph_signature.output_specs]},
                "module_call_graph": module_call_graph,
            },
            "range_constraints": {k: {"min_val": v.min_val, "max_val": v.max_val}
                                  for k, v in serde.serialize_range_constraints(ep.range_constraints).items()},
            "schema_version": {"major": serde.SCHEMA_VERSION[0], "minor": serde.SCHEMA_VERSION[1]},
            "verifiers": [v.dialect for v in ep.verifiers],
            "torch_version": torch.__version__,
        }

    # -- graphs and nodes (GraphModuleSerializer.serialize_graph and handle_*)

    def fill(self, graph_module):
        """Writes the graph's nodes into the current graph state; returns the graph's document."""
        for node in graph_module.graph.nodes:
            op = node.op
            if op == "call_function":
                self.call_function(node)
            elif op == "placeholder":
                self.placeholder(node)
            elif op == "output":
                self.output(node)
            elif op != "get_attr":
                raise Unsupported(f"{op} node {node.name}")
        g = self.graph
        return {"inputs": g.inputs, "outputs": g.outputs, "nodes": g.nodes, "tensor_values": g.tensor_values,
                "sym_int_values": g.sym_int_values}

    def subgraph(self, graph_module):
        """A higher-order op's subgraph, in a graph state of its own (``save_graph_state``)."""
        saved, self.graph = self.graph, _Graph()
        try:
            return self.fill(graph_module)
        finally:
            self.graph = saved

    def placeholder(self, node):
        val = node.meta["val"]
        if isinstance(val, torch.Tensor):
            arg = {"as_tensor": self.tensor_output(node.name, val)}
        elif isinstance(val, torch.SymInt):
            arg = {"as_sym_int": self.sym_int_output(node.name, val)}
        elif isinstance(val, (int, bool, str, float, type(None))):
            arg = self.argument(val)
        else:
            raise Unsupported(f"graph input {node.name} of type {type(val).__name__}")
        self.graph.inputs.append(arg)

    def output(self, node):
        (results,) = node.args
        self.graph.outputs = ([self.argument(results)] if isinstance(results, torch.fx.Node)
                              else [self.argument(r) for r in results])

    def call_function(self, node):
        target = node.target
        if target is operator.getitem:  # its producer names it
            return
        meta_val = node.meta.get("val")
        op = self.operators.get(id(target))  # by id: an OpOverload hashes in Python
        if op is None:
            op = self.operators[id(target)] = _Operator(target)
        if op.sym_op or isinstance(meta_val, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            if node.kwargs:
                raise Unsupported(f"symbolic op {node.name} with keyword arguments")
            names = ([a[0] for a in op.arguments] if op.arguments is not None
                     else list(inspect.signature(target).parameters))
            inputs = [{"name": n, "arg": self.argument(a), "kind": POSITIONAL} for n, a in zip(names, node.args)]
            outputs = [self.result(node.name, meta_val)]
        elif op.arguments is not None:
            inputs = self.inputs(op, node.args, node.kwargs)
            outputs = self.outputs(node, op)
        elif isinstance(target, torch._ops.HigherOrderOperator):
            if target.name() in ("aoti_call_delegate", "triton_kernel_wrapper_functional"):  # torch's own cases
                raise Unsupported(f"higher-order op {target.__name__}")
            inputs = [{"name": "", "arg": self.argument(a), "kind": POSITIONAL} for a in node.args]
            inputs += [{"name": k, "arg": self.argument(a), "kind": KEYWORD} for k, a in node.kwargs.items()]
            outputs = self.hop_outputs(node)
        else:
            raise Unsupported(f"call target {op.name} ({type(target).__name__})")
        self.graph.nodes.append({"target": op.name, "inputs": inputs, "outputs": outputs,
                                 "metadata": self.metadata(node), "name": node.name})

    def inputs(self, op, args, kwargs):
        """``serialize_inputs``: the schema's arguments given by keyword or position; those left
        to their defaults are not written."""
        out = []
        for i, (name, kwarg_only, arg_type) in enumerate(op.arguments):
            if name in kwargs:
                out.append({"name": name, "arg": self.argument(kwargs[name], arg_type), "kind": KEYWORD})
            elif not kwarg_only and i < len(args):
                out.append({"name": name, "arg": self.argument(args[i], arg_type), "kind": POSITIONAL})
        return out

    def metadata(self, node):
        """``serialize_metadata``."""
        meta, out = node.meta, {}
        if stack_trace := meta.get("stack_trace"):
            out["stack_trace"] = stack_trace
        if stack := meta.get("nn_module_stack"):
            out["nn_module_stack"] = ";".join(f"{k},{path},{ty}" for k, (path, ty) in stack.items())
        if source_fns := meta.get("source_fn_stack"):
            out["source_fn_stack"] = ";".join(
                f"{name},{_operator_name(fn)}" for name, fn in source_fns)
        if torch_fn := meta.get("torch_fn"):
            out["torch_fn"] = ";".join(torch_fn)
        if custom := meta.get("custom"):
            out["custom"] = json.dumps(custom)
        if "from_node" in meta:
            sources = meta["from_node"]
            out["from_node"] = json.dumps(None if sources is None else [
                s.to_dict() for s in sources if isinstance(s, torch.fx.traceback.NodeSource)])
        return out

    # -- results (serialize_outputs, serialize_hoo_outputs, serialize_output)

    def user_at(self, node, index):
        """``_output_node_at_index``: the getitem of result ``index``; a second getitem of it is
        recorded as a duplicate of the first."""
        found = None
        for user in node.users:
            if user.target is not operator.getitem:
                raise Unsupported(f"{user.name} uses the results of {node.name} other than by getitem")
            if user.args[1] == index:
                if found is None:
                    found = user
                else:
                    self.duplicate_getitems[user.name] = found.name
        return found

    def name_at(self, node, index):
        user = self.user_at(node, index)
        return f"{node.name}_unused_{index}" if user is None else user.name

    def outputs(self, node, op):
        if not op.returns:
            return []
        meta_val = node.meta["val"]
        if op.tensor_list_return:
            return [{"as_tensors": [self.tensor_output(self.name_at(node, i), m) for i, m in enumerate(meta_val)]}]
        if len(op.returns) == 1:
            return [self.result(node.name, meta_val)]
        out = []
        for index, meta in enumerate(meta_val[:len(op.returns)]):
            if meta is None:
                out.append({"as_none": True})
            elif isinstance(meta, torch.Tensor):
                out.append(self.result(self.name_at(node, index), meta))
            elif isinstance(meta, list):
                user = self.user_at(node, index)
                out.append({"as_tensors": [
                    self.tensor_output(f"{node.name}_unused_{index}_{i}" if user is None else self.name_at(user, i), m)
                    for i, m in enumerate(meta) if m is not None]})
            elif isinstance(meta, (int, float)):
                out.append(self.result(self.name_at(node, index), meta))
            else:
                raise Unsupported(f"result {index} of {node.name} of type {type(meta).__name__}")
        return out

    def hop_outputs(self, node):
        meta_val = node.meta["val"]
        if isinstance(meta_val, dict):
            raise Unsupported(f"higher-order op {node.name} with a dict result")
        if not isinstance(meta_val, tuple):
            return [self.result(node.name, meta_val)]
        out = []
        for i, meta in enumerate(meta_val):
            user = self.user_at(node, i)
            if isinstance(meta, list):
                if not all(isinstance(m, torch.Tensor) for m in meta):
                    raise Unsupported(f"higher-order op {node.name} with a list result of non-tensors")
                out.append({"as_tensors": [
                    self.tensor_output(f"{node.name}_unused_{i}_{j}" if user is None else self.name_at(user, j), m)
                    for j, m in enumerate(meta)]})
            else:
                out.append(self.result(f"{node.name}_unused_{i}" if user is None else user.name, meta))
        return out

    def result(self, name, meta_val):
        if meta_val is None:
            return {"as_none": True}
        if isinstance(meta_val, torch.Tensor):
            return {"as_tensor": self.tensor_output(name, meta_val)}
        if isinstance(meta_val, (bool, torch.SymBool)):
            self.graph.sym_bools.add(name)
            return {"as_sym_bool": {"as_name": name}}
        if isinstance(meta_val, (int, torch.SymInt)):
            return {"as_sym_int": self.sym_int_output(name, meta_val)}
        if isinstance(meta_val, (float, torch.SymFloat)):
            self.graph.sym_floats.add(name)
            return {"as_sym_float": {"as_name": name}}
        raise Unsupported(f"result {name} of type {type(meta_val).__name__}")

    def tensor_output(self, name, t):
        values = self.graph.tensor_values
        if name in values:
            raise Unsupported(f"tensor {name} is defined twice")
        if t.layout != torch.strided:  # neither writer can give it strides (torch's raises)
            raise CommlensError("program", f"tensor '{name}' has layout {t.layout}: commlens models strided "
                                "tensors only")
        values[name] = self.tensor_meta(t)
        return {"name": name}

    def sym_int_output(self, name, s):
        if name in self.graph.sym_int_values:
            raise Unsupported(f"SymInt {name} is defined twice")
        self.graph.sym_int_values[name] = _sym_int(s)
        return {"as_name": name}

    def tensor_meta(self, t):
        """``serialize_tensor_meta``, made once per distinct metadata (not for symbolic sizes,
        which are unhashable)."""
        sizes, strides, offset = t.shape, t.stride(), t.storage_offset()
        key = (t.dtype, sizes, strides, offset, t.requires_grad, t.device, t.layout)
        try:
            meta = self.metas.get(key)
        except TypeError:
            key, meta = None, None
        if meta is None:
            device = t.device
            meta = {"dtype": _DTYPES[t.dtype], "sizes": [_sym_int(s) for s in sizes], "requires_grad": t.requires_grad,
                    "device": {"type": device.type, "index": device.index},
                    "strides": [_sym_int(s) for s in strides], "storage_offset": _sym_int(offset),
                    "layout": _LAYOUTS[t.layout]}
            if key is not None:
                self.metas[key] = meta
        return meta

    # -- arguments (serialize_input)

    def argument(self, arg, arg_type=None):
        if isinstance(arg, torch.fx.Node):
            return self.node_argument(arg)
        if isinstance(arg, torch.SymInt):
            return {"as_sym_int": {"as_name": str(arg)}}
        if isinstance(arg, torch.SymFloat):
            return {"as_sym_float": {"as_name": str(arg)}}
        kind = type(arg)
        if kind is bool:
            return {"as_bool": arg}
        if kind is str:
            return {"as_string": arg}
        if kind is int:
            return {"as_int": arg}
        if kind is float:
            return {"as_float": _float(arg)}
        if kind is complex:
            return {"as_complex": {"real": _float(arg.real), "imag": _float(arg.imag)}}
        if arg is None:
            return {"as_none": True}
        if isinstance(arg, (list, tuple)):
            return self.list_argument(arg, arg_type)
        if isinstance(arg, torch.dtype):
            return {"as_scalar_type": _DTYPES[arg]}
        if isinstance(arg, torch.device):
            return {"as_device": {"type": arg.type, "index": arg.index}}
        if isinstance(arg, torch.memory_format):
            return {"as_memory_format": _MEMORY_FORMATS[arg]}
        if isinstance(arg, torch.layout):
            return {"as_layout": _LAYOUTS[arg]}
        raise Unsupported(f"argument of type {kind.__name__}")

    def node_argument(self, arg):
        name, g = arg.name, self.graph
        if arg.op == "get_attr":
            attr = getattr(arg.graph.owning_module, arg.target)
            if not isinstance(attr, torch.fx.GraphModule):
                raise Unsupported(f"get_attr {arg.target} of type {type(attr).__name__}")
            return {"as_graph": {"name": arg.target, "graph": self.subgraph(attr)}}
        if name in g.sym_int_values:
            return {"as_sym_int": {"as_name": name}}
        if name in g.sym_floats:
            return {"as_sym_float": {"as_name": name}}
        if name in g.sym_bools:
            return {"as_sym_bool": {"as_name": name}}
        if isinstance(arg.meta.get("val"), torch.export.graph_signature.CustomObjArgument):
            raise Unsupported(f"custom object argument {name}")
        return {"as_tensor": {"name": self.duplicate_getitems.get(name, name)}}

    def list_argument(self, arg, arg_type):
        if not arg:
            return {self.empty_list_variant(arg_type): []}
        kinds = {type(a) for a in arg}
        if kinds == {bool}:
            return {"as_bools": list(arg)}
        if kinds == {int}:
            return {"as_ints": list(arg)}
        if kinds == {float}:
            return {"as_floats": [_float(a) for a in arg]}
        if kinds == {str}:
            return {"as_strings": list(arg)}
        g = self.graph
        if all(type(a) is int or isinstance(a, torch.SymInt) for a in arg):
            return {"as_sym_ints": [{"as_int": a} if type(a) is int else {"as_name": str(a)} for a in arg]}
        if all(type(a) is int or isinstance(a, torch.fx.Node) and a.name in g.sym_int_values for a in arg):
            return {"as_sym_ints": [{"as_int": a} if type(a) is int else {"as_name": a.name} for a in arg]}
        if any(isinstance(a, torch.fx.Node) and (a.name in g.sym_floats or a.name in g.sym_bools) for a in arg) or any(
                isinstance(a, (torch.SymFloat, float, bool)) for a in arg):
            raise Unsupported(f"list argument of {sorted(k.__name__ for k in kinds)}")
        if all(isinstance(a, torch.fx.Node) for a in arg):
            if any(a.op == "get_attr" for a in arg):
                raise Unsupported("a list argument of get_attr nodes")
            return {"as_tensors": [{"name": a.name} for a in arg]}
        if all(a is None or isinstance(a, torch.fx.Node) for a in arg):
            return {"as_optional_tensors": [{"as_none": True} if a is None else {"as_tensor": {"name": a.name}}
                                            for a in arg]}
        raise Unsupported(f"list argument of {sorted(k.__name__ for k in kinds)}")

    @staticmethod
    def empty_list_variant(arg_type):
        if arg_type is None:
            return "as_tensors"  # torch's default (with a warning) where no schema says
        if isinstance(arg_type, torch.OptionalType):
            arg_type = arg_type.getElementType()
        if not isinstance(arg_type, torch.ListType):
            raise Unsupported(f"an empty list for a {arg_type} argument")
        elem = arg_type.getElementType()
        if isinstance(elem, torch.OptionalType):
            elem = elem.getElementType()
        for cls, variant in ((torch.BoolType, "as_bools"), (torch.IntType, "as_ints"), (torch.FloatType, "as_floats"),
                             (torch.StringType, "as_strings"), (torch.TensorType, "as_tensors")):
            if isinstance(elem, cls):
                return variant
        raise Unsupported(f"an empty list of {elem}")

    # -- signature and module calls

    def argument_spec(self, x):
        """``serialize_argument_spec``."""
        if isinstance(x, sig.TensorArgument):
            return {"as_tensor": {"name": x.name}}
        if isinstance(x, sig.SymIntArgument):
            return {"as_sym_int": {"as_name": x.name}}
        if isinstance(x, sig.SymFloatArgument):
            return {"as_sym_float": {"as_name": x.name}}
        if isinstance(x, sig.ConstantArgument):
            return self.argument(x.value)
        raise Unsupported(f"argument spec of type {type(x).__name__}")

    def input_spec(self, spec):
        kind, arg = spec.kind, spec.arg
        if kind == sig.InputKind.USER_INPUT:
            if not isinstance(arg, sig.ConstantArgument):
                return {"user_input": {"arg": self.argument_spec(arg)}}
            value = arg.value
            if value is None:
                constant = {"as_none": True}
            elif type(value) in _CONSTANTS:
                constant = {_CONSTANTS[type(value)]: _float(value) if type(value) is float else value}
            else:
                raise Unsupported(f"constant input {arg.name} of type {type(value).__name__}")
            return {"constant_input": {"name": arg.name, "value": constant}}
        if kind == sig.InputKind.PARAMETER:
            return {"parameter": {"arg": {"name": arg.name}, "parameter_name": spec.target}}
        if kind == sig.InputKind.BUFFER:
            return {"buffer": {"arg": {"name": arg.name}, "buffer_name": spec.target, "persistent": spec.persistent}}
        if kind == sig.InputKind.CONSTANT_TENSOR:
            return {"tensor_constant": {"arg": {"name": arg.name}, "tensor_constant_name": spec.target}}
        if kind == sig.InputKind.TOKEN:
            return {"token": {"arg": {"name": arg.name}}}
        raise Unsupported(f"input spec of kind {kind.name}")

    _OUTPUT_SPECS = {
        sig.OutputKind.BUFFER_MUTATION: ("buffer_mutation", "buffer_name"),
        sig.OutputKind.PARAMETER_MUTATION: ("parameter_mutation", "parameter_name"),
        sig.OutputKind.GRADIENT_TO_PARAMETER: ("gradient_to_parameter", "parameter_name"),
        sig.OutputKind.GRADIENT_TO_USER_INPUT: ("gradient_to_user_input", "user_input_name"),
        sig.OutputKind.USER_INPUT_MUTATION: ("user_input_mutation", "user_input_name"),
    }

    def output_spec(self, spec):
        kind = spec.kind
        if kind == sig.OutputKind.USER_OUTPUT:
            return {"user_output": {"arg": self.argument_spec(spec.arg)}}
        if kind == sig.OutputKind.LOSS_OUTPUT:
            return {"loss_output": {"arg": {"name": spec.arg.name}}}
        if kind == sig.OutputKind.TOKEN:
            return {"token": {"arg": {"name": spec.arg.name}}}
        if kind not in self._OUTPUT_SPECS:
            raise Unsupported(f"output spec of kind {kind.name}")
        variant, target_field = self._OUTPUT_SPECS[kind]
        return {variant: {"arg": {"name": spec.arg.name}, target_field: spec.target}}

    def call_signature(self, signature):
        return {"inputs": [self.argument_spec(x) for x in signature.inputs], "in_spec": self.treespec(signature.in_spec)}

    def treespec(self, spec):
        try:
            text = self.treespecs.get(spec)
        except TypeError:  # a context that cannot be hashed
            return serde.treespec_dumps(spec, serde.TREESPEC_VERSION)
        if text is None:
            text = self.treespecs[spec] = serde.treespec_dumps(spec, serde.TREESPEC_VERSION)
        return text
