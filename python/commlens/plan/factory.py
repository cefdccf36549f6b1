"""Plans from plan factories: :func:`resolve_plan` and :func:`sweep` (one plan per factorisation of a
world size)."""

import os
import re
import string

from commlens._factory import call_factory
from commlens.plan.document import dumps, load
from commlens.plan.model import Plan, PlanError
from commlens.plan.validation import validate


def resolve_plan(plan_or_path_or_spec):
    """Accept a :class:`Plan`, a JSON file path, or a plan factory spec."""
    p = plan_or_path_or_spec
    if isinstance(p, Plan):
        validate(p)
        return p
    if isinstance(p, (str, os.PathLike)):
        s = os.fspath(p)
        if os.path.exists(s) or s.endswith(".json") or ":" not in s:
            return load(s)
        plan = call_factory(s)
        if not isinstance(plan, Plan):
            raise PlanError(s, f"plan factory returned {type(plan).__name__}, not commlens.plan.Plan")
        validate(plan, s)
        return plan
    raise PlanError(repr(p), "expected a Plan, a plan JSON path or a MODULE:PLAN_FACTORY spec")


def factorizations(n, k):
    """Every ordered k-tuple of positive integers whose product is n ((1, 8), (2, 4), ... for
    n = 8, k = 2), in lexicographic order."""
    if k == 1:
        return [(n,)]
    return [(d,) + rest for d in range(1, n + 1) if n % d == 0 for rest in factorizations(n // d, k - 1)]


def sweep(spec, world_size, directory):
    """Writes one plan per way of filling the spec's ``{name}`` placeholders with integers whose
    product is ``world_size`` (``llama_fsdp_tp(dp={dp}, tp={tp})`` at 8: dp x tp = 1x8, 2x4, 4x2,
    8x1) into ``directory`` as ``<factory>-<name><value>-....json``; returns the paths written."""
    names = [f for _, f, _, _ in string.Formatter().parse(spec) if f]
    if not names or len(set(names)) != len(names):
        raise PlanError(spec, "a sweep spec needs distinct {name} placeholders, e.g. "
                        "'examples.plans:llama_fsdp_tp(dp={dp}, tp={tp})'")
    if world_size < 1:
        raise PlanError(spec, f"--world-size must be positive, got {world_size}")
    os.makedirs(directory, exist_ok=True)
    base = re.sub(r"\W+", "_", spec.split(":", 1)[-1].split("(", 1)[0])
    paths = []
    for values in factorizations(world_size, len(names)):
        filled = spec.format(**dict(zip(names, values)))
        plan = call_factory(filled)
        if not isinstance(plan, Plan):
            raise PlanError(filled, f"plan factory returned {type(plan).__name__}, not commlens.plan.Plan")
        path = os.path.join(directory, base + "".join(f"-{n}{v}" for n, v in zip(names, values)) + ".json")
        try:
            with open(path, "w") as f:
                f.write(dumps(plan, source=filled))
        except OSError as err:
            raise PlanError(path, f"cannot write plan: {err.strerror or err}") from None
        paths.append(path)
    return paths
