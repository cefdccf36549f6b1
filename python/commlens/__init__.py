"""commlens Python side: example-model export, sharding-plan serialisation and
runtime measurement of DTensor collectives with ``CommDebugMode``.

Submodules (each also a CLI via ``python -m``):

* :mod:`commlens.export`  -- ``torch.export`` a model factory to ``.pt2`` and
  describe an exported program (``describe``).
* :mod:`commlens.plan`    -- the :class:`~commlens.plan.Plan` dataclass and its
  versioned JSON format (``docs/plan-format.md``).
* :mod:`commlens.measure` -- run a parallelised model under ``CommDebugMode``
  and write per-module collective counts.
"""

from commlens._errors import CommlensError

__all__ = ["CommlensError"]
