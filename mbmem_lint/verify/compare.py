"""Compare a real ``ConfigContainer`` dump (:mod:`mbmem_lint.verify.realbuild`) with the static resolution.

For every field path the real object has, the real value against mbmem-lint's value *before* runtime
rewrites (``pre_runtime[path]`` when a rewrite changed it, else ``fields[path].value``): the real dump
is the recipe's own values (no ``validate()``). Classes: ``agree``, ``disagree``, ``unknown``
(mbmem-lint says UNKNOWN), ``missing`` (mbmem-lint has no such path), ``opaque`` (the real value has
no JSON form: layer specs, stubs). ``env_vars`` as a whole is skipped (its entries are compared).
"""

from __future__ import annotations

import math
import re
from typing import Any

from mbmem_lint.resolve.resolved import ResolvedRecipe, is_known

CLASSES = ("agree", "disagree", "unknown", "missing", "opaque")
_DOTTED = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$")


def norm(v: Any) -> Any:
    """Tuples as lists, dict keys as strings (the shape of the real dump)."""
    if isinstance(v, (tuple, list)):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return {str(k): norm(x) for k, x in v.items()}
    return v


def same(real: Any, mine: Any) -> bool:
    """Equal as JSON values (bool is not int; int and float compare numerically). A config object's
    ``_name_`` (the module-level name mbmem-lint saw it bound to, e.g. a userbuffers preset) has no
    counterpart in the real object and is not compared."""
    if isinstance(real, bool) or isinstance(mine, bool):
        return type(real) is type(mine) and real == mine
    if isinstance(real, (int, float)) and isinstance(mine, (int, float)):
        return math.isclose(real, mine, rel_tol=1e-9, abs_tol=0.0) or real == mine
    if isinstance(real, list) and isinstance(mine, list):
        return len(real) == len(mine) and all(same(a, b) for a, b in zip(real, mine))
    if isinstance(real, dict) and isinstance(mine, dict):
        if "_name_" in mine and "_name_" not in real:  # mbmem-lint also names a module-level preset object
            mine = {k: v for k, v in mine.items() if k != "_name_"}
        if set(real) != set(mine):
            return False
        return all(same(real[k], mine[k]) for k in real)
    return bool(real == mine)


def same_name(real: Any, mine: Any) -> bool:
    """Dotted names that differ only in qualification (``signal.Signals.SIGTERM`` vs ``signal.SIGTERM``,
    ``megatron...gpt_provider.default_layer_spec`` vs ``default_layer_spec``): same final component."""
    if isinstance(real, str) and isinstance(mine, str):
        a, b = real.strip("<>"), mine
        if (_DOTTED.match(a) or "." not in a) and (_DOTTED.match(b) or "." not in b) and ("." in a or "." in b):
            return a.rsplit(".", 1)[-1] == b.rsplit(".", 1)[-1]
    return False


def is_opaque(v: Any) -> bool:
    return isinstance(v, str) and v.startswith("<opaque")


def static_value(r: ResolvedRecipe, path: str) -> Any:
    """mbmem-lint's value of ``path`` before runtime rewrites."""
    return r.pre_runtime[path] if path in r.pre_runtime else r.fields[path].value


def classify(path: str, real: Any, r: ResolvedRecipe) -> tuple[str, Any, bool]:
    """(class, mbmem-lint's value or None, matched only by dotted-name normalisation)."""
    if is_opaque(real):
        return "opaque", None, False
    if path not in r.fields:
        return "missing", None, False
    mine = static_value(r, path)
    if not is_known(mine):
        return "unknown", None, False
    if same(norm(real), norm(mine)):
        return "agree", mine, False
    if same_name(real, mine):
        return "agree", mine, True
    return "disagree", mine, False
