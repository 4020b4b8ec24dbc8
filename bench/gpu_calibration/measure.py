#!/usr/bin/env python3
"""Measure the real per-rank GPU memory of Megatron Core 0.19.2 training steps (one GPU, world size 1).

Calibration data for ``mbmem-lint estimate``: each case builds a small Llama-style GPTModel with the
*local* (no Transformer Engine) layer spec, wraps it in MCore DDP, builds the MCore mixed-precision
optimizer, runs 3 training iterations through ``get_forward_backward_func()`` and records
``torch.cuda`` allocator statistics. Every case runs in its own subprocess (fresh CUDA context and
caching allocator). The matching recipes are ``recipes/llama_calibration.py``; ``compare.py`` puts
both side by side.

Usage (GPU machine, Megatron Core from the carried wheel, no internet):

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site python3 bench/gpu_calibration/measure.py --out $OUT/measured.json

    --cases A,D       run a subset (in that order)     --list   print the cases and exit
    --budget-s 230    start no case after this much wall time (default; cases left are "skipped")
    --dry-run         CPU only, tiny shapes (2 layers, hidden 128, seq 64), gloo instead of NCCL: runs the
                      same code path (config, layer spec + SDPA swap, GPTModel, Float16Module, DDP, MCore
                      optimizer, get_forward_backward_func, optimizer.step) with device="cuda" mapped to CPU
                      and CUDA RNG-tracker calls stubbed; records no memory numbers. For checking the script
                      without a GPU.

What is mirrored from production (Megatron Bridge + TE) and what is not:
- Core attention: ``--attention sdpa_flash`` (default for the main cases) swaps the local spec's
  ``DotProductAttention`` (materialises the s x s scores) for ``SDPAFlashCoreAttention`` below, which
  calls ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)`` restricted to the flash
  backend, with native GQA (no K/V repeat). Like TE's FlashAttention on sbhd input, q/k/v are handed over
  as contiguous [b, s, h, d] copies (``--sdpa-layout bshd_contiguous``, default), so the kernel saves
  q, k, v, the output and the fp32 log-sum-exp, and MCore's fused QKV output and RoPE outputs are freed
  after the attention. ``--sdpa-layout view`` passes strided views instead (then ``value``, a view of the
  fused QKV output, keeps that whole tensor alive). Case F keeps the unfused local ``DotProductAttention``
  as a contrast.
- SwiGLU: ``bias_activation_fusion=True`` (as Bridge's Llama providers) -> MCore ``SwiGLUFunction``,
  which saves only the fc1 output (like TE's fused SwiGLU). Its helpers are ``torch.compile``-decorated
  (``megatron.core.jit.jit_fuser``); by default the workers set ``TORCHDYNAMO_DISABLE=1`` so they run
  eagerly (no compile time; a few extra transient ffn-sized temporaries, nothing extra saved).
  ``--jit compile`` keeps torch.compile.
- Norms: the local spec uses ``torch.nn.RMSNorm`` (no apex); TE fuses the norm into the next linear.
  Saved tensors are the same (norm input, linear input), the kernels differ.
- Optimizer: without TE/apex, MCore falls back to ``torch.optim.AdamW`` (optimizer/__init__.py L18-35)
  inside its own mixed-precision wrapper (``Float16OptimizerWithFloat16Params`` or
  ``DistributedOptimizer``: bf16 model params, fp32 main params, fp32 exp_avg/exp_avg_sq). Torch's default
  *foreach* AdamW allocates full-size fp32 temporaries in ``step()``; TE/apex FusedAdam does not. With
  ``--adam fused`` (default) the inner torch optimizer's param groups are switched to ``fused=True``
  (in-place CUDA kernel, no large temporaries) before the first step; ``--adam foreach`` leaves torch's
  default. Adam states are created lazily in the first ``step()``, so "after build" holds weights,
  gradient buffer and main params only; "after step 1" also holds exp_avg/exp_avg_sq.
- Grad clipping (clip_grad=1.0) uses MCore's local (non-apex) multi-tensor fallbacks: the norm is per-tensor
  ``torch.norm``; the scaling (only when the norm exceeds 1.0) is ``dst.copy_(src * scale)``, a temporary
  as large as the largest fp32 gradient (embedding/output layer: ~1 GiB at 128256 x 2048). It happens in
  ``optimizer.step()``, whose peak is recorded separately (``optimizer_step`` of each iteration).
- Cross entropy: MCore's unfused ``vocab_parallel_cross_entropy`` (cross_entropy_loss_fusion=False): the
  fp32 softmax is saved for backward; the bf16 logits are a forward transient.
- Allocator: default caching allocator (no expandable_segments) unless PYTORCH_CUDA_ALLOC_CONF is set in
  the environment (recorded in the output).

Memory bookkeeping: ``torch.cuda.reset_peak_memory_stats()`` is called at phase boundaries (forward of
each microbatch, backward, optimizer step) after reading the phase peak, so the per-phase peaks are
exact and the overall peak is their maximum (recorded as ``peak_allocated_bytes``). Also recorded:
allocated after build (before step 1) and after step 1, reserved peaks, ``mem_get_info`` (CUDA context +
NCCL = total - free - reserved), exact buffer sizes (bf16 params, fp32 grad buffer, fp32 main params, Adam
states), bytes held for backward per microbatch (allocated at the loss minus allocated at forward start),
per-layer allocation deltas of one forward (forward hooks on the decoder layers) and a census of the
autograd-saved tensors of that forward (``saved_tensors_hooks``, storages counted once, per layer, with the
first layer's tensors listed: shape, dtype, bytes), which shows exactly what each layer keeps.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

SCHEMA = "mbmem-lint/gpu-calibration/1"
RECIPE_FILE = "bench/gpu_calibration/recipes/llama_calibration.py"

# Llama-3.2-1B / 3B shapes (HF config.json: hidden, intermediate, heads, kv heads, head_dim, vocab; untied
# here: Llama 3.2 ties embeddings, the brief asks for untied).
LLAMA32_1B = dict(num_layers=16, hidden_size=2048, ffn_hidden_size=8192, num_attention_heads=32,
                  num_query_groups=8, kv_channels=64, vocab_size=128256, rotary_base=500000)
LLAMA32_3B = dict(num_layers=28, hidden_size=3072, ffn_hidden_size=8192, num_attention_heads=24,
                  num_query_groups=8, kv_channels=128, vocab_size=128256, rotary_base=500000)

_BASE = dict(shape=LLAMA32_1B, seq_length=4096, micro_batch_size=1, num_microbatches=2, attention="sdpa_flash",
             recompute_granularity=None, recompute_method=None, recompute_num_layers=None, recompute_modules=None,
             use_distributed_optimizer=False, model_overrides={}, tied=False)


def _case(desc: str, fn: str, **kw: Any) -> dict[str, Any]:
    c = copy.deepcopy(_BASE)
    c.update(kw)
    c["description"] = desc
    c["recipe_function"] = fn
    return c


# Run order = dict order (most important first; later cases are skipped if the time budget runs out).
CASES: dict[str, dict[str, Any]] = {
    "A": _case("Llama-3.2-1B shape, seq 4096, mbs 1, no recompute, SDPA flash",
               "case_a_llama32_1b_seq4k_mbs1_1gpu_h200_config"),
    "D": _case("A + full recompute (uniform, 1 layer per checkpoint)",
               "case_d_llama32_1b_full_recompute_1gpu_h200_config",
               recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1),
    "E": _case("A + selective recompute (default modules: core_attn)",
               "case_e_llama32_1b_selective_recompute_1gpu_h200_config", recompute_granularity="selective"),
    "B": _case("A with mbs 2", "case_b_llama32_1b_seq4k_mbs2_1gpu_h200_config", micro_batch_size=2),
    "C": _case("A with seq 8192", "case_c_llama32_1b_seq8k_mbs1_1gpu_h200_config", seq_length=8192),
    "G": _case("Llama-3.2-3B shape, seq 4096, mbs 1, no recompute, SDPA flash",
               "case_g_llama32_3b_seq4k_mbs1_1gpu_h200_config", shape=LLAMA32_3B),
    "F": _case("A with the local unfused DotProductAttention (s x s scores materialised)",
               "case_f_llama32_1b_unfused_attention_1gpu_h200_config", attention="local_unfused"),
    "H": _case("A + distributed optimizer (DP=1: nothing sharded; params move into the DDP bf16 param buffer)",
               "case_h_llama32_1b_distributed_optimizer_1gpu_h200_config", use_distributed_optimizer=True),
    "I": _case("A + hidden and attention dropout 0.1", "case_i_llama32_1b_dropout_1gpu_h200_config",
               model_overrides={"hidden_dropout": 0.1, "attention_dropout": 0.1}),
    "J": _case("A with tied embeddings (output layer shares the word embeddings)",
               "case_j_llama32_1b_tied_embeddings_1gpu_h200_config", tied=True),
    "K": _case("A with MCore's native fused cross-entropy",
               "case_k_llama32_1b_native_fused_cross_entropy_1gpu_h200_config",
               model_overrides={"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "native"}),
    "L": _case("F with the softmax in bf16 (attention_softmax_in_fp32=False, as Bridge's GPTModelProvider)",
               "case_l_llama32_1b_unfused_attention_bf16_softmax_1gpu_h200_config", attention="local_unfused",
               model_overrides={"attention_softmax_in_fp32": False}),
}

DRY_SHAPE = dict(num_layers=2, hidden_size=128, ffn_hidden_size=256, num_attention_heads=4, num_query_groups=2,
                 kv_channels=32, vocab_size=512, rotary_base=500000)
DRY_SEQ = 64


# ----------------------------------------------------------------------------------------------------------
# Parent: run every case in a subprocess, collect results, write JSON after each case.
# ----------------------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


def _tail(text: str, n: int = 4000) -> str:
    return text[-n:] if len(text) > n else text


def run_parent(args: argparse.Namespace) -> int:
    names = [c.strip().upper() for c in args.cases.split(",")] if args.cases else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"unknown case(s) {unknown}; known: {list(CASES)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    started = time.time()
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "created_unix": int(started),
        "recipe_file": RECIPE_FILE,
        "dry_run": bool(args.dry_run),
        "settings": {"iterations": args.iterations, "attention_override": args.attention, "jit": args.jit,
                     "adam": args.adam, "sdpa_backend": args.sdpa_backend, "sdpa_layout": args.sdpa_layout,
                     "budget_s": args.budget_s,
                     "case_timeout_s": args.case_timeout_s,
                     "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
                     "python": sys.version.split()[0]},
        "cases": {},
    }
    for name in names:
        elapsed = time.time() - started
        left = args.budget_s - elapsed
        if left < args.min_case_s:
            result["cases"][name] = {"status": "skipped", "reason": f"time budget: {left:.0f}s left",
                                     "description": CASES[name]["description"],
                                     "recipe_function": CASES[name]["recipe_function"]}
            print(f"[{name}] skipped ({left:.0f}s of the budget left)", flush=True)
            _write_json(out, result)
            continue
        timeout = max(5.0, min(args.case_timeout_s, left))
        with tempfile.TemporaryDirectory() as td:
            rfile = Path(td) / "case.json"
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--result-file", str(rfile),
                   "--iterations", str(args.iterations), "--jit", args.jit, "--adam", args.adam,
                   "--sdpa-backend", args.sdpa_backend, "--sdpa-layout", args.sdpa_layout]
            if args.attention:
                cmd += ["--attention", args.attention]
            if args.dry_run:
                cmd.append("--dry-run")
            env = dict(os.environ)
            env.update(MASTER_ADDR="localhost", MASTER_PORT=str(_free_port()), WORLD_SIZE="1", RANK="0",
                       LOCAL_RANK="0")
            if args.jit == "eager":
                env["TORCHDYNAMO_DISABLE"] = "1"
            env.setdefault("PYTHONWARNINGS", "ignore")
            t0 = time.time()
            status_note = None
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
                rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
            except subprocess.TimeoutExpired as exc:
                rc = None
                stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
                stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
                status_note = f"timeout after {timeout:.0f}s"
            wall = time.time() - t0
            rec: dict[str, Any]
            if rfile.exists():
                try:
                    rec = json.loads(rfile.read_text())
                except json.JSONDecodeError as exc:
                    rec = {"status": "error", "error": f"unreadable worker result: {exc}"}
            else:
                rec = {"status": "error", "error": "worker wrote no result"}
            if status_note:
                if rec.get("status") == "ok":  # results complete; the worker hung on exit (e.g. NCCL teardown)
                    rec["note"] = f"{status_note}, after the worker had written its results"
                else:
                    rec["status"] = "timeout"
                    rec["error"] = status_note
            rec["returncode"] = rc
            rec["subprocess_wall_s"] = round(wall, 2)
            if rec.get("status") != "ok" or args.keep_logs:
                rec["stdout_tail"] = _tail(stdout)
                rec["stderr_tail"] = _tail(stderr)
            result["cases"][name] = rec
            _write_json(out, result)
            peak = rec.get("memory", {}).get("peak_allocated_bytes")
            peak_s = f"peak allocated {peak / 2**30:.2f} GiB" if isinstance(peak, int) else ""
            print(f"[{name}] {rec.get('status')} in {wall:.1f}s {peak_s} {rec.get('error') or ''}".rstrip(),
                  flush=True)
            if rec.get("status") != "ok":
                print(_tail(stderr, 1500), file=sys.stderr, flush=True)
    result["total_wall_s"] = round(time.time() - started, 2)
    _write_json(out, result)
    bad = [n for n, r in result["cases"].items() if r.get("status") not in ("ok", "skipped")]
    print(f"wrote {out} in {result['total_wall_s']}s; not ok: {bad or 'none'}", flush=True)
    return 1 if bad else 0


# ----------------------------------------------------------------------------------------------------------
# Worker: one case in this process.
# ----------------------------------------------------------------------------------------------------------

class MemTracker:
    """Phase peaks: read max_memory_allocated/reserved, then reset, at every phase boundary."""

    def __init__(self, torch_mod: Any, enabled: bool) -> None:
        self.torch = torch_mod
        self.enabled = enabled
        self.max_alloc = 0
        self.max_reserved = 0
        self.max_alloc_steps = 0
        self.in_steps = False

    def snap(self) -> dict[str, int]:
        if not self.enabled:
            return {}
        c = self.torch.cuda
        return {"allocated": int(c.memory_allocated()), "reserved": int(c.memory_reserved())}

    def close_phase(self) -> dict[str, int]:
        """Peak since the last boundary; starts a new phase."""
        if not self.enabled:
            return {}
        c = self.torch.cuda
        c.synchronize()
        pa, pr = int(c.max_memory_allocated()), int(c.max_memory_reserved())
        self.max_alloc = max(self.max_alloc, pa)
        self.max_reserved = max(self.max_reserved, pr)
        if self.in_steps:
            self.max_alloc_steps = max(self.max_alloc_steps, pa)
        c.reset_peak_memory_stats()
        return {"peak_allocated": pa, "peak_reserved": pr, "allocated": int(c.memory_allocated()),
                "reserved": int(c.memory_reserved())}

    def mem_info(self) -> dict[str, int]:
        if not self.enabled:
            return {}
        free, total = self.torch.cuda.mem_get_info()
        reserved = int(self.torch.cuda.memory_reserved())
        return {"free": int(free), "total": int(total), "used": int(total - free), "reserved": reserved,
                "non_allocator": int(total - free - reserved)}


def _storage_bytes(tensors: Any) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one buffer count once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None:
            continue
        try:
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        except Exception:  # pragma: no cover - exotic tensors
            seen[id(t)] = t.numel() * t.element_size()
    return sum(seen.values())


def _inner_optimizers(opt: Any) -> list[Any]:
    subs = getattr(opt, "chained_optimizers", None)
    return list(subs) if subs else [opt]


FALLBACKS: list[str] = []  # SDPA calls that needed contiguous copies (recorded in the case result)
FIRST_CALL: dict[str, Any] = {}  # dtypes/shapes/strides SDPAFlashCoreAttention saw first (recorded)


def make_sdpa_core_attention(torch: Any, MegatronModule: Any, backend: str, gqa_mode: str, layout: str) -> type:
    """Core attention for the local spec: SDPA (flash backend) on [s, b, h, d] inputs, causal, native GQA.

    Mirrors TE's flash/fused attention memory: saves q, k, v, output and the fp32 log-sum-exp (no s x s).
    The constructor takes the keyword arguments SelfAttention passes to ``submodules.core_attention``
    (attention.py L382-390, CoreAttentionBuilder protocol)."""
    F = torch.nn.functional
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover
        SDPBackend = sdpa_kernel = None
    backends = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                "math": "MATH"}

    def ctx() -> Any:
        import contextlib
        if backend == "auto" or sdpa_kernel is None:
            return contextlib.nullcontext()
        return sdpa_kernel([getattr(SDPBackend, backends[backend])])

    class SDPAFlashCoreAttention(MegatronModule):
        def __init__(self, config: Any, layer_number: int, attn_mask_type: Any, attention_type: str = "self",
                     attention_dropout: float | None = None, softmax_scale: float | None = None,
                     cp_comm_type: str | None = None, pg_collection: Any = None, **_: Any) -> None:
            super().__init__(config=config)
            assert config.context_parallel_size == 1 and config.tensor_model_parallel_size == 1
            self.layer_number = layer_number
            self.attn_mask_type = attn_mask_type
            self.softmax_scale = softmax_scale
            self.dropout_p = config.attention_dropout if attention_dropout is None else attention_dropout

        def forward(self, query: Any, key: Any, value: Any, attention_mask: Any, attn_mask_type: Any = None,
                    attention_bias: Any = None, packed_seq_params: Any = None, **_: Any) -> Any:
            assert packed_seq_params is None and attention_bias is None
            sq, b, np_, hn = query.shape
            if layout == "bshd_contiguous":
                # Like TE's FlashAttention on sbhd input: contiguous [b, s, h, d] copies go to the kernel, so the
                # kernel saves those and the fused QKV output / RoPE outputs are freed after the attention.
                q, k, v = (t.transpose(0, 1).contiguous().transpose(1, 2) for t in (query, key, value))
            else:  # "view": strided views; value keeps the whole fused QKV output alive
                q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
            ng = k.shape[1]
            gqa = np_ != ng
            if not FIRST_CALL:
                FIRST_CALL.update({n: {"dtype": str(t.dtype), "shape": list(t.shape), "stride": list(t.stride())}
                                   for n, t in (("query", query), ("key", key), ("value", value))})
            if gqa and gqa_mode == "repeat":
                k = k.repeat_interleave(np_ // ng, dim=1)
                v = v.repeat_interleave(np_ // ng, dim=1)
                gqa = False
            p = self.dropout_p if self.training else 0.0
            try:
                with ctx():
                    out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True,
                                                         scale=self.softmax_scale, enable_gqa=gqa)
            except RuntimeError as exc:  # a layout the kernel rejects: retry once on contiguous copies
                FALLBACKS.append(f"layer {self.layer_number}: {str(exc)[:300]}")
                with ctx():
                    out = F.scaled_dot_product_attention(q.contiguous(), k.contiguous(), v.contiguous(),
                                                         dropout_p=p, is_causal=True, scale=self.softmax_scale,
                                                         enable_gqa=gqa)
            out = out.permute(2, 0, 1, 3)  # [s, b, np, hn]
            return out.reshape(sq, b, np_ * hn)  # a view when already contiguous (b == 1)

    return SDPAFlashCoreAttention


def probe_sdpa(torch: Any, backend: str, heads: int, groups: int, head_dim: int, device: str,
               layout: str) -> dict[str, Any]:
    """Which SDPA configuration works here: native GQA on the requested backend, else K/V repeat.

    The probe tensors have MCore's layout: q/k/v split from one fused [s, b, g, (h/g + 2) * d] QKV output
    (attention.py get_query_key_value_tensors) and permuted to [b, heads, s, d], i.e. strided views."""
    import contextlib

    from torch.nn.attention import SDPBackend, sdpa_kernel

    F = torch.nn.functional
    names = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
             "math": "MATH"}
    s, b, rep = 256, 2, heads // groups
    mixed = torch.randn(s, b, groups, (rep + 2) * head_dim, device=device, dtype=torch.bfloat16, requires_grad=True)
    qg, k, v = torch.split(mixed, [rep * head_dim, head_dim, head_dim], dim=3)
    q = qg.reshape(s, b, heads, head_dim)
    k = k * 1.0  # RoPE output: a new contiguous [s, b, g, d] tensor; v stays a strided view of the fused QKV
    if layout == "bshd_contiguous":
        q, k, v = (t.transpose(0, 1).contiguous().transpose(1, 2) for t in (q, k, v))
    else:
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))
    errors: dict[str, str] = {}
    for mode in ("native", "repeat"):
        try:
            kk, vv = (k, v) if mode == "native" else (k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1))
            cm = contextlib.nullcontext() if backend == "auto" else sdpa_kernel([getattr(SDPBackend, names[backend])])
            with cm:
                o = F.scaled_dot_product_attention(q, kk, vv, is_causal=True,
                                                   enable_gqa=(mode == "native" and heads != groups))
                o.float().sum().backward()
            return {"backend": backend, "gqa_mode": mode, "layout": layout, "errors": errors}
        except Exception as exc:  # noqa: BLE001
            errors[mode] = f"{type(exc).__name__}: {exc}"[:500]
    raise RuntimeError(f"SDPA backend {backend!r} unusable: {errors}")


def run_worker(args: argparse.Namespace) -> None:
    rfile = Path(args.result_file) if args.result_file else None
    spec_case = copy.deepcopy(CASES[args.worker])
    if args.attention:
        spec_case["attention"] = args.attention
    rec: dict[str, Any] = {"case": args.worker, "status": "running", "description": spec_case["description"],
                           "recipe_function": spec_case["recipe_function"], "recipe_file": RECIPE_FILE}
    timing: dict[str, float] = {}
    t_start = time.time()

    def save() -> None:
        rec["timing_s"] = {k: round(v, 3) for k, v in timing.items()}
        if rfile is not None:
            _write_json(rfile, rec)
        else:
            print(json.dumps(rec, indent=2))

    try:
        _worker_body(args, spec_case, rec, timing)
        rec["status"] = "ok"
    except BaseException as exc:  # noqa: BLE001 - record everything, incl. OOM
        name = type(exc).__name__
        rec["status"] = "oom" if "OutOfMemory" in name or "out of memory" in str(exc) else "error"
        rec["error"] = f"{name}: {exc}"[:2000]
        rec["traceback"] = traceback.format_exc()[-6000:]
        try:
            import torch
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                rec.setdefault("memory", {})["at_error"] = {
                    "allocated": int(torch.cuda.memory_allocated()),
                    "max_allocated_since_reset": int(torch.cuda.max_memory_allocated()),
                    "reserved": int(torch.cuda.memory_reserved())}
        except Exception:  # noqa: BLE001
            pass
    finally:
        timing["total"] = time.time() - t_start
        if FIRST_CALL:
            rec["sdpa_first_call"] = FIRST_CALL
        if FALLBACKS:
            rec["sdpa_contiguous_fallbacks"] = {"count": len(FALLBACKS), "first": FALLBACKS[:3]}
        save()
        try:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def build_transformer_config(case: dict[str, Any], shape: dict[str, Any], dry: bool) -> Any:
    """The Llama-style TransformerConfig of a case (MCore 0.19.2 field names; __post_init__ validates)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    kwargs: dict[str, Any] = dict(
        num_layers=shape["num_layers"], hidden_size=shape["hidden_size"], ffn_hidden_size=shape["ffn_hidden_size"],
        num_attention_heads=shape["num_attention_heads"], num_query_groups=shape["num_query_groups"],
        kv_channels=shape["kv_channels"],
        normalization="RMSNorm", layernorm_epsilon=1e-5, gated_linear_unit=True, activation_func=F.silu,
        bias_activation_fusion=True, add_bias_linear=False, add_qkv_bias=False,
        hidden_dropout=0.0, attention_dropout=0.0,
        bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
        tensor_model_parallel_size=1, pipeline_model_parallel_size=1, context_parallel_size=1,
        sequence_parallel=False, masked_softmax_fusion=False, bias_dropout_fusion=False, apply_rope_fusion=False,
        attention_softmax_in_fp32=True,  # MCore's default, explicit: Bridge's GPTModelProvider defaults it to False
        cross_entropy_loss_fusion=False, gradient_accumulation_fusion=False,
        recompute_granularity=case["recompute_granularity"], recompute_method=case["recompute_method"],
        recompute_num_layers=case["recompute_num_layers"], recompute_modules=case["recompute_modules"],
        init_method_std=0.02, use_cpu_initialization=dry, perform_initialization=True,
    )
    kwargs.update(case.get("model_overrides") or {})
    return TransformerConfig(**kwargs)


def config_record(case: dict[str, Any], shape: dict[str, Any], seq: int, config: Any, iterations: int) -> dict[str, Any]:
    """The configuration as recorded in measured.json (compare.py cross-checks it against the recipe)."""
    attention = case["attention"]
    mbs, nmb, dist_opt = case["micro_batch_size"], case["num_microbatches"], case["use_distributed_optimizer"]
    return {
        "model": {**shape, "seq_length": seq, "normalization": "RMSNorm", "gated_linear_unit": True,
                  "activation_func": "silu", "bias_activation_fusion": True, "add_bias_linear": False,
                  "share_embeddings_and_output_weights": bool(case.get("tied")), "position_embedding_type": "rope",
                  "hidden_dropout": config.hidden_dropout, "attention_dropout": config.attention_dropout,
                  "params_dtype": "bfloat16", "bf16": True,
                  "recompute_granularity": config.recompute_granularity,
                  "recompute_method": config.recompute_method,
                  "recompute_num_layers": config.recompute_num_layers,
                  "recompute_modules": list(config.recompute_modules or []),
                  "cross_entropy_loss_fusion": config.cross_entropy_loss_fusion,
                  "cross_entropy_fusion_impl": config.cross_entropy_fusion_impl, "layer_spec": "local",
                  "masked_softmax_fusion": False, "attention_softmax_in_fp32": config.attention_softmax_in_fp32,
                  "core_attention": ("SDPAFlashCoreAttention (torch SDPA, causal)" if attention == "sdpa_flash"
                                     else "megatron.core DotProductAttention (unfused)"),
                  "attention": attention,
                  "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
                  "context_parallel_size": 1, "sequence_parallel": False},
        "train": {"micro_batch_size": mbs, "num_microbatches": nmb, "global_batch_size": mbs * nmb,
                  "iterations": iterations, "data": "random token ids / labels, position ids 0..s-1, "
                  "attention_mask None (causal)"},
        "ddp": {"grad_reduce_in_fp32": True, "use_distributed_optimizer": dist_opt, "overlap_grad_reduce": False,
                "overlap_param_gather": False},
        "optimizer": {"optimizer": "adam", "bf16": True, "lr": 1e-4, "weight_decay": 0.1, "clip_grad": 1.0,
                      "use_distributed_optimizer": dist_opt, "inner_impl": None},
        "world_size": 1,
    }


def _worker_body(args: argparse.Namespace, case: dict[str, Any], rec: dict[str, Any],
                 timing: dict[str, float]) -> None:
    dry = bool(args.dry_run)
    t = time.time()
    import torch
    import torch.distributed as dist

    timing["import_torch"] = time.time() - t
    use_cuda = not dry
    if use_cuda and not torch.cuda.is_available():
        raise RuntimeError("CUDA is not available (use --dry-run on a CPU machine)")
    mt = MemTracker(torch, enabled=use_cuda)
    mem: dict[str, Any] = {}
    rec["memory"] = mem
    if use_cuda:
        torch.cuda.set_device(0)
        torch.zeros(1, device="cuda")  # CUDA context
        torch.cuda.synchronize()
        mem["baseline_after_cuda_init"] = mt.mem_info()

    t = time.time()
    import megatron.core
    from megatron.core import parallel_state
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module, MegatronModule

    timing["import_megatron"] = time.time() - t
    try:
        from megatron.core.package_info import __version__ as mcore_version
    except ImportError:  # pragma: no cover
        mcore_version = getattr(megatron.core, "__version__", "?")
    rec["env"] = {
        "torch": torch.__version__, "cuda": torch.version.cuda, "megatron_core": mcore_version,
        "megatron_core_path": os.path.dirname(megatron.core.__file__),
        "gpu": torch.cuda.get_device_name(0) if use_cuda else None,
        "gpu_capability": list(torch.cuda.get_device_capability(0)) if use_cuda else None,
        "TORCHDYNAMO_DISABLE": os.environ.get("TORCHDYNAMO_DISABLE"),
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "dry_run": dry,
    }

    shape = dict(DRY_SHAPE if dry else case["shape"])
    seq = DRY_SEQ if dry else case["seq_length"]
    mbs = case["micro_batch_size"]
    nmb = case["num_microbatches"]
    attention = case["attention"]
    dist_opt = case["use_distributed_optimizer"]

    # --- distributed + model parallel state (world size 1) ---
    t = time.time()
    dist.init_process_group(backend="gloo" if dry else "nccl", world_size=1, rank=0)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    if dry:
        _dry_run_shims(torch)
    model_parallel_cuda_manual_seed(1234)
    torch.manual_seed(1234)
    timing["init_distributed"] = time.time() - t
    if dry:
        _CpuDeviceMode(torch).__enter__()  # every device="cuda" in MCore -> cpu (dry run only)

    sdpa_info = None
    if attention == "sdpa_flash":
        backend = args.sdpa_backend if not dry else "auto"
        sdpa_info = probe_sdpa(torch, backend, shape["num_attention_heads"], shape["num_query_groups"],
                               shape["kv_channels"], "cuda" if use_cuda else "cpu", args.sdpa_layout)
        if use_cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    rec["env"]["sdpa"] = sdpa_info

    config = build_transformer_config(case, shape, dry)

    spec = get_gpt_layer_local_spec(normalization="RMSNorm")
    if attention == "sdpa_flash":
        spec.submodules.self_attention.submodules.core_attention = make_sdpa_core_attention(
            torch, MegatronModule, sdpa_info["backend"], sdpa_info["gqa_mode"], args.sdpa_layout)
    elif attention != "local_unfused":
        raise ValueError(f"unknown attention {attention!r}")

    rec["config"] = config_record(case, shape, seq, config, args.iterations)
    rec["config"]["model"]["sdpa_layout"] = args.sdpa_layout if attention == "sdpa_flash" else None

    # --- model ---
    t = time.time()
    base = GPTModel(
        config=config, transformer_layer_spec=spec, vocab_size=shape["vocab_size"], max_sequence_length=seq,
        pre_process=True, post_process=True, parallel_output=True, share_embeddings_and_output_weights=bool(case.get("tied")),
        position_embedding_type="rope", rotary_base=shape["rotary_base"],
    )
    if use_cuda:
        base.cuda(torch.cuda.current_device())
    n_params = sum(p.numel() for p in base.parameters())
    by_dtype: dict[str, int] = {}
    for p in base.parameters():
        by_dtype[str(p.dtype)] = by_dtype.get(str(p.dtype), 0) + p.numel() * p.element_size()
    rec["params"] = {"total": int(n_params), "bytes_by_dtype": by_dtype,
                     "embedding": int(base.embedding.word_embeddings.weight.numel()),
                     "output_layer": int(base.output_layer.weight.numel()) if base.output_layer.weight is not None
                     else 0,
                     "per_layer": int(sum(p.numel() for p in base.decoder.layers[0].parameters()))}
    rec["modules"] = {"core_attention": type(base.decoder.layers[0].self_attention.core_attention).__name__,
                      "input_layernorm": type(base.decoder.layers[0].input_layernorm).__name__,
                      "mlp": type(base.decoder.layers[0].mlp).__name__}
    timing["build_model"] = time.time() - t

    mem["after_model"] = mt.snap()

    # --- DDP + optimizer (as Megatron Bridge's setup: Float16Module, then DDP) ---
    t = time.time()
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                               overlap_param_gather=False, use_distributed_optimizer=dist_opt,
                                               check_for_nan_in_grad=False)
    model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=Float16Module(config, base))
    opt_config = OptimizerConfig(optimizer="adam", lr=1e-4, min_lr=1e-5, weight_decay=0.1, adam_beta1=0.9,
                                 adam_beta2=0.95, adam_eps=1e-8, clip_grad=1.0, bf16=True,
                                 params_dtype=torch.bfloat16, use_distributed_optimizer=dist_opt)
    optimizer = get_megatron_optimizer(opt_config, [model])
    inner_impl = []
    for sub in _inner_optimizers(optimizer):
        inner = getattr(sub, "optimizer", None)
        if inner is None:
            continue
        if args.adam == "fused" and isinstance(inner, torch.optim.Adam):
            for g in inner.param_groups:
                g["fused"] = True
                g["foreach"] = False
            inner.defaults["fused"] = True
            inner.defaults["foreach"] = False
        inner_impl.append({"wrapper": type(sub).__name__, "inner": type(inner).__name__,
                           "fused": [g.get("fused") for g in inner.param_groups],
                           "foreach": [g.get("foreach") for g in inner.param_groups]})
    rec["config"]["optimizer"]["inner_impl"] = inner_impl
    config.no_sync_func = model.no_sync
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss
    timing["build_ddp_optimizer"] = time.time() - t

    grad_bufs = [b.grad_data for b in model.buffers + model.expert_parallel_buffers if b.grad_data is not None]
    param_bufs = [b.param_data for b in model.buffers + model.expert_parallel_buffers if b.param_data is not None]
    main_params = [p for sub in _inner_optimizers(optimizer) if getattr(sub, "optimizer", None) is not None
                   for g in sub.optimizer.param_groups for p in g["params"]]
    rec["buffers"] = {"grad_buffer_bytes": _storage_bytes(grad_bufs),
                      "param_buffer_bytes": _storage_bytes(param_bufs),
                      "grad_buffer_dtypes": sorted({str(b.dtype) for b in grad_bufs}),
                      "model_param_bytes": _storage_bytes(list(base.parameters())),
                      "optimizer_param_bytes": _storage_bytes(main_params),
                      "optimizer_param_dtypes": sorted({str(p.dtype) for p in main_params})}
    if use_cuda:
        torch.cuda.synchronize()
    mem["after_build"] = {**mt.snap(), "mem_get_info": mt.mem_info()}
    mem["build_phase"] = mt.close_phase()  # peak while building (init temporaries)

    # --- data (pre-generated, int64 like Bridge's GPT datasets) ---
    dev = "cuda" if use_cuda else "cpu"
    gen = torch.Generator(device=dev).manual_seed(1234)
    vocab = shape["vocab_size"]
    batches = []
    for _ in range(args.iterations * nmb):
        tokens = torch.randint(0, vocab, (mbs, seq), device=dev, generator=gen)
        labels = torch.randint(0, vocab, (mbs, seq), device=dev, generator=gen)
        pos = torch.arange(seq, device=dev).unsqueeze(0).expand(mbs, -1).contiguous()
        batches.append((tokens, labels, pos))
    mem["after_data"] = mt.snap()

    fwd_bwd = get_forward_backward_func()
    rec["config"]["train"]["forward_backward_func"] = getattr(fwd_bwd, "__name__", str(fwd_bwd))
    iterations: list[dict[str, Any]] = []
    mem["iterations"] = iterations
    cur: dict[str, Any] = {}

    def forward_step(data_iterator: Any, model_: Any) -> Any:
        # Boundary: closes the previous phase (data/optimizer or the previous microbatch's backward).
        prev = mt.close_phase()
        if cur["microbatches"]:
            cur["microbatches"][-1]["backward"] = prev
        else:
            cur["before_first_forward"] = prev
        mb: dict[str, Any] = {"allocated_at_forward_start": prev.get("allocated")}
        cur["microbatches"].append(mb)
        # Per-layer allocation deltas in the forward of the last iteration's first microbatch.
        layer_log["on"] = cur["iteration"] == args.iterations and len(cur["microbatches"]) == 1
        tokens, labels, pos = next(data_iterator)
        if layer_log["on"]:
            census.update(seen=set(), by_owner={}, detail=[])
            with torch.autograd.graph.saved_tensors_hooks(census_pack, lambda t: t):
                output = model_(tokens, pos, None, labels=labels)
            mem["saved_tensor_census"] = {
                "note": "autograd-saved tensors of one forward (last iteration, microbatch 1), distinct storages "
                        "(parameters excluded), attributed to the decoder layer running when saved ('outside' = "
                        "embedding/RoPE, final norm, output layer, cross entropy); detail = first layer",
                "bytes_by_owner": {str(k): v for k, v in census["by_owner"].items()},
                "first_layer_detail": census["detail"]}
        else:
            output = model_(tokens, pos, None, labels=labels)

        def loss_func(output_tensor: Any) -> Any:
            if layer_log["on"]:
                layer_log["on"] = False
                mem["forward_allocation_deltas"] = {
                    "note": "memory_allocated() after minus before each forward (last iteration, microbatch 1); "
                            "a layer's delta = what it keeps for backward + its output (the next layer's input)",
                    "embedding_and_rope": (layer_log["deltas"][0][1] - (mb["allocated_at_forward_start"] or 0))
                    if layer_log["deltas"] else None,
                    "layers": [d for _i, _b, d in layer_log["deltas"]],
                    "after_last_layer_to_loss": None}
                if layer_log["deltas"]:
                    last_after = layer_log["deltas"][-1][1] + layer_log["deltas"][-1][2]
                    mem["forward_allocation_deltas"]["after_last_layer_to_loss"] = alloc() - last_after
                layer_log["deltas"] = []
            ph = mt.close_phase()  # forward peak (incl. logits + cross entropy)
            mb["forward"] = ph
            if ph:
                mb["saved_for_backward_bytes"] = ph["allocated"] - mb["allocated_at_forward_start"]
            loss = output_tensor.float().mean()
            return loss, {"lm loss": loss.detach()}

        return output, loss_func

    layer_log: dict[str, Any] = {"on": False, "deltas": [], "before": {}}

    def alloc() -> int:
        return int(torch.cuda.memory_allocated()) if use_cuda else 0

    census: dict[str, Any] = {"owner": "outside", "seen": set(), "by_owner": {}, "detail": []}
    param_ptrs = {p.untyped_storage().data_ptr() for p in base.parameters()}
    first_layer = base.decoder.layers[0].layer_number

    def census_pack(t: Any) -> Any:
        try:
            st = t.untyped_storage()
            ptr = st.data_ptr()
        except Exception:  # noqa: BLE001 - tensors without storage
            return t
        if ptr in param_ptrs or ptr in census["seen"]:
            return t
        census["seen"].add(ptr)
        owner = census["owner"]
        census["by_owner"][owner] = census["by_owner"].get(owner, 0) + int(st.nbytes())
        if owner == first_layer:
            census["detail"].append({"shape": list(t.shape), "dtype": str(t.dtype), "storage_bytes": int(st.nbytes()),
                                     "view": int(st.nbytes()) != t.numel() * t.element_size()})
        return t

    def pre_hook(module: Any, _inp: Any) -> None:
        census["owner"] = module.layer_number
        if layer_log["on"] and torch.is_grad_enabled():
            layer_log["before"][id(module)] = alloc()

    def post_hook(module: Any, _inp: Any, _out: Any) -> None:
        census["owner"] = "outside"
        if layer_log["on"] and id(module) in layer_log["before"]:
            b = layer_log["before"].pop(id(module))
            layer_log["deltas"].append((module.layer_number, b, alloc() - b))

    for layer in base.decoder.layers:
        layer.register_forward_pre_hook(pre_hook)
        layer.register_forward_hook(post_hook)

    mt.in_steps = True
    for it in range(args.iterations):
        t_it = time.time()
        cur = {"iteration": it + 1, "microbatches": []}
        model.zero_grad_buffer()
        optimizer.zero_grad()
        losses = fwd_bwd(forward_step_func=forward_step, data_iterator=iter(batches[it * nmb:(it + 1) * nmb]),
                         model=[model], num_microbatches=nmb, seq_length=seq, micro_batch_size=mbs,
                         decoder_seq_length=seq, forward_only=False)
        last_bwd = mt.close_phase()
        cur["microbatches"][-1]["backward"] = last_bwd  # last backward + finalize_model_grads
        update_ok, grad_norm, _zeros = optimizer.step()
        cur["optimizer_step"] = mt.close_phase()
        cur["after_step"] = {**mt.snap(), "mem_get_info": mt.mem_info()}
        cur["update_successful"] = bool(update_ok)
        cur["grad_norm"] = float(grad_norm) if grad_norm is not None else None
        cur["loss"] = [float(x["lm loss"]) for x in losses] if losses else None
        cur["peak_allocated"] = max([cur["optimizer_step"].get("peak_allocated", 0)]
                                    + [m["forward"].get("peak_allocated", 0) for m in cur["microbatches"]]
                                    + [m["backward"].get("peak_allocated", 0) for m in cur["microbatches"]])
        cur["time_s"] = round(time.time() - t_it, 3)
        iterations.append(cur)
        if it == 0:
            mem["after_step1"] = cur["after_step"]
    mt.in_steps = False
    timing["iterations"] = sum(i["time_s"] for i in iterations)

    state = [v for sub in _inner_optimizers(optimizer) if getattr(sub, "optimizer", None) is not None
             for st in sub.optimizer.state.values() for k, v in st.items()
             if torch.is_tensor(v) and k in ("exp_avg", "exp_avg_sq")]
    rec["buffers"]["adam_state_bytes"] = _storage_bytes(state)
    rec["buffers"]["adam_state_dtypes"] = sorted({str(v.dtype) for v in state})

    if not use_cuda:
        rec["dry_run"] = {"losses": [i["loss"] for i in iterations], "grad_norms": [i["grad_norm"] for i in iterations],
                          "adam_state_tensors": len(state)}
        return
    stats = torch.cuda.memory_stats()
    mem["peak_allocated_bytes"] = mt.max_alloc  # max over build + all iterations
    mem["peak_allocated_steps_bytes"] = mt.max_alloc_steps  # max over the training iterations only
    mem["peak_reserved_bytes"] = mt.max_reserved
    mem["allocated_after_build_bytes"] = mem["after_build"]["allocated"]
    mem["allocated_after_step1_bytes"] = mem["after_step1"]["allocated"]
    mem["final"] = {**mt.snap(), "mem_get_info": mt.mem_info()}
    mem["allocator_stats"] = {k: int(stats.get(k, 0)) for k in (
        "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
        "allocated_bytes.all.current", "reserved_bytes.all.current", "inactive_split_bytes.all.current")}
    first_mb = iterations[-1]["microbatches"][0]
    mem["saved_for_backward_bytes_per_microbatch"] = first_mb.get("saved_for_backward_bytes")


def _CpuDeviceMode(torch: Any) -> Any:
    """Dry run only: a TorchFunctionMode that maps device="cuda" (factory kwargs, Tensor.to/.cuda) to CPU and
    reports CPU tensors' ``.type()`` as ``torch.cuda.*`` (MCore's optimizer wrappers check it)."""

    def is_cuda(x: Any) -> bool:
        return (isinstance(x, torch.device) and x.type == "cuda") or (isinstance(x, str) and x.startswith("cuda"))

    class Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            d = kwargs.get("device")
            if d is not None and (is_cuda(d) or (isinstance(d, int) and not isinstance(d, bool))):
                kwargs["device"] = "cpu"
            if func is torch.Tensor.cuda:
                return args[0]
            if func is torch.Tensor.type and len(args) == 1 and not kwargs:  # MCore checks 'torch.cuda.*Tensor'
                r = func(*args)
                return r.replace("torch.", "torch.cuda.", 1) if "cuda" not in r else r
            if func is torch.Tensor.to:
                args = tuple("cpu" if is_cuda(a) else a for a in args)
            return func(*args, **kwargs)

    return Mode()


def _dry_run_shims(torch: Any) -> None:
    """CPU dry run only: MCore's activation checkpoint saves/restores CUDA RNG states (made no-ops) and MCore
    places buffers on ``torch.cuda.current_device()`` (made to return "cpu")."""
    from megatron.core.tensor_parallel import random as tp_random

    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
    torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]

    class _Stream:
        def wait_event(self, *a: Any) -> None: ...
        def wait_stream(self, *a: Any) -> None: ...
        def synchronize(self) -> None: ...

    torch.cuda.current_stream = lambda *a, **k: _Stream()  # type: ignore[assignment]

    tp_random._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    tp_random._set_cuda_rng_state = lambda *a, **k: None

    class _NoCudaTracker(tp_random.CudaRNGStatesTracker):
        def add(self, name: str, seed: int) -> None:
            self._is_initialized = True
            self.seeds_.add(seed)
            self.states_[name] = torch.get_rng_state()

        def fork(self, name: str = tp_random._MODEL_PARALLEL_RNG_TRACKER_NAME):  # type: ignore[override]
            import contextlib
            return contextlib.nullcontext()

        def get_states(self) -> dict[str, Any]:
            return dict(self.states_)

        def set_states(self, states: dict[str, Any]) -> None:
            self.states_ = dict(states)

    tp_random._CUDA_RNG_STATE_TRACKER = _NoCudaTracker()
    tp_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    tp_random.initialize_rng_tracker = lambda *a, **k: None


# ----------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="measured.json", help="output JSON (written after every case)")
    ap.add_argument("--cases", default=None, help=f"comma-separated subset of {','.join(CASES)} (run in that order)")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--dry-run", action="store_true", help="CPU only, tiny shapes; checks imports/APIs")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--attention", choices=["sdpa_flash", "local_unfused"], default=None,
                    help="override every case's core attention")
    ap.add_argument("--sdpa-backend", choices=["flash", "efficient", "cudnn", "math", "auto"], default="flash")
    ap.add_argument("--sdpa-layout", choices=["bshd_contiguous", "view"], default="bshd_contiguous",
                    help="q/k/v handed to SDPA: contiguous [b,s,h,d] copies (TE flash-like) or strided views")
    ap.add_argument("--jit", choices=["eager", "compile"], default="eager",
                    help="eager: TORCHDYNAMO_DISABLE=1 for MCore's torch.compile'd fusions")
    ap.add_argument("--adam", choices=["fused", "foreach"], default="fused")
    ap.add_argument("--budget-s", type=float, default=230.0, help="skip remaining cases after this many seconds")
    ap.add_argument("--case-timeout-s", type=float, default=90.0)
    ap.add_argument("--min-case-s", type=float, default=25.0, help="do not start a case with less budget left")
    ap.add_argument("--keep-logs", action="store_true", help="keep worker stdout/stderr tails for ok cases too")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result-file", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.list:
        for name, c in CASES.items():
            print(f"{name}: {c['description']}  [{c['recipe_function']}]")
        return 0
    if args.worker:
        run_worker(args)
        return 0
    return run_parent(args)


if __name__ == "__main__":
    sys.exit(main())
