"""Plain values as source text: Python literals (fixes) and YAML scalars (YAML fixes, ``--set`` items).

Its own module (no libcst) so that the planner renders values without importing the fix machinery.
"""

from __future__ import annotations

import json
from typing import Any


def py_literal(value: Any) -> str:
    """Python source for a plain value (``True``, ``8``, ``"expandable_segments:True"``, ``None``)."""
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(py_literal(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_literal(k)}: {py_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no Python literal for {value!r}")


_YAML_PLAIN_UNSAFE = set(":#{}[],&*!|>'\"%@`")


def yaml_literal(value: Any) -> str:
    """YAML source for a plain scalar/list value (``true``, ``8``, ``null``, quoted strings when needed)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        lowered = value.lower()
        needs_quotes = (
            value == ""
            or value != value.strip()
            or any(c in _YAML_PLAIN_UNSAFE for c in value)
            or lowered in {"true", "false", "yes", "no", "on", "off", "null", "~"}
            or _looks_numeric(value)
        )
        return json.dumps(value) if needs_quotes else value
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_literal(v) for v in value) + "]"
    raise TypeError(f"no YAML literal for {value!r}")


def _looks_numeric(s: str) -> bool:
    try:
        float(s.replace("_", ""))
    except ValueError:
        return False
    return True
