"""``sys.modules`` test doubles for GPU-only packages, installed before megatron is imported.

Runs inside the Python 3.12 diffcheck venv. Megatron Core and Bridge guard most optional imports
(``try: import transformer_engine ... except ImportError: HAVE_TE = False``), so a package is only
stubbed when an *unguarded* import of it would stop a recipe module from importing; every stub is
listed in the harness output (``stubbed_modules``) so its effect on the comparison can be judged.

A stub module answers any attribute with a :class:`Dummy`: a class that can be subclassed, called,
indexed and used as a decorator, so module-level code such as ``class X(te.pytorch.Linear)`` or
``@torch_compile_wrapper`` keeps working. Values a recipe reads from a stub would come back as
``Dummy`` instances and be reported as opaque, never silently compared.
"""

from __future__ import annotations

import abc
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any


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

    def __iter__(self):  # type: ignore[no-untyped-def]
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
