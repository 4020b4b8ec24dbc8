"""Which megatron-core release a megatron-bridge release was built against, read from the code.

The wheels do not pin it (``Requires-Dist: megatron-core[dev,mlm]``). Two kinds of evidence, both
static (:mod:`ast`, nothing imported):

* **imports**: every ``from megatron.core… / megatron.training… import name`` of the Bridge wheel,
  resolved in a Core release (module files, top-level definitions, re-exports and ``import *``
  chains). An unguarded import that does not resolve breaks the Bridge module that has it; a Core
  release that leaves none unresolved (apart from ones no release resolves) is compatible.
* **fields**: names of Core dataclass fields the Bridge code mentions (attributes, keywords, string
  constants) that a Core release added or removed: Bridge code written for a field that only a later
  patch added (e.g. ``fp4_param_gather``) needs that patch.

``bench/core_pairing.py`` prints both for downloaded wheels; docs/versions.md has the table and the
pairings chosen (:data:`mbmem_lint.resolve.versions.SHIPPED`).
"""

from __future__ import annotations

import ast
from pathlib import Path

from mbmem_lint.records import dataclass
from mbmem_lint.resolve.schema_gen import module_name, resolve_relative, top_level_statements

CORE_PACKAGES = ("core", "training")


@dataclass(frozen=True)
class CoreImport:
    """One ``from megatron.core.x import name`` (``name`` None for ``import megatron.core.x``)."""

    file: str
    line: int
    module: str
    name: str | None
    guarded: bool  # inside a ``try`` whose handler catches import errors (or everything)


def _guarded_nodes(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                h.type is None or "Error" in ast.unparse(h.type) or "Exception" in ast.unparse(h.type)
                for h in node.handlers):
            for stmt in node.body:
                out.update(id(n) for n in ast.walk(stmt))
    return out


def core_imports(bridge_root: Path) -> list[CoreImport]:
    """Every import of a ``megatron.core``/``megatron.training`` name under ``bridge_root/megatron/bridge``."""
    out: list[CoreImport] = []
    base = bridge_root / "megatron" / "bridge"
    for path in sorted(base.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        guarded = _guarded_nodes(tree)
        rel = path.relative_to(bridge_root).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[:2] in (["megatron", "core"], ["megatron", "training"]):
                    for alias in node.names:
                        out.append(CoreImport(rel, node.lineno, node.module, alias.name, id(node) in guarded))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(("megatron.core", "megatron.training")):
                        out.append(CoreImport(rel, node.lineno, alias.name, None, id(node) in guarded))
    return out


class CoreIndex:
    """The modules of a Core release and the names each defines at top level (parsed on demand)."""

    def __init__(self, core_root: Path) -> None:
        self.paths: dict[str, Path] = {}
        for pkg in CORE_PACKAGES:
            base = core_root / "megatron" / pkg
            for path in base.rglob("*.py") if base.is_dir() else ():
                self.paths[module_name(core_root, path)[0]] = path
        self._names: dict[str, tuple[set[str], list[str]]] = {}

    def _scan(self, module: str) -> tuple[set[str], list[str]]:
        """(names bound at top level, modules star-imported) of ``module``."""
        hit = self._names.get(module)
        if hit is not None:
            return hit
        names: set[str] = set()
        stars: list[str] = []
        path = self.paths[module]
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            tree = ast.Module(body=[], type_ignores=[])
        for stmt in top_level_statements(tree.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(stmt, ast.Import):
                names.update(a.asname or a.name.split(".")[0] for a in stmt.names)
            elif isinstance(stmt, ast.ImportFrom):
                if any(a.name == "*" for a in stmt.names):
                    stars.append(resolve_relative(module, path.name == "__init__.py", stmt.level, stmt.module))
                names.update(a.asname or a.name for a in stmt.names if a.name != "*")
        self._names[module] = (names, stars)
        return names, stars

    def resolves(self, module: str, name: str | None, depth: int = 0) -> bool:
        """``from module import name`` works in this release (following ``import *`` re-exports)."""
        if module not in self.paths or depth > 8:
            return False
        if name is None or name == "*" or f"{module}.{name}" in self.paths:
            return True
        names, stars = self._scan(module)
        return name in names or any(self.resolves(s, name, depth + 1) for s in stars)


def unresolved(imports: list[CoreImport], core: CoreIndex) -> list[CoreImport]:
    """The imports that do not resolve in ``core``."""
    return [i for i in imports if not core.resolves(i.module, i.name)]
