"""The exported program's JSON that commlens' decoder reads (``frontends/ExportedProgramReader.cpp``),
written straight from the in-memory FX graph: what :func:`commlens.export.program_json` gives
``commlens._core.predict_program_json``.

torch's serialiser (``torch._export.serde.serialize``) builds a schema dataclass or tagged union
for every value of the program (each node, argument, tensor metadata and size), walks them back
into dicts and dumps those: for the 405B-shaped Llama, seconds, and hundreds of thousands of
objects for the cyclic collector to walk afterwards. This writer makes the same JSON values as
torch's serialiser, with torch 2.13's rules (the same argument variants in the same order of
tests, the same names for outputs, ``getitem`` users and unused results, the same metadata
strings). Its graphs and module calls are written in C++ (``api/FxGraphWriter.cpp``, reading the
FX nodes through the CPython API; a tensor metadata written once per distinct value, a call
target's schema and a module call's input spec asked of Python once each), the rest here. It
leaves out what the decoder does not read: ``opset_version``, ``guards_code``, the graph module's
``metadata`` and ``treespec_namedtuple_fields``, the graph's ``sym_bool_values``,
``sym_float_values``, ``custom_obj_values`` and ``is_single_tensor_return``, each node's
``is_hop_single_tensor_return``, and of each module call signature its ``outputs``, ``out_spec``
and ``forward_arg_names`` (``tests/python/test_program_json.py`` checks that the document is
torch's with exactly those keys removed, and that predictions from it are byte-identical).

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
import types

import torch
from torch._export.serde import serialize as serde
from torch._subclasses.fake_tensor import FakeTensor
from torch.export import graph_signature as sig
from torch.fx.experimental.symbolic_shapes import is_concrete_int

from commlens._errors import CommlensError
from commlens._native import core


class Unsupported(Exception):
    """Something of the program this writer does not cover (torch's serialiser writes it instead)."""


def program_json(exported_program):
    """The program's JSON document, as UTF-8 bytes (raises :class:`Unsupported`)."""
    writer = _Writer()
    signature = _dumps(writer.signature(exported_program)).encode("utf-8")
    rest = _dumps(writer.closing_keys(exported_program)).encode("utf-8")
    # The walk reads each FakeTensor's metadata; with subclasses' __torch_function__ disabled
    # (FakeTensor has none), each read costs half.
    with torch._C.DisableTorchFunctionSubclass():
        return writer.native.document(exported_program.graph_module, exported_program.module_call_graph,
                                      b'{"graph_module":{"graph":',
                                      b',"signature":' + signature + b',"module_call_graph":', b"}," + rest[1:])


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


def _sym_int_text(s):
    """``serialize_sym_int`` of a size the native writer does not write itself (a SymInt)."""
    if not isinstance(s, (torch.SymInt, int)):
        raise Unsupported(f"size {s!r} of type {type(s).__name__}")
    if is_concrete_int(s):
        return _dumps({"as_int": int(s)})
    hint = s.node.hint
    return _dumps({"as_expr": {"expr_str": serde._print_sympy(s),
                               "hint": None if hint is None else {"as_int": hint}}})


def _operator_name(target):
    """``GraphModuleSerializer.serialize_operator``."""
    if isinstance(target, str):
        return target
    if target.__module__.startswith("torch._ops"):
        return f"{target.__module__.replace('torch._ops', 'torch.ops')}.{target.__name__}"
    return f"{target.__module__}.{target.__name__}"


def _metadata_text(key, value):
    """``serialize_metadata``'s string for the keys the native writer leaves to Python."""
    if key == "source_fn_stack":
        return ";".join(f"{name},{_operator_name(fn)}" for name, fn in value)
    if key == "custom":
        return json.dumps(value)
    assert key == "from_node", key
    return json.dumps(None if value is None else [
        s.to_dict() for s in value if isinstance(s, torch.fx.traceback.NodeSource)])


def _treespec_text(spec):
    """``treespec_dumps`` of a module call's input spec (the native writer keeps each structure's)."""
    return serde.treespec_dumps(spec, serde.TREESPEC_VERSION)


def _empty_list_variant(arg_type):
    """The variant of an empty list given for an argument of this schema type."""
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


def _operator_info(target):
    """What the native writer needs of one call target, asked once per target: (name, symbolic op,
    argument names of the symbolic form or None, why none, schema arguments (name, kwarg_only,
    variant of an empty list, why none) or None, number of results, returns one Tensor[], higher-order
    op, why the target is not covered)."""
    name = _operator_name(target)
    sym_op = not isinstance(target, torch._ops.OpOverload) and target in serde._SYM_OPS
    schema = target._schema if isinstance(target, torch._ops.OpOverload) else None
    arguments, returns, tensor_list_return = None, 0, False
    if schema is not None:
        arguments = []
        for a in schema.arguments:
            try:
                variant, why = _empty_list_variant(a.type), ""
            except Unsupported as e:
                variant, why = "", str(e)
            arguments.append((a.name, a.kwarg_only, variant, why))
        types = [r.real_type for r in schema.returns]
        returns = len(types)
        tensor_list_return = returns == 1 and isinstance(types[0], torch.ListType) and isinstance(
            types[0].getElementType(), torch.TensorType)
    sym_names, why_no_names = None, ""
    if arguments is not None:
        sym_names = [a[0] for a in arguments]
    else:
        try:
            sym_names = list(inspect.signature(target).parameters)
        except (TypeError, ValueError) as e:
            why_no_names = f"symbolic op {name} without a signature: {e}"
    hop = schema is None and isinstance(target, torch._ops.HigherOrderOperator)
    unsupported = ""
    if hop and target.name() in ("aoti_call_delegate", "triton_kernel_wrapper_functional"):  # torch's own cases
        unsupported = f"higher-order op {target.__name__}"
    elif schema is None and not hop:
        unsupported = f"call target {name} ({type(target).__name__})"
    return name, sym_op, sym_names, why_no_names, arguments, returns, tensor_list_return, hop, unsupported


# What the native writer reads once: the types it tests, the codes and the Python helpers it calls.
_CONTEXT = types.SimpleNamespace(
    node_type=torch.fx.Node, tensor_type=torch.Tensor, fake_tensor_type=FakeTensor, symint_type=torch.SymInt,
    symfloat_type=torch.SymFloat, symbool_type=torch.SymBool, dtype_type=torch.dtype, device_type=torch.device,
    memory_format_type=torch.memory_format, layout_type=torch.layout, graph_module_type=torch.fx.GraphModule,
    custom_obj_type=sig.CustomObjArgument, tensor_argument_type=sig.TensorArgument,
    symint_argument_type=sig.SymIntArgument, symfloat_argument_type=sig.SymFloatArgument,
    constant_argument_type=sig.ConstantArgument, getitem=operator.getitem, strided=torch.strided, dtypes=_DTYPES,
    layouts=_LAYOUTS, memory_formats=_MEMORY_FORMATS, operator_info=_operator_info, sym_int_text=_sym_int_text,
    metadata_text=_metadata_text, treespec_text=_treespec_text, unsupported=Unsupported,
    commlens_error=CommlensError)


class _Writer:
    """The program's signature and closing keys; its graphs and module calls are the native writer's
    (``api/FxGraphWriter.cpp``)."""

    def __init__(self):
        self.native = core().FxGraphWriter(_CONTEXT)

    def signature(self, ep):
        return {"input_specs": [self.input_spec(s) for s in ep.graph_signature.input_specs],
                "output_specs": [self.output_spec(s) for s in ep.graph_signature.output_specs]}

    @staticmethod
    def closing_keys(ep):
        """The document's keys after its graph module."""
        return {
            "range_constraints": {k: {"min_val": v.min_val, "max_val": v.max_val}
                                  for k, v in serde.serialize_range_constraints(ep.range_constraints).items()},
            "schema_version": {"major": serde.SCHEMA_VERSION[0], "minor": serde.SCHEMA_VERSION[1]},
            "verifiers": [v.dialect for v in ep.verifiers],
            "torch_version": torch.__version__,
        }

    # -- the signature

    def argument_spec(self, x):
        """``serialize_argument_spec`` (the native writer's, as it writes the module calls')."""
        return json.loads(self.native.argument_spec(x))

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
