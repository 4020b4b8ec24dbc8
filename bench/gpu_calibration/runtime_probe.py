#!/usr/bin/env python3
"""Decompose the GPU memory that lives outside PyTorch's caching allocator (one GPU, one process).

``measure.py`` found that ``total - free - reserved`` grows from ~0.6 GiB after CUDA init to ~2.4 GiB after a
few training steps. This probe runs the pieces of a training step one at a time and reads
``mem_get_info`` and the allocator's ``memory_reserved`` after each, so each step's growth outside the
allocator is attributed to what first ran in it (lazy module loading, library handles, NCCL buffers).

    python3 bench/gpu_calibration/runtime_probe.py --out $OUT/runtime_probe.json

Steps (each runs after the previous ones, so deltas are incremental):
  cuda_init          torch.cuda.init() + one tiny tensor (the CUDA context)
  cublas_bf16_gemm   bf16 matmul 4096^3 (cuBLAS/cuBLASLt handle, GEMM kernels)
  cublas_fp32_gemm   fp32 matmul (more GEMM kernels)
  elementwise        a spread of elementwise/reduction ops (silu, mul, rsqrt, softmax, cross entropy)
  sdpa_flash         scaled_dot_product_attention (flash backend) forward + backward
  nccl_init          init_process_group("nccl", world size 1) + one all_reduce (communicator buffers)
  nccl_second_group  a second NCCL group (new_group) + one all_reduce on it
  fused_adamw        torch.optim.AdamW(fused=True).step()
  foreach_ops        torch._foreach_norm / _foreach_mul_ (MCore's local grad-clip fallbacks)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runtime_probe.json")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    steps: list[dict[str, Any]] = []

    def record(name: str) -> None:
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        reserved = torch.cuda.memory_reserved()
        non_alloc = total - free - reserved
        prev = steps[-1]["non_allocator"] if steps else 0
        steps.append({"step": name, "non_allocator": non_alloc, "delta_non_allocator": non_alloc - prev,
                      "reserved": reserved, "allocated": torch.cuda.memory_allocated()})
        print(f"{name:18s} non-allocator {non_alloc / 2**20:8.1f} MiB  (+{(non_alloc - prev) / 2**20:7.1f})  "
              f"reserved {reserved / 2**20:8.1f} MiB", flush=True)

    dev = torch.device("cuda", 0)
    torch.cuda.init()
    torch.empty(1, device=dev)
    record("cuda_init")

    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    (a @ a).sum().item()
    record("cublas_bf16_gemm")
    b = a.float()
    (b @ b).sum().item()
    record("cublas_fp32_gemm")

    x = torch.randn(4096, 2048, device=dev, dtype=torch.bfloat16, requires_grad=True)
    y = F.silu(x) * x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype)
    logits = y.float() @ torch.randn(2048, 1000, device=dev)
    loss = F.cross_entropy(logits, torch.randint(0, 1000, (4096,), device=dev)) + torch.softmax(logits, -1).sum()
    loss.backward()
    record("elementwise")

    q = torch.randn(1, 32, 4096, 64, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, 8, 4096, 64, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, 8, 4096, 64, device=dev, dtype=torch.bfloat16, requires_grad=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    o.sum().backward()
    record("sdpa_flash")

    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=str(_free_port()), WORLD_SIZE="1", RANK="0")
    torch.cuda.set_device(0)
    dist.init_process_group(backend="nccl", world_size=1, rank=0, device_id=dev)
    t = torch.ones(1 << 20, device=dev)
    dist.all_reduce(t)
    record("nccl_init")
    g2 = dist.new_group([0])
    dist.all_reduce(t, group=g2)
    record("nccl_second_group")

    p = torch.nn.Parameter(torch.randn(1 << 24, device=dev))
    p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=True)
    opt.step()
    record("fused_adamw")

    grads = [torch.randn(1 << 20, device=dev) for _ in range(8)]
    norms = torch._foreach_norm(grads)
    torch._foreach_mul_(grads, 0.5)
    torch.stack(norms).sum().item()
    record("foreach_ops")

    free, total = torch.cuda.mem_get_info()
    doc = {
        "schema": "mbmem-lint/runtime-probe/1",
        "created_unix": int(time.time()),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(str(x) for x in torch.cuda.nccl.version()),
        "env": {k: os.environ.get(k) for k in ("CUDA_MODULE_LOADING", "PYTORCH_CUDA_ALLOC_CONF",
                                               "NCCL_NVLS_ENABLE", "NCCL_BUFFSIZE")},
        "total_bytes": total,
        "steps": steps,
    }
    dist.destroy_process_group()
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
