"""HF ``config.json`` → Megatron Bridge provider, by running Bridge's own conversion code.

``AutoBridge.from_hf_pretrained(id).to_megatron_provider()`` picks the model bridge registered for the
config's architecture (``@MegatronModelBridge.register_bridge(source=...)``) and calls its
``provider_bridge()``: ``MegatronModelBridge.CONFIG_MAPPING`` / ``hf_config_to_provider_kwargs``
(``models/conversion/model_bridge.py``) plus each family's overrides (``models/<family>/*_bridge.py``).
This module runs that code in the abstract interpreter, with the ``config.json`` object as the HF config,
from ``bridges.pack``: the lowered model-bridge modules of the wheel (``mbmem-lint dev regenerate``).
Nothing is imported or executed; what the code decides from values we lack stays unknown.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from mbmem_lint.data import data_file
from mbmem_lint.diagnostics import Location
from mbmem_lint.records import dataclass
from mbmem_lint.resolve.library import LibrarySummary
from mbmem_lint.resolve.resolved import Unknown
from mbmem_lint.resolve.values import Ext, Obj, Prov, PyClass, PyInstance, realized

BRIDGES_FILE = "bridges.pack"

# Modules of megatron/bridge the conversion code runs through, besides every models/**/*_bridge.py.
BRIDGE_SUPPORT_MODULES = (
    "models/conversion/model_bridge.py",
    "models/conversion/auto_bridge.py",
    "models/conversion/transformers_compat.py",
    "models/conversion/utils.py",
    "models/deepseek/common.py",
    "models/sarvam/common.py",
    "utils/activation_map.py",
)
MODEL_BRIDGE = "megatron.bridge.models.conversion.model_bridge"
AUTO_BRIDGE = "megatron.bridge.models.conversion.auto_bridge"


class BridgeError(Exception):
    """The config cannot be converted: no registered bridge, or its conversion gives no provider."""


@dataclass(frozen=True)
class Conversion:
    """What Bridge's ``provider_bridge()`` builds from one config: the provider class, the provider attributes
    it sets (JSON values; an unknowable one as :class:`Unknown`) and the bridge class that built it."""

    provider: str
    fields: dict[str, Any]
    bridge: str
    architecture: str


# -- the shipped pack ------------------------------------------------------------------------------------

def bridge_source_files(corpus: Path) -> list[Path]:
    bridge = corpus / "megatron" / "bridge"
    files = sorted((bridge / "models").rglob("*_bridge.py"))
    files += [bridge / m for m in BRIDGE_SUPPORT_MODULES if (bridge / m) not in files]
    return files


def generate_bridges(corpus: Path) -> dict[str, Any]:
    """Lower the conversion modules of the unpacked wheel at ``corpus`` (class bodies kept): the library
    summary's layout."""
    from mbmem_lint.resolve.library import generate_library

    return generate_library(corpus, bridge_source_files(corpus), class_bodies=True)


def dump_bridges(data: dict[str, Any]) -> bytes:
    """The same pack layout as the library summary (top-level function bodies decoded on their first call)."""
    from mbmem_lint.resolve.library import dump_library

    return dump_library(data)


@functools.lru_cache(maxsize=1)
def load_bridge_library() -> LibrarySummary:
    from mbmem_lint.data_pack import Pack

    res = data_file(BRIDGES_FILE)
    if not res.is_file():
        raise BridgeError("mbmem_lint/data/bridges.pack is missing; run `mbmem-lint dev regenerate`")
    pack = Pack(res.read_bytes())
    return LibrarySummary.from_pack(pack, "unknown")


# -- running the bridges ---------------------------------------------------------------------------------

class BridgeRunner:
    """One interpreter over the bridge modules: loads them once (their class statements register the
    bridges), then converts any number of configs."""

    def __init__(self, library: LibrarySummary | None = None, schema: Any = None) -> None:
        from mbmem_lint.resolve.interpreter import Interpreter
        from mbmem_lint.resolve.project import Project
        from mbmem_lint.resolve.schema import Schema

        self.library = library if library is not None else load_bridge_library()
        self.project = Project(schema if schema is not None else Schema.load(), {}, self.library)
        self.project.analyse_classes = True
        self.interp = Interpreter(self.project)
        self.registry: dict[str, PyClass] = {}
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for name in self.library.modules:
            env = self.project.load_module(name, self.interp)
            if env is None or not name.endswith("_bridge"):
                continue
            for value in env.globals.values():
                value = realized(value, self.interp)
                if not isinstance(value, PyClass) or value.qualname.rsplit(".", 1)[0] != name:
                    continue
                source = value.attrs.get("SOURCE_NAME")  # set by register_bridge's decorator on the class
                if isinstance(source, str):
                    self.registry[source] = value

    def _global(self, module: str, name: str) -> Any:
        env = self.project.load_module(module, self.interp)
        return realized(env.globals.get(name), self.interp) if env is not None else None

    def architecture(self, cfg: Any) -> str:
        """``AutoBridge._causal_lm_architecture``: the first architecture with a supported suffix; the class
        name of ``auto_map["AutoModelForCausalLM"]`` when present; aliases resolved."""
        from mbmem_lint.resolve.values import HFConfig

        assert isinstance(cfg, HFConfig)
        archs = cfg.attrs.get("architectures")
        if not isinstance(archs, list) or not archs:
            raise BridgeError("config.json has no 'architectures' list (Bridge picks its model bridge by it)")
        suffixes = self._global(AUTO_BRIDGE, "SUPPORTED_HF_ARCHITECTURES")
        if not isinstance(suffixes, tuple) or not all(isinstance(x, str) for x in suffixes):
            raise BridgeError("Bridge's SUPPORTED_HF_ARCHITECTURES is not in the shipped bridge summary")
        arch = next((a for a in archs if isinstance(a, str) and a.endswith(suffixes)), None)
        if arch is None:
            raise BridgeError(f"no supported architecture in {archs} (Bridge needs one ending with "
                              f"{', '.join(suffixes)})")
        auto_map = cfg.attrs.get("auto_map")
        from mbmem_lint.resolve.values import DictVal

        if isinstance(auto_map, DictVal) and "AutoModelForCausalLM" in auto_map.slots:
            target = auto_map.slots["AutoModelForCausalLM"].value
            if isinstance(target, str):
                return target.split(".")[-1]
        aliases = self._global(AUTO_BRIDGE, "HF_ARCHITECTURE_ALIASES")
        if aliases is not None and hasattr(aliases, "slots") and arch in aliases.slots:
            alias = aliases.slots[arch].value
            if isinstance(alias, str):
                return alias
        return arch

    def convert(self, hf: dict[str, Any], *, partial: bool = False, defaults: dict[str, Any] | None = None,
                label: str = "config.json", name_or_path: str | None = None) -> Conversion:
        """Run ``provider_bridge()`` of the bridge registered for ``hf``'s architecture."""
        from mbmem_lint.resolve.pyclasses import hf_config_value

        self._load()
        interp = self.interp
        prov = _prov(label)
        cfg = hf_config_value(hf, prov, partial=partial, defaults=defaults, label=label)
        arch = self.architecture(cfg)
        cls = self.registry.get(arch)
        if cls is None:
            raise BridgeError(f"Megatron Bridge {self.library.version} registers no model bridge for {arch}")
        interp.steps = 0
        interp.notes = []
        from mbmem_lint.resolve.interpreter import Frame

        env = self.project.load_module(MODEL_BRIDGE, interp)
        assert env is not None
        interp.stack.append(Frame(env, None, None))
        try:
            bridge = interp.call(cls, [], [], [1, 1, 1, 1])
            if not isinstance(bridge, PyInstance):
                raise BridgeError(f"{cls.qualname}() could not be analysed")
            shim_cls = PyClass("PreTrainedCausalLM", "megatron.bridge.models.hf_pretrained.causal_lm."
                               "PreTrainedCausalLM", [], {})
            shim = PyInstance(shim_cls)
            shim.attrs["config"] = cfg
            if name_or_path is not None:
                shim.attrs["model_name_or_path"] = name_or_path
            # register_bridge_implementation's dispatch sets these on the bridge it returns (model_bridge.py).
            bridge.attrs["hf_pretrained"] = shim
            bridge.attrs["hf_config"] = cfg
            method = interp.getattr_value(bridge, "provider_bridge")
            provider = interp.call(method, [shim], [], [1, 1, 1, 1])
        finally:
            interp.stack.pop()
        if not isinstance(provider, Obj):
            reason = provider.reason if isinstance(provider, Unknown) else type(provider).__name__
            raise BridgeError(f"{cls.qualname}.provider_bridge() gave no provider ({reason})")
        return Conversion(provider.cls, provider_fields(provider), cls.qualname, arch)


# HF sub-configs the estimator sizes (vision and audio towers); other HF config objects a bridge keeps on the
# provider (``hf_text_config``, the whole ``hf_config``) repeat what the provider fields already say.
_TOWERS = ("vision_config", "audio_config")


def provider_fields(provider: Obj) -> dict[str, Any]:
    """JSON values of what the conversion set on the provider (fields and extra attributes; functions,
    classes and objects left out; HF config objects only for the towers; an unknowable value as
    :class:`Unknown`)."""
    from mbmem_lint.resolve.pyclasses import MISSING, plain
    from mbmem_lint.resolve.values import HFConfig

    out: dict[str, Any] = {}
    for table in (provider.slots, provider.invalid):
        for name, slot in table.items():
            value = slot.value
            if isinstance(value, HFConfig) and not name.endswith(_TOWERS):
                towers = {k: x for k, x in value.attrs.items() if k in _TOWERS and isinstance(x, HFConfig)}
                if not towers:
                    continue
                value = HFConfig(towers, value.partial, {}, value.label)  # keep only the towers it holds
            v = plain(value)
            if v is not MISSING:
                out[name] = v
    return dict(sorted(out.items()))


def _prov(label: str) -> Prov:
    loc = Location(label, 1, 1)
    return Prov(loc, loc, "model-table", 0)


def to_json(value: Any) -> Any:
    """models.pack encoding of a provider value: symbols as ``{"symbol": ...}``, unknowns as
    ``{"unknown": reason}``."""
    if isinstance(value, Ext):
        return {"symbol": value.qualname}
    if isinstance(value, Unknown):
        return {"unknown": value.reason}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value
