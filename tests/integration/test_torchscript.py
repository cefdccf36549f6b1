"""The TorchScript frontend: a scripted or traced module (`python -m commlens.export --torchscript`),
read with `--torchscript` (tests/integration/test_torchscript_trust.py: without it, and hostile
archives), is predicted exactly as the torch.export program of the same model (the same report,
forward and backward, bytes included), CommDebugMode agrees, and what it cannot know is refused in
one line."""
import json
import subprocess
import sys

import pytest
import torch

from commlens import plan as planlib
from commlens._factory import call_model_factory
from commlens.export import export_model, save_torchscript
from integration_helpers import compare_with_measure

P = "examples.plans:"
CASES = [  # (model factory, plan factory, torch.jit mode)
    ("examples.gpt2:gpt2", P + "gpt2_tp_sp(tp=4)", "trace"),
    ("examples.gpt2:gpt2", P + "gpt2_tp_sp(tp=4)", "script"),
    ("examples.gpt2:gpt2", P + "gpt2_tp_loss_parallel(tp=4)", "trace"),
    ("examples.gpt2:gpt2", P + "gpt2_fsdp_tp(dp=2, tp=2, sp=True)", "trace"),
    ("examples.llama:llama", P + "llama_fsdp_tp(dp=2, tp=4)", "trace"),
    ("examples.mlp:mlp", P + "mlp_2d(dp=2, tp=2, input_requires_grad=True)", "script"),
    ("examples.mlp:mlp", P + "mlp_tp(tp=4)", "trace"),
    ("examples.mlp:stacked_mlp", P + "stacked_mlp_fsdp(dp=8)", "script"),
]


def _predict(run_commlens, model, plan_path, out, *extra):
    r = run_commlens("predict", model, "--plan", plan_path, "--phase", "both", "--format", "json", "-o", out, *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def _without_node_names(tree):
    """The report minus the names of the program's nodes and values (each frontend names them its own way)."""
    tree = dict(tree)
    for key in ("collectives_forward_detail", "collectives_backward_detail"):
        if key in tree:
            tree[key] = [{k: v for k, v in d.items() if k not in ("node", "why", "argument")} for d in tree[key]]
    tree["children"] = [_without_node_names(c) for c in tree.get("children", [])]
    return tree


@pytest.mark.parametrize("model, plan, how", CASES, ids=[f"{m.split(':')[1]}-{p.split(':')[1]}-{h}" for m, p, h in CASES])
def test_torchscript_predicts_as_the_exported_program(run_commlens, tmp_path, model, plan, how):
    m, args, kwargs = call_model_factory(model)
    pt2 = tmp_path / "m.pt2"
    torch.export.save(export_model(m, args, kwargs), str(pt2))
    ts = tmp_path / "m.pt"
    save_torchscript(m, args, ts, how)
    plan_path = tmp_path / "plan.json"
    planlib.save(planlib.resolve_plan(plan), str(plan_path))
    from_ts = _predict(run_commlens, ts, plan_path, tmp_path / "ts.json", "--torchscript")
    from_ep = _predict(run_commlens, pt2, plan_path, tmp_path / "ep.json")
    assert from_ts["collectives_forward"]
    assert _without_node_names(from_ts) == _without_node_names(from_ep)
    summary = compare_with_measure(run_commlens, tmp_path / "ts.json", model, plan, tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0


def test_torchscript_from_the_export_cli_equals_comm_debug_mode(run_commlens, tmp_path):
    # `python -m commlens.export --torchscript` writes what predict reads (the cases above save
    # with save_torchscript in-process).
    model, plan = "examples.mlp:mlp", P + "mlp_2d(dp=2, tp=2, input_requires_grad=True)"
    r = subprocess.run([sys.executable, "-m", "commlens.export", model, "-o", str(tmp_path / "m.pt"),
                        "--torchscript", "trace"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    plan_path = tmp_path / "plan.json"
    planlib.save(planlib.resolve_plan(plan), str(plan_path))
    _predict(run_commlens, tmp_path / "m.pt", plan_path, tmp_path / "pred.json", "--torchscript")
    summary = compare_with_measure(run_commlens, tmp_path / "pred.json", model, plan, tmp_path)
    assert summary["differ"] == 0 and summary["bytes_compared"] == summary["cells"] > 0


def test_python_api_reads_torchscript(tmp_path):
    import commlens

    m, args, _ = call_model_factory("examples.mlp:mlp")
    save_torchscript(m, args, tmp_path / "m.pt", "script")
    # mlp_tp: w2 Rowwise -> one all_reduce forward (its output), none backward (w1 Colwise takes
    # a replicated input that does not require grad).
    assert commlens.predict(str(tmp_path / "m.pt"), P + "mlp_tp(tp=4)", torchscript=True).counts()["MLP.w2"] == {
        "forward": {"c10d_functional.all_reduce": 1}, "backward": {}}


# --- what the frontend cannot know is refused: one line, exit 2

class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Linear(4, 4)

    def forward(self, x):
        if x.sum() > 0:  # zeros here, anything at run time
            return self.w(x)
        return x * 2


class Masked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.w(x)[x > 0]


class ShapeBranch(torch.nn.Module):
    """Branches and loops on shapes are followed: flatten, then x.size(0) // 8 = 2 adds."""


    def __init__(self):
        super().__init__()
        self.w = torch.nn.Linear(4, 4)

    def forward(self, x):
        if x.dim() == 3:
            x = x.flatten(0, 1)
        for _ in range(x.size(0) // 8):
            x = x + 1
        return self.w(x)


def _save(module, path, inputs=None):
    extra = {} if inputs is None else {"commlens_inputs.json": inputs}
    torch.jit.save(torch.jit.script(module), str(path), _extra_files=extra)
    return path


SHAPES = json.dumps({"inputs": [{"shape": [2, 8, 4], "dtype": "float32"}]})
ERRORS = {
    "no-shapes": (lambda p: _save(ShapeBranch(), p),
                  "TorchScript: archive without commlens_inputs.json (the example inputs' shapes): save it with "
                  "`python -m commlens.export ... --torchscript`"),
    "shapes-not-json": (lambda p: _save(ShapeBranch(), p, '{"inputs": ['), "TorchScript: commlens_inputs.json: not JSON"),
    "shapes-count": (lambda p: _save(ShapeBranch(), p, '{"inputs": []}'),
                     "TorchScript: commlens_inputs.json: 0 inputs for forward's 1 arguments"),
    "shapes-dtype": (lambda p: _save(ShapeBranch(), p, '{"inputs": [{"shape": [2, 8, 4], "dtype": "float128"}]}'),
                     "TorchScript: commlens_inputs.json: unknown dtype 'float128'"),
    "shapes-mismatch": (lambda p: _save(ShapeBranch(), p, '{"inputs": [{"shape": [2, 8, 5], "dtype": "float32"}]}'),
                        "TorchScript: 'aten::linear' in w (torch.nn.modules.linear.Linear) failed: mat1 and mat2 "
                        "shapes cannot be multiplied (16x5 and 4x4)"),
    "branch-on-values": (lambda p: _save(Branchy(), p, SHAPES),
                         f"TorchScript: the condition of an if in {Branchy.__module__}.Branchy depends on tensor values, which commlens "
                         "cannot know before the run"),
    "shape-from-values": (lambda p: _save(Masked(), p, SHAPES),
                          f"TorchScript: 'aten::index' in {Masked.__module__}.Masked: its output shape depends on tensor values, which "
                          "commlens cannot know before the run"),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_torchscript_errors(run_commlens, tmp_path, name):
    make, what = ERRORS[name]
    path = make(tmp_path / "m.pt")
    r = run_commlens("inspect", path, "--torchscript")
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"commlens: error: {path}: {what}\n")


def test_shape_branches_and_loops_are_followed(run_commlens, tmp_path):
    path = _save(ShapeBranch(), tmp_path / "m.pt", SHAPES)
    r = run_commlens("inspect", path, "--print-ir", "--torchscript")
    assert r.returncode == 0, r.stderr
    ops = [line.split(" = ")[1].split("(")[0] for line in r.stdout.splitlines() if line.startswith("%")]
    # x + 1 is add.Tensor in eager Python (no Python binding for add.Scalar), as DTensor sees it
    assert ops == ["aten::flatten.using_ints", "aten::add.Tensor", "aten::add.Tensor", "aten::linear.default"]
    assert "call @ShapeBranch.w(%add_1)" in r.stdout.splitlines()


def test_missing_frontend_library_is_named(tmp_path, commlens_bin):
    path = _save(ShapeBranch(), tmp_path / "m.pt", SHAPES)
    missing = tmp_path / "nowhere" / "libcommlens_torchscript.so"
    r = subprocess.run([commlens_bin, "inspect", str(path), "--torchscript"], capture_output=True, text=True, timeout=120,
                       env={"COMMLENS_TORCHSCRIPT_LIBRARY": str(missing), "PATH": "/usr/bin:/bin"})
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {path}: the TorchScript frontend libcommlens_torchscript.so is not "
                        f"installed (looked in {missing})\n")


def test_export_cli_reports_a_model_torchscript_cannot_compile(tmp_path):
    r = subprocess.run([sys.executable, "-m", "commlens.export", "examples.llama:llama", "-o", str(tmp_path / "m.pt"),
                        "--torchscript", "script"], capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("commlens: error: examples.llama:llama: torch.jit.script failed: cannot statically infer the "
                        "expected size of a list in this context:\n")


class Endless(torch.nn.Module):
    def forward(self, x):
        while x.dim() > 0:  # a condition on shapes that never changes
            x = x + 1
        return x


def test_endless_loop_is_refused(run_commlens, tmp_path):
    path = _save(Endless(), tmp_path / "m.pt", SHAPES)
    r = run_commlens("inspect", path, "--torchscript")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"commlens: error: {path}: TorchScript: a loop in {Endless.__module__}.Endless runs more "
                        "than 100000 times\n")
