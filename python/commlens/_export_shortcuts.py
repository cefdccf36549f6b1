"""Shortcuts through torch 2.13 internals that make ``torch.export`` and its serialiser cheaper
for a large model without changing what they produce.

Each is a context manager that swaps one torch internal for an equivalent while the block runs
and restores it after, and does nothing when the internal it relies on is absent (another torch
version): export and serialisation then take torch's own path.
``tests/python/test_export_shortcuts.py`` checks, per shortcut, that the program's JSON is
byte-identical with and without it, and that the fallback is taken when the internal is missing.

The swaps are process-wide while active (torch looks these functions up at call time), so a
second thread that uses the same shortcut waits for the first to finish (:func:`_swapped`).
"""

import contextlib
import logging
import threading

_LOCKS = {}
_SWAPPED = set()


@contextlib.contextmanager
def _swapped(key, swap):
    """Within the block, ``swap()``'s replacement is in place (``swap`` installs it and returns the
    function that restores torch's, or returns None, installing nothing, when the internals it
    needs are absent). Blocks with the same ``key`` in other threads wait for this one; one
    nested in it, in this thread, finds the replacement in place and leaves it."""
    with _LOCKS.setdefault(key, threading.RLock()):
        restore = swap() if key not in _SWAPPED else None
        if restore is None:
            yield
            return
        _SWAPPED.add(key)
        try:
            yield
        finally:
            _SWAPPED.discard(key)
            restore()


def no_canonical_form_check():
    """Within the block, torch's program serialiser skips its canonical-form self-check.

    ``ExportedProgramSerializer.serialize`` (torch 2.13) calls ``canonicalize(serialized_ep, ...)``
    on the program it has just built only to "test canonical form is well defined" and discards
    the result; ``canonicalize`` begins with a ``copy.deepcopy`` of the whole serialised program,
    which is most of ``torch.export.save``'s time for a large model (about 60% for a 126-layer
    Llama). What is written does not depend on it: the archive's entries are byte-identical with
    and without the check (``tests/python/test_export.py``). Here the module's ``canonicalize`` is
    the identity."""
    return _swapped("no_canonical_form_check", _swap_canonical_form_check)


def _swap_canonical_form_check():
    try:
        from torch._export.serde import serialize as serde

        plain = serde.canonicalize
    except (ImportError, AttributeError):
        return None

    def restore():
        serde.canonicalize = plain

    serde.canonicalize = lambda ep, constants=None: ep
    return restore


def no_unbacked_rebinding_walk():
    """Within the block, export's recomputation of ``unbacked_bindings`` skips its walk of every
    node's value when the trace has no unbacked symbol.

    ``torch.export._trace._replace_unbacked_bindings`` drops each node's ``unbacked_bindings`` and
    recomputes them with ``_free_unbacked_symbols_with_path`` over the node's ``val``, looking for
    the trace's unbacked symbols (those of its ``ShapeEnv``, less the renamed ones). That walk
    reads every output tensor's sizes, strides and offset through the trace's torch-function
    modes: half a second for the 126-layer Llama. With no unbacked symbol to look for it finds
    nothing for any node (each of its matches requires a symbol of that set), so here the nodes
    only lose their ``unbacked_bindings``; a trace with unbacked symbols (data-dependent shapes)
    takes torch's walk."""
    return _swapped("no_unbacked_rebinding_walk", _swap_unbacked_rebinding)


def _swap_unbacked_rebinding():
    try:
        import torch.export._trace as trace
        from torch._export.utils import _get_shape_env_from_gm
        from torch.utils._sympy.symbol import SymT, symbol_is_type

        plain = trace._replace_unbacked_bindings
    except (ImportError, AttributeError):
        return None
    unbacked = (SymT.UNBACKED_INT, SymT.UNBACKED_FLOAT)

    def replace(gm):
        shape_env = _get_shape_env_from_gm(gm)
        if shape_env is None or any(symbol_is_type(s, unbacked) and s not in shape_env.unbacked_renamings
                                    for s in shape_env.var_to_range):
            return plain(gm)
        for node in gm.graph.nodes:
            node.meta.pop("unbacked_bindings", None)

    def restore():
        trace._replace_unbacked_bindings = plain

    trace._replace_unbacked_bindings = replace
    return restore


@contextlib.contextmanager
def lean_serializer(exported_program=None):
    """Within the block, torch's program serialiser builds the same objects and JSON with less work.

    ``torch._export.serde.serialize`` spends most of its time in bookkeeping that does not depend
    on the program: ``_Union.create`` lists the union class's dataclass fields for every value it
    makes (a tensor argument, an output, each size of each tensor's metadata) and its
    ``__post_init__`` lists them again to check that no field has a reserved name;
    ``_dataclass_to_dict`` (the walk before ``json.dumps``) lists the fields of every dataclass
    it meets and goes through ``_Union.__getattribute__`` for every union; and ``serialize_graph``
    renders the whole graph as Python source (``print_readable``) for a debug log line it drops
    when debug logging is off. Here the field names are listed once per class, the reserved-name
    check runs once per class, a union's tag object is made once per (class, tag) (it is an
    immutable ``str``), the walk reads each class's fields from a per-type table and an object's
    values from its ``__dict__``, and ``exported_program``'s graph module skips the debug
    rendering while debug logging is off (only that call, ``print_readable(print_output=False)``:
    ``str(exported_program)`` still renders). The objects built and the JSON written are the
    same (``tests/python/test_export_shortcuts.py``)."""
    graph_module = getattr(exported_program, "graph_module", None)
    skip_render = graph_module is not None and "print_readable" not in vars(graph_module)
    if skip_render:
        render = graph_module.print_readable

        def print_readable(*args, **kwargs):
            from torch._export.serde.serialize import log

            if not args and kwargs == {"print_output": False} and not log.isEnabledFor(logging.DEBUG):
                return ""  # serialize_graph's debug line, which the logger drops
            return render(*args, **kwargs)

        graph_module.print_readable = print_readable
    try:
        with _swapped("lean_serializer", _swap_serializer):
            yield
    finally:
        if skip_render:
            del graph_module.print_readable


def _swap_serializer():
    try:
        import dataclasses
        import math

        from torch._export.serde import serialize as serde
        from torch._export.serde.union import _Union, _UnionTag

        plain_create_method = _Union.__dict__["create"]
        plain_create = plain_create_method.__func__
        plain_post_init = _Union.__dict__["__post_init__"]
        plain_to_dict = serde._dataclass_to_dict
    except (ImportError, AttributeError, KeyError):
        return None
    field_names, checked, tags = {}, set(), {}

    def names_of(cls):
        names = field_names.get(cls)
        if names is None:
            names = field_names[cls] = tuple(f.name for f in dataclasses.fields(cls))
        return names

    def create(cls, **kwargs):
        if len(kwargs) != 1:
            return plain_create(cls, **kwargs)  # its error
        values = dict.fromkeys(names_of(cls))
        values.update(kwargs)
        obj = cls(**values)
        (name,) = kwargs
        tag = tags.get((cls, name))
        if tag is None:
            tag = tags[(cls, name)] = _UnionTag.create(name, cls)
        obj._type = tag
        return obj

    def post_init(self):
        cls = type(self)
        if cls not in checked:
            plain_post_init(self)
            checked.add(cls)

    UNION, DATACLASS, LIST, TUPLE, DICT, FLOAT, OTHER = range(7)
    kinds = {}

    def kind_of(obj):  # the order of serde._dataclass_to_dict's tests
        if isinstance(obj, _Union):
            return UNION, None
        if dataclasses.is_dataclass(obj):
            return DATACLASS, names_of(type(obj))
        for kind, cls in ((LIST, list), (TUPLE, tuple), (DICT, dict), (FLOAT, float)):
            if isinstance(obj, cls):
                return kind, None
        return OTHER, None

    def to_dict(obj):
        entry = kinds.get(type(obj))
        if entry is None:
            if isinstance(obj, type):  # a class, not an instance: what is_dataclass says depends on it
                return plain_to_dict(obj)
            entry = kinds[type(obj)] = kind_of(obj)
        kind, names = entry
        if kind == OTHER:
            return obj
        if kind == UNION:
            values = obj.__dict__
            tag = values.get("_type")
            if tag is None:  # not made by create(): torch's error
                return plain_to_dict(obj)
            name = str(tag)  # the tag as a plain str: the same JSON key, hashed in C
            return {name: to_dict(values[name])}
        if kind == DATACLASS:
            values = getattr(obj, "__dict__", {})
            return {n: to_dict(values[n] if n in values else getattr(obj, n)) for n in names}
        if kind == LIST:
            return [to_dict(x) for x in obj]
        if kind == TUPLE:
            return tuple(to_dict(x) for x in obj)
        if kind == DICT:
            return {k: to_dict(v) for k, v in obj.items()}
        if obj == math.inf:
            return "Infinity"
        if obj == -math.inf:
            return "-Infinity"
        if math.isnan(obj):
            return "NaN"
        return obj

    def restore():
        _Union.create = plain_create_method
        _Union.__post_init__ = plain_post_init
        serde._dataclass_to_dict = plain_to_dict

    _Union.create = classmethod(create)
    _Union.__post_init__ = post_init
    serde._dataclass_to_dict = to_dict
    return restore


def lazy_program_module():
    """Within the block (and with torch.fx's lazy graph modules on, as in
    :func:`commlens.export.export_model`), the exported program's graph module generates its
    Python code when first called, like the graph modules of the trace before it.

    ``ExportedProgram.__init__`` makes its graph module with
    ``torch.export.exported_program._create_graph_module_for_export``, an eager
    ``torch.fx.GraphModule`` that generates and compiles the whole graph's Python source at once:
    a quarter of a second for the 126-layer Llama, for code that neither ``torch.export.save`` nor
    :func:`commlens.export.program_json` runs. Here it is a ``_LazyGraphModule`` (torch.fx's,
    which torch.compile uses: the same graph, code and behaviour, generated on first use). One
    difference: a graph whose source cannot be compiled (an in-memory object that its code
    cannot spell) raises the ``SyntaxError`` when first called, where torch warns at export and
    leaves a module that cannot be called."""
    return _swapped("lazy_program_module", _swap_program_module)


def _swap_program_module():
    try:
        import torch.export.exported_program as exported_program
        from torch.fx import _lazy_graph_module as lazy

        plain = exported_program._create_graph_module_for_export
        lazy._get_graph_module_cls, lazy._LazyGraphModule  # noqa: B018 - fails on another torch
    except (ImportError, AttributeError):
        return None

    def create(root, graph):
        if lazy._get_graph_module_cls() is not lazy._LazyGraphModule:
            return plain(root, graph)
        return lazy._LazyGraphModule(root, graph)

    def restore():
        exported_program._create_graph_module_for_export = plain

    exported_program._create_graph_module_for_export = create
    return restore
