"""Compiles autograd/derivatives.yaml into C++ (DerivativeTableData.cpp in the build tree): one
function per formula entry, running the entry's ops with a GradEmitter, and the table of every
entry (formulas and the `code:` procedures of autograd/Derivatives.cpp) with the ops autograd
never differentiates. CMake runs it at build time (autograd/CMakeLists.txt), the way torch's
tools/autograd generates its Functions.cpp from its derivatives.yaml.

Every op an entry names or calls, and every argument a formula reads or passes, is checked
against the installed torch's schemas; a mistake is a build error naming the entry.

    python autograd/gen_derivatives.py derivatives.yaml OUT.cpp
"""
import ast
import sys

import torch
import yaml

# Helpers (GradEmitter's and FunctionsManual's) a formula may call: name -> (parameter kinds, C++).
# Kinds: "value" a tensor (Value *), "int" an integer, "arg" a forward argument's name (its
# Argument, possibly absent), "argument" any value as an Argument.
VALUE_HELPERS = {
    "maybe_multiply": (("value", "arg"), "maybeMultiply(c, {0}, {1})"),
    "mm_mat1_backward": (("value", "value", "value"), "c.e.mmMat1Backward({0}, {1}, {2})"),
    "mm_mat2_backward": (("value", "value", "value"), "c.e.mmMat2Backward({0}, {1}, {2})"),
    "bmm": (("value", "value"), "c.e.bmm({0}, {1})"),
    "t": (("value",), "c.e.t({0})"),
    "transpose": (("value", "int", "int"), "c.e.transpose({0}, {1}, {2})"),
    "sum_to": (("value", "value"), "c.e.sumTo({0}, *{1}->meta())"),
    "reshape_as": (("value", "value"), "c.e.reshape({0}, sizesOf(*{1}->meta()))"),
    "new_zeros_like": (("value", "value"), "c.e.newZerosLike({0}, {1})"),
    "contiguous": (("value",), "contiguous(c, {0})"),
    "scalar_minus": (("argument", "value"), 'scalarLeft(c, "aten::sub_.Tensor", {0}, {1})'),
    "scalar_div": (("argument", "value"), 'scalarLeft(c, "aten::div_.Tensor", {0}, {1})'),
    "scalar_tensor": (("argument", "value"), "scalarTensor(c, {0}, {1})"),
}
# Ops whose result is a Bool mask whatever their operands' dtype.
BOOL_RESULT_OPS = {"eq", "ne", "lt", "gt", "le", "ge", "logical_and", "logical_or", "logical_not", "isfinite", "isnan",
                   "isinf"}
DEFAULT_HINTS = {"aten::mul.Scalar": "grad_scale"}
MEMORY_FORMATS = {"preserve_format": "MemoryFormat::Preserve", "contiguous_format": "MemoryFormat::Contiguous"}
RESERVED = {"grad", "result"}


class FormulaError(Exception):
    pass


def schema_of(name, overload, called=True):
    packet = getattr(torch.ops.aten, name, None)
    if packet is None or overload not in packet.overloads():
        raise FormulaError(f"torch has no operator aten::{name}.{overload}")
    schema = getattr(packet, overload)._schema
    if called and (not schema.returns or not is_tensor_type(schema.returns[0].type)):
        # aten::mul.default is TorchScript's Scalar * Scalar: a tensor op names its overload
        raise FormulaError(f"aten::{name}.{overload} does not return a tensor ({schema}): name the overload")
    return schema


def forward_schema(qualified):
    if not qualified.startswith("aten::") or "." not in qualified:
        raise FormulaError(f"'{qualified}' is not an op name aten::NAME.OVERLOAD")
    name, overload = qualified[len("aten::"):].rsplit(".", 1)
    return schema_of(name, overload, called=False)


def is_tensor_type(t):
    return "Tensor" in str(t)


def cpp_double(x):
    text = repr(float(x))
    if text in ("inf", "-inf", "nan"):
        raise FormulaError(f"the constant {text} is not written in formulas")
    return text


def forward_arg(schemas, name):
    """The forward ops' argument `name`: (is a tensor, has a default), the same in every op."""
    found = set()
    for s in schemas:
        args = [a for a in s.arguments if a.name == name]
        if not args:
            raise FormulaError(f"{s.name}.{s.overload_name or 'default'} has no argument '{name}'")
        found.add((is_tensor_type(args[0].type), args[0].has_default_value()))
    if len(found) != 1:
        raise FormulaError(f"argument '{name}' differs between the entry's ops")
    return found.pop()


class Formula:
    """Generates the statements of one operand's formula."""

    def __init__(self, schemas, out, counter):
        self.schemas = schemas  # the entry's forward ops' schemas: every name must read the same in all
        self.out = out
        self.counter = counter
        self.locals = {}

    def fresh(self):
        self.counter[0] += 1
        return f"v{self.counter[0]}"

    def forward_arg(self, name):
        return forward_arg(self.schemas, name)

    # -- expressions: (C++ text, kind); kinds: value (Value *), tensor_ref (a tensor operand, by
    # name), arg (an Argument), int, double, bool, intlist
    def expr(self, node):
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if isinstance(node, ast.Constant):
            return self.constant(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            return self.constant(-node.operand.value)
        if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.Div):
            (lt, lk), (rt, rk) = self.expr(node.left), self.expr(node.right)
            if lk not in ("int", "double") or rk not in ("int", "double"):
                raise FormulaError("arithmetic is on numbers only, not tensors (call the op)")
            if isinstance(node.op, ast.Div):  # Python's true division: a double
                return f"(double({lt}) / double({rt}))", "double"
            sym = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}[type(node.op)]
            return f"({lt} {sym} {rt})", "double" if "double" in (lk, rk) else "int"
        if isinstance(node, ast.Call):
            return self.call(node)
        raise FormulaError(f"unsupported expression: {ast.unparse(node)}")

    def constant(self, v):
        if isinstance(v, bool):
            return ("true" if v else "false"), "bool"
        if isinstance(v, int):
            return f"int64_t({v})", "int"
        if isinstance(v, float):
            return cpp_double(v), "double"
        if isinstance(v, str):
            return f'std::string("{v}")', "string"
        raise FormulaError(f"unsupported constant {v!r}")

    def name(self, n):
        if n in self.locals:
            return self.locals[n], "value"
        if n == "grad":
            return "c.g()", "value"
        if n in MEMORY_FORMATS:
            return MEMORY_FORMATS[n], "memory_format"
        if n == "result" or (n.startswith("result") and n[6:].isdigit()):
            return f"mut(c.result({int(n[6:] or 0)}))", "value"
        tensor, has_default = self.forward_arg(n)
        if tensor:
            return n, "tensor_ref"
        if has_default:
            raise FormulaError(f"'{n}' has a default in the schema: read it through given(), optional(), int() or bool()")
        return f'*c.n.input("{n}")', "arg"

    def as_value(self, text_kind):
        text, kind = text_kind
        if kind == "value":
            return text
        if kind == "tensor_ref":
            return f'c.operand("{text}")'
        raise FormulaError(f"a tensor is needed, not {kind} {text}")

    def as_argument(self, text_kind):
        text, kind = text_kind
        if kind == "value":
            return text
        if kind == "tensor_ref":
            return f'*c.n.input("{text}")'
        if kind == "arg":
            return text
        return f"Argument({text})"

    def arg_name(self, node, what):
        if not isinstance(node, ast.Name) or node.id in self.locals or node.id in RESERVED:
            raise FormulaError(f"{what} takes a forward argument's name, not {ast.unparse(node)}")
        self.forward_arg(node.id)
        return node.id

    def literal(self, node):
        return self.constant(ast.literal_eval(node))

    def call(self, node):
        f = node.func
        if isinstance(f, ast.Name) and f.id in VALUE_HELPERS:
            return self.helper(f.id, node)
        if isinstance(f, ast.Name) and f.id in ("int", "float", "bool"):
            name = self.arg_name(node.args[0], f.id + "()")
            dflt = self.literal(node.args[1])[0] if len(node.args) > 1 else None
            if dflt is None and self.forward_arg(name)[1]:
                raise FormulaError(f"{f.id}({name}) needs a default: the schema has one")
            if f.id == "int":
                return (f'c.intArg("{name}", {dflt}).value_or({dflt})' if dflt else f'(*c.intArg("{name}"))'), "int"
            if f.id == "float":
                return (f'numberOf(c.n.input("{name}")).value_or({dflt})' if dflt else f'(*numberOf(c.n.input("{name}")))'), "double"
            return f'c.boolArg("{name}", {dflt or "false"})', "bool"
        if isinstance(f, ast.Name) and f.id == "given":
            name = self.arg_name(node.args[0], "given()")
            dflt = self.as_argument(self.literal(node.args[1]))
            return f'(c.n.input("{name}") ? *c.n.input("{name}") : {dflt})', "arg"
        if isinstance(f, ast.Name) and f.id == "sizes":
            return f"sizesList({self.as_value(self.expr(node.args[0]))})", "intlist"
        if isinstance(f, ast.Name) and f.id == "size":
            return f"sizesOf(*{self.as_value(self.expr(node.args[0]))}->meta())[{int(ast.literal_eval(node.args[1]))}]", "int"
        if isinstance(f, ast.Name) and f.id == "optional":
            raise FormulaError("optional() is an op's argument, not a value")
        if isinstance(f, ast.Name):
            return self.op(f.id, "default", node)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            return self.op(f.value.id, f.attr, node)
        raise FormulaError(f"unsupported call: {ast.unparse(node)}")

    def helper(self, name, node):
        kinds, template = VALUE_HELPERS[name]
        if len(node.args) != len(kinds) or node.keywords:
            raise FormulaError(f"{name}() takes {len(kinds)} positional arguments")
        parts = []
        for kind, a in zip(kinds, node.args):
            if kind == "value":
                parts.append(self.as_value(self.expr(a)))
            elif kind == "arg":
                parts.append(f'c.n.input("{self.arg_name(a, name + "()")}")')
            elif kind == "argument":
                parts.append(self.as_argument(self.expr(a)))
            else:
                text, k = self.expr(a)
                if k != "int":
                    raise FormulaError(f"{name}() takes an integer, not {ast.unparse(a)}")
                parts.append(text)
        v = self.fresh()
        self.out.append(f"Value *{v} = {template.format(*parts)};")
        return v, "value"

    def op(self, name, overload, node):
        schema = schema_of(name, overload)
        qualified = f"aten::{name}.{overload}"
        params = list(schema.arguments)
        like, sizes_of, hint = None, None, DEFAULT_HINTS.get(qualified, f"grad_{name}")
        args, optional, first_tensor = [], [], None
        positional = len([p for p in params if not p.kwarg_only])
        if len(node.args) > positional:
            raise FormulaError(f"{qualified} takes at most {positional} positional arguments")
        written = [(params[i].name, a, False) for i, a in enumerate(node.args)]
        for k in node.keywords:
            if k.arg == "_like":
                like = self.as_value(self.expr(k.value))
            elif k.arg == "_sizes":
                sizes_of = self.as_value(self.expr(k.value))
            elif k.arg == "_hint":
                hint = ast.literal_eval(k.value)
            else:
                if k.arg not in [p.name for p in params]:
                    raise FormulaError(f"{qualified} has no argument '{k.arg}'")
                written.append((k.arg, k.value, True))
        for pname, a, keyword in written:
            ctor = "K" if keyword else "A"
            if isinstance(a, ast.Call) and isinstance(a.func, ast.Name) and a.func.id == "optional":
                src = self.arg_name(a.args[0], "optional()")
                optional.append(f'if (const Argument *o = c.n.input("{src}"); o && !o->isNone())\n'
                                f'      {{}}.push_back({ctor}("{pname}", *o));')
                continue
            if optional:
                raise FormulaError(f"{qualified}: an optional() argument must come last")
            tk = self.expr(a)
            if first_tensor is None and tk[1] in ("value", "tensor_ref"):
                first_tensor = self.as_value(tk)
            args.append(f'{ctor}("{pname}", {self.as_argument(tk)})')
        meta = like or first_tensor
        if meta is None:
            raise FormulaError(f"{qualified}: no tensor argument to take the result's meta from (give _like=)")
        meta_cpp = (f"GradEmitter::withSizes({meta}, sizesOf(*{sizes_of}->meta()))" if sizes_of
                    else f"GradEmitter::like({meta})")
        if name in BOOL_RESULT_OPS:
            meta_cpp = f"withDtype({meta_cpp}, ScalarType::Bool)"
        v = self.fresh()
        if optional:
            self.out.append(f"llvm::SmallVector<NamedArgument, 4> {v}Args{{{', '.join(args)}}};")
            self.out.extend(o.format(v + "Args") for o in optional)
            self.out.append(f'Value *{v} = c.e.emit("{qualified}", std::move({v}Args), {meta_cpp}, "{hint}");')
        else:
            self.out.append(f'Value *{v} = c.e.emit("{qualified}", {{{", ".join(args)}}}, {meta_cpp}, "{hint}");')
        return v, "value"

    def generate(self, source):
        body = ast.parse(source.strip(), mode="exec").body
        if not body or not isinstance(body[-1], ast.Expr):
            raise FormulaError("a formula ends with an expression")
        for stmt in body[:-1]:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
                raise FormulaError(f"only `name = expression` comes before the formula: {ast.unparse(stmt)}")
            target = stmt.targets[0].id
            self.locals[target] = self.as_value(self.expr(stmt.value))
        return self.as_value(self.expr(body[-1].value))


def generate(doc):
    functions, table, procedures = [], [], []
    seen = set()
    for index, entry in enumerate(doc["derivatives"]):
        ops = entry.get("ops")
        where = f"derivatives.yaml entry {index} ({', '.join(ops or [])})"
        try:
            if not ops:
                raise FormulaError("an entry names its forward ops")
            schemas = [forward_schema(op) for op in ops]
            for op in ops:
                if op in seen:
                    raise FormulaError(f"{op} has two entries")
                seen.add(op)
            real_only = entry.pop("real_only", False)
            if "code" in entry:
                if real_only or len(entry) != 2:
                    raise FormulaError("an entry with code: has no formulas")
                fn = entry["code"]
                procedures.append(fn)
            else:
                fn = f"formula{index}"
                counter = [0]
                lines = []
                if real_only:
                    # the formula is the real case of one that branches on is_complex()
                    lines.append('  for (const NamedArgument &a : c.n.inputs())')
                    lines.append('    for (const Value *v : a.value.tensors())')
                    lines.append('      if (v->meta() && isComplex(v->meta()->dtype))')
                    lines.append('        return makeError("autodiff: {} of a complex tensor has no formula here (node \'{}\')", '
                                 'c.n.opString(), c.n.name());')
                for operand, source in entry.items():
                    if operand == "ops":
                        continue
                    if not forward_arg(schemas, operand)[0]:
                        raise FormulaError(f"'{operand}' is not a tensor argument")
                    if source == "not_differentiable":  # torch raises when the operand requires grad
                        lines.append(f'  if (c.want("{operand}"))')
                        lines.append(f'    return c.notDifferentiable("{operand}");')
                        continue
                    out = []
                    result = Formula(schemas, out, counter).generate(str(source))
                    lines.append(f'  if (c.want("{operand}")) {{')
                    lines.extend("    " + line for line in out)
                    lines.append(f'    c.set("{operand}", {result});')
                    lines.append("  }")
                functions.append(f"// {', '.join(ops)}\nllvm::Error {fn}(GradCall &c) {{\n" + "\n".join(lines) +
                                 "\n  return llvm::Error::success();\n}")
        except (FormulaError, SyntaxError, ValueError, IndexError) as e:
            raise SystemExit(f"{where}: {e}")
        table.extend(f'    {{"{op}", {fn}}},' for op in ops)
    nondiff = []
    for group in doc["non_differentiable"]:
        for op in group:
            try:
                forward_schema(op)
            except FormulaError as e:
                raise SystemExit(f"derivatives.yaml non_differentiable: {e}")
            if op in seen:
                raise SystemExit(f"derivatives.yaml: {op} is both differentiated and non_differentiable")
            nondiff.append(f'    "{op}",')
    declarations = "\n".join(f"llvm::Error {p}(GradCall &c);" for p in sorted(set(procedures)))
    return f"""// Generated by autograd/gen_derivatives.py from autograd/derivatives.yaml: do not edit.
#include "autograd/GradCall.h"
#include "ir/Error.h"

namespace commlens::derivatives {{

// The procedures (autograd/Derivatives.cpp).
{declarations}

namespace {{

{chr(10).join(functions)}

const DerivativeEntry kTable[] = {{
{chr(10).join(table)}
}};

const char *const kNonDifferentiable[] = {{
{chr(10).join(nondiff)}
}};

}} // namespace

llvm::ArrayRef<DerivativeEntry> derivativeTable() {{ return kTable; }}
llvm::ArrayRef<const char *> nonDifferentiableTable() {{ return kNonDifferentiable; }}

}} // namespace commlens::derivatives
"""


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = generate(yaml.safe_load(f))
    with open(out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
