"""The shipped summary of megatron-bridge (per release): the lowered IR of its recipe modules and helpers.

User recipes call ``llama3_70b_pretrain_config()``, ``_pretrain_common()``, ``bf16_mixed()``,
``default_peft_config("lora")``, userbuffers presets and ``**COMMON_RECIPE_ENV_VARS``. The summary
holds exactly those modules, lowered by :mod:`mbmem_lint.parse.python` from the wheel's source
(``mbmem-lint dev regenerate``), so the interpreter runs library code like linted code without
the library being installed and without re-parsing it. One summary per shipped release lives in
``library.pack`` (modules identical across releases stored once); :meth:`LibrarySummary.load`
serves the release the run lints against (:mod:`mbmem_lint.resolve.versions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mbmem_lint.parse.python import PythonParseError, lower_module
from mbmem_lint.resolve import versions

LIBRARY_FILE = versions.LIBRARY_FILE

# Folders (all modules below) and single modules of megatron/bridge that recipes import code from.
LIBRARY_TREES = ("recipes", "perf_recipes")
LIBRARY_MODULES = (
    "training/mixed_precision.py",
    "training/comm_overlap.py",
    "training/flex_dispatcher_backend.py",
    "utils/cuda_graph.py",
    # Layout helpers recipes call with cfg.model (set_deepseek_v4_pipeline_model_parallel_layout):
    # analysed instead of treated as unknown code that may change anything.
    "models/deepseek/deepseek_v4_bridge.py",
)  # (a release that lacks one of them simply has no such module)


# A top-level ``def`` of a summary module keeps its body in a pack entry of its own, named
# ``@<n>`` (numbered across the summary): executing ``megatron.bridge.recipes.llama`` defines ~100 recipe functions of which
# a run calls a few, and decoding every body was most of a one-file check's data reading (the
# h100/llama3.py summary alone is 250 KB of JSON). The ``def`` statement holds the entry's name
# where its body list would be, and the interpreter asks for the body on the first call.
FUNCTION_BODY_MARK = "@"


class LibrarySummary:
    """Module name → (path, package flag, lowered body); bodies are decoded on first use, the bodies
    of top-level functions on their first call (:meth:`function_body`)."""

    def __init__(self, modules: Mapping[str, Mapping[str, Any]], bodies: Mapping[str, Any],
                 version: str = "unknown") -> None:
        self.modules = modules
        self.bodies = bodies
        self.version = version

    @classmethod
    def from_pack(cls, pack: Any, version: str) -> LibrarySummary:
        """The summary a data pack holds (module table in its header); ``version`` when the header has none."""
        return cls(pack.meta["modules"], pack, pack.meta.get("megatron_bridge", version))

    @classmethod
    def load(cls) -> LibrarySummary:
        """The summary of the active Megatron Bridge data (:func:`versions.active`), read once per data."""
        data = versions.active()
        if data is _CURRENT[0]:
            current: LibrarySummary = _CURRENT[1]
            return current
        hit = _LOADED.get(data.cache_key)
        if hit is None:
            hit = _LOADED[data.cache_key] = cls._read(data)
        _CURRENT[:] = [data, hit]
        return hit

    @classmethod
    def _read(cls, data: versions.BridgeData) -> LibrarySummary:
        from mbmem_lint.data_pack import map_file, open_pack

        res = data.library_path()
        if not res.is_file():
            return cls({}, {}, data.version)
        try:
            pack = open_pack(map_file(res), data.pack_version())
        except KeyError:
            return cls({}, {}, data.version)
        return cls.from_pack(pack, data.version)

    def has_module(self, name: str) -> bool:
        return name in self.modules

    def module_body(self, name: str) -> list[Any] | None:
        if name not in self.modules:
            return None
        body: list[Any] = self.bodies[name]
        return body

    def function_body(self, ref: str) -> list[Any]:
        """The body of a top-level library function, by the entry name its ``def`` holds."""
        body: list[Any] = self.bodies[ref]
        return body

    def module_path(self, name: str) -> str:
        return str(self.modules[name]["path"])

    def is_package(self, name: str) -> bool:
        return bool(self.modules[name].get("package"))


_LOADED: dict[str, LibrarySummary] = {}
_CURRENT: list[Any] = [None, None]  # (the BridgeData last asked for, its summary)


def library_source_files(corpus: Path) -> list[Path]:
    bridge = corpus / "megatron" / "bridge"
    files: list[Path] = []
    for tree in LIBRARY_TREES:
        files.extend(sorted((bridge / tree).rglob("*.py")))
    files.extend(bridge / m for m in LIBRARY_MODULES if (bridge / m).is_file())
    return files


def generate_library(corpus: Path, files: list[Path] | None = None, *, class_bodies: bool = False) -> dict[str, Any]:
    """Lower every summary module of the unpacked wheel or source tree at ``corpus`` (holding
    ``megatron/bridge``), or only ``files``: ``{"megatron_bridge": version, "modules": {name: {"path",
    "package"}}, "bodies": {name: IR}}``. ``class_bodies``: keep class statements' bodies (the bridges)."""
    from mbmem_lint.resolve.schema_gen import package_version

    modules: dict[str, dict[str, Any]] = {}
    bodies: dict[str, Any] = {}
    for f in library_source_files(corpus) if files is None else files:
        rel = f.relative_to(corpus).as_posix()
        parts = rel[:-3].split("/")
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        try:
            body = lower_module(f.read_text(encoding="utf-8"), rel, class_bodies=class_bodies)
        except PythonParseError as exc:  # pragma: no cover - the wheel parses
            raise RuntimeError(f"{rel}: {exc.message}") from exc
        name = ".".join(parts)
        modules[name] = {"path": rel, "package": package}
        bodies[name] = body
    return {"megatron_bridge": package_version(corpus, "bridge"), "modules": dict(sorted(modules.items())),
            "bodies": bodies}


def library_entries(data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header meta, entries) of a generated library summary, for a data pack: module bodies with
    their top-level functions' bodies split into entries of their own (:func:`split_function_bodies`)."""
    functions: dict[str, Any] = {}
    modules = {name: split_function_bodies(data["bodies"][name], functions) for name in sorted(data["bodies"])}
    meta = {"megatron_bridge": data["megatron_bridge"], "modules": data["modules"]}
    return meta, {**modules, **functions}


def library_dictionary_sample(entries: Mapping[str, Any]) -> list[str]:
    """The entries whose encodings make the pack's zlib dictionary: function bodies are most of the
    summary and alike (1.24 MB compressed one by one, 0.86 MB against a sample of them)."""
    return sorted(n for n in entries if n.startswith(FUNCTION_BODY_MARK))[::7]


def split_function_bodies(body: list[Any], entries: dict[str, Any]) -> list[Any]:
    """``body`` with each top-level ``def``'s body moved to a new entry of ``entries`` and replaced
    by that entry's name."""
    out: list[Any] = []
    for stmt in body:
        if stmt[0] == "def":
            ref = f"{FUNCTION_BODY_MARK}{len(entries)}"
            entries[ref] = stmt[3]
            stmt = [*stmt[:3], ref, *stmt[4:]]
        out.append(stmt)
    return out


def dump_library(data: Mapping[str, Any]) -> bytes:
    """The bytes of a one-version library pack (data built from a source tree)."""
    from mbmem_lint.data_pack import dump_pack

    meta, entries = library_entries(data)
    return dump_pack(meta, entries, dictionary_sample=library_dictionary_sample(entries))
