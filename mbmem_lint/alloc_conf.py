"""PyTorch allocator config strings (``PYTORCH_CUDA_ALLOC_CONF``): comma-separated ``key:value`` options.

Its own module so that the planner can write the option without importing the fix machinery (libcst).
"""

from __future__ import annotations


def merge_alloc_conf(current: str | None, option: str) -> str:
    """``PYTORCH_CUDA_ALLOC_CONF`` value with ``option`` (``key:value``) set, other options kept in order."""
    key = option.split(":", 1)[0].strip()
    parts = [p for p in (current or "").split(",") if p.strip()]
    out: list[str] = []
    replaced = False
    for p in parts:
        if p.split(":", 1)[0].strip() == key:
            if not replaced:
                out.append(option)
                replaced = True
        else:
            out.append(p)
    if not replaced:
        out.append(option)
    return ",".join(out)
