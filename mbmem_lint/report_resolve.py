"""Output of ``mbmem-lint resolve``: the effective config with provenance (text and the JSON contract).

JSON contract (other tools read it)::

    {"recipes": [{"file": <path as given>, "function": str, "line": int,
                  "fields": {"<section>.<field>": {"value": <json>, "file": str, "line": int, "origin": str}},
                  "unknown": ["<section>.<field>", ...],
                  "rewrites": [{"path", "old", "new", "reason"}],
                  "architecture": null | {"hf_id", "origin", "path", "source", "bridge", "provider",
                                          "confidence"} | {"hf_id", "origin": "unknown", "reason"}}]}

Unknown values are ``null`` in ``fields`` and listed in ``unknown``. ``rewrites`` lists Bridge's
runtime rewrites with their reasons, ``architecture`` where an ``AutoBridge`` model's architecture came
from (bundled table, Hugging Face cache, a pyproject path) or why it is unknown (both additive to the contract).
``megatron_bridge`` is the Megatron Bridge data the run used (additive; the object of ``check --format json``).
"""

from __future__ import annotations

from typing import Any

from mbmem_lint.resolve.resolved import ResolvedRecipe, Unknown, is_known


def json_value(v: Any) -> Any:
    if isinstance(v, Unknown):
        return None
    if isinstance(v, list):
        return [json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    return v


def recipe_json(r: ResolvedRecipe) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    unknown: list[str] = []
    for path in sorted(r.fields):
        f = r.fields[path]
        fields[path] = {"value": json_value(f.value), "file": f.location.path, "line": f.location.line,
                        "origin": f.origin}
        if not is_known(f.value):
            unknown.append(path)
    return {
        "file": r.path,
        "function": r.function,
        "line": r.location.line,
        "fields": fields,
        "unknown": unknown,
        "rewrites": [{"path": w.path, "old": json_value(w.old), "new": json_value(w.new), "reason": w.reason}
                     for w in r.rewrites],
        "architecture": r.architecture,
    }


def render_resolve_json(recipes: list[ResolvedRecipe], bridge: Any = None) -> dict[str, Any]:
    """``bridge``: the Megatron Bridge data of the run (``BridgeData``), recorded as ``megatron_bridge``."""
    out: dict[str, Any] = {"recipes": [recipe_json(r) for r in recipes]}
    if bridge is not None:
        out["megatron_bridge"] = bridge.to_json()
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, Unknown):
        return f"<unknown: {v.reason}>"
    return repr(v) if not isinstance(v, dict) else str(v)


def render_resolve_text(recipes: list[ResolvedRecipe]) -> str:
    lines: list[str] = []
    for r in recipes:
        t = r.target
        lines.append(f"{r.path}:{r.location.line} {r.function}")
        lines.append(f"  target: gpu={t.gpu or '?'} ({t.gpu_source}), world_size={t.world_size or '?'} "
                     f"({t.world_size_source})")
        # Text shows the values something set; defaults are in the JSON output.
        explicit = getattr(r.fields, "explicit", r.fields)
        for path, f in explicit.items():
            where = f"{f.location.path}:{f.location.line}"
            extra = f"  # {f.note}" if f.note and f.origin == "runtime" else ""
            lines.append(f"  {path} = {_fmt(f.value)}  [{f.origin} {where}]{extra}")
        a = r.architecture
        if a is not None:
            where = a.get("path") or a.get("source") or ""
            lines.append(f"  architecture of {a['hf_id']}: {a['origin']}" + (f" ({where})" if a["origin"] != "unknown"
                                                                              else f" ({a.get('reason', '')})"))
        for note in r.notes:
            lines.append(f"  note: {note}")
        lines.append("")
    return "\n".join(lines) + ("\n" if lines else "")
