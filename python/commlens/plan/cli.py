"""``python -m commlens.plan``: serialise a plan factory, check a plan file, or sweep a world size."""

import argparse
import os
import sys

from commlens._errors import cli_main
from commlens._factory import call_factory, call_model_factory
from commlens.plan.document import dumps, load
from commlens.plan.factory import sweep
from commlens.plan.model import Plan, PlanError
from commlens.plan.validation import check_against_model


@cli_main
def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m commlens.plan",
        description="Serialise a plan factory (returning commlens.plan.Plan) to commlens-plan JSON.",
    )
    parser.add_argument("factory", nargs="?", help="MODULE:PLAN_FACTORY or MODULE:PLAN_FACTORY(key=literal, ...)")
    parser.add_argument("-o", "--output", help="output JSON path (default: stdout); with --sweep, a directory")
    parser.add_argument("--sweep", metavar="SPEC", help="plan factory spec with {name} placeholders filled by every "
                        "factorisation of --world-size (one plan file each, into the -o directory)")
    parser.add_argument("--world-size", type=int, help="the product of a --sweep's placeholders")
    parser.add_argument("--check", metavar="PLAN_JSON", help="load and validate a plan JSON file instead")
    parser.add_argument("--model", metavar="MODULE:FACTORY",
                        help="also check the plan's patterns against this model")
    ns = parser.parse_args(argv)
    if ns.sweep:
        if ns.factory or ns.check or ns.model:
            parser.error("--sweep takes no factory, --check or --model")
        if ns.world_size is None or not ns.output:
            parser.error("--sweep needs --world-size and -o DIRECTORY")
        paths = sweep(ns.sweep, ns.world_size, ns.output)
        print(f"commlens: wrote {len(paths)} plans to {ns.output}: "
              + ", ".join(os.path.basename(p) for p in paths))
        return 0
    if ns.check:
        plan, subject = load(ns.check), ns.check
    else:
        if not ns.factory:
            parser.error("a plan factory spec (or --check PLAN_JSON) is required")
        plan, subject = call_factory(ns.factory), ns.factory
        if not isinstance(plan, Plan):
            raise PlanError(ns.factory, f"plan factory returned {type(plan).__name__}, not commlens.plan.Plan")
    if ns.model:
        model, args, kwargs = call_model_factory(ns.model)
        check_against_model(plan, model, subject, args, kwargs)
    if ns.check:
        print(f"commlens: {ns.check}: ok")
        return 0
    text = dumps(plan, source=ns.factory)
    if ns.output:
        try:
            with open(ns.output, "w") as f:
                f.write(text)
        except OSError as err:
            raise PlanError(ns.output, f"cannot write plan: {err.strerror or err}") from None
        n = sum(len(d) for _, d in plan.parallelize_steps())
        units = len(plan.fully_shard)
        fsdp = f", {units} fully_shard unit{'' if units == 1 else 's'}" if units else ""
        print(f"commlens: wrote {ns.output} ({n} plan entries{fsdp}, mesh {tuple(plan.mesh_shape)}"
              f"{'' if plan.mesh_dim_names is None else ' ' + str(tuple(plan.mesh_dim_names))}, "
              f"{plan.device_type})")
    else:
        sys.stdout.write(text)
    return 0
