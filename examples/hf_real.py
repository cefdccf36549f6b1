"""What transformers' own tensor parallelism issues: the truth ``examples.hf:hf_tp`` is checked against.

A user runs ``AutoModelForCausalLM.from_pretrained(path, tp_plan="auto")`` (or
``distributed_config=DistributedConfig(tp_plan="auto")``) under torchrun; transformers then shards
the model with its own layer classes (``transformers/distributed/tensor_parallel.py``), which
replace each module's ``forward``, on the plan the model instance resolves
(``distributed/mixin.py:init_parallel_plans``). :func:`measure_transformers` does exactly that
in one process, as rank 0 of the fake process group, on the tiny model ``examples.hf`` builds
(same weights, saved with ``save_pretrained`` to a temporary directory), and counts one training
step under CommDebugMode as ``commlens.measure`` does for a plan: forward, then phase
``backward``/``both`` the cross-entropy against random targets (seed 0) and backward.

transformers needs ``accelerate`` for ``from_pretrained`` with a ``tp_plan`` (scripts/setup.sh
installs it).
"""

import contextlib
import tempfile

from commlens._transformers import torchrun_env
from commlens.measure import count_collectives, counts_document, device_info, fake_process_group
from commlens.plan import Loss
from examples.hf import HFCausalLM, _build, _family, distributed_sizes

@contextlib.contextmanager
def _no_progress_bars():
    """transformers' "Writing model shards" / "Loading weights" bars, off for the block."""
    from transformers.utils import logging

    was_enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            logging.enable_progress_bar()


def measure_transformers(*, family="llama", tp=4, phase="both", distributed=None, **model_kw):
    """The commlens-counts document of one step of ``examples.hf:hf_model(family=..., **model_kw)``
    as transformers' ``from_pretrained(distributed_config=DistributedConfig(tp_plan="auto"))``
    parallelises it on ``tp`` ranks (fake process group, rank 0). ``distributed``: the other
    ``DistributedConfig`` sizes instead (``{"fsdp_size": 2, "ep_size": 2}``; ``tp_size`` then
    defaults to 1), on as many ranks as their product. Module names are those of the model wrapped
    in ``examples.hf.HFCausalLM`` (``HFCausalLM.model.model.embed_tokens``, ...), as measure and
    ``commlens predict`` name the exported factory's modules."""
    from transformers.distributed import DistributedConfig

    sizes, world_size = distributed_sizes(tp, distributed)
    config = DistributedConfig(tp_plan="auto", **sizes)
    model, (ids,) = _build(family, **model_kw)
    with tempfile.TemporaryDirectory(prefix="commlens-hf-") as path, _no_progress_bars():
        model.model.save_pretrained(path)
        with torchrun_env(world_size), fake_process_group(world_size):
            loaded = _family(family)[1].from_pretrained(
                path, distributed_config=config, attn_implementation=model.model.config._attn_implementation)
            loaded.train()  # from_pretrained returns the model in eval mode; this is a training step
            modules = count_collectives(HFCausalLM(loaded), (ids,), {}, phase,
                                        Loss.cross_entropy(targets="random", seed=0))
            first_mesh = next(p.device_mesh for p in loaded.parameters() if hasattr(p, "device_mesh"))
            mesh = {"shape": list(first_mesh.shape), "dim_names": list(first_mesh.mesh_dim_names),
                    "device_type": first_mesh.device_type}
    shown = ", ".join(f"{k}={v!r}" for k, v in sizes.items() if distributed is not None)
    return counts_document(modules, backend="fake", world_size=world_size, phase=phase,
                           model=f"examples.hf:hf_model(family={family!r})", mesh=mesh,
                           plan_source="transformers:from_pretrained(distributed_config="
                                       f"DistributedConfig(tp_plan='auto'{', ' + shown if shown else ''}))",
                           device=device_info(ids.device))
