"""The module universe the interpreter runs in: linted files, the shipped library summary, externals.

Linted modules are named by their dotted file path, so imports resolve by suffix: in
``/src/megatron/bridge/recipes/llama/llama3.py`` the import ``megatron.bridge.recipes.common``
finds the linted ``common.py`` next to it before the shipped summary. Relative imports resolve
against the importing module's own package. Anything else is external: an :class:`Ext` symbol
that the schema may know as a config class.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mbmem_lint.resolve.library import LibrarySummary
from mbmem_lint.resolve.resolved import Unknown
from mbmem_lint.resolve.values import (
    Deferred,
    DictVal,
    Ext,
    Func,
    HFModel,
    LocalClass,
    ModuleRef,
    Obj,
    Prov,
    is_known_external,
    realized,
)
from mbmem_lint.settings import safe_resolve

if TYPE_CHECKING:
    from mbmem_lint.resolve.hf_models import ModelEntry, ModelTable
    from mbmem_lint.resolve.interpreter import Interpreter
    from mbmem_lint.resolve.schema import ClassSchema, Schema

GPT_PROVIDER = "megatron.bridge.models.gpt_provider.GPTModelProvider"
# Provider fields a model table entry decides; unknown when the HF id is not in the table.
SHAPE_FIELDS = (
    "num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "ffn_hidden_size", "vocab_size", "seq_length", "num_moe_experts", "moe_ffn_hidden_size",
    "moe_router_topk", "moe_shared_expert_intermediate_size", "moe_layer_freq", "gated_linear_unit",
    "share_embeddings_and_output_weights", "multi_latent_attention", "mtp_num_layers",
    "normalization", "add_bias_linear", "add_qkv_bias", "position_embedding_type",
)


def top_level_bindings(body: list[Any]) -> dict[str, int] | None:
    """How many top-level statements of a module bind each name (also inside if/for/while/with/try, not in
    def or class bodies); None when the module star-imports (it binds names nobody can list)."""
    counts: dict[str, int] = {}
    return counts if _bindings(body, counts) else None


def _bindings(body: list[Any], counts: dict[str, int]) -> bool:
    """Count the names top-level statements bind (also inside if/for/while/with/try, not in def or class
    bodies); False when the module has a star import (it binds names nobody can count)."""
    for s in body:
        kind = s[0]
        names: list[str] = []
        if kind == "assign":
            for t in s[1]:
                names.extend(_target_names(t))
        elif kind in ("augassign", "for"):
            names.extend(_target_names(s[1]))
        elif kind in ("def", "class"):
            names.append(s[1])
        elif kind == "import":
            names.extend(asname or name.split(".")[0] for name, asname in s[1])
        elif kind == "from":
            if s[3] == "*":
                return False
            names.extend(asname or name for name, asname in s[3])
        elif kind == "opaque":
            names.extend(s[1])
        elif kind == "del":
            for t in s[1]:
                names.extend(_target_names(t))
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        nested: list[list[Any]] = []
        if kind == "if":
            nested = [s[2], s[3]]
        elif kind in ("for", "while"):
            nested = [s[3], s[4]]
        elif kind == "with":
            nested = [s[1]]
        elif kind == "try":
            nested = [s[1], *s[2], s[3], s[4]]
        for b in nested:
            if not _bindings(b, counts):
                return False
    return True


def _target_names(t: list[Any]) -> list[str]:
    if t[0] == "n":
        return [t[1]]
    if t[0] in ("tuple", "list"):
        return [n for e in t[1] for n in _target_names(e)]
    if t[0] == "star":
        return _target_names(t[1])
    return []


class ModuleEnv:
    def __init__(self, name: str, display_path: str, body: list[Any] | None, *, is_library: bool,
                 is_package: bool, file_path: Path | None = None,
                 loader: Callable[[], list[Any]] | None = None) -> None:
        self.name = name
        self.display_path = display_path
        self._body = body
        self._loader = loader  # lowers the file on first use: most linted files are never imported
        self.is_library = is_library
        self.is_package = is_package
        self.file_path = file_path
        self.globals: dict[str, Any] = {"__name__": "__main__" if not is_library else name}
        self.state = "new"  # new → loading → done
        self.loc_cache: dict[int, Any] = {}
        self.toplevel_assigned: set[str] = set()
        self.bound_once: frozenset[str] | None = None  # names one top-level statement binds (library modules)

    @property
    def body(self) -> list[Any]:
        if self._body is None:
            self._body = self._loader() if self._loader is not None else []
        return self._body

    @property
    def loaded(self) -> bool:
        """Whether the body has been lowered (a lazily registered file is lowered on first use)."""
        return self._body is not None

    def set_body(self, body: list[Any]) -> None:
        self._body = body

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


def module_name_for(path: Path) -> tuple[str, bool]:
    """Dotted name of a linted file from its absolute path, and whether it is a package."""
    p = safe_resolve(path)
    parts = [x for x in p.with_suffix("").parts if x not in ("/", "")]
    parts = [x.replace(":", "_") for x in parts]
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


class Project:
    def __init__(self, schema: Schema | None, models: ModelTable | dict[str, ModelEntry],
                 library: LibrarySummary | None = None) -> None:
        self.schema = schema
        self.models = models
        self.library = library if library is not None else LibrarySummary.load()
        self.user: dict[str, ModuleEnv] = {}
        self._suffix: dict[str, list[str]] = {}
        self._lib_envs: dict[str, ModuleEnv] = {}
        self._schema_cache: dict[str, ClassSchema | None] = {}
        self.call_cache: dict[tuple[Any, ...], Any] = {}
        self.imports: dict[str, set[str]] = {}  # linted file → linted files it imports
        # Class statements of library modules become analysed classes (Bridge's model bridges,
        # resolve/bridges.py); recipes never need them.
        self.analyse_classes = False
        # Finds a module of the user's project on disk that was not passed on the command line
        # (pre-commit passes only the staged files): (name, importer, level) → module key.
        self.disk_finder: Callable[[str, ModuleEnv, int], str | None] | None = None

    # ------------------------------------------------------------------ modules
    def add_user_module(self, path: Path, display_path: str, body: list[Any] | None,
                        loader: Callable[[], list[Any]] | None = None) -> ModuleEnv:
        name, is_package = module_name_for(path)
        env = ModuleEnv(name, display_path, body, is_library=False, is_package=is_package, file_path=path,
                        loader=loader)
        self.user[name] = env
        parts = name.split(".")
        for i in range(len(parts)):
            self._suffix.setdefault(".".join(parts[i:]), []).append(name)
        return env

    def module_exists(self, name: str) -> bool:
        return self._find_user(name, None) is not None or self.library.has_module(name)

    def _find_user(self, name: str, importer: ModuleEnv | None) -> str | None:
        if name in self.user:
            return name
        cands = self._suffix.get(name)
        if not cands:
            return None
        if len(cands) == 1 or importer is None:
            return cands[0] if len(cands) == 1 else None
        # Several linted modules end with this name: take the one closest to the importer.
        imp = importer.name.split(".")

        def shared(c: str) -> int:
            n = 0
            for a, b in zip(imp, c.split(".")):
                if a != b:
                    break
                n += 1
            return n

        best = sorted(cands, key=lambda c: (-shared(c), c))
        if len(best) > 1 and shared(best[0]) == shared(best[1]):
            return None
        return best[0]

    def resolve_import(self, module: str, level: int, importer: ModuleEnv) -> str | None:
        """Key of the module an import statement names (a linted or library module), else None."""
        if level > 0:
            base_parts = importer.package.split(".") if importer.package else []
            if level - 1 > len(base_parts):
                return None
            base = ".".join(base_parts[: len(base_parts) - (level - 1)])
            full = f"{base}.{module}" if module and base else (module or base)
            if importer.is_library:
                return full
            if full not in self.user and self.disk_finder is not None:
                self.disk_finder(full, importer, level)
            return full
        found = self._find_user(module, importer)
        if found is not None:
            return found
        if (not importer.is_library and self.disk_finder is not None and not self.library.has_module(module)
                and not is_known_external(module)):
            found = self.disk_finder(module, importer, 0)
            if found is not None:
                return found
        return module

    def note_import(self, importer: ModuleEnv, imported: ModuleEnv) -> None:
        """Record that a linted module imports another (for the results cache's dependencies)."""
        if not importer.is_library and not imported.is_library and importer is not imported:
            self.imports.setdefault(importer.display_path, set()).add(imported.display_path)

    def dependencies(self, display_path: str) -> set[str]:
        """Linted files ``display_path`` imports, directly or not (itself included)."""
        seen = {display_path}
        todo = [display_path]
        while todo:
            for dep in self.imports.get(todo.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    def load_module(self, key: str | None, interp: Interpreter) -> ModuleEnv | None:
        if not key:
            return None
        env = self.user.get(key)
        if env is None:
            found = self._find_user(key, None)
            env = self.user.get(found) if found else None
        if env is None:
            env = self._lib_envs.get(key)
            if env is None:
                body = self.library.module_body(key)
                if body is None:
                    return None
                env = ModuleEnv(key, self.library.module_path(key), body, is_library=True,
                                is_package=self.library.is_package(key))
                self._lib_envs[key] = env
        if env.state == "new":
            self.execute_module(env, interp)
        if interp.stack:
            self.note_import(interp.stack[-1].module, env)
        return env

    def execute_module(self, env: ModuleEnv, interp: Interpreter) -> None:
        from mbmem_lint.resolve.interpreter import Frame, _Break, _Continue, _Raise, _Return

        env.state = "loading"
        if env.is_library and env.bound_once is None:
            counts = top_level_bindings(env.body)
            env.bound_once = frozenset(n for n, c in (counts or {}).items() if c == 1)
        interp.stack.append(Frame(env, None, None))
        try:
            for stmt in env.body:
                if stmt[0] == "assign":
                    for t in stmt[1]:
                        if t[0] == "n":
                            env.toplevel_assigned.add(t[1])
                    if env.is_library and self.deferrable(stmt, env):
                        interp.tick()
                        env.globals[stmt[1][0][1]] = Deferred(env, stmt)
                        continue
                try:
                    interp.exec_stmt(stmt)
                except (_Raise, _Return, _Break, _Continue):
                    break
        finally:
            interp.stack.pop()
            env.state = "done"

    def deferrable(self, stmt: list[Any], env: ModuleEnv) -> bool:
        """Whether a top-level ``NAME = ...`` of a library module may run when NAME is first read
        (:class:`Deferred`): one name target, assigned once in the module, and a value built only
        from constants and calls of schema config classes that the module binds once and has bound."""
        targets = stmt[1]
        if len(targets) != 1 or targets[0][0] != "n" or targets[0][1] not in (env.bound_once or ()):
            return False
        value = stmt[2][1] if stmt[2][0] == "at" else stmt[2]
        return value[0] == "call" and self._pure_construction(value, env)

    def _pure_construction(self, e: list[Any], env: ModuleEnv) -> bool:
        kind = e[0]
        if kind == "at":
            return self._pure_construction(e[1], env)
        if kind == "c":
            return True
        if kind == "un":
            return self._pure_construction(e[2], env)
        if kind in ("list", "tuple"):
            return all(x[0] != "star" and self._pure_construction(x, env) for x in e[1])
        if kind != "call":
            return False
        func = e[1]
        if func[0] != "n" or func[1] not in (env.bound_once or ()):
            return False
        cls = env.globals.get(func[1])
        if not isinstance(cls, Ext) or self.schema_class(cls.qualname) is None:
            return False
        return (all(a[0] != "star" and self._pure_construction(a, env) for a in e[2])
                and all(kw is not None and self._pure_construction(v, env) for kw, v, _loc in e[3]))

    def module_attr(self, env: ModuleEnv, name: str, interp: Interpreter) -> Any:
        if name in env.globals:
            return realized(env.globals[name], interp)
        sub = f"{env.name}.{name}"
        if self.module_exists(sub):
            return ModuleRef(sub)
        if env.is_library:
            return Ext(sub)
        return Unknown(f"{name} is not defined in {env.display_path}")

    def star_names(self, env: ModuleEnv, interp: Interpreter) -> dict[str, Any]:
        exported = env.globals.get("__all__")
        if isinstance(exported, (list, tuple)) and all(isinstance(x, str) for x in exported):
            return {n: self.module_attr(env, n, interp) for n in exported}
        return {k: realized(v, interp) for k, v in env.globals.items() if not k.startswith("_")}

    def import_value(self, name: str, importer: ModuleEnv, interp: Interpreter) -> Any:
        key = self._find_user(name, importer)
        if (key is None and not importer.is_library and self.disk_finder is not None
                and not self.library.has_module(name) and not is_known_external(name)):
            key = self.disk_finder(name, importer, 0)
        if key is not None or self.library.has_module(name):
            return ModuleRef(key or name)
        if is_known_external(name):
            return Ext(name)
        return Unknown(f"module {name} is not among the linted files")

    # ------------------------------------------------------------------ schema
    def schema_class(self, qualname: str) -> ClassSchema | None:
        if self.schema is None:
            return None
        if qualname in self._schema_cache:
            return self._schema_cache[qualname]
        found = self.schema.get(qualname)
        if found is None and qualname.startswith("megatron."):
            found = self.schema.find(qualname)
            if found is None:
                # Re-exported across packages (megatron.bridge.training.config.RNGConfig is defined
                # in megatron.training.config): a unique simple name, or the nearest module.
                found = self.schema.find(qualname.rsplit(".", 1)[-1], module_hint=qualname)
        self._schema_cache[qualname] = found
        return found

    def class_value(self, env: ModuleEnv, name: str) -> Any:
        """A class statement's value: the schema class when the schema knows it (library code, or a
        linted copy of it), otherwise an opaque local class."""
        qual = f"{env.name}.{name}"
        if not env.is_library and ".megatron." in f".{env.name}":
            qual = "megatron." + f".{env.name}".split(".megatron.", 1)[1] + f".{name}"
        if self.schema is not None and self.schema.get(qual) is not None:
            return Ext(qual)
        return LocalClass(qual)

    def is_subclass(self, cls: str, base: str) -> bool:
        if cls == base:
            return True
        if self.schema is None:
            return False
        b = self.schema_class(base)
        base_q = b.qualname if b is not None else base
        return bool(self.schema.is_subclass(cls, base_q))

    def any_model_field(self, name: str) -> bool:
        """True when some model-provider class in the schema has field ``name``."""
        return self.schema is not None and name in self.schema.model_field_names()

    # ------------------------------------------------------------------ Bridge entry points
    def special_call(self, qualname: str) -> Callable[..., Any] | None:
        short = ".".join(qualname.split(".")[-2:])
        if short == "AutoBridge.from_hf_pretrained":
            return _from_hf_pretrained
        if short == "AutoBridge.from_hf_config":
            return lambda interp, args, kwargs, loc: HFModel(Unknown("model built from an in-memory HF config"))
        if qualname.endswith("mixed_precision.get_mixed_precision_config"):
            return _get_mixed_precision_config
        if qualname == "dataclasses.replace":
            return _dataclasses_replace
        return None

    def provider_for(self, interp: Interpreter, hf_id: Any, prov: Prov, revision: Any = None) -> Obj:
        obj = self._provider(interp, hf_id, prov, revision if isinstance(revision, str) else None)
        # to_megatron_provider() records where the weights come from (model_bridge.py).
        p = Prov(prov.loc, prov.anchor, "model-table", prov.seq, prov.stmt, None, prov.function)
        interp.set_attr(obj, "hf_model_id", hf_id, p)
        if revision is not None:
            interp.set_attr(obj, "hf_model_revision", revision, p)
        return obj

    def model_entry(self, hf_id: str, revision: str | None = None) -> ModelEntry | None:
        models = self.models
        lookup = getattr(models, "lookup", None)
        return lookup(hf_id, revision) if lookup is not None else models.get(hf_id)

    def model_unknown_reason(self, hf_id: str, revision: str | None = None) -> str:
        why = getattr(self.models, "why_unknown", None)
        return why(hf_id, revision) if why is not None else ""

    def _provider(self, interp: Interpreter, hf_id: Any, prov: Prov, revision: str | None = None) -> Obj:
        entry = self.model_entry(hf_id, revision) if isinstance(hf_id, str) else None
        if entry is not None:
            cls = self.schema_class(entry.provider)
            obj = Obj(cls.qualname if cls else entry.provider, cls, prov)
            if cls is None or not cls.qualname.endswith("GPTModelProvider"):
                obj.open = True
            table_prov = Prov(prov.loc, prov.anchor, "model-table", prov.seq, prov.stmt, None, prov.function,
                              note=f"{hf_id}: {entry.source}")
            for k, v in entry.fields.items():
                interp.set_attr(obj, k, _from_json(v), table_prov)
            return obj
        cls = self.schema_class(GPT_PROVIDER)
        obj = Obj(cls.qualname if cls else GPT_PROVIDER, cls, prov)
        obj.open = True  # the real provider class is family-specific: do not flag its extra fields
        if isinstance(hf_id, str):
            detail = self.model_unknown_reason(hf_id, revision)
            why = f"architecture of {hf_id!r} is not known" + (f" ({detail})" if detail else "")
        else:
            why = "Hugging Face model id is not statically known"
        interp.note(why)
        unknown_prov = Prov(prov.loc, prov.anchor, "model-table", prov.seq, prov.stmt, None, prov.function, why)
        for k in SHAPE_FIELDS:
            interp.set_attr(obj, k, Unknown(why), unknown_prov)
        return obj


def _from_json(v: Any) -> Any:
    if isinstance(v, dict) and len(v) == 1:
        if "symbol" in v:
            return Ext(str(v["symbol"]))
        if "unknown" in v:
            return Unknown(str(v["unknown"]))
    if isinstance(v, list):
        return [_from_json(x) for x in v]
    if isinstance(v, dict):
        return {k: _from_json(x) for k, x in v.items()}
    return v


def _from_hf_pretrained(interp: Interpreter, args: list[Any], kwargs: list[Any], loc: list[int]) -> Any:
    hf_id: Any = args[0] if args else None
    revision: Any = None
    for k, v, _ in kwargs:
        if k in ("pretrained_model_name_or_path", "hf_path", "model_id"):
            hf_id = v
        elif k == "revision":
            revision = v
    if hf_id is None:
        hf_id = Unknown("no model id")
    return HFModel(hf_id, revision)


def _get_mixed_precision_config(interp: Interpreter, args: list[Any], kwargs: list[Any], loc: list[int]) -> Any:
    name = args[0] if args else None
    if isinstance(name, Obj):
        return name
    if isinstance(name, str):
        return mixed_precision_preset(interp, name, loc)
    return Unknown("mixed-precision preset name not statically known")


MIXED_PRECISION_MODULE = "megatron.bridge.training.mixed_precision"


def mixed_precision_preset(interp: Interpreter, name: str, loc: list[int] | None) -> Any:
    """Build the registered preset ``name`` (``bf16_mixed`` or ``bf16-mixed``) from the library summary."""
    env = interp.project.load_module(MIXED_PRECISION_MODULE, interp)
    if env is None:
        return Unknown("mixed-precision presets are not in the library summary")
    fn = realized(env.globals.get(name.replace("-", "_")), interp)
    if not isinstance(fn, Func) or fn.name.startswith("_"):
        return Unknown(f"unknown mixed-precision preset {name!r}")
    return interp.call_func(fn, [], [], loc or fn.loc)


def _dataclasses_replace(interp: Interpreter, args: list[Any], kwargs: list[Any], loc: list[int]) -> Any:
    from mbmem_lint.resolve.clone import clone

    if not args or not isinstance(args[0], Obj):
        return Unknown("dataclasses.replace of an unknown value")
    obj = clone(args[0])
    for k, v, p in kwargs:
        interp.set_attr(obj, k, v, p)
    return obj


__all__ = ["ModuleEnv", "Project", "DictVal", "LocalClass", "mixed_precision_preset"]
