"""commlens Python side: example-model export, sharding-plan serialisation and
runtime measurement of DTensor collectives with ``CommDebugMode``.

Submodules (each also a CLI via ``python -m``):

* :mod:`commlens.export`  -- ``torch.export`` a model factory to ``.pt2`` and
  describe an exported program (``describe``).
* :mod:`commlens.plan`    -- the :class:`~commlens.plan.Plan` dataclass and its
  versioned JSON format (``docs/plan-format.md``).
* :mod:`commlens.capture` -- the plan a user's own parallelize function applies
  (``commlens.capture(...)``, docs/plan-format.md "Capturing a plan").
* :mod:`commlens.measure` -- run a parallelised model under ``CommDebugMode``
  and write per-module collective counts.
* :mod:`commlens.api` -- :func:`predict`: the C++ prediction pipeline on an
  in-memory ``ExportedProgram`` or a ``.pt2`` (``commlens._core``).
* :mod:`commlens.testing` -- ``assert_comm_counts`` for a user's pytest.
"""

from commlens._errors import CommlensError


def predict(program, plan, phase="forward", **kwargs):
    """:func:`commlens.api.predict` (imported on first use: it loads torch)."""
    from commlens.api import predict as _predict

    return _predict(program, plan, phase, **kwargs)


__all__ = ["CommlensError", "capture", "predict"]


def __getattr__(name):
    # commlens.capture is a callable module (python -m commlens.capture, commlens.capture(...)),
    # imported on first use: it loads torch.
    if name == "capture":
        import importlib

        return importlib.import_module("commlens.capture")
    raise AttributeError(f"module 'commlens' has no attribute {name!r}")
