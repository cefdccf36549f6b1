"""Sharding plans: the :class:`Plan` dataclass and its JSON format.

A *plan factory* (e.g. ``examples.plans:mlp_tp(tp=4)``) returns a
:class:`Plan` holding the device mesh description and the very
``parallelize_plan`` dict of ``ParallelStyle`` objects a user would pass to
``torch.distributed.tensor.parallel.parallelize_module``.  This package turns
that into versioned JSON (``{"format": "commlens-plan", "version": 1, ...}``,
documented in ``docs/plan-format.md``) by reading the style objects' fields,
and :func:`load` rebuilds equal style objects.  A plan may also list FSDP2
units (:class:`FullyShard`: one ``fully_shard(module, mesh=..., ...)`` call
per matched module, with the real ``MixedPrecisionPolicy`` /
``OffloadPolicy`` objects), applied after the ``parallelize_module`` steps.

CLI::

    python -m commlens.plan MODULE:PLAN_FACTORY[(k=v, ...)] -o plan.json
    python -m commlens.plan --check plan.json [--model MODULE:FACTORY]

Errors raise :class:`commlens.CommlensError` (subclass :class:`PlanError`);
the CLI prints ``commlens: error: <file or spec>: <what>`` and exits 2.

Modules: ``model`` (the dataclasses), ``styles`` (the table of the parallel
styles commlens models, one module per style), ``codec`` (placements, styles
and FSDP units to and from JSON), ``validation``, ``document`` (the whole plan
to and from JSON text), ``schema`` (the format's JSON Schema,
``plan.schema.json``, and its validator), ``factory`` (plan factories and
sweeps) and ``cli``. Everything but ``styles`` and ``schema`` is importable
from ``commlens.plan`` itself.
"""

from commlens.plan.cli import main
from commlens.plan.codec import (
    fully_shard_from_json,
    fully_shard_to_json,
    mp_policy_from_json,
    mp_policy_to_json,
    offload_policy_from_json,
    offload_policy_to_json,
    placement_from_str,
    placement_to_str,
    style_fields,
    style_from_json,
    style_to_json,
)
from commlens.plan.document import dumps, from_json, load, save, to_json
from commlens.plan.factory import factorizations, resolve_plan, sweep
from commlens.plan.model import FORMAT, VERSION, ActivationCheckpoint, FullyShard, Loss, Plan, PlanError
from commlens.plan.validation import (
    check_against_model,
    checkpoint_save_op,
    checkpointed_modules,
    fully_shard_modules,
    match_modules,
    validate,
)
