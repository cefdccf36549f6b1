""":class:`StyleEntry`: what the plan codec knows of one ``ParallelStyle`` class."""

from dataclasses import dataclass
from typing import Callable

# How a field's value is encoded in plan JSON (commlens.plan.codec reads and writes each kind):
#   "pl1"   : 1-tuple (or tuple) of Placement        -> list of strings
#   "pl1?"  : "pl1", on the object only once torch sets it (written only when present)
#   "pl"    : one Placement (transformers' layers hold it bare) -> list of one string
#   "pltup" : None or tuple of (Placement | None)     -> null or list
#   "pldict": dict str -> Placement                   -> object
#   "bool"  : bool
#   "str"   : str (its values listed by the schema)
#   "dim?"  : None or the name of a plan mesh dim (not a flattened one) -> string, written when set
#   "int"   : int
#   "style" : a nested style object
FIELD_KINDS = ("pl1", "pl1?", "pl", "pltup", "pldict", "bool", "str", "dim?", "int", "style")


@dataclass(frozen=True)
class StyleEntry:
    """One parallel style: ``name`` is its ``"style"`` value in plan JSON, ``cls`` the
    ``torch.distributed.tensor.parallel`` class (or, for a class of another library that
    commlens.plan does not import, its ``"module:QualName"``, imported when first needed),
    ``fields`` its instance attributes as
    ``(attribute, kind)`` pairs in the order the JSON writes them, and ``construct(values, subject,
    where)`` builds a ``cls`` object from the decoded fields present (raising ``PlanError`` for a
    combination torch cannot take); the codec then sets every given field verbatim on it."""

    name: str
    cls: type | str
    fields: tuple
    construct: Callable
    # "module:function" run before a "module:QualName" class is imported (torchtitan's needs
    # commlens._torchtitan's shims where triton is missing)
    before_import: str | None = None

    @property
    def class_path(self):
        """``"module.QualName"`` of the class, without importing it."""
        if isinstance(self.cls, str):
            module, _, qualname = self.cls.partition(":")
            return f"{module}.{qualname}"
        return f"{self.cls.__module__}.{self.cls.__qualname__}"

    def resolve(self):
        """The class itself (imported here for a ``"module:QualName"`` entry)."""
        if not isinstance(self.cls, str):
            return self.cls
        import importlib

        if self.before_import:
            setup_module, _, setup = self.before_import.partition(":")
            getattr(importlib.import_module(setup_module), setup)()
        module, _, qualname = self.cls.partition(":")
        return getattr(importlib.import_module(module), qualname)

    def __post_init__(self):
        # A misspelt kind would make the codec skip the field silently.
        for attribute, kind in self.fields:
            if kind not in FIELD_KINDS:
                raise ValueError(f"{self.name}.{attribute}: unknown field kind {kind!r} "
                                 f"(expected one of {', '.join(FIELD_KINDS)})")


def single_placement(layouts):
    """The one placement of a decoded 1-tuple, for constructors that take a single placement."""
    return None if layouts is None else layouts[0]
