"""Predict DTensor's collectives from Python, in memory: the C++ pipeline (``commlens._core``) on
an ``ExportedProgram`` (its JSON written from the in-memory graph by
:func:`commlens.export.decoder_program_json`: no file, no weights, nothing unpickled in C++) or a
``.pt2`` path, under a :class:`commlens.plan.Plan`, a plan JSON file or a plan factory
spec.

    >>> import commlens
    >>> from commlens.export import export_model
    >>> from examples.gpt2 import gpt2
    >>> model, args = gpt2()
    >>> ep = export_model(model, args)
    >>> p = commlens.predict(ep, "examples.plans:gpt2_tp_sp(tp=4)", phase="both")
    >>> p.counts()["Global"]["forward"]       # the same shape as commlens.measure's result
    {'c10d_functional.all_gather_into_tensor': 6, 'c10d_functional.reduce_scatter_tensor': 6}
    >>> p == commlens.measure.measure("examples.gpt2:gpt2", "examples.plans:gpt2_tp_sp(tp=4)")
    True
    >>> print(p.table(noise_level=1))          # CommDebugMode's tracing table

Errors raise :class:`commlens.CommlensError` with the CLI's one-line message.
"""
import json
import os

from commlens._errors import CommlensError
from commlens._native import core

PHASES = ("forward", "backward", "both", "inference")


class Prediction:
    """A prediction: per-module counts, every collective with its bytes and why, totals."""

    def __init__(self, native, phase):
        self._native = native
        self.phase = phase
        self._parsed = None

    @property
    def _doc(self):
        """The report's JSON document, parsed when first needed (``table``, ``html`` and
        ``to_json`` do without it)."""
        if self._parsed is None:
            self._parsed = json.loads(self._native.json())
        return self._parsed

    def to_json(self):
        """CommDebugMode's ``generate_json_dump`` tree with commlens' records (``predict --format json``)."""
        return self._native.json()

    def table(self, noise_level=0):
        """CommDebugMode's tracing table at ``noise_level`` (``predict``'s text output)."""
        return self._native.table(noise_level)

    def html(self, title="commlens prediction"):
        return self._native.html(title)

    def _tree(self):
        stack = [self._doc]
        while stack:
            node = stack.pop(0)
            yield node
            stack[0:0] = node.get("children", [])

    def counts(self):
        """``{fqn: {"forward": {op: n}, "backward": {op: n}}}`` in module order, as
        :func:`commlens.measure.measure` returns it (phases not predicted are empty)."""
        return {n["fqn"]: {"forward": dict(n["collectives_forward"]), "backward": dict(n["collectives_backward"])}
                for n in self._tree()}

    def collectives(self):
        """Every predicted collective: op, phase, module, mesh dims, placements, bytes per rank,
        the op and operand that caused it, why (and its time with a cluster)."""
        out = []
        for n in self._tree():
            for phase in ("forward", "backward"):
                out += [dict(c, phase=phase) for c in n.get(f"collectives_{phase}_detail", [])]
        return out

    def total(self, phase="both"):
        """Collectives issued in ``phase`` ("forward", "backward" or "both"; an inference
        prediction's are its forward's)."""
        g = self._doc
        phases = {"both": ("forward", "backward"), "inference": ("forward",)}.get(phase, (phase,))
        return sum(n for p in phases for _, n in g[f"collectives_{p}"])

    @property
    def step(self):
        """Per-step totals (collectives, bytes, and with a cluster time per mesh dim), or None."""
        return self._doc["commlens"].get("step")

    def __eq__(self, other):
        if isinstance(other, Prediction):
            return self.counts() == other.counts()
        if isinstance(other, dict):  # commlens.measure's result
            return self.counts() == other
        return NotImplemented

    def __repr__(self):
        return f"<commlens.Prediction {self.phase}: {self.total('forward')} forward, {self.total('backward')} backward>"


def _plan_json(plan):
    from commlens.plan import Plan, dumps, resolve_plan

    if isinstance(plan, Plan):
        return dumps(plan, source=getattr(plan, "source", None)), "plan"
    if isinstance(plan, str) and os.path.exists(plan):
        with open(plan) as f:
            return f.read(), plan
    if isinstance(plan, str):
        return dumps(resolve_plan(plan), source=plan), plan
    raise CommlensError(repr(plan), "expected a Plan, a plan JSON path or a MODULE:PLAN_FACTORY spec")


_TORCHSCRIPT_LIMITS = ("memory", "cpu_seconds", "open_files", "wall_seconds")


def _torchscript_limits(limits):
    """The worker's limits from ``torchscript_limits`` (the CLI's --torchscript-* options)."""
    limits = dict(limits or {})
    unknown = sorted(set(limits) - set(_TORCHSCRIPT_LIMITS))
    if unknown:
        raise CommlensError("torchscript_limits", f"unknown limit {unknown[0]!r} (limits: {', '.join(_TORCHSCRIPT_LIMITS)})")
    for key, value in limits.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CommlensError("torchscript_limits", f"{key} needs a positive integer, got {value!r}")
    return [limits.get(k) for k in _TORCHSCRIPT_LIMITS]


def predict(program, plan, phase="forward", *, cluster=None, gpu=None, allow_unsupported=False, routing_skew=1.0,
            torchscript=False, torchscript_limits=None):
    """Predict the collectives DTensor issues for ``program`` under ``plan``.

    ``program``: a ``torch.export.ExportedProgram`` (its JSON written in memory) or a ``.pt2``
    path. ``plan``: a :class:`commlens.plan.Plan`, a plan JSON path or a plan factory spec.
    ``phase``: "forward", "backward", "both" or "inference" (the forward of ``model.eval()`` under
    ``torch.no_grad()``, from a program exported in eval mode). ``cluster``: a preset name or topology file
    (times per collective, module and step); ``gpu``: the CUDA target of ``device_type="cuda"``
    plans (default h100). ``routing_skew``: the routing model of MoE tokens, the busiest
    expert-parallel rank getting that many times the balanced number of routed rows (1: balanced
    top-k routing; the CLI's ``--routing-skew``).

    ``torchscript=True`` reads a TorchScript archive (``torch.jit.save``) at ``program``, which
    means running the model's code: in a worker process under limits (``torchscript_limits``:
    ``{"memory": bytes, "cpu_seconds": n, "open_files": n, "wall_seconds": n}``, each defaulting
    as the CLI's ``--torchscript-*`` options). Without it such an archive raises CommlensError.
    Only for files you trust (README.md, Security and trust).
    """
    if phase not in PHASES:
        raise CommlensError("predict", f"phase must be forward, backward, both or inference, got {phase!r}")
    limits = _torchscript_limits(torchscript_limits)
    if limits != [None] * len(limits) and not torchscript:
        raise CommlensError("torchscript_limits", "applies only with torchscript=True")
    try:
        routing_skew = float(routing_skew)
    except (TypeError, ValueError):
        raise CommlensError("routing_skew", f"needs a number, got {routing_skew!r}") from None
    text, name = _plan_json(plan)
    try:
        if isinstance(program, (str, os.PathLike)):
            native = core().predict_pt2(os.fspath(program), text, name, phase, cluster, gpu, allow_unsupported,
                                        routing_skew, bool(torchscript), *limits)
        else:
            from commlens.export import decoder_program_json, tied_parameters_json

            native = core().predict_program_json(decoder_program_json(program), tied_parameters_json(program), text,
                                                 name, phase, cluster, gpu, allow_unsupported, routing_skew)
    except core().Error as err:
        subject, _, message = str(err).partition(": ")
        raise CommlensError(subject, message) from None
    return Prediction(native, phase)
