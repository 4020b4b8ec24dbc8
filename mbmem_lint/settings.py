"""``[tool.mbmem-lint]`` settings from the nearest ``pyproject.toml``.

Example::

    [tool.mbmem-lint]
    include = ["recipes/**/*.py", "conf/**/*.yaml"]
    exclude = ["recipes/legacy/**"]
    gpu = "h100"                 # target GPU (catalog name or alias)
    world-size = 64
    select = ["MBM"]             # code prefixes to enable (default: all)
    ignore = ["MBM305"]
    fail-level = "warning"       # lowest severity that makes the exit code 1
    headroom-margin = 0.05       # capacity warning below this free fraction
    memory-uncertainty = 0.10    # capacity error only beyond this share over usable memory
                                 # (default: the band measured for the recipe's kind of model)
    torch-version = "2.10"       # for version-dependent rules
    megatron-core-version = "0.19.2"
    megatron-bridge-version = "0.5.1"  # lint against this release's data (default: installed, else newest)
    megatron-bridge-src = "../Megatron-Bridge"  # or build the data from a source tree (cached by content)
    cache = true                 # on-disk cache under .cache/mbmem-lint
    regression-threshold = 0.05  # check/estimate --base: peak-stage growth reported above this share
    measurements = ".mbmem-lint/measurements.json"  # diagnose --record writes here; estimate reads it

    [tool.mbmem-lint.severity]
    MBM401 = "error"

    [tool.mbmem-lint.per-file-ignores]
    "recipes/experimental/*.py" = ["MBM1"]

    [tool.mbmem-lint.targets]    # per-path GPU / world size
    "recipes/gb200/**" = { gpu = "gb200", world-size = 256 }

    [tool.mbmem-lint.models]     # extra HF architectures: id -> config.json path or checkpoint folder
    "my-org/my-model" = "models/my-model/config.json"
    "my-org/other" = "checkpoints/other"

    [tool.mbmem-lint.recipes]    # YAML override -> recipe pairing
    "conf/llama_finetune.yaml" = "recipes/llama.py::llama3_8b_finetune_config"

Keys accept ``kebab-case`` or ``snake_case``.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import sys
from pathlib import Path
from typing import Any

from mbmem_lint.records import dataclass, field


def safe_resolve(path: str | Path) -> Path:
    """``Path.resolve()`` that survives symlink loops and unreadable folders (absolute path instead).
    Memoised: a run asks for the same few hundred paths many times (the resolver's file index, the
    per-path settings), and the tree does not change under a run."""
    key = os.path.abspath(path)  # absolute first: a relative key depends on the cwd
    hit = _RESOLVED.get(key)
    if hit is None:
        try:
            hit = Path(key).resolve()
        except (OSError, RuntimeError):
            hit = Path(key)
        _RESOLVED[key] = hit
    return hit


def remember_resolved(absolute: str, real: Path) -> None:
    """Record what :func:`safe_resolve` returns for ``absolute`` when the caller knows it without asking
    the file system (discovery walks a resolved folder: a plain file in it resolves to folder/name)."""
    _RESOLVED[absolute] = real


_RESOLVED: dict[str, Path] = {}


def cache_root(settings: Settings) -> Path:
    """Folder of the on-disk caches: ``$MBMEM_LINT_CACHE_DIR``, else ``.cache/mbmem-lint`` beside the
    pyproject.toml (or in the working folder)."""
    env = os.environ.get("MBMEM_LINT_CACHE_DIR")
    return Path(env) if env else (settings.root or Path.cwd()) / ".cache" / "mbmem-lint"


def write_cache_file(path: Path, text: str) -> None:
    """Write a cache entry atomically (readers see the old entry or the new one, never half of one):
    a temporary file named after this process, then ``os.replace``. ``OSError`` is the caller's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # unique per writer, cheaper than mkstemp
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


@functools.lru_cache(maxsize=16384)
def _relative(root: Path | None, path: str | Path) -> str:
    # Memoised like safe_resolve: per-file settings are looked up for every recipe and finding.
    p = safe_resolve(path)
    if root is not None:
        try:
            return p.relative_to(safe_resolve(root)).as_posix()
        except ValueError:
            pass
    return Path(path).as_posix()


class SettingsError(ValueError):
    """Invalid ``[tool.mbmem-lint]`` content; reported with exit code 2."""


@dataclass
class TargetOverride:
    """GPU and world size for files matching a ``[tool.mbmem-lint.targets]`` glob (None: not set)."""

    gpu: str | None = None
    world_size: int | None = None


@dataclass
class Settings:
    """The ``[tool.mbmem-lint]`` settings (defaults when there is no pyproject.toml)."""

    root: Path | None = None  # folder of the pyproject.toml the settings came from
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    gpu: str | None = None
    world_size: int | None = None
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    severity: dict[str, str] = field(default_factory=dict)
    fail_level: str = "warning"
    headroom_margin: float = 0.05
    memory_uncertainty: float | None = None  # None: the validation table's band for the model kind
    torch_version: str | None = None
    megatron_core_version: str = "0.19.2"
    megatron_bridge_version: str | None = None  # None: the installed distribution, else the newest shipped
    megatron_bridge_src: str | None = None  # a Megatron Bridge source tree (relative to ``root``)
    cache: bool = False
    regression_threshold: float = 0.05
    measurements: str = ".mbmem-lint/measurements.json"
    # Not from pyproject.toml: the base revision's estimates of a ``check --base`` run (a
    # :class:`mbmem_lint.regression.BaseIndex`), read by rule MBM703.
    base: Any = field(default=None, repr=False, compare=False)
    targets: dict[str, TargetOverride] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    recipes: dict[str, str] = field(default_factory=dict)

    def relative(self, path: str | Path) -> str:
        """``path`` relative to the settings root, with forward slashes (for glob matching)."""
        return _relative(self.root, path)

    def target_for(self, path: str | Path) -> TargetOverride:
        rel = self.relative(path)
        result = TargetOverride()
        for pattern, override in self.targets.items():
            if path_matches(rel, pattern):
                result = TargetOverride(override.gpu or result.gpu, override.world_size or result.world_size)
        return result

    def ignored_codes_for(self, path: str | Path) -> list[str]:
        rel = self.relative(path)
        codes: list[str] = []
        for pattern, ignored in self.per_file_ignores.items():
            if path_matches(rel, pattern):
                codes.extend(ignored)
        return codes


def path_matches(rel_path: str, pattern: str) -> bool:
    """Glob match where ``**/`` spans zero or more folders (``recipes/**/*.py`` matches
    ``recipes/a.py`` and ``recipes/x/y/a.py``), ``dir/**`` everything below ``dir``, and a bare
    name matches at any depth."""
    if any(fnmatch.fnmatchcase(rel_path, p) for p in _zero_or_more_dirs(pattern)):
        return True
    if "/" not in pattern and fnmatch.fnmatchcase(rel_path.rsplit("/", 1)[-1], pattern):
        return True
    return pattern.endswith("/**") and (rel_path + "/").startswith(pattern[:-2])


def _zero_or_more_dirs(pattern: str) -> list[str]:
    """``pattern`` with each ``**/`` kept (``*`` of fnmatch crosses folders) or dropped (no folder)."""
    head, sep, tail = pattern.partition("**/")
    if not sep:
        return [pattern]
    return [head + v for rest in _zero_or_more_dirs(tail) for v in (sep + rest, rest)]


def find_pyproject(start: Path) -> Path | None:
    start = safe_resolve(start)
    folder = start if start.is_dir() else start.parent
    for candidate in (folder, *folder.parents):
        p = candidate / "pyproject.toml"
        if p.is_file():
            return p
    return None


_SEVERITIES = ("error", "warning", "info")


def _norm(key: str) -> str:
    return key.replace("-", "_")


def _str_list(value: Any, key: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise SettingsError(f"[tool.mbmem-lint] {key}: expected a list of strings")


def parse_settings(table: dict[str, Any], root: Path | None) -> Settings:
    s = Settings(root=root)
    for raw_key, value in table.items():
        key = _norm(raw_key)
        if key in ("include", "exclude", "select", "ignore"):
            setattr(s, key, _str_list(value, raw_key))
        elif key == "gpu":
            if not isinstance(value, str):
                raise SettingsError("[tool.mbmem-lint] gpu: expected a string")
            s.gpu = value
        elif key == "world_size":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SettingsError("[tool.mbmem-lint] world-size: expected a positive integer")
            s.world_size = value
        elif key == "fail_level":
            if value not in _SEVERITIES:
                raise SettingsError(f"[tool.mbmem-lint] fail-level: expected one of {', '.join(_SEVERITIES)}")
            s.fail_level = value
        elif key in ("headroom_margin", "memory_uncertainty"):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
                raise SettingsError(f"[tool.mbmem-lint] {raw_key}: expected a number in [0, 1)")
            setattr(s, key, float(value))
        elif key == "regression_threshold":
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 10:
                raise SettingsError(f"[tool.mbmem-lint] {raw_key}: expected a number in [0, 10) (0.05 = 5%)")
            s.regression_threshold = float(value)
        elif key == "measurements":
            if not isinstance(value, str) or not value:
                raise SettingsError(f"[tool.mbmem-lint] {raw_key}: expected a file path")
            s.measurements = value
        elif key in ("torch_version", "megatron_core_version"):
            setattr(s, key, str(value))
        elif key in ("megatron_bridge_version", "megatron_bridge_src"):
            if not isinstance(value, str) or not value.strip():
                raise SettingsError(f"[tool.mbmem-lint] {raw_key}: expected a non-empty string")
            if key == "megatron_bridge_version":
                from mbmem_lint.resolve.versions import VersionError, parse_version

                try:
                    parse_version(value)
                except VersionError as exc:
                    raise SettingsError(f"[tool.mbmem-lint] {raw_key}: {exc}") from None
            setattr(s, key, value.strip())
        elif key == "cache":
            s.cache = bool(value)
        elif key == "per_file_ignores":
            if not isinstance(value, dict):
                raise SettingsError("[tool.mbmem-lint.per-file-ignores]: expected a table")
            s.per_file_ignores = {k: _str_list(v, f"per-file-ignores.{k}") for k, v in value.items()}
        elif key == "severity":
            if not isinstance(value, dict) or any(v not in _SEVERITIES for v in value.values()):
                raise SettingsError("[tool.mbmem-lint.severity]: values must be error, warning or info")
            s.severity = {str(k): str(v) for k, v in value.items()}
        elif key == "targets":
            if not isinstance(value, dict):
                raise SettingsError("[tool.mbmem-lint.targets]: expected a table")
            for pattern, spec in value.items():
                if not isinstance(spec, dict):
                    raise SettingsError(f"[tool.mbmem-lint.targets] {pattern!r}: expected a table")
                spec = {_norm(k): v for k, v in spec.items()}
                s.targets[pattern] = TargetOverride(spec.get("gpu"), spec.get("world_size"))
        elif key in ("models", "recipes"):
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise SettingsError(f"[tool.mbmem-lint.{raw_key}]: expected a table of strings")
            setattr(s, key, dict(value))
        else:
            raise SettingsError(f"[tool.mbmem-lint] unknown key {raw_key!r}")
    return s


def may_hold_our_table(text: str) -> bool:
    """False only when the TOML ``text`` certainly defines nothing under ``tool.mbmem-lint``.

    Every spelling of that key contains "mbmem" unless it uses escapes (a backslash), so a file
    without "mbmem" cannot hold it. Otherwise the lines are scanned with TOML's lexical rules
    (strings, comments, brackets of multi-line arrays) to see in which table each "mbmem" occurs:
    it matters only in a table header, in ``[tool]`` or at the top level (dotted keys, inline
    tables). Anything the scan does not follow exactly (multi-line strings, escapes, a quoted
    header) answers True, and the file is parsed."""
    if "\\" in text or '"""' in text or "'''" in text:
        return True
    if "mbmem" not in text:
        return False
    depth = 0  # open [ and { of values spanning lines
    in_scope = True  # top level, or [tool]
    for line in text.splitlines():
        code, quoted = _toml_code(line)
        if code is None:
            return True  # an unterminated string: not what the scan follows
        if depth == 0 and code.lstrip().startswith("["):
            if "mbmem" in line:
                return True
            if quoted:
                return True
            name = code.strip().strip("[]")
            in_scope = "".join(name.split()) == "tool"
            continue
        if "mbmem" in line and in_scope:
            return True
        depth += code.count("[") + code.count("{") - code.count("]") - code.count("}")
        if depth < 0:
            return True
    return False


def _toml_code(line: str) -> tuple[str | None, bool]:
    """The line without its comment and with string contents blanked (``None``: a string does not
    end on this line), and whether it had a string."""
    out: list[str] = []
    quote = ""
    quoted = False
    for ch in line:
        if quote:
            if ch == quote:
                quote = ""
                out.append(ch)
            continue
        if ch in "\"'":
            quote = ch
            quoted = True
            out.append(ch)
        elif ch == "#":
            break
        else:
            out.append(ch)
    return (None if quote else "".join(out)), quoted


def load_settings(start: Path | None = None) -> Settings:
    """Settings from the nearest ``pyproject.toml`` at or above ``start`` (default: cwd)."""
    pyproject = find_pyproject(start or Path(os.getcwd()))
    if pyproject is None:
        return Settings()
    try:
        text = pyproject.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{pyproject}: cannot read: {exc}") from exc
    if not may_hold_our_table(text):
        # importing tomllib costs ~15 M instructions (its regexes compile at import), a tenth of a
        # one-file check: a pyproject.toml that cannot hold [tool.mbmem-lint] is not parsed
        return Settings(root=pyproject.parent)
    if sys.version_info >= (3, 11):
        import tomllib  # only when there is a pyproject.toml to read
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{pyproject}: cannot read: {exc}") from exc
    table = data.get("tool", {}).get("mbmem-lint")
    if table is None:
        return Settings(root=pyproject.parent)
    if not isinstance(table, dict):
        raise SettingsError(f"{pyproject}: [tool.mbmem-lint] must be a table")
    return parse_settings(table, pyproject.parent)
