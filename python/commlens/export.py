"""Export a model factory with ``torch.export`` and describe exported programs.

CLI::

    python -m commlens.export MODULE:FACTORY[(k=v, ...)] -o model.pt2 [--plan PLAN] [--stack-traces]
        [--eval] [--describe desc.json]

The factory returns ``(model, args)`` or ``(model, args, kwargs)``.  The model
is exported non-strict (``torch.export.export(model, args, kwargs,
strict=False)``, every submodule's call signature preserved: see
:func:`export_model`) in whatever mode the factory left it (``nn.Module`` default:
training mode, so ``aten.dropout`` nodes are kept; ``--eval`` calls ``model.eval()`` first, for
``commlens predict --phase inference``) and written with
``torch.export.save`` (:func:`save_program`), without the Python stack trace of each node unless
``--stack-traces`` is given.  One summary line goes to stdout: what was exported and the time
torch.export and the save took.  With ``--plan``, the
model is traced in the dtypes the plan's FSDP ``MixedPrecisionPolicy`` gives it
at run time (:func:`fsdp_mixed_precision`), so predict knows the bytes of the
DTensor collectives of a bf16 run.

Meta-device models (``device="meta"``) export and save directly in torch 2.13:
``torch.export.save`` stores meta parameters as meta tensors (no data, the
archive stays small) and ``torch.export.load`` gives back a program whose
state_dict tensors are on ``meta``.  No weights are materialised, so a
70B-shaped model exports on a laptop.

:func:`describe` computes, from a model and its exported program, the JSON
facts that ``commlens inspect --json`` must reproduce.
"""

import argparse
import contextlib
import gc
import json
import logging
import sys
import time
from collections import OrderedDict

from commlens._errors import CommlensError, cli_main
from commlens._factory import call_model_factory


def _without_checkpoint_wrappers(plan):
    """The plan with its fully_shard patterns naming the model before checkpoint_wrapper (a unit
    inside a wrapped block names it, and its prefetch targets, through
    ``_checkpoint_wrapped_module``), as the program is exported from that model."""
    import dataclasses

    from commlens.measure import _unwrapped_path

    def unwrapped(fqn):
        return tuple(map(_unwrapped_path, fqn)) if isinstance(fqn, tuple) else _unwrapped_path(fqn)

    units = tuple(dataclasses.replace(unit, fqn=unwrapped(unit.fqn), forward_prefetch=unwrapped(unit.forward_prefetch),
                                      backward_prefetch=unwrapped(unit.backward_prefetch))
                  for unit in plan.fully_shard)
    return dataclasses.replace(plan, fully_shard=units)


@contextlib.contextmanager
def fsdp_mixed_precision(model, plan):
    """Within the block, ``model`` computes in the dtypes the plan's FSDP2 ``MixedPrecisionPolicy``
    units give it at run time, so a trace records them (the bytes of DTensor collectives depend on
    them, and export bakes trace-time dtypes into its casts, so they cannot be changed afterwards).

    As ``fully_shard`` does: each unit (children before parents) takes the parameters of its
    modules that no earlier unit took, and the floating ones it takes are held in ``param_dtype``
    (fresh ``nn.Parameter`` objects, tied parameters stay tied); with ``cast_forward_inputs`` each
    of its modules casts its floating tensor inputs to ``param_dtype`` in a pre-hook that runs
    before any other (FSDP prepends its own), and ``output_dtype`` casts its outputs after the
    module's other hooks.  Buffers keep their dtype.  On exit the model gets its parameters back
    and loses the hooks; a program exported inside keeps the cast parameters.  A plan without
    FSDP units, or whose units set neither dtype, leaves the model alone."""
    import torch
    from torch.utils._pytree import tree_map_only

    from commlens.plan import fully_shard_modules

    def cast_to(dtype):
        def cast(x):
            return x.to(dtype) if torch.is_floating_point(x) and x.dtype != dtype else x
        return lambda tree: tree_map_only(torch.Tensor, cast, tree)

    calls = [(unit.mp_policy, model.get_submodule(path) if path else model)
             for _, unit, paths in (fully_shard_modules(_without_checkpoint_wrappers(plan), model)
                                    if plan is not None else ()) for path in paths]
    taken, cast_params, hooks = set(), {}, []
    for mp, module in calls:
        for p in module.parameters():
            if id(p) in taken:
                continue
            taken.add(id(p))
            if mp.param_dtype is not None and torch.is_floating_point(p) and p.dtype != mp.param_dtype:
                cast_params[id(p)] = torch.nn.Parameter(p.detach().to(mp.param_dtype), requires_grad=p.requires_grad)
        if mp.cast_forward_inputs and mp.param_dtype is not None:
            cast_in = cast_to(mp.param_dtype)
            hooks.append(module.register_forward_pre_hook(lambda _m, args, kwargs, f=cast_in: f((args, kwargs)),
                                                          with_kwargs=True, prepend=True))
        if mp.output_dtype is not None:
            cast_out = cast_to(mp.output_dtype)
            hooks.append(module.register_forward_hook(lambda _m, _args, out, f=cast_out: f(out)))
    swapped = [(m, name, p) for m in model.modules() for name, p in m._parameters.items()
               if p is not None and id(p) in cast_params]
    for m, name, p in swapped:
        m._parameters[name] = cast_params[id(p)]
    try:
        yield model
    finally:
        for h in hooks:
            h.remove()
        for m, name, p in swapped:
            m._parameters[name] = p


@contextlib.contextmanager
def _without_cyclic_gc():
    """Within the block, Python's cyclic garbage collector does not run (reference counting still
    frees what it can). Tracing and serialising a large model allocate hundreds of thousands of
    objects, each full collection walks all of them, and none of it is garbage yet: collections
    are a tenth of torch.export's time and nearly half of serialising the program. What was
    allocated is collected at the next collection after the block."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def _lean_serialization(exported_program):
    """Within the block, torch's serialiser skips its discarded canonical-form self-check
    (:func:`commlens._export_shortcuts.no_canonical_form_check`), does less bookkeeping
    (:func:`commlens._export_shortcuts.lean_serializer`) and runs without cyclic garbage
    collections (:func:`_without_cyclic_gc`)."""
    from commlens._export_shortcuts import lean_serializer, no_canonical_form_check

    with no_canonical_form_check(), lean_serializer(exported_program), _without_cyclic_gc():
        yield


def save_program(exported_program, path):
    """``torch.export.save(exported_program, path)``, the same archive, serialised with less work
    (:func:`_lean_serialization`), plus commlens' tie record (:func:`tied_parameters_json`)."""
    import torch

    with _lean_serialization(exported_program):
        torch.export.save(exported_program, path,
                          extra_files={TIED_PARAMETERS_FILE: tied_parameters_json(exported_program)})


# extra/<this> in the archive (frontends/Pt2Loader.h: kTiedParametersRecord)
TIED_PARAMETERS_FILE = "commlens_tied_parameters.json"


def tied_parameters(exported_program):
    """Groups of parameter FQNs that are one ``nn.Parameter`` (``state_dict`` identity), each in
    the program's input order. The archive cannot say it for meta-device parameters: its weight
    records are grouped by storage pointer, 0 for every meta tensor."""
    from torch.export.graph_signature import InputKind

    groups = {}
    for spec in exported_program.graph_signature.input_specs:
        if spec.kind == InputKind.PARAMETER and spec.target in exported_program.state_dict:
            groups.setdefault(id(exported_program.state_dict[spec.target]), []).append(spec.target)
    return [g for g in groups.values() if len(g) > 1]


def tied_parameters_json(exported_program):
    """The tie record commlens reads with the program (``commlens-tied-parameters`` version 1)."""
    return json.dumps({"format": "commlens-tied-parameters", "version": 1,
                       "groups": tied_parameters(exported_program)})


def program_json(exported_program):
    """The program's JSON (``models/model.json`` of the archive ``torch.export.save`` writes), in
    memory: what ``commlens._core.predict_program_json`` decodes. Neither the weights nor the
    constants nor the example inputs are pickled (``torch.export.save`` writes those to other
    entries, which predict never reads), nor is the canonical-form self-check run, nor the cyclic
    garbage collector, and the serialiser's bookkeeping is lighter (:func:`_lean_serialization`)."""
    from torch._export.serde.serialize import serialize

    with _lean_serialization(exported_program):
        return serialize(exported_program, serialize_state_dict=False, serialize_constants=False,
                         serialize_example_inputs=False).exported_program


def decoder_program_json(exported_program):
    """The program's JSON as ``commlens._core.predict_program_json`` reads it, from the in-memory
    graph by commlens' own writer (:mod:`commlens._program_json`: the values torch's serialiser
    writes, less what the decoder does not read, a small fraction of the time and no cyclic
    garbage), run without cyclic garbage collections. A program that writer does not cover is
    serialised by torch's (:func:`program_json`), and the ``commlens`` logger says why at INFO."""
    from commlens import _program_json

    try:
        with _without_cyclic_gc():
            return _program_json.program_json(exported_program)
    except _program_json.Unsupported as why:
        logging.getLogger("commlens").info("commlens: the program is serialised by torch's serialiser: %s", why)
    return program_json(exported_program)


@contextlib.contextmanager
def _stack_traces(record):
    """Within the block, tracing records each node's Python stack (``node.meta["stack_trace"]``)
    or not (``torch.fx.config.do_not_emit_stack_traces``)."""
    import torch.fx.config as fx_config

    before = fx_config.do_not_emit_stack_traces
    fx_config.do_not_emit_stack_traces = not record
    try:
        yield
    finally:
        fx_config.do_not_emit_stack_traces = before


def export_model(model, args, kwargs=None, plan=None, *, stack_traces=False):
    """``torch.export.export`` (non-strict), preserving every submodule's call signature; with a
    ``plan``, under its FSDP mixed precision (:func:`fsdp_mixed_precision`).

    Nodes carry no ``stack_trace`` metadata unless ``stack_traces=True``: commlens never reads it,
    and capturing and symbolising a Python stack for every traced node is about a fifth of the
    trace (3 s of 14 s for a 126-layer Llama). Everything else (nodes, their targets, arguments,
    ``nn_module_stack`` and other metadata, signature, module call graph, weights) is the same.
    The cyclic garbage collector does not run during the trace (:func:`_without_cyclic_gc`), and
    the graph modules of the trace generate their Python code when first called instead of after
    each of export's passes (torch.fx's lazy graph modules, which torch.compile uses): regenerating
    the code of the whole graph after every pass is a sixth of export's time for a large model;
    the program's own graph module is lazy too (:func:`commlens._export_shortcuts.lazy_program_module`),
    and a trace without unbacked symbols skips the walk that looks for them
    (:func:`commlens._export_shortcuts.no_unbacked_rebinding_walk`).

    The program then records, per module call (``fqn``, ``fqn@1``, ...), which graph values are
    its positional and keyword arguments (``module_call_graph``), which commlens needs to apply
    ``PrepareModuleInput`` and the other styles' input hooks to the right arguments.  Forward hooks
    record them during the trace (:class:`commlens._module_calls.ModuleCallRecorder`), which is
    what torch's ``preserve_module_call_signature`` tracepoints give, for a quarter less export
    time: the same program, but that torch's erased tracepoints use up value names (see that
    module).  Where the recorder declines, the model is exported again with torch's tracepoints;
    when export refuses to preserve signatures (a module taking arguments it cannot flatten), the
    model is exported without, with a warning: commlens then takes a module's tensor inputs in
    order of first use.
    """
    import torch
    from torch.fx._lazy_graph_module import _use_lazy_graph_module

    from commlens._export_shortcuts import lazy_program_module, no_unbacked_rebinding_walk
    from commlens._module_calls import ModuleCallRecorder

    names = tuple(name for name, _ in model.named_modules() if name)
    with fsdp_mixed_precision(model, plan), _stack_traces(stack_traces), _without_cyclic_gc(), \
            _use_lazy_graph_module(True), no_unbacked_rebinding_walk(), lazy_program_module():
        recorder, ep = ModuleCallRecorder(model, names), None
        if recorder.declined is None:  # declined before the trace: a model with aliased modules
            try:
                with recorder:
                    ep = torch.export.export(model, tuple(args), kwargs or {}, strict=False)
            except Exception:  # noqa: BLE001 - e.g. the hooks inside a region dynamo must capture whole;
                pass  # torch's path below says what fails, or exports without the signatures
        if ep is not None and (module_call_graph := recorder.module_call_graph(ep)) is not None:
            ep._module_call_graph = module_call_graph
            return ep
        del ep
        try:
            return torch.export.export(model, tuple(args), kwargs or {}, strict=False,
                                       preserve_module_call_signature=names)
        except Exception as err:  # noqa: BLE001 - retried below without the signatures
            print(f"commlens: warning: exporting without module call signatures "
                  f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})", file=sys.stderr)
        return torch.export.export(model, tuple(args), kwargs or {}, strict=False)


def save_torchscript(model, args, path, how="trace"):
    """``torch.jit.trace`` (``how="trace"``) or ``torch.jit.script`` the model and ``torch.jit.save``
    it to ``path`` with the example inputs' shapes and dtypes in the archive's extra file
    ``commlens_inputs.json`` (``{"inputs": [{"shape": [...], "dtype": "float32"}, ...]}``, one per
    positional argument of ``forward``), which commlens' TorchScript frontend needs: TorchScript
    code carries no shapes. commlens reads it only with ``--torchscript`` (``commlens.predict(...,
    torchscript=True)``), since reading it runs the model's code (README.md, Security and trust)."""
    import torch

    if how not in ("trace", "script"):
        raise ValueError(f"how must be 'trace' or 'script', got {how!r}")
    if not all(isinstance(a, torch.Tensor) for a in args):
        raise CommlensError(str(path), "TorchScript export takes tensor positional inputs only")
    module = torch.jit.trace(model, tuple(args)) if how == "trace" else torch.jit.script(model)
    shapes = {"inputs": [{"shape": list(a.shape), "dtype": str(a.dtype).removeprefix("torch.")} for a in args]}
    torch.jit.save(module, str(path), _extra_files={"commlens_inputs.json": json.dumps(shapes)})
    return module


def _module_type(mod_or_str):
    return mod_or_str if isinstance(mod_or_str, str) else (
        f"{type(mod_or_str).__module__}.{type(mod_or_str).__qualname__}"
    )


def describe(model, exported_program):
    """Return a JSON-able description of ``exported_program`` (exported from ``model``).

    Keys (all lists are in a deterministic order):

    ``root``
        ``type(model).__name__``; the prefix of every module name, as in
        CommDebugMode / ModTracker (root class name + ``.`` + attribute path,
        e.g. ``Transformer.layers.0.attention.wq``; the root itself is just
        ``Transformer``).

    ``modules``
        One entry per module that owns at least one ``call_function`` node,
        in **forward order** = order of first appearance in the graph: walk
        ``exported_program.graph.nodes`` in order; for every node with
        ``op == "call_function"`` take its ``meta["nn_module_stack"]`` (an
        ordered mapping outermost -> innermost of ``key -> (path, type)``);
        each ``path`` not seen before is appended, outer before inner.  A
        node without ``nn_module_stack`` (or with an empty one) is treated as
        belonging to the root only.  Modules that produce no ATen node (e.g.
        an ``nn.Identity``) do not appear.  Fields:

        * ``fqn``: root class name, plus ``.`` + ``path`` unless ``path`` is "".
        * ``path``: the attribute path (``""`` for the root).
        * ``type``: the type string recorded in ``nn_module_stack``
          (``module.qualname``, e.g. ``torch.nn.modules.linear.Linear``).
        * ``own_nodes``: number of ``call_function`` nodes whose *innermost*
          stack entry is this module.
        * ``inclusive_nodes``: number of ``call_function`` nodes whose stack
          contains this module anywhere (the root's count is therefore the
          total number of ``call_function`` nodes; parents include children).

        Placeholders, ``get_attr`` and ``output`` nodes are never counted.
        A module called twice contributes both calls to the same ``path``.

    ``total_call_function_nodes``
        Number of ``call_function`` nodes in the graph.

    ``parameters``
        ``[{"fqn": path, "shape": [...], "dtype": "float32", "requires_grad": bool}]``
        from ``model.named_parameters()`` (registration order; a tied
        parameter appears once, under its first name).

    ``parameter_aliases``
        ``{alias_path: canonical_path}`` for parameters reachable under more
        than one name (``named_parameters(remove_duplicate=False)``), e.g.
        ``{"lm_head.weight": "tok_embeddings.weight"}`` for tied GPT-2.

    ``buffers``
        Same as ``parameters`` (without ``requires_grad``) from ``model.named_buffers()``.

    ``parameter_first_use``
        Canonical parameter paths in order of first use: walk the graph in
        node order; for each ``call_function`` node look at its inputs in
        ``node.all_input_nodes`` order; an input that is a placeholder the
        graph signature maps to a parameter (``inputs_to_parameters``) is
        translated to its canonical path (aliases resolved) and appended if
        not already listed.  Parameters never used by any node are left out.

    ``user_inputs``
        Placeholder names of the user inputs, in signature order.
    """
    import torch

    graph = exported_program.graph
    root = type(model).__name__

    def fqn_of(path):
        return root if path == "" else f"{root}.{path}"

    modules = OrderedDict()  # path -> dict
    total = 0
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        total += 1
        stack = node.meta.get("nn_module_stack") or {}
        paths = []
        for _key, value in stack.items():
            path, mtype = value[0], value[1]
            mtype = _module_type(mtype)
            if path not in modules:
                modules[path] = {"fqn": fqn_of(path), "path": path, "type": mtype,
                                 "own_nodes": 0, "inclusive_nodes": 0}
            if path not in paths:
                paths.append(path)
        if not paths:
            if "" not in modules:
                modules[""] = {"fqn": root, "path": "", "type": _module_type(model),
                               "own_nodes": 0, "inclusive_nodes": 0}
            paths = [""]
        elif "" not in paths and "" in modules:
            # a stack that does not start at the root still lies inside it
            paths.insert(0, "")
        for p in paths:
            modules[p]["inclusive_nodes"] += 1
        modules[paths[-1]]["own_nodes"] += 1

    canonical = {}
    for name, p in model.named_parameters():
        canonical[id(p)] = name
    aliases = {}
    alias_to_canonical = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        alias_to_canonical[name] = canonical[id(p)]
        if canonical[id(p)] != name:
            aliases[name] = canonical[id(p)]

    sig = exported_program.graph_signature
    placeholder_to_param = dict(sig.inputs_to_parameters)
    first_use = []
    seen = set()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        for inp in node.all_input_nodes:
            if inp.op == "placeholder" and inp.name in placeholder_to_param:
                target = placeholder_to_param[inp.name]
                target = alias_to_canonical.get(target, target)
                if target not in seen:
                    seen.add(target)
                    first_use.append(target)

    def dt(t):
        return str(t.dtype).replace("torch.", "")

    return {
        "format": "commlens-describe",
        "version": 1,
        "root": root,
        "modules": list(modules.values()),
        "total_call_function_nodes": total,
        "parameters": [
            {"fqn": n, "shape": list(p.shape), "dtype": dt(p), "requires_grad": bool(p.requires_grad)}
            for n, p in model.named_parameters()
        ],
        "parameter_aliases": aliases,
        "buffers": [
            {"fqn": n, "shape": list(b.shape), "dtype": dt(b)} for n, b in model.named_buffers()
        ],
        "parameter_first_use": first_use,
        "user_inputs": [s.arg.name for s in sig.input_specs
                        if s.kind == torch.export.graph_signature.InputKind.USER_INPUT
                        and hasattr(s.arg, "name")],
    }


@cli_main
def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m commlens.export",
        description="torch.export a model factory (non-strict) and save it as .pt2",
    )
    parser.add_argument("factory", help="MODULE:FACTORY or MODULE:FACTORY(key=literal, ...)")
    parser.add_argument("-o", "--output", required=True, help="output .pt2 path")
    parser.add_argument("--plan", metavar="PLAN",
                        help="export as the run under this plan computes: its FSDP MixedPrecisionPolicy's dtypes "
                             "(a plan file or MODULE:FACTORY spec; nothing else of the plan is applied)")
    parser.add_argument("--torchscript", choices=("trace", "script"),
                        help="write a TorchScript archive (torch.jit.trace or torch.jit.script, with the input "
                             "shapes commlens needs) instead of a torch.export .pt2; commlens reads it with "
                             "--torchscript, which runs its code in a worker process under limits")
    parser.add_argument("--stack-traces", action="store_true",
                        help="record each node's Python stack trace (node.meta['stack_trace']; commlens does not "
                             "read them, and recording them makes export slower)")
    parser.add_argument("--eval", action="store_true",
                        help="export the model after model.eval() (dropout off, batch norm on its running "
                             "statistics): the program `commlens predict --phase inference` takes")
    parser.add_argument("--describe", metavar="JSON",
                        help="also write commlens.export.describe() output to this file")
    ns = parser.parse_args(argv)
    import os

    parent = os.path.dirname(os.path.abspath(ns.output))
    if not os.path.isdir(parent):
        raise CommlensError(ns.output, f"cannot write: directory {parent} does not exist")
    model, args, kwargs = call_model_factory(ns.factory)
    if ns.eval:
        model.eval()
    plan = None
    if ns.plan:
        from commlens.plan import resolve_plan

        plan = resolve_plan(ns.plan)
    t0 = time.perf_counter()
    if ns.torchscript:
        import torch

        if kwargs or plan is not None or ns.describe or ns.stack_traces:
            raise CommlensError(ns.factory, "--torchscript takes a factory without keyword inputs, and no --plan, "
                                "--describe or --stack-traces")
        try:
            save_torchscript(model, args, ns.output, ns.torchscript)
        except (RuntimeError, torch.jit.frontend.FrontendError) as err:
            why = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
            raise CommlensError(ns.factory, f"torch.jit.{ns.torchscript} failed: {why}") from None
        print(f"commlens: saved {ns.factory} ({type(model).__name__}) as TorchScript ({ns.torchscript}) to "
              f"{ns.output} in {time.perf_counter() - t0:.1f}s (read it with commlens ... --torchscript)")
        return 0
    try:
        ep = export_model(model, args, kwargs, plan, stack_traces=ns.stack_traces)
    except Exception as err:  # noqa: BLE001
        raise CommlensError(ns.factory, f"torch.export failed: {type(err).__name__}: {err}") from None
    t1 = time.perf_counter()
    try:
        save_program(ep, ns.output)
    except (OSError, RuntimeError) as err:
        raise CommlensError(ns.output, f"cannot write: {getattr(err, 'strerror', None) or err}") from None
    t2 = time.perf_counter()
    if ns.describe:
        with open(ns.describe, "w") as f:
            json.dump(describe(model, ep), f, indent=2)
            f.write("\n")
    n_nodes = sum(1 for n in ep.graph.nodes if n.op == "call_function")
    n_params = sum(p.numel() for p in model.parameters())
    devices = sorted({str(p.device) for p in model.parameters()}) or ["none"]
    print(f"commlens: exported {ns.factory} ({type(model).__name__}, {n_params} parameters "
          f"on {','.join(devices)}, {n_nodes} ops) to {ns.output} in {t2 - t0:.1f}s "
          f"(torch.export {t1 - t0:.1f}s, save {t2 - t1:.1f}s)")
    return 0


if __name__ == "__main__":
    # run the imported module's main so classes (e.g. Plan) have one identity
    from commlens._errors import exit_without_teardown
    from commlens.export import main as _main

    # No cyclic garbage collection in this process: it imports torch, builds one model, traces and
    # saves it, and leaves without a teardown; most of what it allocates lives until it exits, yet
    # collections would walk it all (the one after tracing and the one after saving each walk every
    # object of the traced program: half a second for the 126-layer Llama, for 26 MiB more at peak).
    gc.disable()
    # Everything is written and closed: the teardown would free the traced program object by object
    # (a second for the 126-layer Llama, twice a bare torch import's).
    exit_without_teardown(_main())
