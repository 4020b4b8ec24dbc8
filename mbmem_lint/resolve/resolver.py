"""Resolve every recipe in a set of parsed files: detect recipes, evaluate them, apply overrides
and Bridge's runtime rewrites, and flatten the result into :class:`ResolvedRecipe`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mbmem_lint.diagnostics import Diagnostic, Location
from mbmem_lint.discover.files import read_source
from mbmem_lint.parse.override_types import OverrideFile
from mbmem_lint.parse.python import PythonParseError, lower_module
from mbmem_lint.records import dataclass, field
from mbmem_lint.resolve import interpreter as interp_mod
from mbmem_lint.resolve.clone import clone
from mbmem_lint.resolve.flatten import flatten
from mbmem_lint.resolve.interpreter import BudgetExceeded, Interpreter, loc_of
from mbmem_lint.resolve.project import ModuleEnv, Project
from mbmem_lint.resolve.resolved import ResolvedRecipe, Unknown
from mbmem_lint.resolve.runtime import RuntimeRewriter
from mbmem_lint.resolve.target import resolve_target
from mbmem_lint.resolve.values import Func, Obj
from mbmem_lint.settings import Settings, safe_resolve
from mbmem_lint.sources import SourceFile

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mbmem_lint.resolve.cache import IRCache

CONFIG_CONTAINER_SUFFIX = ".ConfigContainer"
MAX_DISK_MODULES = 200  # modules read from disk beyond the linted files, per run
MAX_IMPORT_DEPTH = 6  # folders above the importing file searched for an absolute import
RECIPE_TIME_BUDGET_S = 30.0  # only pathological inputs; the step budget is the deterministic bound


@dataclass
class ResolveOptions:
    """What a run asks of the resolver beyond the files: target, one function, CLI overrides."""

    gpu: str | None = None
    world_size: int | None = None
    function: str | None = None  # only this recipe function (resolve/estimate FILE::FUNCTION)
    recipe_ref: str | None = None  # --recipe FILE::FUNCTION pairing for the YAML files given
    set_overrides: OverrideFile | None = None  # --set dotlist
    apply_runtime: bool = True
    # check: an override file that names no recipe becomes a partial config of its own values
    # (resolve/partial.py); resolve and estimate show recipes only.
    lone_overrides: bool = False
    megatron_bridge_version: str | None = None  # --megatron-bridge-version (over the settings key)
    megatron_bridge_src: str | None = None  # --megatron-bridge-src (over the settings keys)
    megatron_bridge_source: str = "option"  # who chose megatron_bridge_version (verify: "python")


@dataclass
class ResolveResult:
    """What resolving produced: recipes (unless streamed to ``on_file``), tool diagnostics, failures."""

    recipes: list[ResolvedRecipe] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    functions_seen: int = 0
    failed: list[str] = field(default_factory=list)  # "path::function: reason"


@dataclass
class _Candidate:
    """A function (or a module-level config) of a linted file that is resolved as a recipe."""

    env: ModuleEnv
    func: Func | None  # None for module-level scripts
    name: str
    loc: list[int]
    config_global: str | None = None


def _imports_only(body: list[Any]) -> bool:
    """True for a module body of imports and ``__all__ = [...]`` only (no function, no config)."""
    for stmt in body:
        if stmt[0] in ("import", "from"):
            continue
        if (stmt[0] == "assign" and all(t[0] == "n" and t[1] == "__all__" for t in stmt[1])
                and stmt[2][1][0] in ("list", "tuple")
                and all(x[0] == "c" for x in stmt[2][1][1])):
            continue
        return False
    return True


def tool_diagnostic(code: str, name: str, severity: str, message: str, loc: Location) -> Diagnostic:
    return Diagnostic(code=code, name=name, severity=severity, message=message, location=loc)  # type: ignore[arg-type]


def load_default_project(settings: Settings) -> Project:
    from mbmem_lint.resolve.hf_models import load_model_table
    from mbmem_lint.resolve.schema import Schema

    models = load_model_table(settings.models or None, settings.root)
    return Project(Schema.load(), models)


class Resolver:
    def __init__(self, settings: Settings, options: ResolveOptions | None = None,
                 project: Project | None = None) -> None:
        self.settings = settings
        self.options = options or ResolveOptions()
        self.project = project if project is not None else load_default_project(settings)
        self.result = ResolveResult()
        self._modules: dict[str, ModuleEnv] = {}  # display path → env
        self._by_real: dict[Path, str] = {}  # resolved path → display path of a registered file
        self.ir_cache: IRCache | None = None
        if settings.cache:  # optional (`cache = true`): its module and hashing load only then
            from mbmem_lint.resolve.cache import IRCache

            self.ir_cache = IRCache.for_settings(settings)
        self.project.disk_finder = self._find_on_disk
        self._disk_loaded = 0

    # ------------------------------------------------------------------ inputs
    def add_python(self, src: SourceFile, *, own: bool = True) -> ModuleEnv | None:
        """Register a linted file. ``own`` files are lowered now (their parse errors are reported);
        others (a parallel worker's share of the tree) are lowered only if something imports them."""
        if not own:
            env = self.project.add_user_module(Path(src.path), src.path, None,
                                               loader=lambda: self._lower(src, report=False) or [])
            self._register(src.path, env)
            return env
        body = self._lower(src, report=True)
        if body is None:
            return None
        env = self.project.add_user_module(Path(src.path), src.path, body)
        self._register(src.path, env)
        return env

    def _register(self, display: str, env: ModuleEnv) -> None:
        self._modules[display] = env
        self._by_real[safe_resolve(display)] = display

    def _find_on_disk(self, name: str, importer: ModuleEnv, level: int) -> str | None:
        """A module of the user's project that exists on disk but was not given to lint, found the
        way Python would from the importing file (its folder and the folders above it). It is
        analysed like the linted files (never executed) and nothing is reported in it."""
        if self._disk_loaded >= MAX_DISK_MODULES or importer.file_path is None:
            return None
        rel = Path(*name.split("."))
        if level > 0:
            roots = [Path("/")]  # linted modules are named by their absolute path
        else:
            folder = safe_resolve(importer.file_path).parent
            roots = [folder, *list(folder.parents)[:MAX_IMPORT_DEPTH]]
        for root in roots:
            for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                try:
                    if not candidate.is_file():
                        continue
                except OSError:
                    continue
                display = self._display(candidate)
                if display in self._modules:
                    return self._modules[display].name
                src = read_source(display, "python")
                if isinstance(src, Diagnostic):
                    return None
                self._disk_loaded += 1
                env = self.add_python(src, own=False)
                return env.name if env is not None else None
        return None

    def _lower(self, src: SourceFile, *, report: bool) -> list[Any] | None:
        cached = self.ir_cache.get(src.text) if self.ir_cache is not None else None
        if cached is not None:
            return cached
        try:
            body = lower_module(src.text, src.path)
        except PythonParseError as exc:
            if report:
                self.result.diagnostics.append(tool_diagnostic(
                    "MBM002", "parse-error", "error", f"cannot parse {src.path}: {exc.message}",
                    Location(src.path, exc.line, max(1, exc.column))))
            return None
        if self.ir_cache is not None:
            self.ir_cache.put(src.text, body)
        return body

    def _env_for_file(self, path: str) -> ModuleEnv | None:
        """The module of a recipe file a YAML override names: a linted one, or read from disk."""
        display = self._by_real.get(safe_resolve(path))
        if display is not None:
            return self._modules[display]
        src = read_source(path, "python")
        return None if isinstance(src, Diagnostic) else self.add_python(src)

    # ------------------------------------------------------------------ recipe detection
    def candidates(self, env: ModuleEnv) -> list[_Candidate]:
        out: list[_Candidate] = []
        for stmt in env.body:
            if stmt[0] != "def":
                continue
            name, params, body, loc, returns = stmt[1], stmt[2], stmt[3], stmt[4], stmt[5]
            if self.options.function and name != self.options.function:
                continue
            if not self.options.function and name.startswith("_"):
                continue  # private builders/helpers are evaluated when public recipes call them
            annotated = returns is not None and "ConfigContainer" in returns
            if not annotated:
                if returns is not None or not _returns_value(body):
                    continue
                if any(p[1] is None and p[2] in ("pos", "kwonly") for p in params):
                    continue
            fn = env.globals.get(name)
            if isinstance(fn, Func):
                out.append(_Candidate(env, fn, name, loc))
        return out

    def script_candidate(self, env: ModuleEnv) -> _Candidate | None:
        if self.options.function and self.options.function != "<module>":
            return None
        for name in sorted(env.toplevel_assigned):
            v = env.globals.get(name)
            if isinstance(v, Obj) and v.cls.endswith(CONFIG_CONTAINER_SUFFIX):
                first = next((s for s in env.body if s[0] == "assign" and any(
                    t[0] == "n" and t[1] == name for t in s[1])), None)
                loc = first[-1] if first else [1, 1, 1, 1]
                return _Candidate(env, None, "<module>", loc, config_global=name)
        return None

    # ------------------------------------------------------------------ evaluation
    def resolve_all(self, python: list[SourceFile], overrides: list[OverrideFile],
                    own: set[str] | None = None,
                    on_file: Callable[[str, list[ResolvedRecipe]], None] | None = None) -> ResolveResult:
        """Resolve the recipes of ``python`` files (only those in ``own`` when given: the other
        files are still importable) and of the recipes paired with ``overrides``.

        ``on_file(path, recipes)``: called with each file's recipes as soon as they are resolved,
        which are then not kept in the result (a check streams file by file: memory stays flat)."""
        envs = self.register(python, own)
        paired = self.pair_overrides(overrides)
        self.resolve_modules(envs, on_file)
        self.resolve_overrides(overrides, paired)
        return self.result

    def resolve_overrides(self, overrides: list[OverrideFile],
                          paired: dict[tuple[str, str], list[OverrideFile]] | None = None) -> None:
        """The recipes the override files name, with the overrides applied; a file that names none
        (or one that is not found) is checked on its own values (:mod:`.partial`)."""
        if paired is None:
            paired = self.pair_overrides(overrides)
        lost = self.resolve_paired(paired)
        if self.options.lone_overrides:
            named = {id(f) for files in paired.values() for f in files}
            self.resolve_unpaired([f for f in overrides if id(f) not in named], announce=True)
            self.resolve_unpaired(lost, announce=False)

    def resolve_unpaired(self, files: list[OverrideFile], *, announce: bool) -> None:
        """Each override file on its own, as a partial config (everything else unknown). ``announce``:
        say once per file (MBM008, info) that the recipe-dependent checks need a pairing."""
        if not files:
            return
        from mbmem_lint.resolve.partial import names_config_sections, partial_recipe

        for f in files:
            if not names_config_sections(f):
                continue  # not a Megatron Bridge override file (pre-commit passes every staged YAML)
            if announce:
                self.result.diagnostics.append(tool_diagnostic(
                    "MBM008", "override-file-unpaired", "info",
                    "checked on its own values: the checks that need the recipe (its values, the model's "
                    "shape, memory) run once the file names it: '# mbmem-lint: recipe=FILE::FUNCTION' as its "
                    "first line, a [tool.mbmem-lint.recipes] entry in pyproject.toml, or --recipe FILE::FUNCTION",
                    Location(f.path, 1, 1)))
            target = resolve_target("", f.path, self.settings, self.options.gpu, self.options.world_size)
            interp = self._interpreter()
            try:
                files_ = [f] + ([self.options.set_overrides] if self.options.set_overrides is not None else [])
                recipe = partial_recipe(interp, files_, target, self.options.apply_runtime)
            except (BudgetExceeded, RecursionError):
                self._too_slow(f.path, "<overrides>")
                continue
            except Exception as exc:  # an internal error must not stop the other files
                self.result.failed.append(f"{f.path}: internal error {exc!r}")
                self.result.diagnostics.append(tool_diagnostic(
                    "MBM001", "internal-error", "error",
                    f"internal error while checking the override file on its own: {type(exc).__name__}: {exc}",
                    Location(f.path, 1, 1)))
                continue
            self.result.recipes.append(recipe)

    def register(self, python: list[SourceFile], own: set[str] | None = None) -> list[ModuleEnv]:
        """Register the files (importable from now on); lower the ``own`` ones (all when None) and
        return their modules. The others are lowered when imported or adopted."""
        envs = []
        for src in python:
            is_own = own is None or src.path in own
            env = self.add_python(src, own=is_own)
            if env is not None and is_own:
                envs.append(env)
        return envs

    def adopt(self, src: SourceFile) -> ModuleEnv | None:
        """Make a registered file one whose recipes are resolved: lowered now, with its parse errors
        reported (an import may already have lowered it quietly). None when it does not parse."""
        env = self._modules.get(src.path)
        if env is None:
            return self.add_python(src)
        if env.loaded and env.body:
            return env
        body = self._lower(src, report=True)
        if body is None:
            return None
        env.set_body(body)
        return env

    def resolve_modules(self, envs: list[ModuleEnv],
                        on_file: Callable[[str, list[ResolvedRecipe]], None] | None = None) -> None:
        """Load each module and resolve its recipe candidates."""
        for env in envs:
            if _imports_only(env.body):
                # A package ``__init__`` that re-exports names has no recipe of its own; running its
                # (star) imports would lower and execute every module of the package for nothing.
                if on_file is not None:
                    on_file(env.display_path, [])
                continue
            interp = self._interpreter()
            try:
                self.project.load_module(env.name, interp)
            except (BudgetExceeded, RecursionError):
                self._too_slow(env.display_path, "<module>")
                continue
            except Exception as exc:
                self.result.diagnostics.append(tool_diagnostic(
                    "MBM001", "internal-error", "error",
                    f"internal error while loading module: {type(exc).__name__}: {exc}",
                    Location(env.display_path, 1, 1)))
                continue
            cands = self.candidates(env)
            script = self.script_candidate(env)
            if script is not None:
                cands.append(script)
            before = len(self.result.recipes)
            for cand in cands:
                self.result.functions_seen += 1
                self._resolve_candidate(cand, [])
            if on_file is not None:
                on_file(env.display_path, self.result.recipes[before:])
                del self.result.recipes[before:]

    def resolve_paired(self, paired: dict[tuple[str, str], list[OverrideFile]]) -> list[OverrideFile]:
        """Resolve the recipes named by override files, with those overrides applied. Returns the
        files whose recipe was not found (MBM007): they are checked on their own values."""
        lost: list[OverrideFile] = []
        for (path, function), files in paired.items():
            paired_env = self._env_for_file(path)
            if paired_env is None:
                for f in files:
                    self.result.diagnostics.append(tool_diagnostic(
                        "MBM007", "unpaired-override", "warning",
                        f"recipe file {path!r} named for this override file was not found; "
                        "its values are checked on their own", Location(f.path, 1, 1)))
                lost += files
                continue
            env = paired_env
            interp = self._interpreter()
            try:
                self.project.load_module(env.name, interp)
            except BudgetExceeded:
                self._too_slow(env.display_path, function)
                continue
            cands = [c for c in self._all_candidates(env) if function in ("*", c.name)]
            if not cands:
                for f in files:
                    self.result.diagnostics.append(tool_diagnostic(
                        "MBM007", "unpaired-override", "warning",
                        f"recipe function {function!r} not found in {path}; the file's values are checked "
                        "on their own", Location(f.path, 1, 1)))
                lost += files
                continue
            for cand in cands:
                self._resolve_candidate(cand, files)
        return lost

    def _all_candidates(self, env: ModuleEnv) -> list[_Candidate]:
        saved = self.options.function
        self.options.function = None
        try:
            cands = self.candidates(env)
            s = self.script_candidate(env)
            return cands + ([s] if s else [])
        finally:
            self.options.function = saved

    def _interpreter(self) -> Interpreter:
        interp = Interpreter(self.project)
        interp.deadline = time.monotonic() + RECIPE_TIME_BUDGET_S
        return interp

    def _too_slow(self, path: str, function: str) -> None:
        self.result.failed.append(f"{path}::{function}: evaluation budget exceeded")
        self.result.diagnostics.append(tool_diagnostic(
            "MBM004", "file-skipped", "warning",
            f"skipped {function}: static evaluation exceeded its time/step budget", Location(path, 1, 1)))

    def _resolve_candidate(self, cand: _Candidate, files: list[OverrideFile]) -> None:
        try:
            self._resolve_candidate_inner(cand, files)
        except RecursionError:
            self._too_slow(cand.env.display_path, cand.name)
        except Exception as exc:  # an internal error must not stop the other recipes
            self.result.failed.append(f"{cand.env.display_path}::{cand.name}: internal error {exc!r}")
            self.result.diagnostics.append(tool_diagnostic(
                "MBM001", "internal-error", "error",
                f"internal error while resolving {cand.name}: {type(exc).__name__}: {exc}",
                loc_of(cand.env, cand.loc)))

    def _resolve_candidate_inner(self, cand: _Candidate, files: list[OverrideFile]) -> None:
        interp = self._interpreter()
        env = cand.env
        try:
            if cand.func is not None:
                interp.stack.append(interp_mod.Frame(env, None, None))
                interp.frame.cur = cand.loc
                try:
                    result = interp.call_func(cand.func, [], [], cand.loc)
                finally:
                    interp.stack.pop()
                frame_locals = interp.last_locals
            else:
                result = env.globals.get(cand.config_global or "")
                frame_locals = {cand.config_global or "": result}
        except BudgetExceeded:
            self._too_slow(env.display_path, cand.name)
            return
        if isinstance(result, Obj) and result.cls.endswith(CONFIG_CONTAINER_SUFFIX):
            model = result.slots.get("model")
            if model is not None and model.value is None and not self.options.function:
                return  # a base helper (``_pretrain_common``-style): no model, not a trainable recipe
        if not (isinstance(result, Obj) and result.cls.endswith(CONFIG_CONTAINER_SUFFIX)):
            if cand.func is not None and cand.func.returns and "ConfigContainer" in cand.func.returns:
                why = result.reason if isinstance(result, Unknown) else "does not return a ConfigContainer"
                self.result.failed.append(f"{env.display_path}::{cand.name}: {why}")
            return
        # A function's result is fresh (memoised calls hand out copies); a script's object is shared.
        root: Obj = result if cand.func is not None else clone(result)
        config_var = next((k for k, v in frame_locals.items() if v is result), None)
        ret_loc = _last_return(cand.func.body) if cand.func is not None else None
        def_loc = loc_of(env, cand.loc)
        target = resolve_target(cand.name, env.display_path, self.settings, self.options.gpu,
                                self.options.world_size)
        try:
            all_files = list(files)
            if self.options.set_overrides is not None:
                all_files.append(self.options.set_overrides)
            interp.stack.append(interp_mod.Frame(env, None, None))
            interp.frame.cur = cand.loc
            try:
                if all_files:  # YAML / --set overrides: their module loads only for runs that have some
                    from mbmem_lint.resolve.overrides import apply_overrides

                    apply_overrides(interp, root, all_files)
                rewriter = RuntimeRewriter(interp, root, target.world_size, def_loc)
                if self.options.apply_runtime:
                    rewriter.run()
            finally:
                interp.stack.pop()
        except BudgetExceeded:
            self._too_slow(env.display_path, cand.name)
            return
        fields, writes = flatten(root)
        self.result.recipes.append(ResolvedRecipe(
            path=env.display_path,
            function=cand.name,
            location=def_loc,
            fields=fields,  # type: ignore[arg-type]
            writes=writes,
            rewrites=rewriter.rewrites,
            target=target,
            pre_runtime=rewriter.pre_runtime(),
            overrides=[f.path for f in files] + (["<--set>"] if self.options.set_overrides else []),
            notes=list(interp.notes),
            config_var=config_var or ("cfg" if cand.func is not None else cand.config_global),
            return_location=loc_of(env, ret_loc) if ret_loc else None,
            architecture=self._architecture(fields),
        ))

    def _architecture(self, fields: Any) -> dict[str, Any] | None:
        """Where the model's architecture came from, for ``AutoBridge`` providers (``model.hf_model_id``)."""
        f = fields.get("model.hf_model_id")
        if f is None or not isinstance(f.value, str) or f.origin != "model-table":
            return None
        hf_id = f.value
        rev = fields.get("model.hf_model_revision")
        revision = rev.value if rev is not None and isinstance(rev.value, str) else None
        entry = self.project.model_entry(hf_id, revision)
        if entry is None:
            return {"hf_id": hf_id, "origin": "unknown", "reason": self.project.model_unknown_reason(hf_id, revision)}
        return {"hf_id": hf_id, **entry.describe()}

    # ------------------------------------------------------------------ YAML pairing
    def pair_overrides(self, overrides: list[OverrideFile]) -> dict[tuple[str, str], list[OverrideFile]]:
        paired: dict[tuple[str, str], list[OverrideFile]] = {}
        for f in overrides:
            ref = self.options.recipe_ref or f.recipe_ref or self._pyproject_ref(f.path)
            if not ref:
                continue
            file_part, sep, function = ref.partition("::")
            if not sep or not function:
                self.result.diagnostics.append(tool_diagnostic(
                    "MBM006", "bad-override", "error",
                    f"recipe reference {ref!r} must look like FILE::FUNCTION", Location(f.path, 1, 1)))
                continue
            path = self._locate(file_part, f.path, from_cli=bool(self.options.recipe_ref))
            paired.setdefault((path, function), []).append(f)
        return paired

    def _pyproject_ref(self, yaml_path: str) -> str | None:
        from mbmem_lint.settings import path_matches

        rel = self.settings.relative(yaml_path)
        for pattern, ref in self.settings.recipes.items():
            if path_matches(rel, pattern):
                file_part, sep, function = ref.partition("::")
                root = self.settings.root or Path.cwd()
                return f"{(root / file_part).as_posix()}::{function}" if sep else ref
        return None

    def _locate(self, file_part: str, yaml_path: str, *, from_cli: bool) -> str:
        p = Path(file_part)
        if p.is_absolute() or from_cli:
            return self._display(p)
        near = Path(yaml_path).parent / p
        if near.is_file():
            return self._display(near)
        if self.settings.root is not None and (self.settings.root / p).is_file():
            return self._display(self.settings.root / p)
        return self._display(p)

    def _display(self, p: Path) -> str:
        display = self._by_real.get(safe_resolve(p))
        if display is not None:
            return display
        # Not among the linted files (pre-commit passed only the YAML): show it relative to cwd.
        norm = os.path.normpath(p)
        try:
            rel = os.path.relpath(os.path.abspath(norm))
        except ValueError:
            return Path(norm).as_posix()
        return Path(rel if not rel.startswith("..") else norm).as_posix()


def _returns_value(body: list[Any]) -> bool:
    stack = list(body)
    while stack:
        s = stack.pop()
        if s[0] == "return" and s[1] is not None:
            return True
        if s[0] == "if":
            stack.extend(s[2])
            stack.extend(s[3])
        elif s[0] in ("with",) or s[0] == "try":
            stack.extend(s[1])
    return False


def _last_return(body: list[Any]) -> list[int] | None:
    for s in reversed(body):
        if s[0] == "return":
            return list(s[-1])
    return None
