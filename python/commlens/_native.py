"""Finds the C++ extension commlens._core: inside the package (pip install), or in a checkout's
build tree ($COMMLENS_BUILD/python/commlens, default build/)."""
import functools
import importlib.util
import os
import pathlib

from commlens._errors import CommlensError


@functools.lru_cache(maxsize=None)
def core():
    try:
        from commlens import _core  # installed wheel

        return _core
    except ImportError:
        pass
    root = pathlib.Path(__file__).resolve().parents[2]
    build = pathlib.Path(os.environ.get("COMMLENS_BUILD", root / "build")) / "python" / "commlens"
    for path in sorted(build.glob("_core*.so")):
        spec = importlib.util.spec_from_file_location("commlens._core", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    raise CommlensError("commlens._core", f"the C++ extension is not built (looked in the package and in {build}; "
                        "run scripts/setup.sh or pip install .)")
