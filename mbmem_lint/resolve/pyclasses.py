"""Classes of analysed library code: class statements, instances, methods, ``super()``, and Hugging Face
config objects.

The recipe interpreter treats a class as opaque (recipes build config dataclasses the schema knows). Megatron
Bridge's model bridges are classes, though: ``MegatronModelBridge.provider_bridge`` and its overrides
(``models/<family>/*_bridge.py``) turn an HF ``config.json`` into a provider, through class attributes
(``CONFIG_MAPPING``, ``PROVIDER_CLASS``), methods, ``super()`` and a registering class decorator. Where a
project asks for it (``Project.analyse_classes``, set by :mod:`mbmem_lint.resolve.bridges`), class statements
of library modules become :class:`~mbmem_lint.resolve.values.PyClass` values and this module gives them
Python's semantics, over the same abstract values (anything unknown stays unknown).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mbmem_lint.resolve.resolved import Unknown
from mbmem_lint.resolve.values import (
    BoundFunc,
    DictVal,
    Ext,
    Func,
    HFConfig,
    Prov,
    PyClass,
    PyInstance,
    Slot,
    SuperProxy,
)

if TYPE_CHECKING:
    from mbmem_lint.resolve.interpreter import Interpreter

# Decorators of a ``def`` that change how it binds (the IR keeps a def's decorators as dotted names).
_KINDS = {"staticmethod": "staticmethod", "classmethod": "classmethod", "property": "property",
          "cached_property": "property", "functools.cached_property": "property"}

# transformers ``PretrainedConfig.__init__`` defaults of the attributes every config has
# (``configuration_utils.py``): ``to_json_string`` leaves out values equal to them, so a complete
# config.json that lacks one of these keys has the default.
PRETRAINED_CONFIG_DEFAULTS: dict[str, Any] = {
    "tie_word_embeddings": True, "torch_dtype": None, "dtype": None, "architectures": None,
    "is_encoder_decoder": False, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
    "chunk_size_feed_forward": 0, "name_or_path": "", "model_type": "",
}  # fmt: skip

MISSING = object()


def func_kind(decorators: list[str]) -> str:
    for d in decorators:
        k = _KINDS.get(d)
        if k is not None:
            return k
    return "function"


def define_class(interp: Interpreter, s: list[Any]) -> Any:
    """Run a class statement ``["class", name, loc, bases, body, decorators]``; return the class value after
    its decorators (a decorator whose result is not a class leaves the class as it was defined)."""
    from mbmem_lint.resolve.interpreter import Frame, _Break, _Continue, _Raise, _Return

    f = interp.frame
    name, bases_ir, body, decos_ir = s[1], s[3], s[4], s[5]
    bases = []
    for b in bases_ir:
        if b[0] == "sub" and interp.eval(b[1]) in (Ext("typing.Generic"), Ext("typing.Protocol")):
            continue  # Generic[...]: typing only
        bases.append(interp.eval(b))
    decorators = [interp.eval(d) for d in decos_ir]
    ns: dict[str, Any] = {}
    qual = f"{f.module.name}.{name}"
    frame = Frame(f.module, ns, f"<class {name}>")
    frame.class_body = True
    interp.stack.append(frame)
    try:
        interp.run_body(body)
    except (_Raise, _Return, _Break, _Continue):
        pass
    finally:
        interp.stack.pop()
    cls = PyClass(name, qual, bases, ns)
    for v in ns.values():
        if isinstance(v, Func) and v.owner is None:
            v.owner = cls
    result: Any = cls
    for deco in reversed(decorators):
        out = interp.call(deco, [result], [], s[2])
        if isinstance(out, PyClass):
            result = out
    return result


# -- attributes ----------------------------------------------------------------------------------------

def _bind(value: Any, owner_self: Any, cls: PyClass, interp: Interpreter, on_instance: bool) -> Any:
    if isinstance(value, Func):
        if value.kind == "staticmethod":
            return value
        if value.kind == "classmethod":
            return BoundFunc(value, cls)
        if value.kind == "property":
            return interp.call_func(value, [owner_self], [], value.loc) if on_instance else value
        return BoundFunc(value, owner_self) if on_instance else value
    return value


def _opaque_bases(cls: PyClass) -> bool:
    """True when some class in the MRO derives from a class outside the analysed code (its attributes are
    not known)."""
    return any(not isinstance(b, PyClass) and not (isinstance(b, Ext) and b.qualname in _INERT_BASES)
               for c in cls.mro() for b in c.bases)


# Bases that add no attributes the bridges read (typing generics, ABC, object).
_INERT_BASES = {"builtins.object", "abc.ABC", "typing.Generic", "typing.Protocol"}


def get_attr(interp: Interpreter, base: Any, name: str) -> Any:
    """``base.name`` for a PyClass, PyInstance, SuperProxy or HFConfig (the caller checked the type)."""
    found, value = lookup_attr(interp, base, name)
    if found is True:
        return value
    what = base.label if isinstance(base, HFConfig) else getattr(base, "qualname", type(base).__name__)
    return Unknown(f"attribute {name} of {what}" + (" (partial config.json)" if found is None else ""))


def lookup_attr(interp: Interpreter, base: Any, name: str) -> tuple[bool | None, Any]:
    """(found, value): found is True, False (no such attribute) or None (not knowable)."""
    if isinstance(base, HFConfig):
        return hf_attr(interp, base, name)
    if isinstance(base, PyInstance):
        if name in base.attrs:
            return True, base.attrs[name]
        if name == "__class__":
            return True, base.cls
        ok, v, owner = base.cls.lookup(name)
        if ok and owner is not None:
            return True, _bind(v, base, base.cls, interp, True)
        return (None if _opaque_bases(base.cls) else False), None
    if isinstance(base, PyClass):
        if name == "__name__":
            return True, base.name
        if name == "__qualname__":
            return True, base.qualname
        ok, v, owner = base.lookup(name)
        if ok and owner is not None:
            return True, _bind(v, base, base, interp, False)
        return (None if _opaque_bases(base) else False), None
    if isinstance(base, SuperProxy):
        obj = base.obj
        start = obj.cls if isinstance(obj, PyInstance) else obj
        if not isinstance(start, PyClass):
            return None, None
        mro = start.mro()
        after = mro[mro.index(base.cls) + 1:] if base.cls in mro else []
        for c in after:
            if name in c.attrs:
                return True, _bind(c.attrs[name], obj, start, interp, isinstance(obj, PyInstance))
        return None, None
    return None, None


def set_attr(interp: Interpreter, base: Any, name: str, value: Any) -> None:
    table = base.attrs
    if interp.in_may():
        from mbmem_lint.resolve.interpreter import join

        found, old = lookup_attr(interp, base, name)
        value = join(old if found else None, value, f"attribute {name} set conditionally")
    table[name] = value


# -- calls ---------------------------------------------------------------------------------------------

def instantiate(interp: Interpreter, cls: PyClass, args: list[Any], kwargs: list[Any], loc: list[int]) -> Any:
    inst = PyInstance(cls)
    ok, init, owner = cls.lookup("__init__")
    if ok and isinstance(init, Func):
        interp.call_func(init, [inst, *args], kwargs, loc)
    elif not ok and (args or kwargs) and _opaque_bases(cls):
        return Unknown(f"instance of {cls.qualname} (its base class is not analysed)")
    return inst


def super_of(interp: Interpreter) -> Any:
    """Zero-argument ``super()`` in the running method: its defining class and first argument."""
    f = interp.frame
    fn = f.function
    if fn is None or fn.owner is None or not fn.params or f.locals is None:
        return Unknown("super() outside a method")
    first = f.locals.get(fn.params[0][0])
    if not isinstance(first, (PyInstance, PyClass)):
        return Unknown("super() of an unknown object")
    return SuperProxy(fn.owner, first)


def is_subclass(interp: Interpreter, a: Any, b: Any) -> Any:
    if isinstance(b, tuple):
        results = [is_subclass(interp, a, x) for x in b]
        if True in results:
            return True
        return Unknown("issubclass()") if any(isinstance(r, Unknown) for r in results) else False
    if isinstance(a, PyClass):
        mro = a.mro()
        if isinstance(b, PyClass):
            return b in mro or (Unknown("issubclass() of a class with unanalysed bases") if _opaque_bases(a)
                                else False)
        if isinstance(b, Ext):
            if any(isinstance(x, Ext) and x == b for c in mro for x in c.bases):
                return True
            return Unknown("issubclass() of a class with unanalysed bases") if _opaque_bases(a) else False
        return Unknown("issubclass()")
    if isinstance(a, Ext) and isinstance(b, Ext):
        if a == b or interp.project.is_subclass(a.qualname, b.qualname):
            return True
        known = interp.project.schema_class(a.qualname) is not None
        return False if known else Unknown("issubclass() of a class outside the schema")
    if isinstance(a, Ext) and isinstance(b, PyClass):
        return False
    return Unknown("issubclass()")


def is_instance(interp: Interpreter, v: Any, types: tuple[Any, ...]) -> Any:
    """isinstance() for PyInstance / HFConfig values and PyClass types (None: not ours to answer)."""
    if isinstance(v, PyInstance):
        out: Any = False
        for t in types:
            r = is_subclass(interp, v.cls, t)
            if r is True:
                return True
            if isinstance(r, Unknown):
                out = r
        return out
    if isinstance(v, HFConfig):
        names = [t.qualname for t in types if isinstance(t, Ext)]
        if any(n.endswith(("PretrainedConfig", "PreTrainedConfig")) for n in names):
            return True
        if any(n.startswith("builtins.") for n in names) and len(names) == len(types):
            return False
        return Unknown("isinstance() of a Hugging Face config")
    if any(isinstance(t, PyClass) for t in types):
        if v is None or isinstance(v, (int, float, str, bool, list, tuple, DictVal)):
            return False
        return Unknown("isinstance() against an analysed class")
    return None


# -- Hugging Face config objects -----------------------------------------------------------------------

def hf_attr(interp: Interpreter, cfg: HFConfig, name: str) -> tuple[bool | None, Any]:
    if name in cfg.attrs:
        return True, cfg.attrs[name]
    # transformers keeps torch_dtype and dtype as one attribute (renamed in 4.56, the old name an alias).
    alias = {"torch_dtype": "dtype", "dtype": "torch_dtype"}.get(name)
    if alias is not None and alias in cfg.attrs:
        return True, cfg.attrs[alias]
    if name == "__dict__":
        dv = DictVal(_prov(interp))
        for k, v in cfg.attrs.items():
            dv.slots[k] = Slot(v, dv.created)
        return True, dv
    if name in ("to_dict", "to_diff_dict", "get_text_config", "get"):
        from mbmem_lint.resolve.values import BoundMethod

        return True, BoundMethod(cfg, name)
    if name in cfg.defaults:
        return True, cfg.defaults[name]
    if cfg.partial:
        return None, None
    if name in PRETRAINED_CONFIG_DEFAULTS:
        return True, PRETRAINED_CONFIG_DEFAULTS[name]
    return False, None


def hf_method(interp: Interpreter, cfg: HFConfig, name: str, args: list[Any]) -> Any:
    if name in ("to_dict", "to_diff_dict"):
        return hf_attr(interp, cfg, "__dict__")[1]
    if name == "get_text_config":
        found, text = hf_attr(interp, cfg, "text_config")
        if found is True and isinstance(text, HFConfig):
            return text
        return cfg if found is False else Unknown("text config of a partial config.json")
    return Unknown(f"{name}() of a Hugging Face config")


def _prov(interp: Interpreter) -> Prov:
    return interp.prov(None)


def hf_config_value(data: dict[str, Any], prov: Prov, *, partial: bool, defaults: dict[str, Any] | None = None,
                    label: str = "config.json") -> HFConfig:
    """The HFConfig of a parsed ``config.json`` object: nested ``*_config`` objects are configs themselves
    (transformers builds sub-configs for them), other objects are dicts, lists stay lists."""
    defaults = defaults or {}

    def conv(v: Any, key: str) -> Any:
        if isinstance(v, dict):
            if key.endswith("_config"):
                sub_defaults = defaults.get(f"{key}.*", {}) if isinstance(defaults.get(f"{key}.*"), dict) else {}
                return hf_config_value(v, prov, partial=partial, defaults=sub_defaults, label=f"{label}.{key}")
            dv = DictVal(prov)
            for k, x in v.items():
                dv.slots[k] = Slot(conv(x, str(k)), prov)
            return dv
        if isinstance(v, list):
            return [conv(x, key) for x in v]
        return v

    attrs = {k: conv(v, k) for k, v in data.items()}
    own_defaults = {k: v for k, v in defaults.items() if not k.endswith(".*")}
    return HFConfig(attrs, partial, own_defaults, label)


def plain(value: Any) -> Any:
    """A JSON-able copy of an abstract value, or MISSING when it holds something that is not data (a
    function, an object, a class). Unknowns stay Unknown."""
    if value is None or isinstance(value, (bool, int, float, str, Unknown)):
        return value
    if isinstance(value, (list, tuple)):
        items = [plain(x) for x in value]
        return MISSING if any(x is MISSING for x in items) else items
    if isinstance(value, DictVal):
        out = {}
        for k, s in value.slots.items():
            v = plain(s.value)
            if v is MISSING or not isinstance(k, str):
                return MISSING
            out[k] = v
        return out
    if isinstance(value, HFConfig):
        out = {}
        for k, x in value.attrs.items():
            v = plain(x)
            if v is not MISSING:
                out[k] = v
        return out
    if isinstance(value, Ext):
        return value
    return MISSING
