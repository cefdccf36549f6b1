"""The module call graph of a non-strict ``torch.export``, recorded by forward hooks instead of
torch's call-signature tracepoints.

``torch.export.export(..., preserve_module_call_signature=names)`` wraps every named module in
hooks that put an ``_export_tracepoint`` operator into the trace before and after each call, and
afterwards walks the graph to turn those operators into the program's ``module_call_graph`` (which
graph values each call received and returned, and the tree specs of its arguments and results),
then removes them. For a large model that is a quarter of the export: 3,030 tracepoints for the
126-layer Llama, each traced, given metadata, then found, rewired and erased (about 2 s of 7.4 s).

:class:`ModuleCallRecorder` gets the same facts from the trace itself: while export traces without
tracepoints, its hooks look up the graph node that the tracer holds for each tensor a module call
receives and returns, and mark it (node metadata, which export's later passes copy when they
rebuild a region of the graph). The graph is the same with and without tracepoints (torch removes
them and points their users back at their inputs), so the marked nodes are what torch's walk ends
up naming. The recorder builds the entries as torch's ``_get_module_call_graph`` and
``CollectTracepointsPass`` do: the module hierarchy's entries in ``named_modules`` order, each with
the signature of the module's first call (or none if it was not called), then one ``path@N`` entry
per later call, in the order those calls began. Torch's walk also moves the nodes that a call's
earlier forward pre-hooks made (an FSDP ``MixedPrecisionPolicy`` casting the call's inputs), those
just before its input tracepoint in the call's own scope, out to the caller's scope; the recorder
marks the same nodes when its pre-hook, the last, runs, and moves them after the export.

The program is torch's but for the names of some values: torch's tracepoints were values too, and
erased, they leave their names behind. A ``getitem`` after a module call (``torch.split``) is
``getitem_50`` in torch's archive where it is ``getitem_5`` here, and the inputs of a region
subgraph (``torch.no_grad``, ``torch.autocast``) keep the names of the tracepoint values that fed
them. ``tests/python/test_module_calls.py`` checks that the archive is byte-identical to torch's
for models with neither, and the same once every value is named after where it is defined for
Hugging Face models with both; predict's counts do not depend on names (its report's detail
records name values as the archive does).

Whatever it cannot reproduce exactly it declines (:meth:`ModuleCallRecorder.module_call_graph`
returns None, and :func:`commlens.export.export_model` exports again with torch's tracepoints):
a module reachable under two names (torch records such calls under the name they were made
with), an argument or result that is neither a tensor the trace knows nor a Python constant
(symbolic sizes, tensors created outside the trace, other objects), a call whose tree specs
differ from the module's first call (torch refuses those), a hook that did not see its module's
call end, or a tensor that is not exactly one node of the program's own graph (a module called
inside a ``torch.no_grad`` or ``torch.autocast`` region, where torch's tracepoints change what
the region's subgraph returns). An export that fails with the hooks in place (a region dynamo
must capture whole) is also retried on torch's path.
"""

import torch
from torch.export.exported_program import ConstantArgument, ModuleCallEntry, ModuleCallSignature, TensorArgument
from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot
from torch.utils import _pytree as pytree

_CONSTANT_TYPES = (str, int, float, bool, type(None))
# The node metadata key under which a traced node a module call used carries its number. Export's
# later passes may rebuild the graph (regions under torch.autocast or torch.no_grad are split out
# and inlined back), copying each node's metadata to its copy: the number finds the final node.
_MARK = "commlens_module_call_value"
# Marks a node a forward pre-hook made inside a module call before the call's arguments were taken
# (an FSDP MixedPrecisionPolicy's input casts): torch's walk moves such nodes, those just before a
# call's input tracepoint in the call's own scope, out to the caller's scope.
_HOOK_NODE = "commlens_module_call_hook_node"


class _Declined(Exception):
    """The recorder cannot reproduce torch's module call graph for this trace."""


class _Call:
    __slots__ = ("path", "number", "inputs", "outputs", "in_spec", "out_spec")

    def __init__(self, path, number, inputs, in_spec):
        self.path, self.number, self.inputs, self.in_spec = path, number, inputs, in_spec
        self.outputs = self.out_spec = None


class ModuleCallRecorder:
    """Within the block (``with recorder:``), hooks on the named submodules ``paths`` of ``model``
    record each call; :meth:`module_call_graph` then gives the exported program's entries."""

    def __init__(self, model, paths):
        self._model = model
        self._paths = tuple(paths)
        self._calls = []  # in the order the calls began
        self._open = {}  # path -> calls begun and not yet ended (innermost last)
        self._counts = {}
        self._marked = []  # traced nodes, by mark
        self._declined = None  # known before the trace for a model with aliases: no trace is needed
        if len(dict(model.named_modules(remove_duplicate=False))) != len(dict(model.named_modules())):
            self._declined = "a module is reachable under more than one name"
        self._handles = []

    def __enter__(self):
        for path in self._paths if self._declined is None else ():
            module = self._model.get_submodule(path)
            self._handles.append(module.register_forward_pre_hook(self._pre_hook(path), with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post_hook(path), with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        return False

    @staticmethod
    def _tracer():
        mode = get_proxy_mode()
        if mode is None:
            raise _Declined("a module ran outside the trace")
        return mode.tracer

    def _arguments(self, flat, tracer):
        """Per leaf: a tensor's mark (an int), or a constant's ConstantArgument."""
        out = []
        for leaf in flat:
            if isinstance(leaf, torch.Tensor):
                slot = get_proxy_slot(leaf, tracer, None)
                if slot is None:
                    raise _Declined("a module received or returned a tensor the trace does not hold")
                node = slot.proxy.node
                out.append(node.meta.setdefault(_MARK, len(self._marked)))
                if node.meta[_MARK] == len(self._marked):
                    self._marked.append(node)
            elif isinstance(leaf, _CONSTANT_TYPES):
                out.append(ConstantArgument(name="", value=leaf))
            else:
                raise _Declined(f"a module received or returned a {type(leaf).__name__}")
        return out

    @staticmethod
    def _mark_hook_nodes(tracer):
        """Marks the nodes that end the trace so far in the scope of the call now beginning: the
        work of the call's earlier pre-hooks (the recorder's runs last)."""
        stack = getattr(tracer, "module_stack", None)
        if stack is None:
            raise _Declined("the tracer keeps no module stack")
        for node in reversed(tracer.graph.nodes):
            if node.op != "call_function":
                continue
            if node.meta.get("nn_module_stack", {}).keys() != stack.keys():  # keys: the calls
                break
            node.meta[_HOOK_NODE] = True

    def _pre_hook(self, path):
        def hook(_module, args, kwargs):
            if self._declined:
                return None
            try:
                flat, in_spec = pytree.tree_flatten((args, kwargs))
                number = self._counts.get(path, 0)
                self._counts[path] = number + 1
                tracer = self._tracer()
                call = _Call(path, number, self._arguments(flat, tracer), in_spec)
                self._mark_hook_nodes(tracer)
            except _Declined as why:
                self._declined = str(why)
                return None
            self._calls.append(call)
            self._open.setdefault(path, []).append(call)
            return None
        return hook

    def _post_hook(self, path):
        def hook(_module, _args, _kwargs, result):
            if self._declined:
                return None
            try:
                call = self._open[path].pop()
                flat, out_spec = pytree.tree_flatten(result)
                call.outputs, call.out_spec = self._arguments(flat, self._tracer()), out_spec
            except _Declined as why:
                self._declined = str(why)
            except (KeyError, IndexError):
                self._declined = "a module call ended that its hook did not see begin"
            return None
        return hook

    def module_call_graph(self, exported_program):
        """The program's ``module_call_graph`` as torch's tracepoints would have made it, or None
        (with the reason in :attr:`declined`) when the recorder declines."""
        if self._declined is None and any(self._open.values()):
            self._declined = "a module call began whose end the hooks did not see"
        # mark -> the node of the program's own graph carrying it (None: more than one does). A
        # region export made a subgraph of (torch.no_grad, torch.autocast) has copies of the
        # metadata of values crossing its boundary; a value only there (a module called inside
        # such a region) is declined: torch's tracepoints there change the region's outputs.
        final, moved = {}, set()  # moved: the scope stacks already moved out (copies share them)
        for module in exported_program.graph_module.modules():
            if not isinstance(module, torch.fx.GraphModule):
                continue
            for node in module.graph.nodes:
                if node.meta.pop(_HOOK_NODE, False) and self._declined is None:
                    stack = node.meta["nn_module_stack"]
                    if id(stack) not in moved:
                        moved.add(id(stack))
                        stack.popitem()
                mark = node.meta.pop(_MARK, None)
                if mark is not None and module is exported_program.graph_module:
                    final[mark] = node if mark not in final else None
        for node in self._marked:  # the trace's own nodes, where export did not keep them
            node.meta.pop(_MARK, None)
            node.meta.pop(_HOOK_NODE, None)
        if self._declined is not None:
            return None

        def spec(arg):
            if isinstance(arg, ConstantArgument):
                return ConstantArgument(name="", value=arg.value)
            node = final.get(arg)
            if node is None:
                raise _Declined("a tensor a module call used is not one node of the program's graph")
            if not isinstance(node.meta.get("val"), torch.Tensor):
                raise _Declined("a tensor a module call used is not a tensor in the program")
            return TensorArgument(name=node.name)

        first, later = {}, []  # path -> (its first call, that call's signature); path@N entries
        try:
            for call in self._calls:
                known = first.get(call.path)
                specs = known[0] if known else call
                if specs.in_spec != call.in_spec or specs.out_spec != call.out_spec:
                    raise _Declined(f"module {call.path} was called with another argument structure")
                signature = ModuleCallSignature(inputs=[spec(a) for a in call.inputs],
                                                outputs=[spec(a) for a in call.outputs],
                                                in_spec=specs.in_spec, out_spec=specs.out_spec,
                                                forward_arg_names=None)
                if known is None:
                    first[call.path] = (call, signature)
                else:
                    later.append(ModuleCallEntry(fqn=f"{call.path}@{call.number}", signature=signature))
        except _Declined as why:
            self._declined = str(why)
            return None
        return [ModuleCallEntry(fqn=e.fqn, signature=first[e.fqn][1]) if e.fqn in first else e
                for e in exported_program.module_call_graph] + later

    @property
    def declined(self):
        return self._declined
