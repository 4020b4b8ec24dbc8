"""Which plain values a config field's annotation accepts, from the annotation text in the schema.

Bridge applies YAML and ``--set`` overrides with ``setattr`` on an untyped OmegaConf copy of the
config (``training/utils/omegaconf_utils.py``): nothing converts ``"4"`` to ``4`` or checks a
``Literal``. Only what the annotation decides is answered; a class, ``Any``, a callable or an enum
gives None ("cannot tell"), so no finding rests on a guess.
"""

from __future__ import annotations

import ast
from typing import Any

_INT = frozenset({"int"})
_FLOAT = frozenset({"float"})
_BOOL = frozenset({"bool"})
_STR = frozenset({"str", "torch.dtype", "dtype"})  # a dtype is given by name in YAML and converted
_LIST = frozenset({"list", "List", "tuple", "Tuple", "Sequence", "set", "Set"})
_DICT = frozenset({"dict", "Dict", "Mapping"})
_NONE = frozenset({"None", "NoneType"})


def _split(text: str) -> list[str]:
    """Top-level parts of ``A, B`` or ``A | B`` (brackets and quotes respected)."""
    parts: list[str] = []
    depth, start, quote = 0, 0, ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch in ",|" and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def kind_of(value: Any) -> str:
    """The YAML value's kind: int, float, bool, str, none, list or dict."""
    if value is None:
        return "none"
    for t, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (list, "list"), (dict, "dict")):
        if isinstance(value, t):
            return name
    return "other"


def accepts(annotation: str, value: Any) -> bool | None:
    """Whether a field annotated ``annotation`` accepts the plain ``value``; None when the annotation
    does not decide it (classes, ``Any``, callables, enums, unparsable text)."""
    text = annotation.strip().strip("'\"")
    if not text:
        return None
    alternatives = _split(text)
    if len(alternatives) > 1:
        verdicts = [accepts(a, value) for a in alternatives]
        return True if True in verdicts else (None if None in verdicts else False)
    head, _, rest = text.partition("[")
    head = head.strip().rsplit(".", 1)[-1] if not head.strip().startswith("torch.") else head.strip()
    inner = rest[:-1] if rest.endswith("]") else ""
    kind = kind_of(value)
    if kind == "none":
        # Bridge's own recipes set None where the annotation is not Optional: not decided.
        return True if head in ("Optional",) or head in _NONE else None
    if head in ("Optional",):
        return accepts(inner, value)
    if head in ("Union",):
        return accepts(inner.replace(",", "|"), value) if inner else None
    if head == "Literal":
        try:
            choices = ast.literal_eval(f"[{inner}]")
        except (ValueError, SyntaxError):
            return None
        return any(value == c and type(value) is type(c) for c in choices)
    # What is decided: a string, list or dict where a number is meant (and the reverse), a fraction
    # for an int. An int for a bool is used for its truth; a number for a tuple may be meant for it
    # (window_size = 512): not decided.
    if head in _NONE:
        return False
    if head in _BOOL:
        return True if kind in ("bool", "int") else (False if kind in ("str", "list", "dict", "float") else None)
    if head in _INT:
        if kind == "float":
            return None if float(value).is_integer() else False
        return kind == "int" or (None if kind == "bool" else False)
    if head in _FLOAT:
        return True if kind in ("int", "float") else (None if kind == "bool" else False)
    if head in _STR:
        return kind == "str"
    if head in _LIST:
        return True if kind == "list" else (False if kind in ("str", "dict") else None)
    if head in _DICT:
        return True if kind == "dict" else (False if kind in ("str", "list") else None)
    return None
