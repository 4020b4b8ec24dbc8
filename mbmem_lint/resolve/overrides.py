"""Apply YAML override files and ``--set`` dotlists to a resolved recipe, as Bridge's
``process_config_with_overrides`` would (``training/utils/omegaconf_utils.py:105``): recipe < YAML < CLI.

* unknown keys are skipped (Bridge logs a warning) — recorded as writes with ``valid_field`` False;
* ``~key`` deletes the key from the DictConfig only: the recipe value stays (a no-op);
* ``???`` keeps the recipe value; ``${a.b}`` resolves against the merged tree;
* a dict with ``_target_`` is instantiated; strings become dtypes where the field held one;
* nested keys under a section the recipe left as ``None`` or a string replace it with a plain dict.
"""

from __future__ import annotations

import re
from typing import Any

from mbmem_lint.parse.override_types import Interpolation, Missing, OverrideEntry, OverrideFile
from mbmem_lint.resolve.interpreter import Interpreter
from mbmem_lint.resolve.resolved import Unknown
from mbmem_lint.resolve.values import DictVal, Ext, Obj, Prov, Slot, WriteRec

_INTERP_RE = re.compile(r"\$\{([^}]+)\}")


def apply_overrides(interp: Interpreter, root: Obj, files: list[OverrideFile]) -> None:
    # OmegaConf resolves ${...} after merging every file and the dotlist
    # (training/utils/omegaconf_utils.py:157, to_container(resolve=True)): plain values first.
    deferred: list[tuple[OverrideEntry, str]] = []
    for f in files:
        origin = "cli" if f.path == "<--set>" else "yaml"
        for entry in f.entries:
            if _has_interpolation(entry.value):
                deferred.append((entry, origin))
            else:
                _apply_entry(interp, root, entry, origin)
    for entry, origin in deferred:
        _apply_entry(interp, root, entry, origin)


def _has_interpolation(value: Any) -> bool:
    if isinstance(value, Interpolation):
        return True
    if isinstance(value, dict):
        return any(_has_interpolation(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_interpolation(v) for v in value)
    return False


def _lookup(interp: Interpreter, root: Obj, path: str) -> Any:
    cur: Any = root
    for part in path.split("."):
        if isinstance(cur, Obj):
            slot = interp.get_slot(cur, part)
            if slot is None:
                return Unknown(f"{path} is not a field")
            cur = slot.value
        elif isinstance(cur, DictVal):
            s = cur.slots.get(part)
            if s is None:
                return Unknown(f"{path} is not set")
            cur = s.value
        else:
            return Unknown(f"{path} is not set")
    return cur


def _resolve_value(interp: Interpreter, root: Obj, value: Any, prov: Prov) -> Any:
    if isinstance(value, Interpolation):
        m = _INTERP_RE.fullmatch(value.text.strip())
        if m and not m.group(1).startswith(("oc.", "env:")) and ":" not in m.group(1):
            return _lookup(interp, root, m.group(1).strip())
        return Unknown(f"interpolation {value.text}")
    if isinstance(value, dict):
        if "_target_" in value and isinstance(value["_target_"], str):
            kwargs = [(str(k), _resolve_value(interp, root, v, prov), prov)
                      for k, v in value.items() if not str(k).startswith("_")]
            return interp.construct(value["_target_"], kwargs, prov)
        dv = DictVal(prov)
        for k, v in value.items():
            dv.slots[k] = Slot(_resolve_value(interp, root, v, prov), prov)
        return dv
    if isinstance(value, list):
        return [_resolve_value(interp, root, v, prov) for v in value]
    return value


def _apply_entry(interp: Interpreter, root: Obj, entry: OverrideEntry, origin: str) -> None:
    if isinstance(entry.value, Missing) or entry.op == "delete":
        return  # ``???`` keeps the recipe value; ``~key`` leaves the dataclass field unchanged
    loc = entry.location
    prov = Prov(loc, loc, origin, interp.next_seq(), entry.key_location, entry.path, None)
    parts = entry.path.split(".")
    parent: Any = root
    for i, part in enumerate(parts[:-1]):
        if isinstance(parent, Obj):
            slot = interp.get_slot(parent, part)
            if slot is None:
                _record_invalid(parent, ".".join(parts[i:]), entry.value, prov)
                return
            child = slot.value
            if child is None or isinstance(child, (str, Unknown)):
                # OmegaConf replaces a scalar with a mapping; Bridge then setattr()s a plain dict.
                child = DictVal(prov)
                interp.set_attr(parent, part, child, prov)
            parent = child
        elif isinstance(parent, DictVal):
            s = parent.slots.get(part)
            if s is None or not isinstance(s.value, (DictVal, Obj)):
                s = Slot(DictVal(prov), prov)
                parent.slots[part] = s
            parent = s.value
        else:
            return
    name = parts[-1]
    value = _resolve_value(interp, root, entry.value, prov)
    if isinstance(parent, Obj):
        slot = interp.get_slot(parent, name)
        valid = slot is not None or parent.schema is None or (parent.open and interp.project.any_model_field(name))
        if not valid:
            _record_invalid(parent, name, value, prov)
            return
        if slot is not None and isinstance(slot.value, Ext) and isinstance(value, str) and value.startswith("torch."):
            value = Ext(value)
        interp.set_attr(parent, name, value, prov)
    elif isinstance(parent, DictVal):
        interp.setitem(parent, name, value, prov)


def _record_invalid(obj: Obj, name: str, value: Any, prov: Prov) -> None:
    """Bridge skips keys that are not fields: keep the write for rules, without changing the config."""
    slot = obj.invalid.get(name)
    rec = WriteRec(value, prov, False)
    if slot is None:
        # Unknown value: the attribute does not exist at runtime; only the write history matters.
        obj.invalid[name] = Slot(Unknown(f"{name} is not a field; Bridge skips it"), prov, (rec,))
    else:
        obj.invalid[name] = Slot(slot.value, slot.prov, slot.history + (rec,))  # replaced: clones share slots
