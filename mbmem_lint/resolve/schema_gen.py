"""Generate the dataclass schema (fields, types, defaults) of Megatron Bridge + Megatron Core statically.

Reads the unpacked wheel sources with :mod:`ast` only (nothing is imported or executed). For every
``@dataclass`` class, and every class inheriting from one, under ``megatron/bridge``, ``megatron/core``
and ``megatron/training`` it records the direct bases (qualified through each module's imports and
re-exports) and the dataclass fields merged in MRO order, the way :func:`dataclasses.dataclass` does:
fields of dataclass bases first (most-base first), then the class's own annotated fields, so a
subclass redeclaring a field (``GPTModelProvider.deallocate_pipeline_outputs: bool = True``)
overrides the inherited default while keeping the field's position.

The output is a JSON-able dict::

    {"generator": {"megatron_bridge": "0.6.2", "megatron_core": "0.19.2"},
     "classes": {"<qualname>": {"bases": [...], "fields": {"<name>": {"type": str, "default": {...},
                                                                     "line": int, "init": bool}}}}}

Default encodings: ``{"value": literal}``, ``{"symbol": "torch.float32"}``, ``{"factory": qualname}``,
``{"required": true}``, ``{"unknown": "<source>"}``.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mbmem_lint.records import dataclass, field

PACKAGES = ("bridge", "core", "training")

# torch dtype aliases normalised to their canonical names.
_DTYPE_ALIASES = {
    "torch.float": "torch.float32",
    "torch.half": "torch.float16",
    "torch.double": "torch.float64",
    "torch.long": "torch.int64",
    "torch.int": "torch.int32",
    "torch.short": "torch.int16",
    "torch.cfloat": "torch.complex64",
}

_DATACLASS_DECORATORS = {"dataclasses.dataclass"}
_SKIP_TYPES = {
    "ClassVar",
    "typing.ClassVar",
    "InitVar",
    "dataclasses.InitVar",
    "KW_ONLY",
    "dataclasses.KW_ONLY",
}

_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}

_NO_VALUE = object()


@dataclass
class _ClassInfo:
    """A class found in the Megatron sources, its qualified bases and whether it is a dataclass."""

    qualname: str
    module: str
    node: ast.ClassDef
    is_dataclass: bool
    bases: list[str] = field(default_factory=list)


@dataclass
class _ModuleInfo:
    """A parsed Megatron source module with its imports, top-level classes and constants."""

    name: str
    is_package: bool
    tree: ast.Module
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    constants: dict[str, ast.expr] = field(default_factory=dict)  # NAME = <expr> at top level


def module_name(root: Path, path: Path) -> tuple[str, bool]:
    """(dotted module name, whether it is a package) of a ``.py`` file under ``root``."""
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def top_level_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Top-level statements, descending into ``if``/``try`` blocks (first binding wins)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            yield from top_level_statements(stmt.body)
            yield from top_level_statements(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from top_level_statements(stmt.body)
            for handler in stmt.handlers:
                yield from top_level_statements(handler.body)
            yield from top_level_statements(stmt.orelse)
            yield from top_level_statements(stmt.finalbody)
        else:
            yield stmt


def resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    base = ".".join(parts)
    if target:
        return f"{base}.{target}" if base else target
    return base


def _index_module(info: _ModuleInfo) -> None:
    for stmt in top_level_statements(info.tree.body):
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    info.imports.setdefault(alias.asname, alias.name)
                else:
                    head = alias.name.split(".")[0]
                    info.imports.setdefault(head, head)
        elif isinstance(stmt, ast.ImportFrom):
            src = resolve_relative(info.name, info.is_package, stmt.level, stmt.module)
            for alias in stmt.names:
                if alias.name == "*":
                    continue
                info.imports.setdefault(alias.asname or alias.name, f"{src}.{alias.name}")
        elif isinstance(stmt, ast.ClassDef):
            info.classes.setdefault(stmt.name, stmt)
        elif (
            isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
        ):
            info.constants.setdefault(stmt.targets[0].id, stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            info.constants.setdefault(stmt.target.id, stmt.value)


_CLASS_RE = re.compile(r"^class\s+(\w+)\s*\(([^)]*)\)", re.M)


def package_roots(corpus: Path | Sequence[Path]) -> dict[str, Path]:
    """Package (``bridge``, ``core``, ``training``) → the first of the folders that holds ``megatron/<package>``."""
    roots = [corpus] if isinstance(corpus, Path) else list(corpus)
    found: dict[str, Path] = {}
    for pkg in PACKAGES:
        for root in roots:
            if (root / "megatron" / pkg).is_dir():
                found[pkg] = root
                break
    return found


class _Corpus:
    """Module index over the corpus; modules are parsed lazily (``ast.parse`` dominates the cost)."""

    def __init__(self, corpus: Path | Sequence[Path]) -> None:
        self.paths: dict[str, tuple[Path, bool]] = {}
        self.texts: dict[str, str] = {}
        self._modules: dict[str, _ModuleInfo | None] = {}
        self.roots = package_roots(corpus)
        for pkg, root in self.roots.items():
            for path in sorted((root / "megatron" / pkg).rglob("*.py")):
                name, is_package = module_name(root, path)
                self.paths[name] = (path, is_package)

    def package_root(self, pkg: str) -> Path | None:
        return self.roots.get(pkg)

    def text(self, name: str) -> str:
        if name not in self.texts:
            self.texts[name] = self.paths[name][0].read_text(encoding="utf-8")
        return self.texts[name]

    def get(self, name: str) -> _ModuleInfo | None:
        if name not in self._modules:
            info: _ModuleInfo | None = None
            if name in self.paths:
                try:
                    tree = ast.parse(self.text(name), filename=str(self.paths[name][0]))
                except SyntaxError:
                    tree = None
                if tree is not None:
                    info = _ModuleInfo(name=name, is_package=self.paths[name][1], tree=tree)
                    _index_module(info)
            self._modules[name] = info
        return self._modules[name]

    def candidate_modules(self) -> list[str]:
        """Modules that may define a dataclass or a subclass of one (a cheap textual pre-filter).

        A module qualifies if it mentions ``dataclass``, or defines a class whose base's simple name is
        the name of a class in an already qualifying module (iterated to a fixpoint).
        """
        selected = {m for m in self.paths if "dataclass" in self.text(m)}
        names: set[str] = set()
        for m in selected:
            names.update(n for n, _ in _CLASS_RE.findall(self.text(m)))
        changed = True
        while changed:
            changed = False
            for m in self.paths:
                if m in selected:
                    continue
                found = _CLASS_RE.findall(self.text(m))
                if any(
                    b.strip().split("[")[0].split(".")[-1] in names
                    for _, bases in found
                    for b in bases.split(",")
                ):
                    selected.add(m)
                    names.update(n for n, _ in found)
                    changed = True
        return sorted(selected)

    # -- name resolution ---------------------------------------------------------------------------

    def qualify(self, module: str, dotted: str) -> str:
        """Qualify a dotted name used in ``module`` through its imports (not following re-exports)."""
        info = self.get(module)
        head, _, rest = dotted.partition(".")
        if info is not None:
            if head in info.classes:
                base = f"{module}.{head}"
            elif head in info.imports:
                base = info.imports[head]
            else:
                return dotted
            return f"{base}.{rest}" if rest else base
        return dotted

    def canonical(self, qualname: str, _depth: int = 0) -> str:
        """Follow re-exports (``from .x import Y`` in package ``__init__``) to where a name is defined."""
        if _depth > 20:
            return qualname
        parts = qualname.split(".")
        for i in range(len(parts) - 1, 0, -1):
            mod = ".".join(parts[:i])
            info = self.get(mod)
            if info is None:
                continue
            name, rest = parts[i], parts[i + 1 :]
            if name in info.classes:
                return qualname
            if name in info.imports:
                target = info.imports[name]
                if target == qualname:
                    return qualname
                resolved = self.canonical(target, _depth + 1)
                return ".".join([resolved, *rest])
            if name in info.constants and isinstance(info.constants[name], (ast.Name, ast.Attribute)):
                # Simple alias ``Foo = Bar`` at module level.
                alias = _dotted(info.constants[name])
                if alias:
                    resolved = self.canonical(self.qualify(mod, alias), _depth + 1)
                    return ".".join([resolved, *rest])
            return qualname
        return qualname

    def resolve(self, module: str, dotted: str) -> str:
        return self.canonical(self.qualify(module, dotted))


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _base_expr(node: ast.expr) -> ast.expr:
    # Generic[T], ModelProviderMixin[MCoreGPTModel] -> the subscripted class
    return node.value if isinstance(node, ast.Subscript) else node


class _DefaultEncoder:
    def __init__(self, corpus: _Corpus, module: str) -> None:
        self.corpus = corpus
        self.module = module

    def source(self, node: ast.expr) -> str:
        """Source text of an expression, whitespace-normalised (stable across Python versions)."""
        seg = ast.get_source_segment(self.corpus.text(self.module), node)
        if seg is None:
            seg = ast.unparse(node)
        return " ".join(seg.split())

    def symbol(self, dotted: str) -> str:
        qual = self.corpus.resolve(self.module, dotted)
        return _DTYPE_ALIASES.get(qual, qual)

    def literal(self, node: ast.expr, depth: int = 0) -> Any:
        """The JSON value of a constant expression, or ``_NO_VALUE``."""
        if depth > 10:
            return _NO_VALUE
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bytes, complex)) or node.value is Ellipsis:
                return _NO_VALUE
            if isinstance(node.value, float) and not math.isfinite(node.value):
                return _NO_VALUE
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = [self.literal(e, depth + 1) for e in node.elts]
            if any(i is _NO_VALUE for i in items):
                return _NO_VALUE
            if isinstance(node, ast.Set):
                try:
                    return sorted(items)
                except TypeError:
                    return _NO_VALUE
            return items
        if isinstance(node, ast.Dict):
            out: dict[str, Any] = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    return _NO_VALUE
                key = self.literal(k, depth + 1)
                val = self.literal(v, depth + 1)
                if not isinstance(key, (str, int, float, bool)) or val is _NO_VALUE:
                    return _NO_VALUE
                out[str(key)] = val
            return out
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            val = self.literal(node.operand, depth + 1)
            if isinstance(val, (int, float)) and not isinstance(val, bool):
                return -val if isinstance(node.op, ast.USub) else val
            return _NO_VALUE
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left = self.literal(node.left, depth + 1)
            right = self.literal(node.right, depth + 1)
            nums = (int, float)
            if (
                isinstance(left, nums)
                and isinstance(right, nums)
                and not isinstance(left, bool)
                and not isinstance(right, bool)
            ):
                if isinstance(node.op, ast.Pow) and abs(right) > 256:
                    return _NO_VALUE
                try:
                    return _BINOPS[type(node.op)](left, right)
                except (ArithmeticError, ValueError):
                    return _NO_VALUE
            if isinstance(node.op, ast.Add):
                if isinstance(left, str) and isinstance(right, str):
                    return left + right
                if isinstance(left, list) and isinstance(right, list):
                    return left + right
            if isinstance(node.op, ast.Mult):
                seq, count = (left, right) if isinstance(left, list) else (right, left)
                if (
                    isinstance(seq, list)
                    and isinstance(count, int)
                    and not isinstance(count, bool)
                    and 0 <= count * max(len(seq), 1) <= 4096
                ):
                    return seq * count
            return _NO_VALUE
        if isinstance(node, ast.Name):
            # A module-level constant of the same module (e.g. ``DEFAULT_X = 3``).
            info = self.corpus.get(self.module)
            if info is not None and node.id in info.constants:
                return self.literal(info.constants[node.id], depth + 1)
        return _NO_VALUE

    def factory(self, node: ast.expr) -> dict[str, Any]:
        if isinstance(node, ast.Lambda):
            body = node.body
            lit = self.literal(body)
            if lit is not _NO_VALUE:
                return {"value": lit}
            if isinstance(body, ast.Call) and not body.args and not body.keywords:
                return self.factory(body.func)
            return {"unknown": self.source(node)}
        dotted = _dotted(node)
        if dotted in ("list", "tuple", "set"):
            return {"value": []}
        if dotted == "dict":
            return {"value": {}}
        if dotted is not None:
            return {"factory": self.symbol(dotted)}
        return {"unknown": self.source(node)}

    def default(self, value: ast.expr | None) -> tuple[dict[str, Any], bool]:
        """Encoded default and the ``init`` flag."""
        if value is None:
            return {"required": True}, True
        if isinstance(value, ast.Call) and _dotted(value.func) in ("field", "dataclasses.field"):
            kwargs = {kw.arg: kw.value for kw in value.keywords if kw.arg}
            init = True
            if "init" in kwargs:
                init_val = self.literal(kwargs["init"])
                init = bool(init_val) if init_val is not _NO_VALUE else True
            if "default" in kwargs:
                return self.encode(kwargs["default"]), init
            if "default_factory" in kwargs:
                return self.factory(kwargs["default_factory"]), init
            return {"required": True}, init
        return self.encode(value), True

    def encode(self, node: ast.expr) -> dict[str, Any]:
        lit = self.literal(node)
        if lit is not _NO_VALUE:
            return {"value": lit}
        dotted = _dotted(node)
        if dotted is not None:
            return {"symbol": self.symbol(dotted)}
        return {"unknown": self.source(node)}


def _annotation_text(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ast.unparse(node)


def _is_skipped_annotation(ann: ast.expr, corpus: _Corpus, module: str) -> bool:
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        text = ann.value.strip()
        return any(text == t or text.startswith(t + "[") for t in _SKIP_TYPES)
    head = _base_expr(ann)
    dotted = _dotted(head)
    if dotted is None:
        return False
    return dotted in _SKIP_TYPES or corpus.qualify(module, dotted) in {
        "typing.ClassVar",
        "dataclasses.InitVar",
        "dataclasses.KW_ONLY",
    }


def _is_dataclass_decorator(dec: ast.expr, corpus: _Corpus, module: str) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    dotted = _dotted(target)
    if dotted is None:
        return False
    return corpus.qualify(module, dotted) in _DATACLASS_DECORATORS


def _c3_merge(seqs: list[list[str]]) -> list[str] | None:
    seqs = [list(s) for s in seqs if s]
    out: list[str] = []
    while seqs:
        for seq in seqs:
            head = seq[0]
            if not any(head in s[1:] for s in seqs):
                break
        else:
            return None
        out.append(head)
        seqs = [[x for x in s if x != head] for s in seqs]
        seqs = [s for s in seqs if s]
    return out


def package_version(corpus: Path | None, pkg: str) -> str:
    """``MAJOR.MINOR.PATCH`` (plus ``PRE_RELEASE``) of ``megatron/<pkg>/package_info.py`` under ``corpus``."""
    if corpus is None:
        return "unknown"
    path = corpus / "megatron" / pkg / "package_info.py"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    nums = []
    for key in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"^{key}\s*=\s*(\d+)", text, re.M)
        if not m:
            return "unknown"
        nums.append(m.group(1))
    pre = re.search(r"^PRE_RELEASE\s*=\s*[\"']([A-Za-z0-9.]*)[\"']", text, re.M)
    return ".".join(nums) + (pre.group(1) if pre else "")


def _init_attributes(node: ast.ClassDef, enc: Any, declared: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Attributes a hand-written ``__init__`` stores from its parameters (``self.x = x``).

    Bridge's ``GPTDatasetConfig.__init__`` takes ``skip_getting_attention_mask_from_dataset`` and
    stores it without declaring a field; recipes pass it, so it is a valid name to set.
    """
    init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
    if init is None:
        return {}
    stored: set[str] = set()
    for st in ast.walk(init):
        if isinstance(st, ast.Assign) and isinstance(st.value, ast.Name):
            for t in st.targets:
                if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                        and t.attr == st.value.id):
                    stored.add(t.attr)
    args = init.args
    positional = list(args.posonlyargs) + list(args.args)
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
    out: dict[str, dict[str, Any]] = {}
    for arg, default_node in pairs:
        if arg.arg == "self" or arg.arg not in stored or arg.arg in declared:
            continue
        default, _ = enc.default(default_node)
        out[arg.arg] = {
            "type": _annotation_text(arg.annotation) if arg.annotation is not None else "",
            "default": default,
            "line": arg.lineno,
            "init": True,
        }
    return out


def generate_schema(corpus: Path | Sequence[Path]) -> dict[str, Any]:
    """The schema of every dataclass (and dataclass subclass) in the corpus, each class with all its
    fields (``{"bases", "fields"}``: the compact form expanded by :func:`expand_schema`)."""
    return expand_schema(generate_compact_schema(corpus))


def generate_compact_schema(corpus: Path | Sequence[Path]) -> dict[str, Any]:
    """The schema as shipped: each class with its bases, its MRO (classes of the schema only) and,
    for a dataclass, the fields it declares itself (``{"bases", "mro", "own"}``). The fields of a
    class are merged from these at load time (:func:`mbmem_lint.resolve.schema.merged_fields`),
    so a base's fields are stored once rather than in every subclass.

    ``corpus``: a folder holding ``megatron/bridge``, ``megatron/core`` (and ``megatron/training``),
    or several such folders (a Bridge checkout and a Core checkout): the first that has a package wins.
    """
    idx = _Corpus(corpus)

    classes: dict[str, _ClassInfo] = {}
    for mod_name in idx.candidate_modules():
        info = idx.get(mod_name)
        if info is None:
            continue
        for stmt in top_level_statements(info.tree.body):
            if not isinstance(stmt, ast.ClassDef):
                continue
            qual = f"{mod_name}.{stmt.name}"
            if qual in classes:
                continue
            is_dc = any(_is_dataclass_decorator(d, idx, mod_name) for d in stmt.decorator_list)
            bases = []
            for b in stmt.bases:
                dotted = _dotted(_base_expr(b))
                if dotted is not None:
                    bases.append(idx.resolve(mod_name, dotted))
            classes[qual] = _ClassInfo(
                qualname=qual, module=mod_name, node=stmt, is_dataclass=is_dc, bases=bases
            )

    mro_cache: dict[str, list[str]] = {}

    def mro(qual: str, stack: tuple[str, ...] = ()) -> list[str]:
        if qual in mro_cache:
            return mro_cache[qual]
        ci = classes.get(qual)
        if ci is None or qual in stack:
            return [qual]
        parents = [mro(b, (*stack, qual)) for b in ci.bases]
        merged = _c3_merge([*parents, list(ci.bases)])
        if merged is None:  # inconsistent hierarchy: fall back to depth-first
            merged = []
            for p in parents:
                merged.extend(x for x in p if x not in merged)
        result = [qual, *merged]
        mro_cache[qual] = result
        return result

    own_cache: dict[str, dict[str, dict[str, Any]]] = {}

    def own_fields(qual: str) -> dict[str, dict[str, Any]]:
        if qual in own_cache:
            return own_cache[qual]
        ci = classes[qual]
        enc = _DefaultEncoder(idx, ci.module)
        out: dict[str, dict[str, Any]] = {}
        for stmt in ci.node.body:
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            if _is_skipped_annotation(stmt.annotation, idx, ci.module):
                continue
            default, init = enc.default(stmt.value)
            out[stmt.target.id] = {
                "type": _annotation_text(stmt.annotation),
                "default": default,
                "line": stmt.lineno,
                "init": init,
            }
        out.update(_init_attributes(ci.node, enc, out))
        own_cache[qual] = out
        return out

    # A class with no dataclass in its MRO contributes no fields: it is left out, and so are the
    # links to it (dataclasses would find nothing there either).
    kept = [q for q in sorted(classes) if any(c in classes and classes[c].is_dataclass for c in mro(q))]
    keep = set(kept)
    result: dict[str, Any] = {}
    for qual in kept:
        ci = classes[qual]
        entry: dict[str, Any] = {"bases": list(ci.bases), "mro": [c for c in mro(qual)[1:] if c in keep]}
        if ci.is_dataclass:
            entry["own"] = own_fields(qual)
        result[qual] = entry

    return {
        "generator": {
            "megatron_bridge": package_version(idx.package_root("bridge"), "bridge"),
            "megatron_core": package_version(idx.package_root("core"), "core"),
        },
        "classes": result,
    }


def expand_schema(compact: Mapping[str, Any]) -> dict[str, Any]:
    """The compact schema with every class's merged fields: ``{"bases", "fields"}`` per class."""
    from mbmem_lint.resolve.schema import merged_fields

    classes: Mapping[str, Any] = compact.get("classes", {})
    memo: dict[str, dict[str, Any]] = {}
    return {
        "generator": dict(compact.get("generator", {})),
        "classes": {q: {"bases": list(spec.get("bases", [])), "fields": merged_fields(q, classes, memo)}
                    for q, spec in classes.items()},
    }
