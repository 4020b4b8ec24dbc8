"""The shipped summary of megatron-bridge 0.6.2: the lowered IR of its recipe modules and helpers.

User recipes call ``llama3_70b_pretrain_config()``, ``_pretrain_common()``, ``bf16_mixed()``,
``default_peft_config("lora")``, userbuffers presets and ``**COMMON_RECIPE_ENV_VARS``. The summary
holds exactly those modules, lowered by :mod:`mbmem_lint.parse.python` from the wheel's source
(``mbmem-lint dev regenerate``), so the interpreter runs library code like linted code without
the library being installed and without re-parsing it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mbmem_lint.data import data_file
from mbmem_lint.parse.python import PythonParseError, lower_module

LIBRARY_FILE = "library.pack"
MEGATRON_BRIDGE_VERSION = "0.6.2"

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
)


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
                 version: str = MEGATRON_BRIDGE_VERSION) -> None:
        self.modules = modules
        self.bodies = bodies
        self.version = version

    @classmethod
    @functools.lru_cache(maxsize=1)
    def load(cls) -> LibrarySummary:
        from mbmem_lint.data_pack import Pack

        res = data_file(LIBRARY_FILE)
        if not res.is_file():
            return cls({}, {})
        pack = Pack(res.read_bytes())
        return cls(pack.meta["modules"], pack, pack.meta.get("megatron_bridge", MEGATRON_BRIDGE_VERSION))

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


def library_source_files(corpus: Path) -> list[Path]:
    bridge = corpus / "megatron" / "bridge"
    files: list[Path] = []
    for tree in LIBRARY_TREES:
        files.extend(sorted((bridge / tree).rglob("*.py")))
    files.extend(bridge / m for m in LIBRARY_MODULES)
    return files


def generate_library(corpus: Path) -> dict[str, Any]:
    """Lower every summary module of the unpacked wheel at ``corpus`` (holding ``megatron/bridge``):
    ``{"megatron_bridge": version, "modules": {name: {"path", "package"}}, "bodies": {name: IR}}``."""
    modules: dict[str, dict[str, Any]] = {}
    bodies: dict[str, Any] = {}
    for f in library_source_files(corpus):
        rel = f.relative_to(corpus).as_posix()
        parts = rel[:-3].split("/")
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        try:
            body = lower_module(f.read_text(encoding="utf-8"), rel)
        except PythonParseError as exc:  # pragma: no cover - the wheel parses
            raise RuntimeError(f"{rel}: {exc.message}") from exc
        name = ".".join(parts)
        modules[name] = {"path": rel, "package": package}
        bodies[name] = body
    return {"megatron_bridge": MEGATRON_BRIDGE_VERSION, "modules": dict(sorted(modules.items())), "bodies": bodies}


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
    from mbmem_lint.data_pack import dump_pack

    functions: dict[str, Any] = {}
    modules = {name: split_function_bodies(data["bodies"][name], functions) for name in sorted(data["bodies"])}
    meta = {"megatron_bridge": data["megatron_bridge"], "modules": data["modules"]}
    # Function bodies are most of the summary and alike: a sample of them makes the zlib dictionary
    # (1.24 MB compressed one by one, 0.86 MB with it; the modules' bodies whole were 0.86 MB).
    return dump_pack(meta, {**modules, **functions}, dictionary_sample=sorted(functions)[::7])
