"""Resolve factory specs ``MODULE:FACTORY`` or ``MODULE:FACTORY(key=literal, ...)``.

* ``MODULE`` is a dotted Python module path (imported with ``importlib``).
* ``FACTORY`` is a dotted attribute path inside the module.
* The optional argument list holds keyword arguments only; every value is a
  Python literal parsed with ``ast.literal_eval`` (numbers, strings, bools,
  None, tuples, lists, dicts).  Nothing is ever ``eval``-ed.

Every problem raises :class:`commlens.CommlensError` whose subject is the
spec, e.g. ``examples.mlp:nope: module 'examples.mlp' has no attribute 'nope'``.
"""

import ast
import importlib
import re

from commlens._errors import CommlensError

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def parse_spec(spec):
    """Split ``spec`` into ``(module, attr, kwargs)`` without importing."""
    if not isinstance(spec, str) or not spec.strip():
        raise CommlensError(spec, "empty factory spec (expected MODULE:FACTORY)")
    text = spec.strip()
    if ":" not in text:
        raise CommlensError(spec, "expected MODULE:FACTORY or MODULE:FACTORY(key=value, ...)")
    module, _, rest = text.partition(":")
    module = module.strip()
    if not _DOTTED.match(module):
        raise CommlensError(spec, f"bad module name {module!r}")
    rest = rest.strip()
    kwargs = {}
    if "(" in rest:
        if not rest.endswith(")"):
            raise CommlensError(spec, "unbalanced parentheses in factory arguments")
        attr, _, argtext = rest.partition("(")
        attr = attr.strip()
        kwargs = _parse_kwargs(spec, argtext[:-1])
    else:
        attr = rest
    if not _DOTTED.match(attr):
        raise CommlensError(spec, f"bad factory name {attr!r}")
    return module, attr, kwargs


def _parse_kwargs(spec, argtext):
    if not argtext.strip():
        return {}
    try:
        call = ast.parse(f"f({argtext})", mode="eval").body
    except SyntaxError:
        raise CommlensError(spec, "cannot parse factory arguments") from None
    if not isinstance(call, ast.Call):
        raise CommlensError(spec, "cannot parse factory arguments")
    if call.args:
        raise CommlensError(spec, "factory arguments must be keyword arguments (key=literal)")
    kwargs = {}
    for kw in call.keywords:
        if kw.arg is None:
            raise CommlensError(spec, "'**' is not allowed in factory arguments")
        if kw.arg in kwargs:
            raise CommlensError(spec, f"duplicate factory argument {kw.arg!r}")
        try:
            kwargs[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError):
            raise CommlensError(
                spec, f"value of {kw.arg!r} is not a Python literal: {ast.unparse(kw.value)}"
            ) from None
    return kwargs


def resolve(spec):
    """Import the factory named by ``spec``; return ``(callable, kwargs)``."""
    module_name, attr, kwargs = parse_spec(spec)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and (module_name == err.name or module_name.startswith(err.name + ".")):
            raise CommlensError(spec, f"no module named {module_name!r}") from None
        raise CommlensError(spec, f"importing {module_name!r} failed: {err}") from None
    except Exception as err:  # noqa: BLE001 - report any import-time failure
        raise CommlensError(spec, f"importing {module_name!r} failed: {type(err).__name__}: {err}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CommlensError(spec, f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise CommlensError(spec, f"{module_name}:{attr} is not callable")
    return obj, kwargs


def call_factory(spec, **extra):
    """Resolve and call ``spec``; ``extra`` kwargs are added (spec kwargs win)."""
    fn, kwargs = resolve(spec)
    merged = dict(extra)
    merged.update(kwargs)
    try:
        return fn(**merged)
    except CommlensError:
        raise
    except TypeError as err:
        raise CommlensError(spec, f"calling the factory failed: {err}") from None
    except ValueError as err:
        raise CommlensError(spec, f"calling the factory failed: {err}") from None


def call_model_factory(spec_or_callable):
    """Return ``(model, args, kwargs)`` from a model factory spec or callable.

    The factory must return ``(model, args)`` or ``(model, args, kwargs)``.
    """
    if callable(spec_or_callable) and not isinstance(spec_or_callable, str):
        name = getattr(spec_or_callable, "__qualname__", repr(spec_or_callable))
        result = spec_or_callable()
    else:
        name = spec_or_callable
        result = call_factory(spec_or_callable)
    return normalize_model_result(name, result)


def normalize_model_result(name, result):
    import torch

    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise CommlensError(name, "model factory must return (model, args) or (model, args, kwargs)")
    model, args = result[0], result[1]
    kwargs = result[2] if len(result) == 3 else {}
    if not isinstance(model, torch.nn.Module):
        raise CommlensError(name, f"model factory returned {type(model).__name__}, not an nn.Module")
    if isinstance(args, torch.Tensor):
        args = (args,)
    if not isinstance(args, (tuple, list)):
        raise CommlensError(name, "model factory args must be a tuple")
    if not isinstance(kwargs, dict):
        raise CommlensError(name, "model factory kwargs must be a dict")
    return model, tuple(args), dict(kwargs)
