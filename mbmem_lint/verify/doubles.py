"""Test doubles for building Megatron Bridge recipes on a CPU without network: ``sys.modules`` doubles
for GPU-only packages (Transformer Engine & co.), installed before megatron is imported, and an offline
``AutoBridge.from_hf_pretrained`` that answers from mbmem-lint's model table instead of downloading.

Runs inside the interpreter that has Megatron Bridge (``mbmem-lint verify --python``, and the
bench's differential check), as a plain module next to :mod:`realbuild`: standard library only,
nothing from mbmem_lint (which that interpreter need not have). Megatron Core and Bridge guard most
optional imports (``try: import transformer_engine ... except ImportError: HAVE_TE = False``), so a
package is only stubbed when an *unguarded* import of it would stop a recipe module from importing;
every stub is listed in the output (``stubbed_modules``) so its effect on the comparison can be judged.

A stub module answers any attribute with a :class:`Dummy`: a class that can be subclassed, called,
indexed and used as a decorator, so module-level code such as ``class X(te.pytorch.Linear)`` or
``@torch_compile_wrapper`` keeps working. Values a recipe reads from a stub would come back as
``Dummy`` instances and be reported as opaque, never silently compared.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Any

# Top-level packages replaced by doubles when they are not installed. Megatron guards most of them;
# the list only matters for the few unguarded imports on the recipe import path.
STUB_ROOTS = {
    "transformer_engine",
    "megatron.energon",
    "modelopt",
}
# No downloads, no telemetry, no GPU.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_MODE": "disabled",
    "CUDA_VISIBLE_DEVICES": "",
}


def offline_environment() -> None:
    """Set the offline variables (values already in the environment win)."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)


class _DummyMeta(abc.ABCMeta):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Dummy

    def __getitem__(cls, item: Any) -> Any:
        return Dummy

    def __or__(cls, other: Any) -> Any:
        return Dummy

    def __ror__(cls, other: Any) -> Any:
        return Dummy


class Dummy(metaclass=_DummyMeta):
    """Stand-in for anything taken from a stubbed module."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            self._wrapped = args[0]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        wrapped = self.__dict__.get("_wrapped")
        if wrapped is not None:
            return wrapped(*args, **kwargs)
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # ``@stub.decorator(...)`` applied to a function: identity
        return Dummy()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Dummy()

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Any:
        return iter(())


class _StubModule(types.ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []  # a package, so submodule imports resolve through the finder
        self.__file__ = f"<diffcheck stub {name}>"
        self.__version__ = "0.0.0+diffcheck.stub"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Dummy


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _StubFinder(importlib.abc.MetaPathFinder):
    def __init__(self, roots: set[str]) -> None:
        self.roots = roots
        self.used: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        root = next((r for r in self.roots if fullname == r or fullname.startswith(r + ".")), None)
        if root is not None:
            self.used.add(root)
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


FINDER: _StubFinder | None = None


def install(roots: set[str]) -> _StubFinder:
    """Stub every module whose top-level package is in ``roots`` (only those not importable for real)."""
    global FINDER
    missing = set()
    for root in roots:
        if root in sys.modules:
            continue
        try:
            spec = importlib.util.find_spec(root)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            missing.add(root)
    FINDER = _StubFinder(missing)
    sys.meta_path.insert(0, FINDER)
    return FINDER


# -- AutoBridge double ------------------------------------------------------------------------------


class SkipRecipe(Exception):
    """The recipe needs something the doubles cannot provide (HF id not in mbmem-lint's table)."""


MODEL_TABLE: dict[str, Any] = {}  # HF id -> {"provider": qualname, "fields": {...}} (mbmem-lint's table)
HF_IDS_SEEN: list[str] = []


def _import_qualname(qualname: str) -> Any:
    module, _, name = qualname.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _is_unknown(v: Any) -> bool:
    return "'unknown'" in repr(v)


def _decode(v: Any) -> Any:
    """The table's JSON as Python values: ``{"symbol": "torch.bfloat16"}`` imported (dtypes, activation
    functions; the dotted name itself when it does not import)."""
    if isinstance(v, dict) and set(v) == {"symbol"}:
        try:
            return _import_qualname(v["symbol"])
        except (ImportError, AttributeError):
            return v["symbol"]
    if isinstance(v, dict):
        return {k: _decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return v


class _OfflineBridge:
    """What ``AutoBridge.from_hf_pretrained(id)`` returns here: no download, the table's architecture."""

    def __init__(self, hf_id: str, revision: str | None) -> None:
        self.hf_id = hf_id
        self.revision = revision

    def to_megatron_provider(self, load_weights: bool = True, hf_path: Any = None) -> Any:
        entry = MODEL_TABLE.get(self.hf_id)
        if entry is None:
            raise SkipRecipe(f"HF id {self.hf_id!r} is not in mbmem-lint's model table")
        cls = _import_qualname(entry["provider"])
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        # The table's JSON: {"symbol": "torch.bfloat16"} for objects (dtypes, activation functions),
        # {"unknown": why} for what mbmem-lint does not know (left to the provider's default here).
        kwargs = {k: (tuple(v) if k == "window_size" and isinstance(v, list) else _decode(v))
                  for k, v in entry["fields"].items() if k in names and not _is_unknown(v)}
        provider = cls(**kwargs)
        for k, v in entry["fields"].items():  # attributes Bridge's conversion sets beyond the dataclass fields
            if k not in names and not _is_unknown(v):
                setattr(provider, k, _decode(v))
        if load_weights:
            provider.perform_initialization = False
        provider.hf_model_id = str(hf_path) if hf_path is not None else self.hf_id
        if hf_path is None and self.revision:
            provider.hf_model_revision = self.revision
        return provider

    def __getattr__(self, name: str) -> Any:
        raise SkipRecipe(f"recipe uses AutoBridge.{name}, which the offline double does not provide")


def _fake_from_hf_pretrained(cls: Any, path: Any, **kwargs: Any) -> _OfflineBridge:
    HF_IDS_SEEN.append(str(path))
    return _OfflineBridge(str(path), kwargs.get("revision"))


def _fake_from_hf_config(cls: Any, config: Any, **kwargs: Any) -> _OfflineBridge:
    raise SkipRecipe("recipe uses AutoBridge.from_hf_config (not doubled)")


def patch_autobridge() -> None:
    """Replace ``AutoBridge.from_hf_pretrained``/``from_hf_config`` (after megatron.bridge imported)."""
    from megatron.bridge.models.conversion.auto_bridge import AutoBridge

    AutoBridge.from_hf_pretrained = classmethod(_fake_from_hf_pretrained)
    AutoBridge.from_hf_config = classmethod(_fake_from_hf_config)
