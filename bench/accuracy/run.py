#!/usr/bin/env python3
"""commlens accuracy corpus: predicted vs measured collectives over example models x plans x
meshes x phases.

    .venv/bin/python bench/accuracy/run.py [--subset ci|full] [--jobs N] [--only REGEX]
        [--work-dir out/accuracy] [--commlens build/commlens] [--no-strict]

For every configuration (model factory spec, plan factory spec, phase):

1. the model is exported (``torch.export``, non-strict, as ``python -m commlens.export`` does)
   and the plan serialised (as ``python -m commlens.plan`` does), both cached under
   ``WORK/models/`` and ``WORK/plans/``, keyed by the spec and the sources they come from;
2. the truth is measured with ``commlens.measure`` (fake process group, in-process, CommDebugMode)
   from the cached plan JSON, or by the configuration's own ``measure`` function, which
   parallelises the model as the user's stack does (``examples.hf_real:measure_transformers``:
   transformers' ``tp_plan="auto"``): ``WORK/measured/CONFIG.counts.json``;
3. ``commlens predict MODEL.pt2 --plan PLAN.json --phase P --format json -o
   WORK/predicted/CONFIG.json`` and, when that succeeds, ``commlens compare PREDICTED MEASURED
   --phase P --json``.

One line per configuration::

    CONFIG  measured=<collectives>  predicted=<collectives or ->  exact | DIFF (k cells) |
        no prediction | predict error: <line> | ...

A configuration whose plan has ``device_type="cuda"`` is measured on ``meta`` tensors (CUDA
collectives, no CUDA kernels) for that line and gets a second line, its **GPU column**::

    gpu:  measured=<n>  predicted=<n>  exact | DIFF (k cells) | ... | skipped: no CUDA device (...)

On a machine with a GPU, step 2 runs with CUDA tensors on it (``measure(device="cuda")``: the
real CUDA dispatch, fake process group) and step 3 predicts for that GPU
(``--gpu-arch/--cudnn-version/--cuda-version/--torch-version`` from the counts file's ``device``); without one
the cell is skipped and counted nowhere. ``gpu: exact N/M configs, K/L cells on <GPU>`` or
``gpu: skipped M cuda-plan configs, not counted: <why>`` sums that column; a GPU DIFF fails the run.

then ``bytes: compared on B/L cells`` and last ``exact: N/M configs, K/L cells``: M counts every
configuration, L every cell (module x collective x phase, non-zero on either side) of every
configuration, where a configuration without a prediction contributes its measured cells, none
exact. A cell is exact when its count and, where both sides record them (measure and predict
do), the bytes its collectives send on one rank agree; B counts the cells whose bytes were compared.
Bytes that depend on an MoE layer's routing (expert-parallel all-to-alls) are predicted under
balanced routing with bounds; such a cell's bytes agree when the measured ones lie within the
bounds, and the line says how many cells were so compared. ``WORK/results.json`` holds
the same per configuration.

``no prediction``: ``commlens predict`` does not exist (``unknown command``) or exits 2 with an
error (``predict error: <its error line>``). Exit status: 0 when every configuration was measured
and every prediction made is exact; 1 otherwise (a DIFF, a measure/export/compare error, a crashed
predictor, and, unless ``--no-strict``, a predict error, a configuration measured and predicted
with no cell at all, or one whose bytes were compared on fewer cells than it counts: each of those
would let a run pass without checking anything; ``strict: CONFIG: why`` on stderr names them);
2 on usage errors.
"""

import argparse
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import traceback
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[2]
for _p in (str(ROOT / "python"), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

REUSE_EXPORTS_ENV = "COMMLENS_ACCURACY_REUSE_EXPORTS"  # --reuse-exports, seen by the worker processes too
SUMMARY_RE = re.compile(r"^exact: (\d+)/(\d+) configs, (\d+)/(\d+) cells$")


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    model: str  # MODULE:FACTORY(...) spec
    plan: str  # MODULE:PLAN_FACTORY(...) spec
    phase: str  # forward | backward | both | inference (model.eval() under torch.no_grad(), eval-mode export)
    ci: bool = False
    frontend: str = "export"  # the program: torch.export, or TorchScript "trace" / "script"
    # Only the GPU column: FSDP2 on a cuda mesh moves the parameters to the current CUDA device,
    # so there is no meta-tensor measurement to compare with on a machine without a GPU.
    gpu_only: bool = False
    # MODULE:FUNCTION(...) measuring the truth natively, as the user's own stack parallelises the
    # model (called with phase=, returns a commlens-counts document), instead of commlens.measure
    # applying the plan; the plan is then only what commlens predicts from.
    measure: str | None = None
    # The truth is that the step issues no collective (a column-wise Linear's forward): exact with
    # no cell is then the check, not a configuration that checked nothing (which --strict fails).
    no_collectives: bool = False


MLP = "examples.mlp:mlp"
STACKED = "examples.mlp:stacked_mlp"
GPT2 = "examples.gpt2:gpt2"
GPT2_SDPA = "examples.gpt2:gpt2(attn='sdpa')"
LLAMA = "examples.llama:llama"
LLAMA_COMPLEX_ROPE = "examples.llama:llama(complex_rope=True)"  # torchtitan's complex RoPE
T = "examples.titan:"  # torchtitan's own models and parallelize functions
GATED = "examples.kwargs:gated"
SHARED = "examples.shared:shared_mlp"
HF_LLAMA = "examples.hf:hf_llama"
HF_QWEN2 = "examples.hf:hf_qwen2"
P = "examples.plans:"
H = "examples.hf:"
PZ = "examples.parallelize:"  # parallelize functions as users write them, for commlens.capture
# Dense families whose real transformers tp_plan="auto" path the corpus measures natively. Not
# Qwen3, Exaone4, Apertus: hf_tp refuses their replicated_with_grad_allreduce
# (tests/integration/test_hf_real_path.py); the plan captured from transformers' own calls models
# it (HF_CAPTURED).
HF_TRANSFORMERS_TP = ("llama", "qwen2", "mistral", "granite", "gemma", "gemma2", "cohere", "starcoder2", "olmo",
                      "olmo2", "olmo3", "phi", "phi3", "glm", "smollm3", "ministral", "ernie4_5", "arcee")
HF_CAPTURED = HF_TRANSFORMERS_TP + ("qwen3", "exaone4", "apertus", "granite_swa", "gemma3")
# Mixture-of-experts families whose tp_plan="auto" path the corpus measures natively (moe_tp_experts).
HF_MOE_CAPTURED = ("qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "granitemoe", "deepseek_v3", "deepseek_v2")

CONFIGS = [
    # MLP: w1 Colwise, w2 Rowwise; input with and without requires_grad; 1-D and 2-D meshes
    Config("mlp-tp-tp2-forward", MLP, P + "mlp_tp(tp=2)", "forward", ci=True),
    Config("mlp-tp-tp4-grad-both", MLP, P + "mlp_tp(tp=4, input_requires_grad=True)", "both", ci=True),
    Config("mlp-tp-tp4-both", MLP, P + "mlp_tp(tp=4)", "both"),
    Config("mlp-tp-tp8-grad-backward", MLP, P + "mlp_tp(tp=8, input_requires_grad=True)", "backward"),
    Config("mlp-2d-dp2xtp2-grad-both", MLP, P + "mlp_2d(dp=2, tp=2, input_requires_grad=True)", "both", ci=True),
    Config("mlp-2d-dp4xtp2-forward", MLP, P + "mlp_2d(dp=4, tp=2)", "forward"),
    # nn.Identity placeholders (no ops): listed where CommDebugMode lists them, counts unchanged
    Config("identity_mlp-tp-tp4-grad-both", "examples.mlp:identity_mlp", P + "mlp_tp(tp=4, input_requires_grad=True)",
           "both"),
    # a root Linear, Colwise; Rowwise, whose plain input each rank passes as its Shard(-1) slice
    Config("linear-colwise-tp4-grad-both", "examples.mlp:linear",
           P + "linear_colwise(tp=4, input_requires_grad=True)", "both"),
    Config("linear-rowwise-tp4-grad-both", "examples.mlp:linear",
           P + "linear_rowwise(tp=4, input_requires_grad=True)", "both"),
    Config("linear-rowwise-shard-tp2-both", "examples.mlp:linear",
           P + "linear_rowwise(tp=2, output='shard')", "both"),
    # F.normalize over Colwise-sharded features: the norm is a partial p-norm (_NormPartial)
    Config("normalized_mlp-tp-tp4-grad-both", "examples.mlp:normalized_mlp",
           P + "normalized_mlp_tp(tp=4, input_requires_grad=True)", "both"),
    Config("normalized_mlp-tp-tp2-backward", "examples.mlp:normalized_mlp", P + "normalized_mlp_tp(tp=2)", "backward"),
    # stacked MLP blocks (layers.*)
    Config("stacked_mlp-tp-tp2-forward", STACKED, P + "stacked_mlp_tp(tp=2)", "forward"),
    Config("stacked_mlp-tp-tp4-grad-both", STACKED, P + "stacked_mlp_tp(tp=4, input_requires_grad=True)", "both",
           ci=True),
    Config("stacked_mlp-tp-tp8-backward", STACKED, P + "stacked_mlp_tp(tp=8)", "backward"),
    # GPT-2, explicit matmul attention: TP, TP+SP (PrepareModuleInput on attn/mlp), loss_parallel, 2-D
    Config("gpt2-tp-tp4-both", GPT2, P + "gpt2_tp(tp=4)", "both", ci=True),
    # TorchScript input (torch.jit.trace / script of the same model, commlens' TorchScript frontend)
    Config("gpt2-tp_sp-tp4-torchscript_trace-both", GPT2, P + "gpt2_tp_sp(tp=4)", "both", ci=True, frontend="trace"),
    Config("gpt2-tp_sp-tp4-torchscript_script-both", GPT2, P + "gpt2_tp_sp(tp=4)", "both", frontend="script"),
    Config("gpt2-fsdp_tp_sp-dp2xtp2-torchscript_trace-both", GPT2, P + "gpt2_fsdp_tp(dp=2, tp=2, sp=True)", "both",
           frontend="trace"),
    Config("llama-fsdp_tp_sp-dp2xtp4-torchscript_trace-both", LLAMA, P + "llama_fsdp_tp(dp=2, tp=4)", "both", ci=True,
           frontend="trace"),
    Config("mlp-2d-dp2xtp2-grad-torchscript_script-both", MLP, P + "mlp_2d(dp=2, tp=2, input_requires_grad=True)",
           "both", frontend="script"),
    Config("gpt2-tp-tp2-forward", GPT2, P + "gpt2_tp(tp=2)", "forward", ci=True),
    Config("gpt2-tp_sp-tp4-both", GPT2, P + "gpt2_tp_sp(tp=4)", "both", ci=True),
    Config("gpt2-tp_sp-tp8-backward", GPT2, P + "gpt2_tp_sp(tp=8)", "backward"),
    Config("gpt2-tp_loss_parallel-tp4-both", GPT2, P + "gpt2_tp_loss_parallel(tp=4)", "both", ci=True),
    Config("gpt2-tp-dp2xtp2-both", GPT2, P + "gpt2_tp(tp=2, dp=2)", "both"),
    # GPT-2, scaled_dot_product_attention
    Config("gpt2_sdpa-tp-tp4-both", GPT2_SDPA, P + "gpt2_tp(tp=4)", "both", ci=True),
    Config("gpt2_sdpa-tp_sp-tp2-both", GPT2_SDPA, P + "gpt2_tp_sp(tp=2)", "both"),
    Config("gpt2_sdpa-tp_sp_loss_parallel-tp4-both", GPT2_SDPA, P + "gpt2_tp_sp(tp=4, loss_parallel=True)", "both"),
    Config("gpt2_sdpa-tp_loss_parallel-tp8-forward", GPT2_SDPA, P + "gpt2_tp_loss_parallel(tp=8)", "forward"),
    # Llama (torchtitan plan): with SP, without SP (PrepareModuleInput Replicate -> Replicate), 2-D
    Config("llama-tp_sp-tp4-both", LLAMA, P + "llama_tp(tp=4)", "both", ci=True),
    Config("llama-tp_sp-tp2-forward", LLAMA, P + "llama_tp(tp=2)", "forward", ci=True),
    Config("llama-tp_sp-tp8-backward", LLAMA, P + "llama_tp(tp=8)", "backward"),
    Config("llama-tp-tp4-both", LLAMA, P + "llama_tp(tp=4, sp=False)", "both", ci=True),
    Config("llama-tp-tp8-both", LLAMA, P + "llama_tp(tp=8, sp=False)", "both"),
    Config("llama-tp_sp_loss_parallel-tp4-both", LLAMA, P + "llama_tp(tp=4, loss_parallel=True)", "both"),
    Config("llama-tp_sp-dp2xtp2-both", LLAMA, P + "llama_2d(dp=2, tp=2)", "both", ci=True),
    Config("llama-tp-dp2xtp4-forward", LLAMA, P + "llama_2d(dp=2, tp=4, sp=False)", "forward"),
    # Keyword inputs: PrepareModuleInput with input_kwarg_layouts on blocks called with a keyword
    # argument, a kwargs-only PrepareModuleInput on the root, a keyword user input requiring grad
    Config("gated-tp-tp4-both", GATED, P + "gated_tp(tp=4)", "both", ci=True),
    Config("gated-tp-tp2-forward", GATED, P + "gated_tp(tp=2)", "forward"),
    Config("gated-tp-tp8-backward", GATED, P + "gated_tp(tp=8)", "backward"),
    # PrepareModuleInput with keyword layouts on modules below checkpoint_wrapper: their call
    # signature is recorded under the unwrapped names (refused before, issue 28)
    Config("gated-tp-tp4-ac-both", GATED, P + "with_ac(plan='gated_tp', tp=4)", "both"),
    Config("gated-tp_root_kwargs-tp4-context_grad-both", GATED,
           P + "gated_tp(tp=4, root_kwargs=True, context_requires_grad=True)", "both"),
    # A shared module called twice per forward (weight sharing): each call runs the styles' hooks
    # again, CommDebugMode names both calls alike (measure fixes its tracker's hook pile-up, see
    # python/commlens/measure.py:_fix_repeated_call_tracking)
    Config("shared_mlp-tp-tp4-both", SHARED, P + "shared_mlp_tp(tp=4)", "both", ci=True),
    Config("shared_mlp-tp_prepare-tp2-grad-both", SHARED,
           P + "shared_mlp_tp(tp=2, prepare=True, input_requires_grad=True)", "both"),
    Config("shared_mlp-tp-tp8-backward", SHARED, P + "shared_mlp_tp(tp=8)", "backward"),
    # An FSDP unit called twice per forward: re-gathered per call, backward hooks per call.
    Config("shared_mlp-fsdp-dp4-both", SHARED, P + "shared_mlp_fsdp(dp=4)", "both", ci=True),
    Config("shared_mlp-fsdp_no_reshard-dp4-both", SHARED, P + "shared_mlp_fsdp(dp=4, reshard_after_forward=False)",
           "both"),
    Config("shared_mlp-fsdp_reshard2-dp4-both", SHARED, P + "shared_mlp_fsdp(dp=4, reshard_after_forward=2)", "both"),
    Config("shared_mlp-fsdp_nested-dp4-both", SHARED, P + "shared_mlp_fsdp(dp=4, units=('block.w1', 'block'))",
           "both"),
    Config("shared_mlp-hsdp-rep2-dp4-both", SHARED, P + "shared_mlp_fsdp(dp=4, hsdp=2)", "both"),
    Config("shared_mlp-fsdp_tp-dp2-tp2-grad-both", SHARED,
           P + "shared_mlp_fsdp(dp=2, tp=2, input_requires_grad=True)", "both"),
    # Frozen parameters (requires_grad=False before parallelising): no gradient, no backward comm.
    Config("mlp-tp-tp4-grad-frozen_w1-both", MLP, P + "mlp_tp(tp=4, input_requires_grad=True, frozen=('w1.*',))",
           "both", ci=True),
    Config("stacked_mlp-tp-tp2-frozen_layer0-both", STACKED, P + "stacked_mlp_tp(tp=2, frozen=('layers.0.*',))",
           "both"),
    Config("gpt2-tp-tp4-frozen_embeddings-both", GPT2,
           P + "gpt2_tp(tp=4, frozen=('tok_embeddings.*', 'pos_embeddings.*'))", "both"),
    Config("llama-tp_sp-tp4-frozen_attention-both", LLAMA, P + "llama_tp(tp=4, frozen=('layers.*.attention.*',))",
           "both", ci=True),
    # Hugging Face transformers models (tiny configs) with the tensor-parallel plan they ship
    Config("hf_llama-tp-tp4-both", HF_LLAMA, H + "hf_tp(family='llama', tp=4)", "both", ci=True),
    Config("hf_llama-tp-tp2-forward", HF_LLAMA, H + "hf_tp(family='llama', tp=2)", "forward"),
    Config("hf_llama_kv8-tp_no_lm_head-tp8-both", HF_LLAMA + "(n_kv_heads=8)",
           H + "hf_tp(family='llama', tp=8, lm_head=False)", "both"),
    Config("hf_llama-fsdp_tp-dp2xtp2-both", HF_LLAMA, H + "hf_tp(family='llama', tp=2, dp=2, fsdp=True)", "both"),
    Config("hf_qwen2-tp-tp4-both", HF_QWEN2, H + "hf_tp(family='qwen2', tp=4)", "both", ci=True),
    Config("hf_qwen2-tp-tp2-backward", HF_QWEN2, H + "hf_tp(family='qwen2', tp=2)", "backward"),
    Config("hf_qwen2-fsdp_tp-dp2xtp4-both", HF_QWEN2, H + "hf_tp(family='qwen2', tp=4, dp=2, fsdp=True)", "both"),
    Config("hf_mistral-tp-tp4-both", "examples.hf:hf_mistral", H + "hf_tp(family='mistral', tp=4)", "both"),
    Config("hf_granite-fsdp_tp-dp2xtp2-both", "examples.hf:hf_granite",
           H + "hf_tp(family='granite', tp=2, dp=2, fsdp=True)", "both"),
    # More families with the plan each ships (examples.hf:hf_model(family=...)): Olmo2/Olmo3 gather
    # q/k/v outputs and split o_proj's input (rowwise_split_input); Gemma2 runs eager attention
    Config("hf_olmo2-tp-tp2-both", "examples.hf:hf_model(family='olmo2')", H + "hf_tp(family='olmo2', tp=2)", "both",
           ci=True),
    Config("hf_olmo3-tp-tp4-both", "examples.hf:hf_model(family='olmo3')", H + "hf_tp(family='olmo3', tp=4)", "both"),
    Config("hf_gemma-tp-tp4-both", "examples.hf:hf_model(family='gemma')", H + "hf_tp(family='gemma', tp=4)", "both"),
    Config("hf_gemma2-tp-tp2-both", "examples.hf:hf_model(family='gemma2')", H + "hf_tp(family='gemma2', tp=2)",
           "both"),
    Config("hf_cohere-tp-tp2-both", "examples.hf:hf_model(family='cohere')", H + "hf_tp(family='cohere', tp=2)",
           "both"),
    Config("hf_starcoder2-tp-tp4-both", "examples.hf:hf_model(family='starcoder2')",
           H + "hf_tp(family='starcoder2', tp=4)", "both"),
    Config("hf_olmo-tp-tp2-backward", "examples.hf:hf_model(family='olmo')", H + "hf_tp(family='olmo', tp=2)",
           "backward"),
    Config("hf_phi-tp-tp4-both", "examples.hf:hf_model(family='phi')", H + "hf_tp(family='phi', tp=4)", "both"),
    Config("hf_smollm3-fsdp_tp-dp2xtp2-both", "examples.hf:hf_model(family='smollm3')",
           H + "hf_tp(family='smollm3', tp=2, dp=2, fsdp=True)", "both"),
    Config("hf_ministral-tp-tp2-both", "examples.hf:hf_model(family='ministral')",
           H + "hf_tp(family='ministral', tp=2)", "both"),
    # Phi3 / Glm pack gate and up in one Linear (chunked: split at run time) and split o_proj's input
    Config("hf_phi3-tp-tp2-both", "examples.hf:hf_model(family='phi3')", H + "hf_tp(family='phi3', tp=2)", "both"),
    Config("hf_glm-tp-tp2-both", "examples.hf:hf_model(family='glm')", H + "hf_tp(family='glm', tp=2)", "both"),
    Config("hf_arcee-tp-tp4-both", "examples.hf:hf_model(family='arcee')", H + "hf_tp(family='arcee', tp=4)", "both"),
    Config("hf_ernie4_5-tp-tp4-forward", "examples.hf:hf_model(family='ernie4_5')",
           H + "hf_tp(family='ernie4_5', tp=4)", "forward"),
    # transformers' own tensor parallelism, as a user runs it: from_pretrained(tp_plan="auto") applies
    # its layer classes on the plan the model resolves (with the vocab-parallel embed_tokens), one
    # training step measured natively (examples.hf_real), predicted from hf_tp
    *[Config(f"hf_{family}-transformers_tp-tp{tp}-both", f"examples.hf:hf_model(family={family!r})",
             H + f"hf_tp(family={family!r}, tp={tp})", "both",
             measure=f"examples.hf_real:measure_transformers(family={family!r}, tp={tp})")
      for family in HF_TRANSFORMERS_TP for tp in ((2, 4) if family == "llama" else (4,))],
    # the same runs predicted from the plan commlens.capture reads off transformers' own calls
    # (--parallelize transformers): no plan written by hand
    # the parallelize functions of examples/parallelize.py, written as users write them, measured
    # natively (the function itself parallelizes the model) and predicted from the plan capture reads
    # off them; examples.subclassed: styles on subclasses of nn.Linear and nn.Embedding (isinstance);
    # stacked_mlp_fsdp_dim1: fully_shard's shard_placement_fn (a weight sharded on dim 1)
    *[Config(f"{model.split(':')[1].split('(')[0]}-{fn.split('(')[0]}_captured-{tag}-both", model,
             PZ + f"captured(model={model!r}, parallelize={PZ + fn!r}, world_size={ws}, loss={loss!r}, "
                  f"inputs_requires_grad={grad!r})", "both", ci=ci,
             measure=PZ + f"measure_natively(model={model!r}, parallelize={PZ + fn!r}, world_size={ws}, "
                          f"loss={loss!r}, inputs_requires_grad={grad!r})")
      for model, fn, ws, loss, grad, tag, ci in (
          (LLAMA, "llama_tp_sp(tp=4)", 4, "cross_entropy", (), "tp4", False),
          (LLAMA, "llama_fsdp_tp(dp=2, tp=4, ac=True, early_stop=False, embedding_unit=True)", 8, "cross_entropy",
           (), "dp2xtp4-full_ac", False),
          (STACKED, "stacked_mlp_fsdp", 4, "sum", (0,), "dp4", False),
          (MLP, "mlp_placed(dp=2, tp=2)", 4, "sum", (0,), "dp2xtp2", False),
          ("examples.mlp:stacked_mlp(dim=12, hidden=32)", "stacked_mlp_fsdp_dim1(dp=8)", 8, "sum", (0,), "dim12-dp8", True),
          ("examples.subclassed:subclassed", "subclassed_tp(tp=2)", 2, "sum", (), "tp2", True),
          ("examples.subclassed:subclassed", "subclassed_tp(tp=4)", 4, "sum", (), "tp4", False))],
    # Qwen3.5's text model (4 layers: 3 gated delta-net layers, whose causal conv1d and chunked
    # delta rule run on local tensors, and a full-attention one) through tp_plan="auto", captured
    *[Config(f"hf_qwen3_5-transformers_tp_captured-tp4-{phase}", "examples.hf:hf_model(family='qwen3_5', n_layers=4)",
             H + "hf_captured(family='qwen3_5', tp=4, n_layers=4)", phase,
             measure="examples.hf_real:measure_transformers(family='qwen3_5', tp=4, n_layers=4)")
      for phase in ("both", "inference")],
    # in-place writes into views (out[:, i] = x), differentiated through CopySlices as autograd does
    *[Config(f"inplace_{variant}-tp_local_captured-tp2-grad-both", model, PZ + f"captured({settings})", "both",
             ci=variant == "chunks", measure=PZ + f"measure_natively({settings})")
      for variant in ("copy_select", "copy_slice", "chunks", "overwrite")
      for model in [f"examples.inplace:inplace(variant={variant!r})"]
      for settings in [f"model={model!r}, parallelize='examples.inplace:tp_local(tp=2)', world_size=2, "
                       "inputs_requires_grad=(0,)"]],
    # convolutions on batch-sharded DTensors (DTensor's _tp_conv.py handlers), the head replicated
    # or column-parallel, measured natively
    *[Config(f"cnn-batch_parallel_captured-dp{dp}{tag}-grad-both", "examples.cnn:cnn()", PZ + f"captured({settings})",
             "both", ci=(dp, tag) == (2, "-head_tp"), measure=PZ + f"measure_natively({settings})")
      for dp, tag, extra in ((2, "", ""), (2, "-head_tp", ", head_tp=True"), (4, "-head_tp", ", head_tp=True"))
      for settings in [f"model='examples.cnn:cnn()', parallelize='examples.cnn:batch_parallel(dp={dp}{extra})', "
                       f"world_size={dp}, inputs_requires_grad=(0,)"]],
    *[Config(f"hf_{family}-transformers_tp_captured-tp{tp}-both", f"examples.hf:hf_model(family={family!r})",
             H + f"hf_captured(family={family!r}, tp={tp})", "both", ci=(family, tp) == ("llama", 4),
             measure=f"examples.hf_real:measure_transformers(family={family!r}, tp={tp})")
      for family in HF_CAPTURED for tp in ((2, 4) if family == "llama" else (4,))],
    # inference through the same path (model.eval() under torch.no_grad(): transformers' row-wise
    # Linear sums its local output with dist.all_reduce, c10d.allreduce_), from the captured plan
    *[Config(f"hf_{family}-transformers_tp_captured-tp{tp}-inference", f"examples.hf:hf_model(family={family!r})",
             H + f"hf_captured(family={family!r}, tp={tp})", "inference", ci=(family, tp) == ("llama", 4),
             measure=f"examples.hf_real:measure_transformers(family={family!r}, tp={tp})")
      for family in HF_CAPTURED for tp in ((2, 4) if family == "llama" else (4,))],
    # transformers' mixture-of-experts families through their real tp_plan="auto" path: the experts'
    # 3-D weights placed by their own entries (packed_colwise: _StridedShard; rowwise), the experts
    # run on local shards between transformers' autograd all-reduces (moe_tp_experts), training and
    # inference, from the captured plan
    *[Config(f"hf_{family}-transformers_tp_captured-tp{tp}-{phase}", f"examples.hf:hf_model(family={family!r})",
             H + f"hf_captured(family={family!r}, tp={tp})", phase, ci=(family, tp, phase) == ("qwen3_moe", 2, "both"),
             measure=f"examples.hf_real:measure_transformers(family={family!r}, tp={tp})")
      for family, phase in [*((family, phase) for family in HF_MOE_CAPTURED for phase in ("both", "inference")),
                            # Llama 4 (packed_rowwise gate_up_proj): inference only, as its training step
                            # does not run under CommDebugMode (an in-place op on the view CommDebugMode's
                            # module backward hook returns)
                            ("llama4", "inference")]
      for tp in (2, 4)],
    # transformers' own FSDP2 (DistributedConfig(fsdp_size=N): its fsdp_plan's units, the norm and
    # lm_head kept unsharded as one unit, then the root), from the captured plan
    *[Config(f"hf_{family}-transformers_fsdp_captured-fsdp2-both", f"examples.hf:hf_model(family={family!r})",
             H + f"hf_captured(family={family!r}, distributed={{'fsdp_size': 2}})", "both",
             measure=f"examples.hf_real:measure_transformers(family={family!r}, distributed={{'fsdp_size': 2}})")
      for family in ("llama", "qwen3_moe")],
    # transformers' expert parallelism (DistributedConfig(ep_size=E, ...)): the experts sharded by
    # expert on the expert mesh's ep dim (grouped_gemm), the tokens exchanged by AllToAllEP
    # (per-expert counts, then each token to its top-k experts' ranks and back). With fsdp_size=E
    # the experts under FSDP on efsdp and the dense layers on fsdp (two root meshes, one plan
    # mesh); with tp_size=E the expert group is the TP group: each rank dispatches its slice of the
    # shared batch and all-gathers the outputs, or AllReduceEP sums the partial outputs (AutoEP's
    # choice without grad); with 1 < tp_size < ep_size each TP group inside the expert group slices
    # its batch over tp and all-gathers the outputs over it, the exchanges over ep (flattened from
    # fsdp x tp, or from the part of fsdp no other dim names, "fsdp&ep", x tp). From the captured
    # plan; training and inference
    *[Config(f"hf_{family}-transformers_ep_captured-{tag}-{phase}", f"examples.hf:hf_model(family={family!r})",
             H + f"hf_captured(family={family!r}, distributed={distributed!r})", phase,
             ci=(family, tag, phase) == ("qwen3_moe", "ep2xfsdp2", "both"),
             measure=f"examples.hf_real:measure_transformers(family={family!r}, distributed={distributed!r})")
      for family, tag, distributed, phase in [
          *((family, "ep2xfsdp2", {"fsdp_size": 2, "ep_size": 2}, "both") for family in HF_MOE_CAPTURED),
          ("qwen3_moe", "ep4xfsdp4", {"fsdp_size": 4, "ep_size": 4}, "both"),
          # ep_size < fsdp_size: the experts' units on efsdp (forced sum reduction), the dense on
          # fsdp, flattened from (efsdp, ep)
          *((family, "ep2xfsdp4", {"fsdp_size": 4, "ep_size": 2}, phase)
            for family in HF_MOE_CAPTURED for phase in ("both", "inference")),
          *((family, "ep2xfsdp2", {"fsdp_size": 2, "ep_size": 2}, "inference") for family in ("qwen3_moe", "mixtral")),
          *((family, "ep2xtp2", {"tp_size": 2, "ep_size": 2}, phase)
            for family in ("qwen3_moe", "mixtral", "deepseek_v3") for phase in ("both", "inference")),
          ("qwen3_moe", "ep4xtp4", {"tp_size": 4, "ep_size": 4}, "both"),
          ("qwen3_moe", "ep2xtp2_all_reduce", {"tp_size": 2, "ep_size": 2, "ep_implementation": "all_reduce"}, "both"),
          ("qwen3_moe", "ep2xtp2_all_to_all", {"tp_size": 2, "ep_size": 2, "ep_implementation": "all_to_all"},
           "inference"),
          *((family, "ep4xtp2xfsdp2", {"tp_size": 2, "fsdp_size": 2, "ep_size": 4}, phase)
            for family in ("qwen3_moe", "mixtral") for phase in ("both", "inference")),
          ("qwen3_moe", "ep4xtp2xfsdp4", {"tp_size": 2, "fsdp_size": 4, "ep_size": 4}, "both")]],
    # transformers' mixture-of-experts families under FSDP2 (every decoder layer, then the root): their
    # experts' grouped matmuls (exported as transformers::grouped_mm_fallback, run as _grouped_mm),
    # routers (top-k, Mixtral's in-place normalisation, DeepSeek-V3's group-limited top-k), shared
    # experts (Qwen2-MoE, DeepSeek-V3) and DeepSeek-V3's multi-head latent attention
    *[Config(f"hf_{family}-fsdp-dp{dp}-both", f"examples.hf:hf_model(family={family!r})",
             H + f"hf_fsdp(family={family!r}, dp={dp})", "both", ci=(family, dp) == ("qwen3_moe", 2))
      for family, dp in (("qwen3_moe", 2), ("qwen3_moe", 4), ("qwen2_moe", 2), ("mixtral", 2), ("olmoe", 2),
                         ("granitemoe", 2), ("deepseek_v3", 2))],
    # torchtitan 0.2.2 as users run it: its Llama 3 parallelized by its own parallelize_llama
    # (TP+SP, loss parallel, tok_embeddings / blocks / [norm, output] / root FSDP2 units with
    # gradient division off, full AC and both selective policies, bf16), and its dense Qwen3 by
    # parallelize_qwen3 under FSDP (under TP its DTensor attention does not run on CPU) as is its
    # Qwen3-MoE, one step
    # of its forward_backward_step measured natively (examples.titan), predicted from the
    # captured plan
    *[Config(f"titan_{model}-{name}-both", T + f"titan_model(name={model!r})",
             T + f"titan_captured(name={model!r}, {settings})", "both", ci=ci,
             measure=T + f"measure_titan(name={model!r}, {settings})")
      for model, name, settings, ci in (
          ("llama3", "tp_sp-tp4", "tp=4", False),
          ("llama3", "tp-tp4-no_loss_parallel", "tp=4, loss_parallel=False", False),
          ("llama3", "fsdp-dp4", "dp_shard=4", False),
          ("llama3", "fsdp_tp_sp-dp2xtp2", "tp=2, dp_shard=2", True),
          ("llama3", "hsdp_tp_sp-2x2x2", "tp=2, dp_shard=2, dp_replicate=2", False),
          ("llama3", "fsdp_tp_sp-dp2xtp4", "tp=4, dp_shard=2", False),
          ("llama3", "fsdp_tp_sp-dp2xtp2-full_ac", "tp=2, dp_shard=2, ac='full'", False),
          ("llama3", "fsdp_tp_sp-dp2xtp2-sac_op", "tp=2, dp_shard=2, ac='selective', sac_option='op'", True),
          ("llama3", "fsdp_tp_sp-dp2xtp2-sac_layer2", "tp=2, dp_shard=2, ac='selective', sac_option='2'", False),
          ("llama3", "fsdp_tp_sp-dp2xtp2-bf16", "tp=2, dp_shard=2, mixed_precision_param='bfloat16'", False),
          ("llama3", "fsdp_tp_sp-dp2xtp2-bf16-sac_op",
           "tp=2, dp_shard=2, mixed_precision_param='bfloat16', ac='selective', sac_option='op'", False),
          ("qwen3", "fsdp-dp4", "dp_shard=4", False),
          ("qwen3", "hsdp-2x2", "dp_shard=2, dp_replicate=2", False),
          ("qwen3", "fsdp-dp4-full_ac", "dp_shard=4, ac='full'", False),
          ("qwen3", "fsdp-dp4-sac_op", "dp_shard=4, ac='selective', sac_option='op'", True),
          # Qwen3-MoE: torchtitan's MoE layers (router top-k, histc, argsort, index gathers and
          # puts, grouped matmuls) under FSDP / HSDP / AC, no expert parallel
          ("qwen3_moe", "fsdp-dp2", "dp_shard=2", False),
          ("qwen3_moe", "fsdp-dp4", "dp_shard=4", True),
          ("qwen3_moe", "hsdp-2x2", "dp_shard=2, dp_replicate=2", False),
          ("qwen3_moe", "fsdp-dp4-full_ac", "dp_shard=4, ac='full'", False),
          ("qwen3_moe", "fsdp-dp4-sac_layer2", "dp_shard=4, ac='selective', sac_option='2'", False),
          # expert parallel (torchtitan's ExpertParallel on the experts, which FSDP shards on
          # their own mesh), ep borrowing all of dp_shard: token dispatch and combine all-to-alls
          ("qwen3_moe", "fsdp_ep-dp2xep2", "dp_shard=2, ep=2", True),
          ("qwen3_moe", "fsdp_ep-dp4xep4", "dp_shard=4, ep=4", False),
          ("qwen3_moe", "hsdp_ep-2x2xep2", "dp_shard=2, dp_replicate=2, ep=2", False),
          ("qwen3_moe", "fsdp_ep-dp2xep2-full_ac", "dp_shard=2, ep=2, ac='full'", False),
          # ep taking part of dp_shard: the dense units on fsdp, flattened from (efsdp, ep), the
          # experts' units on efsdp (at dp_shard 8 CommDebugMode's run fails on the fake process
          # group: "alltoall_base: inputBuffer is empty but outputSplitSizes[1] > 0")
          ("qwen3_moe", "fsdp_ep-dp4xep2", "dp_shard=4, ep=2", True),
          ("qwen3_moe", "hsdp_ep-2x4xep2", "dp_shard=4, dp_replicate=2, ep=2", False),
          ("qwen3_moe", "fsdp_ep-dp4xep2-full_ac", "dp_shard=4, ep=2, ac='full'", False),
          ("qwen3_moe", "fsdp_ep-dp4xep2-bf16", "dp_shard=4, ep=2, mixed_precision_param='bfloat16'", False),
          # torchtitan's per-op SAC, which forces the router gates' mms to recompute
          ("qwen3_moe", "fsdp-dp4-sac_op", "dp_shard=4, ac='selective', sac_option='op'", False),
          # torchtitan's DeepSeek-V3 (multi-head latent attention, complex RoPE, a dense first
          # block, MoE blocks with a shared expert) by its parallelize_deepseekv3: FSDP, HSDP, TP+SP
          # (its attention runs on CPU under TP), expert parallel on dp_shard, on part of it and
          # borrowing the tp ranks, AC
          ("deepseek_v3", "fsdp-dp2", "dp_shard=2", False),
          ("deepseek_v3", "fsdp-dp4-full_ac", "dp_shard=4, ac='full'", False),
          ("deepseek_v3", "tp_sp-tp2", "tp=2", False),
          ("deepseek_v3", "tp_sp-tp4", "tp=4", False),
          ("deepseek_v3", "fsdp_tp_sp-dp2xtp2", "tp=2, dp_shard=2", True),
          ("deepseek_v3", "fsdp_tp_sp-dp2xtp2-sac_op", "tp=2, dp_shard=2, ac='selective', sac_option='op'", False),
          ("deepseek_v3", "fsdp_ep-dp2xep2", "dp_shard=2, ep=2", False),
          ("deepseek_v3", "fsdp_ep-dp4xep2", "dp_shard=4, ep=2", False),
          ("deepseek_v3", "fsdp_ep-dp4xep4", "dp_shard=4, ep=4", False),
          ("deepseek_v3", "hsdp_ep-2x2xep2", "dp_shard=2, dp_replicate=2, ep=2", False),
          ("deepseek_v3", "fsdp_ep-dp2xep2-full_ac", "dp_shard=2, ep=2, ac='full'", False),
          ("deepseek_v3", "fsdp_ep_tp_sp-dp2xtp2xep2", "tp=2, dp_shard=2, ep=2", False),
          # ep borrowing all of dp_shard and tp (etp 1): the experts on mesh["ep"], flattened from
          # fsdp x tp, beside the dense TP on mesh["tp"] (DTensors on two meshes)
          ("deepseek_v3", "fsdp_ep_tp_sp-dp2xtp2xep4", "tp=2, dp_shard=2, ep=4", True),
          # expert tensor parallel (etp = tp): ExpertTensorParallel on the experts' 2-D [ep, etp]
          # mesh, ep on dp_shard's ranks and etp on tp's (the routed tokens' gradient all-reduced
          # over etp, the all-to-alls over ep)
          ("deepseek_v3", "fsdp_etp_tp_sp-dp2xtp2xep2xetp2", "tp=2, dp_shard=2, ep=2, etp=2", True))],
    # MoE tensor parallel as torchtitan's apply_moe_ep_tp applies it with a tp mesh alone (the MoE
    # input all-gathered and output reduce-scattered, NoParallel router gate, TensorParallel
    # experts), on token embeddings and MoE layers (Qwen3-MoE's DTensor attention has no CPU
    # strategy under TP), and under torchtitan's apply_fsdp and apply_ac (whose recomputation
    # CommDebugMode charges to the module entered last: the MoE output hook's to the experts)
    *[Config(f"titan_moe_stack-{name}-both", T + "moe_stack()", T + f"moe_stack_captured({settings})",
             "both", ci=ci, measure=T + f"measure_moe_stack({settings})")
      for name, settings, ci in (("tp_captured-tp2", "tp=2", False), ("tp_captured-tp4", "tp=4", False),
                                 ("fsdp_tp_captured-dp2xtp2", "tp=2, dp_shard=2", True),
                                 ("fsdp_tp_captured-dp2xtp2-full_ac", "tp=2, dp_shard=2, ac='full'", False),
                                 # expert parallel borrowing the tp ranks (ReordererSequenceParallel
                                 # splits the tokens, ExpertParallel dispatches each rank's slice)
                                 ("ep_tp_captured-tp2xep2", "tp=2, ep=2", True),
                                 ("ep_tp_captured-tp4xep4", "tp=4, ep=4", False),
                                 ("fsdp_ep_tp_captured-dp2xtp2xep2", "tp=2, ep=2, dp_shard=2", False),
                                 ("fsdp_ep_tp_captured-dp2xtp2xep2-full_ac", "tp=2, ep=2, dp_shard=2, ac='full'",
                                  False))],
    # FSDP2 (fully_shard on every block, then the root), HSDP, and FSDP2 / HSDP x TP
    Config("stacked_mlp-fsdp-dp8-both", STACKED, P + "stacked_mlp_fsdp(dp=8)", "both", ci=True),
    Config("stacked_mlp-fsdp-dp8-grad-backward", STACKED, P + "stacked_mlp_fsdp(dp=8, input_requires_grad=True)",
           "backward"),
    Config("stacked_mlp-fsdp-dp4-frozen_layer1-both", STACKED,
           P + "stacked_mlp_fsdp(dp=4, frozen=('layers.1.*',))", "both"),
    Config("stacked_mlp-fsdp_tp_nested-dp2xtp2-grad-both", STACKED, P + "stacked_mlp_fsdp_tp_nested(dp=2, tp=2)",
           "both"),
    Config("gpt2-fsdp-dp8-both", GPT2, P + "gpt2_fsdp(dp=8)", "both", ci=True),
    Config("gpt2-fsdp-dp8-no_reshard-both", GPT2, P + "gpt2_fsdp(dp=8, reshard_after_forward=False)", "both"),
    Config("gpt2-fsdp-dp8-reshard2-both", GPT2, P + "gpt2_fsdp(dp=8, reshard_after_forward=2)", "both"),
    Config("gpt2-fsdp-dp8-bf16-both", GPT2, P + "gpt2_fsdp(dp=8, mixed_precision='bf16')", "both"),
    Config("gpt2-hsdp-2x4-both", GPT2, P + "gpt2_hsdp(replicate=2, shard=4)", "both", ci=True),
    Config("gpt2-fsdp_tp-dp2xtp4-both", GPT2, P + "gpt2_fsdp_tp(dp=2, tp=4)", "both"),
    Config("gpt2-fsdp_tp_sp-dp2xtp4-both", GPT2, P + "gpt2_fsdp_tp(dp=2, tp=4, sp=True)", "both", ci=True),
    Config("gpt2-fsdp_tp_sp-dp2xtp4-bf16-both", GPT2,
           P + "gpt2_fsdp_tp(dp=2, tp=4, sp=True, mixed_precision='bf16')", "both"),
    Config("gpt2_sdpa-fsdp_tp_sp_loss_parallel-dp2xtp2-both", GPT2_SDPA,
           P + "gpt2_fsdp_tp(dp=2, tp=2, sp=True, loss_parallel=True)", "both"),
    Config("llama-fsdp_tp_sp-dp2xtp4-both", LLAMA, P + "llama_fsdp_tp(dp=2, tp=4)", "both", ci=True),
    Config("llama-fsdp_tp-dp2xtp4-both", LLAMA, P + "llama_fsdp_tp(dp=2, tp=4, sp=False)", "both"),
    # the ends of a dp x tp sweep (commlens rank): a mesh dim of one rank moves nothing
    Config("llama-fsdp_tp_sp-dp1xtp8-both", LLAMA, P + "llama_fsdp_tp(dp=1, tp=8)", "both"),
    Config("llama-fsdp_tp_sp-dp8xtp1-both", LLAMA, P + "llama_fsdp_tp(dp=8, tp=1)", "both"),
    Config("llama-fsdp_tp_sp-dp4xtp2-reshard_false-both", LLAMA,
           P + "llama_fsdp_tp(dp=4, tp=2, reshard_after_forward=False)", "both"),
    Config("stacked_mlp-fsdp-dp8-reshard4-backward", STACKED, P + "stacked_mlp_fsdp(dp=8, reshard_after_forward=4)",
           "backward"),
    Config("llama-fsdp_tp_sp-dp2xtp4-bf16-both", LLAMA, P + "llama_fsdp_tp(dp=2, tp=4, mixed_precision='bf16')",
           "both"),
    Config("llama-fsdp_tp_sp-dp2xtp4-frozen_norms-both", LLAMA, P + "llama_fsdp_tp(dp=2, tp=4, frozen=('*norm*',))",
           "both"),
    Config("llama-fsdp_tp_sp-dp2xtp4-frozen_after_norms-both", LLAMA,
           P + "llama_fsdp_tp(dp=2, tp=4, frozen_after=('*norm*',))", "both", ci=True),
    Config("llama-tp_sp-tp4-frozen_after_attention-backward", LLAMA,
           P + "llama_tp(tp=4, frozen_after=('layers.*.attention.*',))", "backward"),
    Config("llama-fsdp_tp_sp-dp2xtp4-frozen_attention-both", LLAMA,
           P + "llama_fsdp_tp(dp=2, tp=4, frozen=('layers.*.attention.*',))", "both"),
    Config("llama-hsdp_tp_sp-2x2x2-both", LLAMA, P + "llama_hsdp_tp(replicate=2, shard=2, tp=2)", "both", ci=True),
    Config("llama-hsdp_tp-2x2x2-forward", LLAMA, P + "llama_hsdp_tp(replicate=2, shard=2, tp=2, sp=False)",
           "forward"),
    Config("gpt2-fsdp-dp8-explicit_prefetch-4layers-both", GPT2 + "(n_layers=4)",
           P + "gpt2_fsdp(dp=8, prefetch='explicit', n_layers=4)", "both"),
    Config("llama-fsdp_tp_sp-dp2xtp4-explicit_prefetch-both", LLAMA,
           P + "llama_fsdp_tp(dp=2, tp=4, prefetch='explicit')", "both", ci=True),
    # torchtitan's complex RoPE (view_as_complex, complex mul, view_as_real), both phases
    Config("llama_complex_rope-tp_sp-tp4-both", LLAMA_COMPLEX_ROPE, P + "llama_tp(tp=4)", "both", ci=True),
    Config("llama_complex_rope-fsdp_tp_sp-dp2xtp4-ac_no_early_stop-both", LLAMA_COMPLEX_ROPE,
           P + "with_ac(plan='llama_fsdp_tp', dp=2, tp=4, early_stop=False, embedding_unit=True)", "both"),
    # units with no common root (each a root of its own: no reshard after forward, no prefetch
    # across roots), and torchtitan's vocab-parallel tok_embeddings as its own unit
    Config("stacked_mlp-fsdp_roots-dp4-both", STACKED, P + "stacked_mlp_fsdp_roots(dp=4)", "both", ci=True),
    Config("stacked_mlp-fsdp_linear_roots-dp4-grad-both", STACKED,
           P + "stacked_mlp_fsdp_roots(dp=4, units=('layers.*.w1', 'layers.*.w2'), input_requires_grad=True)", "both"),
    Config("llama-fsdp_tp_sp-dp2xtp4-embedding_unit-both", LLAMA, P + "llama_fsdp_tp(dp=2, tp=4, embedding_unit=True)",
           "both", ci=True),
    Config("llama-fsdp_tp-dp2xtp2-embedding_unit-both", LLAMA,
           P + "llama_fsdp_tp(dp=2, tp=2, sp=False, embedding_unit=True)", "both"),
    Config("llama-fsdp_tp_sp-dp2xtp4-bf16-loss_parallel-both", LLAMA,
           P + "llama_fsdp_tp(dp=2, tp=4, mixed_precision='bf16', loss_parallel=True)", "both"),
    # Activation checkpointing (non-reentrant, early stop): checkpoint_wrapper per block, sub-blocks,
    # under FSDP2 (units on the wrappers, and a unit inside a wrapped block), and the model's own
    # checkpointing (Hugging Face gradient_checkpointing_enable)
    Config("llama-tp_sp-tp4-ac-both", LLAMA, P + "with_ac(plan='llama_tp', tp=4)", "both", ci=True),
    Config("llama-tp-tp4-ac-both", LLAMA, P + "with_ac(plan='llama_tp', tp=4, sp=False)", "both"),
    Config("llama-tp_sp-tp4-ac_attention_ffn-backward", LLAMA,
           P + "with_ac(plan='llama_tp', tp=4, ac=('layers.*.attention', 'layers.*.feed_forward'))", "backward"),
    Config("gpt2-tp_sp-tp4-ac-both", GPT2, P + "with_ac(plan='gpt2_tp_sp', tp=4)", "both"),
    Config("gpt2-fsdp-dp4-ac-both", GPT2, P + "with_ac(plan='gpt2_fsdp', dp=4)", "both"),
    Config("llama-fsdp_tp_sp-dp2xtp4-ac-both", LLAMA, P + "with_ac(plan='llama_fsdp_tp', dp=2, tp=4)", "both",
           ci=True),
    Config("llama-fsdp_tp_sp-dp2xtp4-ac_no_early_stop-both", LLAMA,
           P + "with_ac(plan='llama_fsdp_tp', dp=2, tp=4, early_stop=False)", "both", ci=True),
    Config("llama-tp-tp4-ac_no_early_stop-both", LLAMA, P + "with_ac(plan='llama_tp', tp=4, sp=False, early_stop=False)",
           "both"),
    Config("stacked_mlp-fsdp_tp_nested-dp2xtp2-ac-both", STACKED, P + "stacked_mlp_fsdp_tp_nested_ac(dp=2, tp=2)",
           "both"),
    Config("llama-tp_sp-tp4-sac_mm_sdpa_rs-both", LLAMA,
           P + "with_ac(plan='llama_tp', tp=4, save_ops=('aten.mm.default', "
           "'aten._scaled_dot_product_flash_attention_for_cpu.default', "
           "'_c10d_functional.reduce_scatter_tensor.default'))", "both"),
    Config("llama-fsdp_tp_sp-dp2xtp4-sac_ag-both", LLAMA,
           P + "with_ac(plan='llama_fsdp_tp', dp=2, tp=4, save_ops=('_c10d_functional.all_gather_into_tensor.default',))",
           "both"),
    Config("hf_llama_gc-tp-tp4-both", HF_LLAMA + "(gradient_checkpointing=True)",
           H + "hf_tp(family='llama', tp=4, gradient_checkpointing=True)", "both", ci=True),
    Config("hf_qwen2_gc-fsdp_tp-dp2xtp2-both", HF_QWEN2 + "(gradient_checkpointing=True)",
           H + "hf_tp(family='qwen2', tp=2, dp=2, fsdp=True, gradient_checkpointing=True)", "both"),
    # Explicit DTensor placements on both dims of a 2-D mesh (no parallel style)
    Config("mlp-nd_placements-dp2xtp4-both", MLP, P + "mlp_nd(dp=2, tp=4)", "both", ci=True),
    Config("mlp_b4-nd_placements-dp4xtp2-both", MLP + "(batch=4)", P + "mlp_nd(dp=4, tp=2)", "both"),
    # Forward phase of every plan family (issue 4: every forward config exact).
    Config("linear-colwise-tp4-forward", "examples.mlp:linear", P + "linear_colwise(tp=4)", "forward",
           no_collectives=True),
    Config("stacked_mlp-tp-tp8-forward", STACKED, P + "stacked_mlp_tp(tp=8)", "forward"),
    Config("gpt2-tp_sp-tp4-forward", GPT2, P + "gpt2_tp_sp(tp=4)", "forward", ci=True),
    Config("gpt2-tp_sp-dp2xtp2-forward", GPT2, P + "gpt2_tp_sp(tp=2, dp=2)", "forward"),
    Config("gpt2-tp_loss_parallel-tp4-forward", GPT2, P + "gpt2_tp_loss_parallel(tp=4)", "forward"),
    Config("gpt2-tp_sp-tp4-cuda-forward", GPT2, P + "gpt2_tp_sp(tp=4, device_type='cuda')", "forward"),
    Config("gpt2_sdpa-tp-tp4-forward", GPT2_SDPA, P + "gpt2_tp(tp=4)", "forward"),
    # cuda plans: SDPA lowered to the CUDA kernel an H100 runs (efficient attention for fp32); the
    # kernel sees local tensors here, so the meta-device measurement is the truth.
    Config("gpt2_sdpa-tp_sp-tp4-cuda-both", GPT2_SDPA, P + "gpt2_tp_sp(tp=4, device_type='cuda')", "both"),
    Config("llama-tp_sp-tp4-cuda-both", LLAMA, P + "llama_tp(tp=4, device_type='cuda')", "both"),
    # bf16 (on an H100: flash attention, or cuDNN attention from cuDNN 9.15.1 on), dropout, head dim
    # 128 (sdpa_kernels.py checks the kernel on a GPU); a 2-D mesh and loss parallel on cuda plans
    Config("gpt2_sdpa_bf16-tp_sp-tp4-cuda-both", "examples.gpt2:gpt2(attn='sdpa', dtype='bfloat16')",
           P + "gpt2_tp_sp(tp=4, device_type='cuda')", "both"),
    Config("llama_bf16-tp_sp-tp4-cuda-both", LLAMA + "(dtype='bfloat16')", P + "llama_tp(tp=4, device_type='cuda')",
           "both"),
    Config("gpt2_sdpa_bf16_dropout-tp_sp-tp4-cuda-both", "examples.gpt2:gpt2(attn='sdpa', dtype='bfloat16', dropout=0.1)",
           P + "gpt2_tp_sp(tp=4, device_type='cuda')", "both"),
    Config("llama_bf16_hd128-tp_sp-tp4-cuda-both", LLAMA + "(dtype='bfloat16', dim=1024, n_heads=8, n_kv_heads=4)",
           P + "llama_tp(tp=4, device_type='cuda')", "both"),
    Config("llama-tp_sp-dp2xtp2-cuda-both", LLAMA, P + "llama_2d(dp=2, tp=2, device_type='cuda')", "both"),
    Config("gpt2_sdpa-tp_loss_parallel-tp4-cuda-both", GPT2_SDPA,
           P + "gpt2_tp_loss_parallel(tp=4, device_type='cuda')", "both"),
    # FSDP2 x TP on a cuda mesh, fp32 and bf16 mixed precision: the GPU column alone
    Config("gpt2_sdpa-fsdp_tp_sp-dp2xtp4-cuda-both", GPT2_SDPA,
           P + "gpt2_fsdp_tp(dp=2, tp=4, sp=True, device_type='cuda')", "both", gpu_only=True),
    Config("llama-fsdp_tp_sp-dp2xtp4-bf16-cuda-both", LLAMA,
           P + "llama_fsdp_tp(dp=2, tp=4, mixed_precision='bf16', device_type='cuda')", "both", gpu_only=True),
    Config("gpt2-fsdp-dp8-bf16-cuda-both", GPT2, P + "gpt2_fsdp(dp=8, mixed_precision='bf16', device_type='cuda')",
           "both", gpu_only=True),
    Config("gpt2_sdpa-tp_sp-tp8-forward", GPT2_SDPA, P + "gpt2_tp_sp(tp=8)", "forward"),
    Config("llama-tp-tp8-forward", LLAMA, P + "llama_tp(tp=8, sp=False)", "forward"),
    Config("llama-tp_sp_loss_parallel-tp4-forward", LLAMA, P + "llama_tp(tp=4, loss_parallel=True)", "forward"),
    Config("llama-tp_sp-dp2xtp2-forward", LLAMA, P + "llama_2d(dp=2, tp=2)", "forward", ci=True),
    # Inference: model.eval() under torch.no_grad() (no loss, no backward), the program exported in
    # eval mode; torch's styles, FSDP2 (HSDP, mixed precision) and activation checkpointing
    Config("mlp-tp-tp4-inference", MLP, P + "mlp_tp(tp=4)", "inference", ci=True),
    Config("gpt2-tp_sp-tp4-inference", GPT2, P + "gpt2_tp_sp(tp=4)", "inference", ci=True),
    Config("gpt2-tp_loss_parallel-tp4-inference", GPT2, P + "gpt2_tp_loss_parallel(tp=4)", "inference"),
    Config("gpt2_sdpa-tp-tp4-cuda-inference", GPT2_SDPA, P + "gpt2_tp(tp=4, device_type='cuda')", "inference"),
    Config("llama-tp_sp-tp4-inference", LLAMA, P + "llama_tp(tp=4)", "inference"),
    Config("llama-fsdp_tp_sp-dp2xtp2-inference", LLAMA, P + "llama_fsdp_tp(dp=2, tp=2)", "inference", ci=True),
    Config("llama-fsdp_tp_sp_ac-dp2xtp2-inference", LLAMA, P + "with_ac(plan='llama_fsdp_tp', dp=2, tp=2)",
           "inference"),
    Config("gpt2-hsdp-r2xs2-bf16-inference", GPT2, P + "gpt2_hsdp(replicate=2, shard=2, mixed_precision='bf16')",
           "inference"),
    Config("stacked_mlp-fsdp-dp8-inference", STACKED, P + "stacked_mlp_fsdp(dp=8)", "inference"),
    Config("gated-tp-tp4-inference", GATED, P + "gated_tp(tp=4)", "inference"),
    Config("hf_llama-tp-tp4-inference", HF_LLAMA, H + "hf_tp(family='llama', tp=4)", "inference"),
    Config("hf_qwen2-fsdp_tp-dp2xtp2-inference", HF_QWEN2, H + "hf_tp(family='qwen2', tp=2, dp=2, fsdp=True)",
           "inference"),
]


def select(subset, only=None):
    configs = [c for c in CONFIGS if subset == "full" or c.ci]
    if only:
        configs = [c for c in configs if re.search(only, c.name)]
    return configs


# ------------------------------------------------------------------------------------------
# caches


# the commlens.plan package, which writes and reads plans
# what the plan factories run: the plan package with its styles, and the capture of captured plans
_PLAN_SOURCES = sorted([*(ROOT / "python/commlens/plan").rglob("*.py"), ROOT / "python/commlens/capture.py",
                        ROOT / "python/commlens/_transformers.py"])


def _sources_digest(paths):
    h = hashlib.sha256()
    for p in paths:
        h.update(str(p.relative_to(ROOT)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _slug(spec):
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", spec).strip("_")[:80]


def _cache_path(directory, spec, digest, suffix):
    key = hashlib.sha256((spec + "\0" + digest).encode()).hexdigest()[:12]
    return directory / f"{_slug(spec)}-{key}{suffix}"


def _export_versions():
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__}


def _model_digest(work):
    """The cache key of exported models: the sources and the versions that export them (the plan
    package: a mixed-precision plan's model is exported under its plan). Under --reuse-exports the versions
    are those recorded in the work dir (models/versions.json) by the machine that exported, so a
    GPU machine with another torch measures against those programs."""
    files = (sorted((ROOT / "examples").glob("*.py")) + _PLAN_SOURCES
             + [ROOT / f"python/commlens/{name}.py" for name in ("export", "_export_shortcuts", "_module_calls",
                                                                   "_factory")])
    record = work / "models" / "versions.json"
    versions = (json.loads(record.read_text()) if os.environ.get(REUSE_EXPORTS_ENV) and record.exists()
                else _export_versions())
    return _sources_digest(files) + versions["torch"] + versions["transformers"]


def _plan_digest():
    """The cache key of serialised plans: their sources and the versions whose ParallelStyle
    objects (torch) and shipped TP plans (transformers) they are read from."""
    files = [ROOT / "examples/plans.py", ROOT / "examples/hf.py", ROOT / "examples/titan.py"] + _PLAN_SOURCES
    versions = _export_versions()
    return _sources_digest(files) + versions["torch"] + versions["transformers"]


def _write_atomic(path, write):
    tmp = path.with_name(f".tmp{os.getpid()}-{path.name}")  # keeps the suffix (torch.export.save wants .pt2)
    write(tmp)
    os.replace(tmp, path)


def mixed_precision_key(plan_spec):
    """The FSDP mixed-precision dtypes a plan runs its model in, as a cache key ("" when none):
    such a plan's model is exported under them (commlens.export --plan), as a user does to get the
    bytes of a bf16 run's DTensor collectives."""
    from commlens.plan import resolve_plan

    units = resolve_plan(plan_spec).fully_shard
    if not any(u.mp_policy.param_dtype or u.mp_policy.output_dtype for u in units):
        return ""
    return ";".join(f"{u.fqn}:{u.mp_policy.param_dtype}:{u.mp_policy.output_dtype}:{u.mp_policy.cast_forward_inputs}"
                    for u in units)


def ensure_export(spec, work, plan_spec=None, frontend="export", eval_mode=False):
    """Cached torch.export of a model factory spec, under ``plan_spec``'s FSDP mixed precision
    when it has one, or its TorchScript archive (``frontend`` "trace" / "script"); in eval mode
    (``model.eval()``, as ``commlens.export --eval``) for an inference configuration. Returns the path."""
    mp_key = mixed_precision_key(plan_spec) if plan_spec and frontend == "export" else ""
    suffix = ".pt2" if frontend == "export" else f".{frontend}.pt"
    path = _cache_path(work / "models", spec, _model_digest(work) + mp_key + (":eval" if eval_mode else ""), suffix)
    if path.exists():
        return path
    if os.environ.get(REUSE_EXPORTS_ENV):
        raise FileNotFoundError(f"{path}: not exported (--reuse-exports exports nothing)")

    from commlens._factory import call_model_factory
    from commlens.export import export_model, save_program, save_torchscript
    from commlens.plan import resolve_plan

    path.parent.mkdir(parents=True, exist_ok=True)
    made = call_model_factory(spec)
    model, args = made[0], made[1]
    kwargs = made[2] if len(made) > 2 else None
    if eval_mode:
        model.eval()
    if frontend != "export":
        _write_atomic(path, lambda tmp: save_torchscript(model, args, tmp, frontend))
        return path
    ep = export_model(model, args, kwargs, resolve_plan(plan_spec) if mp_key else None)
    _write_atomic(path, lambda tmp: save_program(ep, str(tmp)))
    return path


def ensure_plan(spec, work):
    """Cached commlens-plan JSON of a plan factory spec; returns its path."""
    path = _cache_path(work / "plans", spec, _plan_digest(), ".json")
    if path.exists():
        return path
    from commlens.plan import dumps, resolve_plan

    path.parent.mkdir(parents=True, exist_ok=True)
    text = dumps(resolve_plan(spec), source=spec)
    _write_atomic(path, lambda tmp: tmp.write_text(text))
    return path


# ------------------------------------------------------------------------------------------
# one configuration


def _phases(phase):
    """The sections of a counts document a phase fills (an inference forward's are "forward")."""
    return {"both": ["forward", "backward"], "inference": ["forward"]}.get(phase, [phase])


def _measured_cells(doc, phase):
    """Non-zero cells and total collectives (Global) of a commlens-counts document."""
    cells = 0
    total = 0
    for m in doc["modules"]:
        for p in _phases(phase):
            cells += sum(1 for n in m[p].values() if n)
    glob = next((m for m in doc["modules"] if m["fqn"] == "Global"), None)
    if glob is not None:
        total = sum(sum(glob[p].values()) for p in _phases(phase))
    return cells, total


def _error_line(stderr):
    lines = [line for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("commlens: error:"):
            return line
    return lines[-1] if lines else "(no output)"


def gpu_target_args(device):
    """``commlens predict`` options naming the GPU a counts file's ``device`` ran on."""
    args = ["--gpu-arch", device["compute_capability"]]
    if device.get("cudnn_version"):
        args += ["--cudnn-version", str(device["cudnn_version"])]
    if device.get("cuda_version"):
        args += ["--cuda-version", device["cuda_version"]]
    if device.get("torch_version"):
        args += ["--torch-version", device["torch_version"]]
    return args


def _measure_predict_compare(cfg, work, commlens, model_path, plan_path, r, *, suffix="", device=None):
    """Measure (fake process group; ``device`` as measure's), predict and compare into ``r``."""
    measured_path = work / "measured" / f"{cfg.name}{suffix}.counts.json"
    measured_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        from commlens._factory import resolve
        from commlens.measure import measure

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if cfg.measure:
                native, kwargs = resolve(cfg.measure)
                doc = native(phase=cfg.phase, **kwargs)
            else:
                doc = measure(cfg.model, str(plan_path), backend="fake", phase=cfg.phase, device=device,
                              return_document=True)
        doc.pop("rank", None)
        measured_path.write_text(json.dumps(doc, indent=1) + "\n")
    except Exception as err:  # noqa: BLE001
        r.update(status="measure error", error=f"{type(err).__name__}: {err}".splitlines()[0],
                 traceback=traceback.format_exc())
        return r
    cells, total = _measured_cells(doc, cfg.phase)
    r.update(measured=total, cells=cells, measured_file=str(measured_path), device=doc["device"])

    predicted_path = work / "predicted" / f"{cfg.name}{suffix}.json"
    predicted_path.parent.mkdir(parents=True, exist_ok=True)
    if predicted_path.exists():
        predicted_path.unlink()
    target = gpu_target_args(doc["device"]) if doc["device"]["type"] == "cuda" else []
    # The corpus' own TorchScript archives (saved here from the example models) are read on request.
    torchscript = ["--torchscript"] if cfg.frontend != "export" else []
    p = subprocess.run([commlens, "predict", str(model_path), "--plan", str(plan_path), "--phase", cfg.phase,
                        "--format", "json", "-o", str(predicted_path), *target, *torchscript],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        line = _error_line(p.stderr)
        if "unknown command" in p.stderr:
            r.update(status="no prediction")
        elif p.returncode == 2 and line.startswith("commlens: error:"):
            r.update(status="predict error", error=line)
        else:
            r.update(status="predict crashed", error=f"exit {p.returncode}: {line}")
        return r

    c = subprocess.run([commlens, "compare", str(predicted_path), str(measured_path), "--phase", cfg.phase,
                        "--json"], capture_output=True, text=True, timeout=600)
    if c.returncode not in (0, 1):
        r.update(status="compare error", error=_error_line(c.stderr))
        return r
    cmp = json.loads(c.stdout)
    summary = cmp["summary"]
    r.update(predicted=summary["predicted_collectives"], cells=summary["cells"],
             differ_cells=summary["differ"], exact_cells=summary["cells"] - summary["differ"],
             approximate_cells=summary["approximate"], bytes_cells=summary.get("bytes_compared", 0),
             routed_bytes_cells=sum(1 for cell in cmp["cells"]
                                    if "predicted_bytes_bounds" in cell and "measured_bytes" in cell),
             predicted_file=str(predicted_path),
             status="exact" if c.returncode == 0 else "DIFF",
             diffs=[cell for cell in cmp["cells"] if not cell["match"]])
    return r


def _empty_result(**fields):
    return {"status": None, "measured": None, "predicted": None, "cells": 0, "exact_cells": 0,
            "differ_cells": 0, "error": None, **fields}


def no_gpu_reason():
    """Why the GPU column is skipped here, or None when a CUDA device is there."""
    import torch

    if torch.cuda.is_available():
        return None
    return f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False)"


def run_config(cfg, work, commlens):
    """Measure, predict and compare one configuration; returns a JSON-able result dict.

    A configuration whose plan has ``device_type="cuda"`` also gets a ``gpu`` result: measured
    with CUDA tensors on the GPU here (the real CUDA dispatch) and predicted for that GPU's compute
    capability, cuDNN and CUDA versions; without a GPU it is ``skipped``, never exact."""
    r = _empty_result(name=cfg.name, model=cfg.model, plan=cfg.plan, phase=cfg.phase,
                      no_collectives=cfg.no_collectives)
    t0 = time.time()
    try:
        plan_path = ensure_plan(cfg.plan, work)
        model_path = ensure_export(cfg.model, work, cfg.plan, cfg.frontend, cfg.phase == "inference")
    except Exception as err:  # noqa: BLE001 - reported per configuration
        r.update(status="export error", error=f"{type(err).__name__}: {err}".splitlines()[0])
        return r
    # Without a GPU, measure emulates a cuda plan on meta tensors: a truth for the collectives
    # DTensor issues when the CUDA kernels see local tensors, not for the CUDA dispatch itself.
    if cfg.gpu_only:
        r.update(status="gpu only")
    else:
        _measure_predict_compare(cfg, work, commlens, model_path, plan_path, r,
                                 device="meta" if _is_cuda_plan(plan_path) else None)
    if _is_cuda_plan(plan_path):
        reason = no_gpu_reason()
        if reason is not None:
            r["gpu"] = _empty_result(status="skipped", error=reason)
        else:
            r["gpu"] = _measure_predict_compare(cfg, work, commlens, model_path, plan_path, _empty_result(),
                                                suffix=".gpu", device="cuda")
    r["seconds"] = round(time.time() - t0, 2)
    return r


def _is_cuda_plan(plan_path):
    return json.loads(pathlib.Path(plan_path).read_text())["mesh"].get("device_type") == "cuda"


def format_line(r, width, name=None):
    predicted = "-" if r["predicted"] is None else str(r["predicted"])
    measured = "?" if r["measured"] is None else str(r["measured"])
    status = r["status"]
    if status == "DIFF":
        status = f"DIFF ({r['differ_cells']} cells)"
    elif status == "gpu only":
        status = "gpu only: fully_shard on a cuda mesh, measured in the GPU column alone"
    elif r["error"]:
        status = f"{status}: {r['error']}"
    name = r["name"] if name is None else name
    return f"{name:<{width}}  measured={measured:<4}  predicted={predicted:<4}  {status}"


def format_gpu_summary(results):
    """The GPU column's summary line (None when no configuration has a cuda plan)."""
    gpu = [r["gpu"] for r in results if "gpu" in r]
    if not gpu:
        return None
    ran = [g for g in gpu if g["status"] != "skipped"]
    if not ran:
        return f"gpu: skipped {len(gpu)} cuda-plan configs, not counted: {gpu[0]['error']}"
    devices = sorted({f"{g['device']['name']} (sm{g['device']['compute_capability'].replace('.', '')}, "
                      f"cuDNN {g['device'].get('cudnn_version')}, CUDA {g['device'].get('cuda_version')}"
                      + (f", torch {g['device']['torch_version']})" if g["device"].get("torch_version") else ")")
                      for g in ran if g.get("device")})
    exact = sum(1 for g in ran if g["status"] == "exact")
    return (f"gpu: exact {exact}/{len(ran)} configs, {sum(g['exact_cells'] for g in ran)}/"
            f"{sum(g['cells'] for g in ran)} cells on {', '.join(devices) or '?'}")


def strict_problem(r):
    """Why a configuration (or its GPU column) that is not a failure otherwise fails a strict run,
    or None: a predict error, or an exact line that checked nothing or not every cell's bytes."""
    if r["status"] == "predict error":
        return r["error"]
    if r["status"] != "exact":
        return None
    if r["cells"] == 0 and not r.get("no_collectives"):
        return "no cell measured or predicted"
    if r.get("bytes_cells", 0) < r["cells"]:
        return f"bytes compared on {r.get('bytes_cells', 0)}/{r['cells']} cells"
    return None


def is_failure(r, strict):
    if "gpu" in r and r["gpu"]["status"] != "skipped" and is_failure(r["gpu"], strict):
        return True
    if strict and strict_problem(r):
        return True
    return r["status"] not in ("exact", "no prediction", "gpu only", "predict error")


# ------------------------------------------------------------------------------------------
# driver


def _worker_init():
    warnings.simplefilter("ignore")


def _run_one(args):
    cfg, work, commlens = args
    return run_config(cfg, work, commlens)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="bench/accuracy/run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--subset", choices=("ci", "full"), default="full")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--only", metavar="REGEX", help="run only configurations whose name matches (re.search)")
    parser.add_argument("--work-dir", default=str(ROOT / "out" / "accuracy"))
    parser.add_argument("--commlens", default=None,
                        help="the commlens CLI (default: $COMMLENS_BUILD/commlens or build/commlens)")
    parser.add_argument("--no-strict", dest="strict", action="store_false",
                        help="do not fail on predict errors, configurations with no cell, or cells whose bytes "
                             "were not compared")
    parser.add_argument("--list", action="store_true", help="list the configurations and exit")
    parser.add_argument("--reuse-exports", action="store_true",
                        help="use the programs exported into the work dir by another machine (its torch and "
                             "transformers versions, recorded in models/versions.json) and export nothing: a "
                             "GPU machine with its own torch measuring against programs exported here")
    ns = parser.parse_args(argv)
    configs = select(ns.subset, ns.only)
    if ns.list:
        for c in configs:
            print(f"{c.name}  {c.model}  {c.plan}  {c.phase}")
        return 0
    if not configs:
        parser.error("no configuration selected")
    if ns.jobs < 1:
        parser.error("--jobs must be at least 1")
    commlens = ns.commlens or str(pathlib.Path(os.environ.get("COMMLENS_BUILD", ROOT / "build")) / "commlens")
    if not pathlib.Path(commlens).exists():
        print(f"commlens: error: {commlens}: not built (run scripts/setup.sh)", file=sys.stderr)
        return 2
    work = pathlib.Path(ns.work_dir).resolve()
    if ns.reuse_exports:
        os.environ[REUSE_EXPORTS_ENV] = "1"
    else:  # the versions this machine exports with, for a later --reuse-exports elsewhere
        (work / "models").mkdir(parents=True, exist_ok=True)
        _write_atomic(work / "models" / "versions.json",
                      lambda tmp: tmp.write_text(json.dumps(_export_versions()) + "\n"))
    work.mkdir(parents=True, exist_ok=True)

    width = max(len(c.name) for c in configs)
    tasks = [(c, work, commlens) for c in configs]
    results = []

    def report(r):
        results.append(r)
        print(format_line(r, width), flush=True)
        if "gpu" in r:
            g = r["gpu"]
            print(f"  gpu: skipped: {g['error']}" if g["status"] == "skipped"
                  else format_line(g, width, name="  gpu:"), flush=True)

    t0 = time.time()
    if ns.jobs == 1:
        warnings.simplefilter("ignore")
        for t in tasks:
            report(_run_one(t))
    else:
        import multiprocessing as mp

        # Exports first, once per model, so that workers do not race to write the same file.
        ctx = mp.get_context("spawn")
        with ctx.Pool(min(ns.jobs, len(tasks)), initializer=_worker_init) as pool:
            exports = sorted({(c.model, None if c.frontend != "export" else _mixed_precision_plan(c.plan), c.frontend,
                               c.phase == "inference") for c in configs}, key=lambda e: (e[0], e[1] or "", e[2], e[3]))
            pool.map(_export_only, [(m, p, f, e, work) for m, p, f, e in exports])
            for r in pool.imap(_run_one, tasks):
                report(r)

    cpu = [r for r in results if r["status"] != "gpu only"]  # the CPU corpus' summary counts these
    exact_configs = sum(1 for r in cpu if r["status"] == "exact")
    cells = sum(r["cells"] for r in cpu)
    exact_cells = sum(r["exact_cells"] for r in cpu)
    (work / "results.json").write_text(json.dumps(
        {"subset": ns.subset, "seconds": round(time.time() - t0, 1), "configs": results}, indent=1) + "\n")
    bytes_cells = sum(r.get("bytes_cells", 0) for r in results)
    routed = sum(r.get("routed_bytes_cells", 0) for r in results)
    print(f"bytes: compared on {bytes_cells}/{cells} cells (a byte mismatch makes a cell differ)"
          + (f"; {routed} of them depend on MoE routing: predicted under balanced top-k routing, exact when "
             "the measured bytes lie within the routing's bounds (no token to every token of the group sent "
             "to one rank)" if routed else ""))
    gpu_summary = format_gpu_summary(results)
    if gpu_summary:  # before the last line, which stays the CPU corpus' summary
        print(gpu_summary)
    print(f"exact: {exact_configs}/{len(cpu)} configs, {exact_cells}/{cells} cells")
    if ns.strict:
        for r in results:
            for name, x in ((r["name"], r), (r["name"] + " gpu", r.get("gpu"))):
                if x and x["status"] != "skipped" and strict_problem(x):
                    print(f"strict: {name}: {strict_problem(x)}", file=sys.stderr)
    return 1 if any(is_failure(r, ns.strict) for r in results) else 0


def _mixed_precision_plan(plan_spec):
    """The plan spec when its model is exported under it, else None (also for a plan that does
    not resolve: run_config reports that)."""
    try:
        return plan_spec if mixed_precision_key(plan_spec) else None
    except Exception:  # noqa: BLE001
        return None


def _export_only(args):
    spec, plan_spec, frontend, eval_mode, work = args
    try:
        ensure_export(spec, work, plan_spec, frontend, eval_mode)
    except Exception:  # noqa: BLE001 - reported again by run_config
        pass


if __name__ == "__main__":
    sys.exit(main())
