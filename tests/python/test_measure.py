"""commlens.measure against counts derived by hand from DTensor's rules.

Notation: R = Replicate(), S(d) = Shard(d), P = Partial(sum).  tp = mesh size.
AR = c10d_functional.all_reduce, AG = c10d_functional.all_gather_into_tensor,
RS = c10d_functional.reduce_scatter_tensor (CommDebugMode keys native funcol
ops under the legacy c10d_functional names).

Shared facts (torch 2.13, torch/distributed/tensor/parallel/style.py,
_api.py, _ops/_matrix_ops.py):

* nn.Linear on a 3-D DTensor input is decomposed before DTensor sees it:
  ``t(W)``, ``view(x, [B*S, K])``, ``addmm(b, x2d, Wt)``, ``view`` back.
* mm/addmm strategies for ``mk,kn->mn`` (one mesh dim):
  [R|R,R], [P|S(1),S(0)], [S(0)|S(0),R], [S(1)|R,S(1)]  ([out|lhs,rhs]);
  addmm's bias must match the output placement (R -> P is a local divide).
* ``from_local`` / ``to_local`` never communicate in forward.  The backward of
  ``from_local(x, p)`` redistributes the incoming grad to ``p`` (a Partial
  grad to R = one AR); it exists only if ``x`` requires grad.
* ``Redistribute`` backward sends the grad back to the forward *source*
  placements, except that a Partial source becomes R.
* The loss is ``sum()`` of the (local) output; its grad is a plain tensor.
* CommDebugMode attributes a forward collective to the module whose forward
  (including TP input/output hooks) is running, a backward collective to the
  module whose backward pre-hook fired last, and adds it to every ancestor
  and to "Global".
"""

import json
import os
import subprocess
import sys

import pytest

from commlens import CommlensError
from commlens.measure import measure, measure_many
from commlens.plan import PlanError
from conftest import REPO, error_lines

AR = "c10d_functional.all_reduce"
AG = "c10d_functional.all_gather_into_tensor"
RS = "c10d_functional.reduce_scatter_tensor"


def expect(modules, phase="both"):
    """modules: [(fqn, forward, backward)] in forward order -> measure()'s dict."""
    out = {}
    for fqn, fw, bw in modules:
        out[fqn] = {"forward": {} if phase == "backward" else dict(fw),
                    "backward": {} if phase == "forward" else dict(bw)}
    return out


# ---------------------------------------------------------------- derivations

def colwise_linear(rg):
    # Root nn.Linear(16, 32) with ColwiseParallel(); x: plain [2, 8, 16].
    # forward: input hook from_local(x, (R,)); input_layouts == desired (R,) so
    #   no redistribute.  W -> S(0) (Wt = t(W) -> S(1)), bias -> S(0).
    #   addmm(bias S(0), x R, Wt S(1)) matches [S(1)|R,S(1)] (bias broadcast to
    #   output dim 1 -> S(0) as given): no comm.  Output view -> S(2).
    #   Output hook: (S(2),) != (S(-1),) -> redistribute to Shard(-1), which
    #   normalises to S(2) == current: no comm.  Forward: 0.
    # backward: to_local grad -> DTensor S(2); grad Wt = mm(x^T R, g S(1)) ->
    #   [S(1)|R,S(1)], grad bias = sum over rows of S(1) -> S(0): no comm.
    #   If x requires grad: grad x = mm(g S(1), Wt^T S(0)) -> [P|S(1),S(0)] = P;
    #   from_local backward: P -> R = 1 AR, during Linear's backward.
    return [("Global", {}, {AR: 1} if rg else {}),
            ("Linear", {}, {AR: 1} if rg else {})]


def rowwise_linear(rg, output="replicate"):
    # Root nn.Linear(16, 32) with RowwiseParallel(output_layouts=R or S(1));
    # x: plain [2, 8, 16], the global input: measure passes each rank its
    # local shard [2, 8, 16/tp] (docs/plan-format.md, "Inputs and local shards").
    # forward: input hook from_local(x, (S(-1),)); input_layouts == desired
    #   (Shard(-1),): no redistribute.  W -> S(1) (Wt -> S(0)), bias -> R.
    #   addmm(bias, x S(1), Wt S(0)) -> [P|S(1),S(0)], bias R -> P local: no comm.
    #   Output P.  Output hook: P -> R = 1 AR   (or P -> S(1) = 1 RS).
    # backward: to_local grad -> DTensor with the output placements.
    #   replicate: Redistribute backward, source P -> target R: R -> R, no comm.
    #   shard:     grad S(1) -> R (source P normalised to R) = 1 AG.
    #   Then grad is R: grad Wt = mm(x^T S(0), g R) -> [S(0)|S(0),R]; grad x =
    #   mm(g R, Wt^T S(1)) -> [S(1)|R,S(1)] = S(1) -> view S(2), equal to the
    #   from_local placement: no comm.  So requires_grad changes nothing.
    if output == "replicate":
        fw, bw = {AR: 1}, {}
    else:
        fw, bw = {RS: 1}, {AG: 1}
    return [("Global", fw, bw), ("Linear", fw, bw)]


def mlp(rg):
    # MLP: w1 ColwiseParallel, relu on the local S(-1) shard, w2 RowwiseParallel.
    # forward: w1 as colwise_linear (0); w2 as rowwise_linear: 1 AR in w2's
    #   output hook.
    # backward: w2 as rowwise_linear (0; its input grad S(2) matches
    #   from_local(S(-1))); relu backward is local; w1 as colwise_linear: 1 AR
    #   only when x requires grad, in w1's backward.
    return [("Global", {AR: 1}, {AR: 1} if rg else {}),
            ("MLP", {AR: 1}, {AR: 1} if rg else {}),
            ("MLP.w1", {}, {AR: 1} if rg else {}),
            ("MLP.w2", {AR: 1}, {})]


def cases(tp):
    out = []
    for rg in (False, True):
        out.append((f"colwise-rg{int(rg)}", "examples.mlp:linear",
                    f"examples.plans:linear_colwise(tp={tp}, input_requires_grad={rg})", colwise_linear(rg)))
        out.append((f"rowwise-rg{int(rg)}", "examples.mlp:linear",
                    f"examples.plans:linear_rowwise(tp={tp}, input_requires_grad={rg})", rowwise_linear(rg)))
        out.append((f"rowwise-shard-rg{int(rg)}", "examples.mlp:linear",
                    f"examples.plans:linear_rowwise(tp={tp}, output='shard', input_requires_grad={rg})",
                    rowwise_linear(rg, "shard")))
        out.append((f"mlp-rg{int(rg)}", "examples.mlp:mlp",
                    f"examples.plans:mlp_tp(tp={tp}, input_requires_grad={rg})", mlp(rg)))
    return out


FAKE_CASES = cases(4)


@pytest.mark.parametrize("phase", ["forward", "backward", "both"])
@pytest.mark.parametrize("name, model, plan, modules", FAKE_CASES, ids=[c[0] for c in FAKE_CASES])
def test_fake_matches_hand_derivation(name, model, plan, modules, phase):
    assert measure(model, plan, backend="fake", phase=phase) == expect(modules, phase)


def test_fake_world_size_8():
    # The derivations do not depend on tp.
    assert measure("examples.mlp:mlp", "examples.plans:mlp_tp(tp=8, input_requires_grad=True)") == expect(mlp(True))


def test_2d_mesh_tp_only_on_tp_dim():
    # (dp=2, tp=2) mesh, TP on the "tp" sub-mesh only: same counts as 1-D TP.
    assert measure("examples.mlp:mlp", "examples.plans:mlp_2d(dp=2, tp=2, input_requires_grad=True)") == expect(mlp(True))


def test_frozen_w1_has_no_effect_on_input_grad_allreduce():
    # Freezing w1's parameters removes only local param-grad mm's; the input
    # grad still flows through w1 (x requires grad): counts unchanged.
    got = measure("examples.mlp:mlp", "examples.plans:mlp_tp(tp=4, input_requires_grad=True, frozen=('w1.*',))")
    assert got == expect(mlp(True))


def test_dtensor_input_leaf_keeps_partial_grad():
    # Plan input placement (R,): x becomes a DTensor leaf (distribute_tensor,
    # outside CommDebugMode) that requires grad.  w1's input hook sees a
    # DTensor: no from_local, and (R,) == desired (R,): no redistribute.
    # forward: as mlp(): 1 AR in w2's output hook.
    # backward: w1's input grad is P (as in colwise_linear) and flows straight
    #   into x's AccumulateGrad, which does not redistribute: 0 collectives
    #   (a plain x would cost 1 AR in from_local's backward).
    from examples.plans import mlp_tp
    from torch.distributed.tensor import Replicate

    plan = mlp_tp(tp=4, input_requires_grad=True)
    plan.input_placements = {0: (Replicate(),)}
    assert measure("examples.mlp:mlp", plan) == expect(mlp(False))


def test_explicit_parameter_placements():
    # Only w1 gets a style (Colwise, use_local_output=False -> DTensor S(2)
    # output); w2 stays a plain nn.Linear whose parameters the plan places
    # explicitly: weight S(1), bias R (what RowwiseParallel would do, minus
    # its hooks).
    # forward: w1 as colwise_linear: 0.  relu(S(2)) -> S(2).  w2: t(W S(1)) ->
    #   S(0); view h -> S(1); addmm(bias R, S(1), S(0)) -> [P|S(1),S(0)], bias
    #   R -> P locally: 0.  The output stays P (no output hook).
    # backward: sum(P) -> P scalar; its seed ones_like follows DTensor's
    #   create-like rule (P -> R), sum/view backward keep R; addmm backward with
    #   grad R: grad h = mm(R, S(1)) -> S(1), grad Wt = mm(S(0), R) -> S(0):
    #   0.  x needs no grad: no from_local backward.  Total 0 everywhere.
    from commlens.plan import Plan
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel

    plan = Plan(mesh_shape=(4,), parallelize_plan={"w1": ColwiseParallel(use_local_output=False)},
                placements={"w2.weight": (Shard(1),), "w2.bias": (Replicate(),)})
    assert measure("examples.mlp:mlp", plan) == expect([
        ("Global", {}, {}), ("MLP", {}, {}), ("MLP.w1", {}, {}), ("MLP.w2", {}, {})])


def test_explicit_placement_of_already_distributed_parameter():
    from examples.plans import mlp_tp
    from torch.distributed.tensor import Replicate

    plan = mlp_tp(tp=4)
    plan.placements = {"w2.b*": (Replicate(),)}
    with pytest.raises(PlanError) as info:
        measure("examples.mlp:mlp", plan)
    assert str(info.value) == ("plan: placements['w2.b*']: w2.bias is already a DTensor (Replicate(),) "
                               "after parallelize_module")


def test_measure_with_plan_object_and_callable_factory():
    from examples.mlp import mlp as mlp_factory
    from examples.plans import mlp_tp

    got = measure(lambda: mlp_factory(dim=32, hidden=64), mlp_tp(tp=2, input_requires_grad=True))
    assert got == expect(mlp(True))


@pytest.mark.gloo
def test_gloo_matches_fake(tmp_path):
    """Real collectives among 2 spawned CPU processes (one spawn for all cases;
    about 15 s on 2 cores).  Every rank measures; ranks must agree; rank 0
    writes the CommDebugMode dump."""
    gloo_cases = cases(2)
    jobs = [(model, plan) for _, model, plan, _ in gloo_cases]
    dump = tmp_path / "gloo-mlp.json"
    jobs[-1] = jobs[-1] + ("both", str(dump))  # mlp-rg1
    fake = measure_many([j[:2] for j in jobs], backend="fake")
    gloo = measure_many(jobs, backend="gloo")
    assert gloo == fake
    assert gloo == [expect(modules) for *_, modules in gloo_cases]
    tree = json.loads(dump.read_text())
    assert tree["collectives_forward"] == [[AR, 1]] and tree["collectives_backward"] == [[AR, 1]]


# ---------------------------------------------------------------- CLI

def test_measure_cli_fake(cli, tmp_path):
    out = tmp_path / "measured.json"
    r = cli("commlens.measure", "examples.mlp:mlp",
            "--plan", "examples.plans:mlp_tp(tp=4, input_requires_grad=True)", "-o", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "commlens: measured examples.mlp:mlp with examples.plans:mlp_tp(tp=4, input_requires_grad=True) "
        f"(fake, world size 4, phase both): 1 forward + 1 backward collectives; wrote {out} and "
        f"{tmp_path / 'measured.counts.json'}"]
    counts = json.loads((tmp_path / "measured.counts.json").read_text())
    assert counts["format"] == "commlens-counts" and counts["version"] == 1
    assert (counts["source"], counts["backend"], counts["world_size"], counts["phase"]) == ("measure", "fake", 4, "both")
    assert counts["mesh"] == {"shape": [4], "dim_names": ["tp"], "device_type": "cpu"}
    assert counts["device"] == {"type": "cpu"}
    assert [{k: m[k] for k in ("fqn", "forward", "backward")} for m in counts["modules"]] == [
        {"fqn": f, "forward": fw, "backward": bw} for f, fw, bw in mlp(True)]
    # Bytes each all_reduce sends on rank 0: the whole [2, 8, 16] float32 activation (w2's Partial
    # output in forward, w1's Partial input gradient in backward) = 2 * 8 * 16 * 4 = 1024.
    assert [(m["forward_bytes"], m["backward_bytes"]) for m in counts["modules"]] == [
        ({AR: 1024 * n} if n else {}, {AR: 1024 * b} if b else {})
        for n, b in [(fw.get(AR, 0), bw.get(AR, 0)) for _, fw, bw in mlp(True)]]
    dump = json.loads(out.read_text())  # CommDebugMode.generate_json_dump
    assert dump["fqn"] == "Global"
    assert [c["fqn"] for c in dump["children"]] == ["MLP"]
    assert [c["fqn"] for c in dump["children"][0]["children"]] == ["MLP.w1", "MLP.w2"]
    assert dump["collectives_forward"] == [[AR, 1]] and dump["collectives_backward"] == [[AR, 1]]


def test_measure_cli_plan_file_phase_forward(cli, tmp_path):
    from commlens.plan import save
    from examples.plans import mlp_tp

    plan = tmp_path / "plan.json"
    save(mlp_tp(tp=2, input_requires_grad=True), str(plan))
    r = cli("commlens.measure", "examples.mlp:mlp", "--plan", plan, "--phase", "forward",
            "--noise-level", "0", "-o", tmp_path / "m.json", "--counts", tmp_path / "c.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    counts = json.loads((tmp_path / "c.json").read_text())
    assert counts["phase"] == "forward" and counts["plan"] == str(plan)
    assert [{k: m[k] for k in ("fqn", "forward", "backward")} for m in counts["modules"]] == [
        {"fqn": f, "forward": fw, "backward": {}} for f, fw, _ in mlp(True)]
    dump = json.loads((tmp_path / "m.json").read_text())
    assert dump["collectives_backward"] == []  # backward never ran
    assert dump["operations_forward"] == []  # noise level 0: counts only


# ---------------------------------------------------------------- errors

def test_world_size_mismatch_api():
    with pytest.raises(PlanError) as info:
        measure("examples.mlp:mlp", "examples.plans:mlp_tp(tp=4)", world_size=8)
    assert str(info.value) == "examples.plans:mlp_tp(tp=4): mesh shape (4,) has 4 devices but the world size is 8"


def test_pattern_matches_no_module_api():
    # parallelize_module warns and skips a plan entry that matches no module; measure does the same
    with pytest.warns(UserWarning) as caught:
        got = measure("examples.mlp:mlp", "examples.plans:stacked_mlp_tp(tp=2)")
    assert [str(w.message) for w in caught if "matches no module" in str(w.message)] == [
        f"examples.plans:stacked_mlp_tp(tp=2): plan pattern '{p}' matches no module of MLP: skipped, as torch's "
        "parallelize_module skips it" for p in ("layers.*.w1", "layers.*.w2")]
    assert got == expect([("Global", {}, {}), ("MLP", {}, {}), ("MLP.w1", {}, {}), ("MLP.w2", {}, {})])


def test_meta_model_on_fake_backend():
    # shapes are all DTensor needs: a meta-device model counts the same
    got = measure("examples.mlp:mlp(device='meta')", "examples.plans:mlp_tp(tp=4, input_requires_grad=True)")
    assert got == expect(mlp(True))
    got = measure("examples.mlp:mlp", "examples.plans:mlp_tp(tp=4, input_requires_grad=True)", device="meta")
    assert got == expect(mlp(True))


HAS_CUDA = __import__("torch").cuda.is_available()


def test_device_recorded_in_counts():
    # where the fresh model ran: a meta factory, --device meta, a cuda plan without a GPU (meta)
    for model, plan, device in [
            ("examples.mlp:mlp(device='meta')", "examples.plans:mlp_tp(tp=2)", None),
            ("examples.mlp:mlp", "examples.plans:mlp_tp(tp=2)", "meta")] + ([] if HAS_CUDA else [
            ("examples.mlp:mlp", "examples.plans:mlp_tp(tp=2, device_type='cuda')", None)]):
        doc = measure(model, plan, device=device, return_document=True)
        assert doc["device"] == {"type": "meta"}, (model, plan, device)


def test_device_cuda_needs_a_cuda_plan():
    with pytest.raises(PlanError) as info:
        measure("examples.mlp:mlp", "examples.plans:mlp_tp(tp=2)", device="cuda")
    assert str(info.value) == ("examples.plans:mlp_tp(tp=2): --device cuda needs a plan with device_type "
                               "'cuda' (plan has 'cpu')")


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a GPU")
def test_device_cuda_without_a_gpu(cli, tmp_path):
    import torch

    r = cli("commlens.measure", "examples.mlp:mlp", "--plan", "examples.plans:mlp_tp(tp=2, device_type='cuda')",
            "--device", "cuda", "-o", tmp_path / "m.json", cwd=tmp_path)
    assert r.returncode == 2
    assert error_lines(r.stderr) == [f"commlens: error: measure: --device cuda needs a CUDA GPU (torch "
                              f"{torch.__version__}: torch.cuda.is_available() is False)"]


def test_unknown_device_api():
    with pytest.raises(CommlensError) as info:
        measure("examples.mlp:mlp", "examples.plans:mlp_tp(tp=2)", device="xpu")
    assert str(info.value) == "measure: unknown device 'xpu' (expected one of meta, cuda)"


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_device_cuda_on_a_gpu():
    # MLP under Colwise/Rowwise on the GPU: one all_reduce forward (w2's Partial output), none
    # backward (the input needs no grad), as on CPU; the counts file names the GPU.
    import torch

    doc = measure("examples.mlp:mlp", "examples.plans:mlp_tp(tp=4, device_type='cuda')", device="cuda",
                  return_document=True)
    assert [{k: m[k] for k in ("fqn", "forward", "backward")} for m in doc["modules"]] == [
        {"fqn": f, "forward": fw, "backward": bw} for f, fw, bw in mlp(False)]
    major, minor = torch.cuda.get_device_capability()
    assert doc["device"] == {"type": "cuda", "name": torch.cuda.get_device_name(),
                             "compute_capability": f"{major}.{minor}",
                             "cudnn_version": torch.backends.cudnn.version(), "cuda_version": torch.version.cuda,
                             "torch_version": torch.__version__}


def test_cuda_plan_rejected_by_gloo():
    with pytest.raises(CommlensError) as info:
        measure("examples.mlp:mlp", "examples.plans:mlp_tp(tp=2, device_type='cuda')", backend="gloo")
    assert str(info.value) == ("examples.plans:mlp_tp(tp=2, device_type='cuda'): the gloo backend needs "
                               "device_type 'cpu' (plan has 'cuda')")


def test_nccl_needs_torchrun():
    with pytest.raises(CommlensError) as info:
        measure("examples.mlp:mlp", "examples.plans:mlp_tp(tp=2, device_type='cuda')", backend="nccl")
    assert str(info.value) == ("measure: the nccl backend must run under torchrun (RANK/WORLD_SIZE not set); "
                               "see python -m commlens.measure --help")


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a GPU")
def test_nccl_under_torchrun_without_a_gpu(tmp_path):
    # One line naming the missing GPUs, not torch's traceback from torch.cuda.set_device.
    import torch

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "python"), str(REPO)])}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
                        "-m", "commlens.measure", "examples.mlp:mlp", "--plan",
                        "examples.plans:mlp_tp(tp=1, device_type='cuda')", "--backend", "nccl", "-o",
                        str(tmp_path / "m.json")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert error_lines(r.stderr) == [f"commlens: error: measure: the nccl backend needs CUDA GPUs (torch "
                                     f"{torch.__version__}: torch.cuda.is_available() is False)"], r.stderr[-3000:]


def test_measure_cli_world_size_error(cli, tmp_path):
    r = cli("commlens.measure", "examples.mlp:mlp", "--plan", "examples.plans:mlp_tp(tp=4)",
            "--world-size", "8", "-o", tmp_path / "m.json", cwd=tmp_path)
    assert r.returncode == 2
    assert error_lines(r.stderr) == [
        "commlens: error: examples.plans:mlp_tp(tp=4): mesh shape (4,) has 4 devices but the world size is 8"]
    assert not (tmp_path / "m.json").exists()


def test_measure_cli_pattern_error(cli, tmp_path):
    plan = tmp_path / "plan.json"
    from commlens.plan import dumps
    from examples.plans import mlp_tp

    obj = json.loads(dumps(mlp_tp(tp=2)))
    obj["parallelize"][0]["plan"][0]["fqn"] = "fc*"
    obj["parallelize"][0]["plan"][1]["fqn"] = "fd*"
    plan.write_text(json.dumps(obj))
    r = cli("commlens.measure", "examples.mlp:mlp", "--plan", plan, "-o", tmp_path / "m.json", cwd=tmp_path)
    # skipped with a warning, as parallelize_module skips them: nothing is parallelised
    assert r.returncode == 0, r.stderr
    for p in ("fc*", "fd*"):
        assert f"{plan}: plan pattern '{p}' matches no module of MLP: skipped, as torch's parallelize_module skips it" \
            in r.stderr
    assert "0 forward + 0 backward collectives" in r.stdout
