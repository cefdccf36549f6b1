"""The C++ library API from an installed tree: `cmake --install` the build, configure and build
examples/cpp against it with find_package(commlens), run it. Its own pass, appended to commlens'
pipeline, sums collectives and bytes per mesh dim from the prediction state: they must equal
CommDebugMode's for the same model and plan (commlens.measure, fake process group)."""
import os
import pathlib
import subprocess

import pytest

from commlens import plan as planlib
from integration_helpers import export_pt2, measured_fsdp_tp_step, save_plan

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def example(commlens_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("cpp_api")
    build = pathlib.Path(commlens_bin).parent
    prefix = d / "install"
    r = subprocess.run(["cmake", "--install", str(build), "--prefix", str(prefix)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (prefix / "include" / "commlens" / "api" / "Commlens.h").exists()
    assert (prefix / "lib" / "cmake" / "commlens" / "commlensConfig.cmake").exists()
    r = subprocess.run(["cmake", "-S", str(ROOT / "examples" / "cpp"), "-B", str(d / "build"), "-G", "Ninja",
                        f"-DCMAKE_PREFIX_PATH={prefix}"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["cmake", "--build", str(d / "build")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return d / "build" / "bytes_per_mesh_dim", d


def test_installed_library_with_its_own_pass(example):
    exe, d = example
    pt2 = export_pt2("examples.llama:llama", d)
    plan = save_plan(planlib.resolve_plan("examples.plans:llama_fsdp_tp(dp=2, tp=4)"), d)
    r = subprocess.run([str(exe), str(pt2), str(plan)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    step = measured_fsdp_tp_step("examples.llama:llama", str(plan))
    expected = [f"collectives: forward {step['forward']['collectives']}, backward {step['backward']['collectives']}"]
    for name, dim in sorted(step["mesh_dims"].items()):
        n = dim["forward"]["collectives"] + dim["backward"]["collectives"]
        b = dim["forward"]["bytes_per_rank"] + dim["backward"]["bytes_per_rank"]
        expected.append(f"mesh dim {name}: {n} collectives, {b} bytes per rank")
    assert r.stdout.splitlines() == expected


def test_installed_library_reports_errors(example, tmp_path):
    exe, _ = example
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not a zip")
    r = subprocess.run([str(exe), str(bad), str(tmp_path / "plan.json")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith(f"bytes_per_mesh_dim: error: {bad}: ")
    assert len(r.stderr.splitlines()) == 1
