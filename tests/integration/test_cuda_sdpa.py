"""device_type="cuda" plans lower SDPA as ATen's CUDA dispatch does (no GPU needed to predict).

Expected backends are derived by hand from select_sdp_backend (sdp_utils.cpp; see
docs/cuda-dispatch.md): the GPT-2 example runs float32 with head dim 8 (dim 64 / 8 heads),
is_causal=True and no mask, so on an H100 with the default cuDNN 9.10.2:
flash is rejected (needs fp16/bf16), efficient accepts fp32 with head dims that are multiples of 4
on sm80+ and 16-byte-aligned storage offsets (q, k, v come from separate projections: offset 0).
In bfloat16, flash takes it; with cuDNN 9.17 on sm90, cuDNN is tried first and takes it.
"""
import json
import re
import subprocess
import sys

import pytest

from commlens import plan as planlib
from integration_helpers import export_pt2, save_plan

GPT2 = "examples.gpt2:gpt2(attn='sdpa')"
PLAN = "examples.plans:gpt2_tp_sp(tp=4, device_type='cuda')"


def _decomposed_attention_ops(run_commlens, pt2, plan_path, *extra):
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--print-after=decompose", *extra)
    assert r.returncode == 0, r.stderr
    ops = [re.search(r" = (aten::[\w.]+)\(", line) for line in r.stderr.splitlines()]
    return [m.group(1) for m in ops if m and "scaled_dot_product" in m.group(1)]


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpt2_cuda")
    return export_pt2(GPT2, d), save_plan(planlib.resolve_plan(PLAN), d), d


def test_float32_gpt2_on_h100_runs_efficient_attention(run_commlens, gpt2):
    pt2, plan_path, _ = gpt2
    ops = _decomposed_attention_ops(run_commlens, pt2, plan_path)
    assert ops == ["aten::_scaled_dot_product_efficient_attention.default"] * 2  # one per layer


def test_a_cpu_plan_keeps_the_cpu_kernel(run_commlens, gpt2, tmp_path):
    pt2, _, _ = gpt2
    cpu_plan = save_plan(planlib.resolve_plan("examples.plans:gpt2_tp_sp(tp=4)"), tmp_path)
    ops = _decomposed_attention_ops(run_commlens, pt2, cpu_plan)
    assert ops == ["aten::_scaled_dot_product_flash_attention_for_cpu.default"] * 2


def test_bfloat16_runs_flash_and_new_cudnn_runs_cudnn(run_commlens, tmp_path):
    pt2 = export_pt2("examples.gpt2:gpt2(attn='sdpa', dtype='bfloat16')", tmp_path)
    plan_path = save_plan(planlib.resolve_plan(PLAN), tmp_path)
    assert _decomposed_attention_ops(run_commlens, pt2, plan_path) == \
        ["aten::_scaled_dot_product_flash_attention.default"] * 2
    assert _decomposed_attention_ops(run_commlens, pt2, plan_path, "--cudnn-version", "91700") == \
        ["aten::_scaled_dot_product_cudnn_attention.default"] * 2
    # sm89 keeps the default order whatever the cuDNN version
    assert _decomposed_attention_ops(run_commlens, pt2, plan_path, "--gpu", "l40s", "--cudnn-version", "91700") == \
        ["aten::_scaled_dot_product_flash_attention.default"] * 2
    # sm101 with cuDNN 9.17: check_prefer_cudnn_attention admits minor revisions 0 and 3 only for
    # CUDA 12 builds, any minor for CUDA 13 (torch.version.cuda, --cuda-version). Flash and cuDNN
    # both accept sm101 (sm80..sm121), so the order decides.
    assert _decomposed_attention_ops(run_commlens, pt2, plan_path, "--gpu-arch", "10.1", "--cudnn-version",
                                     "91700") == ["aten::_scaled_dot_product_flash_attention.default"] * 2
    assert _decomposed_attention_ops(run_commlens, pt2, plan_path, "--gpu-arch", "10.1", "--cudnn-version",
                                     "91700", "--cuda-version", "13.0") == \
        ["aten::_scaled_dot_product_cudnn_attention.default"] * 2


def test_torch_2_11_runs_cudnn_attention_with_dropout_0_1(run_commlens, tmp_path):
    # The lent H200 (cuDNN 9.19, CUDA 13, torch 2.11.0+cu130) ran cuDNN attention for GPT-2 in bf16
    # with dropout 0.1 (bench/accuracy/sdpa_kernels.py). torch 2.13's check_cudnn_dropout refuses a
    # probability that is not a multiple of 1/16, so flash runs there; torch 2.11 has no such check.
    pt2 = export_pt2("examples.gpt2:gpt2(attn='sdpa', dtype='bfloat16', dropout=0.1)", tmp_path)
    plan_path = save_plan(planlib.resolve_plan(PLAN), tmp_path)
    h200 = ("--gpu", "h200", "--cudnn-version", "91900", "--cuda-version", "13.0")
    assert _decomposed_attention_ops(run_commlens, pt2, plan_path, *h200) == \
        ["aten::_scaled_dot_product_flash_attention.default"] * 2
    assert _decomposed_attention_ops(run_commlens, pt2, plan_path, *h200, "--torch-version", "2.11.0+cu130") == \
        ["aten::_scaled_dot_product_cudnn_attention.default"] * 2
    r = run_commlens("rank", pt2, "--plan", plan_path, *h200, "--torch-version", "2.11.0+cu130")
    assert r.returncode == 0, r.stderr


def _measure_counts(plan_path, out_dir):
    out = out_dir / "measured.json"
    r = subprocess.run([sys.executable, "-m", "commlens.measure", GPT2, "--plan", str(plan_path), "--phase", "both",
                        "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out_dir / "measured.counts.json"


def test_local_output_plan_matches_commdebugmode(run_commlens, gpt2, tmp_path):
    # With ColwiseParallel's default use_local_output=True the attention kernel sees plain local
    # tensors, so its backend changes no collective and the meta-device measurement of the cuda
    # plan is the truth for every count.
    pt2, plan_path, _ = gpt2
    predicted = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    r = run_commlens("compare", predicted, _measure_counts(plan_path, tmp_path), "--phase", "both")
    assert r.returncode == 0, r.stdout
    assert "summary: 50 cells, 0 differ; collectives predicted 23, measured 23" in r.stdout


def test_attention_on_head_sharded_dtensors_adds_no_collective(run_commlens, gpt2, tmp_path):
    # torchtitan-style: wq/wk/wv keep DTensor outputs (use_local_output=False). view/transpose
    # carry Shard(2) of [B, S, H*D] to Shard(1) of [B, H, S, D] for q, k and v, which is the heads
    # pattern of the efficient-attention strategy (q, k, v, out, logsumexp all Shard(1)): no
    # redistribution forward. Backward, grad_out arrives as Shard(1) (wo's RowwiseParallel input
    # layout Shard(-1), through transpose and view), again the heads pattern. So the counts equal
    # the local-output plan's, which CommDebugMode measures (23 = 12 forward + 11 backward).
    # (On CPU this plan fails at run time: the CPU kernel has no DTensor strategy.)
    pt2, plan_path, d = gpt2
    doc = json.loads(plan_path.read_text())
    for entry in doc["parallelize"][0]["plan"]:
        if entry["fqn"].endswith((".wq", ".wk", ".wv")):
            entry["use_local_output"] = False
    dtensor_plan = tmp_path / "dtensor_plan.json"
    dtensor_plan.write_text(json.dumps(doc))
    predicted = tmp_path / "pred.json"
    r = run_commlens("predict", pt2, "--plan", dtensor_plan, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    local_counts = _measure_counts(plan_path, tmp_path)
    r = run_commlens("compare", predicted, local_counts, "--phase", "both")
    assert r.returncode == 0, r.stdout
    assert "collectives predicted 23, measured 23" in r.stdout


@pytest.mark.parametrize("args, message", [
    (("--gpu", "k80"), "commlens: error: --gpu: unknown GPU 'k80' (known: v100, t4, a100, a10, a10g, l4, l40s, "
                       "h100, h200, h20, b200, gb200, b300, rtx4090, rtx5090)\n"),
    (("--gpu-arch", "nine"), "commlens: error: --gpu-arch: bad compute capability 'nine' (expected MAJOR.MINOR "
                             "such as 9.0, or smXY such as sm90)\n"),
    (("--cudnn-version", "9.10"), "commlens: error: --cudnn-version needs torch.backends.cudnn.version()'s "
                                  "integer (e.g. 91002), got '9.10'\n"),
    (("--cuda-version", "twelve"), "commlens: error: --cuda-version needs torch.version.cuda (e.g. 12.8), "
                                   "got 'twelve'\n"),
    (("--cuda-version", "12x"), "commlens: error: --cuda-version needs torch.version.cuda (e.g. 12.8), got '12x'\n"),
    (("--torch-version", "2.9.1+cu128"), "commlens: error: --torch-version: torch 2.9: the CUDA dispatch is "
                                         "modelled for torch 2.11 to 2.13\n"),
])
def test_bad_target_options(run_commlens, gpt2, args, message):
    pt2, plan_path, _ = gpt2
    r = run_commlens("predict", pt2, "--plan", plan_path, *args)
    assert r.returncode == 2
    assert r.stderr == message


def test_math_backend_is_refused_by_name(run_commlens, tmp_path):
    # head dim 6 in float32: flash needs fp16/bf16, efficient needs a multiple of 4: math, which
    # commlens does not decompose yet; the error names the node and module.
    pt2 = export_pt2("examples.gpt2:gpt2(attn='sdpa', dim=48, n_heads=8)", tmp_path)
    plan_path = save_plan(planlib.resolve_plan(PLAN), tmp_path)
    r = run_commlens("predict", pt2, "--plan", plan_path)
    assert r.returncode == 2
    assert "node 'scaled_dot_product_attention' in module 'GPT2.layers.0.attn': scaled_dot_product_attention " \
           "runs the math backend on CUDA (math on h100 (sm90, cuDNN 9.10.2)" in r.stderr


def test_llama_dtensor_attention_stops_at_rope_as_dtensor_does(run_commlens, tmp_path):
    # Llama with wq/wk/wv keeping DTensor outputs: the rotary embedding multiplies the query (a
    # DTensor, viewed as complex) by freqs_cis, a plain tensor the attention module takes as its
    # second input (PrepareModuleInput leaves it alone: None layout). DTensor refuses mixed
    # DTensor / torch.Tensor operands of aten.mul.Tensor, so the run fails there, before
    # attention; commlens stops at the same node with the same reason.
    pt2 = export_pt2("examples.llama:llama", tmp_path)
    doc = planlib.to_json(planlib.resolve_plan("examples.plans:llama_tp(tp=4, device_type='cuda')"))
    for entry in doc["parallelize"][0]["plan"]:
        if entry["fqn"].endswith((".wq", ".wk", ".wv")):
            entry["use_local_output"] = False
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    r = run_commlens("predict", pt2, "--plan", plan, "--phase", "both")
    assert r.returncode == 2
    assert r.stderr == (f"commlens: error: {pt2}: node 'mul' aten::mul.Tensor in Transformer.layers.0.attention: "
                        "mixes DTensor and plain torch.Tensor operands ('view_3' is a plain tensor); DTensor would "
                        "raise here\n")
    # and DTensor does (the plan on meta tensors, fake process group)
    m = subprocess.run([sys.executable, "-m", "commlens.measure", "examples.llama:llama", "--plan", str(plan), "-o",
                        str(tmp_path / "m.json")], capture_output=True, text=True, timeout=600)
    assert m.returncode != 0
    assert "RuntimeError: aten.mul.Tensor got mixed torch.Tensor and DTensor" in m.stderr
