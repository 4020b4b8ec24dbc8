"""Megatron-LM functional tests as estimator validation cases (``bench/mlm_validation.py``).

The folder layout (Megatron-LM's ``tests/functional_tests/test_cases`` and ``tests/test_utils/recipes``, as the
validation data keeps them): ``tests/<family>/<test>/model_config.yaml`` (``MODEL_ARGS``, ``ENV_VARS``),
``tests/<family>/<test>/memory.json`` (per golden file ``golden_values_<env>_<platform>.json``: the
``mem-max-allocated-bytes`` series of the last rank, ``torch.cuda.max_memory_allocated()``), and
``recipes/<platform>/<file>.yaml`` (``spec.nodes`` × ``spec.gpus``, the training script, and the products that
schedule each test on an environment and platform).

One row per (test, golden file): the run's configuration from :func:`mbmem_lint.dev.mlm_args.translate`, the GPU
of the golden file's platform, the world size of the recipe that schedules the test there, and the estimator's
allocated peak of the last pipeline stage (the rank that logs, ``world_size - 1``) against the largest logged
``mem-max-allocated-bytes``. A test that cannot be mapped gives a ``skipped`` row with the reason.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from mbmem_lint.dev.mlm_args import Symbol, Translation, translate
from mbmem_lint.records import dataclass, field

# The GPU of each CI platform (Megatron-LM's dgx_a100 / dgx_h100 / dgx_gb200 clusters): DGX A100 nodes with the
# 80 GB A100 (its golden files log peaks above 40 GB), DGX H100 (80 GB), GB200 NVL72 (186 GB per GPU).
PLATFORM_GPU = {"dgx_a100": "a100-80gb", "dgx_h100": "h100-80gb", "dgx_gb200": "gb200"}
# Which recipes folder schedules a platform's runs.
PLATFORM_RECIPES = {"dgx_a100": "h100", "dgx_h100": "h100", "dgx_gb200": "gb200"}
TRAINING_SCRIPTS = {"pretrain_gpt.py": "gpt", "pretrain_hybrid.py": "hybrid", "pretrain_mamba.py": "hybrid"}
FAMILY_SCRIPT = {"gpt": "pretrain_gpt.py", "moe": "pretrain_gpt.py", "mixtral": "pretrain_gpt.py",
                 "hybrid": "pretrain_hybrid.py", "nemotron": "pretrain_hybrid.py"}
_GOLDEN_RE = re.compile(r"golden_values_(?P<env>[A-Za-z0-9]+)_(?P<platform>[A-Za-z0-9_]+)\.json$")
_SCRIPT_RE = re.compile(r"TRAINING_SCRIPT_PATH=([^\"\s]+)")

PROVIDERS = {
    "gpt": ("megatron.bridge.models.gpt_provider", "GPTModelProvider"),
    "mla": ("megatron.bridge.models.mla_provider", "MLAModelProvider"),
    "hybrid": ("megatron.bridge.models.hybrid.hybrid_provider", "HybridModelProvider"),
}
SECTIONS = {
    "train": "megatron.bridge.training.config.TrainingConfig",
    "optimizer": "megatron.bridge.training.config.OptimizerConfig",
    "ddp": "megatron.bridge.training.config.DistributedDataParallelConfig",
    "dataset": "megatron.bridge.training.config.MockGPTDatasetConfig",
}


@dataclass
class Row:
    """One validation row (the ``--json`` contract of bench/mlm_validation.py, plus descriptive fields)."""

    test: str
    golden_file: str
    gpu: str | None = None
    world_size: int | None = None
    measured_bytes: int | None = None
    estimated_bytes: int | None = None
    error: float | None = None
    status: str = "skipped"
    reason: str = ""
    family: str = ""
    kind: str = ""  # dense | MoE | MLA | hybrid (the estimator's model kind)
    mechanisms: list[str] = field(default_factory=list)
    first_step_bytes: int | None = None  # max allocated at the first logged step (before MoE imbalance builds up)
    # A recipe runs the test on the golden file's environment and platform at the snapshot. When not (a test
    # taken off the schedule, or a platform no longer run), no CI run compares with the file any more: its
    # run may predate the test's configuration.
    scheduled: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"test": self.test, "golden_file": self.golden_file, "gpu": self.gpu, "world_size": self.world_size,
                "measured_bytes": self.measured_bytes, "estimated_bytes": self.estimated_bytes, "error": self.error,
                "status": self.status, "reason": self.reason, "family": self.family, "kind": self.kind,
                "mechanisms": list(self.mechanisms), "first_step_bytes": self.first_step_bytes,
                "scheduled": self.scheduled}


@dataclass
class Scheduled:
    """Where a recipe schedules a test: world size and training script, per (environment, platform)."""

    nodes: int
    gpus: int
    script: str

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus


@dataclass
class Case:
    """A test's golden file with what the row needs before estimating."""

    row: Row
    translation: Translation | None = None


@lru_cache(maxsize=1)
def _yaml_loader() -> Any:
    from ruamel.yaml import YAML
    from ruamel.yaml.constructor import SafeConstructor

    class LastKeyWins(SafeConstructor):
        def check_mapping_key(self, node: Any, key_node: Any, mapping: Any, key: Any, value: Any) -> bool:
            return True

    yaml = YAML(typ="safe", pure=True)
    yaml.Constructor = LastKeyWins
    return yaml


def _yaml(path: Path) -> Any:
    """A YAML file as the test runner reads it: yq, and then argparse, keep the last of repeated keys."""
    return _yaml_loader().load(path.read_text(encoding="utf-8"))


_COMMENTED_TEST_RE = re.compile(r"^\s*#\s*-\s*test_case:\s*\[([^\]]*)\]", re.M)


class Schedule:
    """What ``recipes/`` says about each test: the recipes that run it on an (environment, platform), and every
    recipe of a platform folder that names it at all (a product for another environment or platform, or a
    commented-out product: a test taken off the schedule keeps the recipe it ran under)."""

    def __init__(self) -> None:
        self.runs: dict[tuple[str, str, str, str], list[Scheduled]] = {}  # (family, test, env, platform)
        self.named: dict[tuple[str, str, str], list[Scheduled]] = {}  # (family, test, recipes folder)

    def _add(self, table: dict[Any, list[Scheduled]], key: Any, entry: Scheduled) -> None:
        if entry not in table.setdefault(key, []):
            table[key].append(entry)

    def lookup(self, family: str, test: str, env: str, platform: str) -> tuple[list[Scheduled], bool]:
        """(the recipes for the golden file's run, whether they schedule exactly that environment and platform)."""
        exact = self.runs.get((family, test, env, platform), [])
        if exact:
            return exact, True
        return self.named.get((family, test, PLATFORM_RECIPES.get(platform, "")), []), False


def load_schedule(recipes_dir: Path) -> Schedule:
    """The test schedule of the recipe files under ``recipes_dir`` (``<platform folder>/<name>.yaml``)."""
    out = Schedule()
    for path in sorted(recipes_dir.glob("*/*.yaml")):
        try:
            text = path.read_text(encoding="utf-8")
            doc = _yaml_loader().load(text)
        except Exception:  # a file that is not YAML is no recipe
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("spec"), dict):
            continue
        spec = doc["spec"]
        try:
            nodes, gpus = int(spec["nodes"]), int(spec["gpus"])
        except (KeyError, TypeError, ValueError):
            continue
        m = _SCRIPT_RE.search(str(spec.get("script", "")))
        entry = Scheduled(nodes, gpus, m.group(1).strip('"') if m else "")
        family, folder = str(spec.get("model", "")), path.parent.name
        for product in doc.get("products") or []:
            if not isinstance(product, dict):
                continue
            tests = product.get("test_case") or []
            tests = [str(t) for t in (tests if isinstance(tests, list) else [tests])]
            for test in tests:
                out._add(out.named, (family, test, folder), entry)
            for sub in product.get("products") or [{}]:
                if not isinstance(sub, dict):
                    continue
                for test in tests:
                    for env in sub.get("environment") or ["dev"]:
                        for plat in sub.get("platforms") or [spec.get("platforms")]:
                            out._add(out.runs, (family, test, str(env), str(plat)), entry)
        for names in _COMMENTED_TEST_RE.findall(text):
            for test in (t.strip() for t in names.split(",")):
                if test:
                    out._add(out.named, (family, test, folder), entry)
    return out


def _measured(series: Any) -> tuple[int | None, int | None]:
    """(largest logged value, first logged step's value) of a ``mem-max-allocated-bytes`` entry."""
    if isinstance(series, (int, float)) and not isinstance(series, bool):
        return int(series), int(series)
    if not isinstance(series, dict) or not isinstance(series.get("values"), dict):
        return None, None
    vals: list[tuple[int, float]] = []
    for step, v in series["values"].items():
        try:
            vals.append((int(step), float(v)))
        except (TypeError, ValueError):
            continue
    vals = [(s, v) for s, v in vals if v == v and v > 0]  # NaN and empty steps
    if not vals:
        return None, None
    return int(max(v for _, v in vals)), int(min(vals)[1])


def load_cases(data_dir: Path) -> list[Case]:
    """One case per (test, golden file) of the layout under ``data_dir``; every problem becomes a skipped row."""
    schedule = load_schedule(data_dir / "recipes")
    passthrough = _passthrough()
    cases: list[Case] = []
    for test_dir in sorted(p for p in (data_dir / "tests").glob("*/*") if p.is_dir()):
        family, name = test_dir.parent.name, test_dir.name
        test = f"{family}/{name}"
        config: Any = None
        problem = ""
        try:
            config = _yaml(test_dir / "model_config.yaml")
        except FileNotFoundError:
            problem = "no model_config.yaml"
        except Exception as exc:
            problem = f"model_config.yaml unreadable: {type(exc).__name__}"
        goldens: dict[str, Any] = {}
        try:
            goldens = json.loads((test_dir / "memory.json").read_text(encoding="utf-8")).get("golden_files") or {}
        except FileNotFoundError:
            problem = problem or "no memory.json"
        except (ValueError, AttributeError) as exc:
            problem = problem or f"memory.json unreadable: {type(exc).__name__}"
        if not isinstance(goldens, dict) or not goldens:
            cases.append(Case(Row(test, "", family=family, reason=problem or "no golden files in memory.json")))
            continue
        translation = None
        if not problem:
            if not isinstance(config, dict) or not isinstance(config.get("MODEL_ARGS"), dict):
                problem = "model_config.yaml has no MODEL_ARGS mapping"
            elif str(config.get("MODE", "")) in ("inference", "rl"):
                problem = f"not a training run (MODE: {config['MODE']})"
            else:
                env = config.get("ENV_VARS") if isinstance(config.get("ENV_VARS"), dict) else {}
                translation = translate(config["MODEL_ARGS"], env, passthrough=passthrough)
        for gname, gold in sorted(goldens.items()):
            row = Row(test, gname, family=family)
            cases.append(Case(row, translation))
            m = _GOLDEN_RE.search(gname)
            gold = gold if isinstance(gold, dict) else {}
            row.measured_bytes, row.first_step_bytes = _measured(gold.get("mem-max-allocated-bytes"))
            if problem:
                row.reason = problem
                continue
            if m is None or m.group("platform") not in PLATFORM_GPU:
                # golden_values_lts.json, ..._dgx_h100_2nd.json, ..._dgxa100_dracooci.json: no recipe at the
                # snapshot compares against these files, so their runs may predate the configuration.
                row.reason = "golden file of no scheduled platform (not read by the recipes at the snapshot)"
                continue
            platform = m.group("platform")
            row.gpu = PLATFORM_GPU[platform]
            if row.measured_bytes is None:
                row.reason = "no mem-max-allocated-bytes values"
                continue
            found, row.scheduled = schedule.lookup(family, name, m.group("env"), platform)
            per_node = _gpus_per_node(config)
            sizes = {s.nodes * per_node if per_node else s.world_size for s in found}
            if not found:
                row.reason = f"no recipe in recipes/{PLATFORM_RECIPES[platform]} names the test (world size unknown)"
                continue
            if len(sizes) > 1:
                row.reason = f"scheduled with different world sizes {sorted(sizes)}"
                continue
            row.world_size = sizes.pop()
            script = found[0].script.rsplit("/", 1)[-1] or FAMILY_SCRIPT.get(family, "")
            if script not in TRAINING_SCRIPTS:
                row.reason = f"not a pretraining script ({found[0].script or 'none'})"
                continue
            assert translation is not None
            row.mechanisms, row.kind = list(translation.mechanisms), translation.kind
            if translation.skipped:
                row.reason = translation.skipped
                continue
            if (TRAINING_SCRIPTS[script] == "hybrid") != (translation.provider == "hybrid"):
                row.reason = f"{script} without a hybrid layer pattern" if translation.provider != "hybrid" else \
                    f"hybrid layer pattern under {script}"
                continue
            bad = _layout_problem(translation, row.world_size)
            if bad:
                row.reason = bad
                continue
            row.status = "pending"
    return cases


def _layout_problem(translation: Translation, world: int) -> str:
    """Why Megatron-LM would refuse this world size for the run's parallel sizes (validate_args L432-434:
    TP·PP·CP divides the world; parallel_state: EP·ETP divides world / PP), or ""."""
    f = translation.fields
    tp, pp, cp = (int(f.get(f"model.{k}_size") or 1) for k in
                  ("tensor_model_parallel", "pipeline_model_parallel", "context_parallel"))
    ep, etp = int(f.get("model.expert_model_parallel_size") or 1), int(f.get("model.expert_tensor_parallel_size") or 1)
    if min(tp, pp, cp, ep, etp) < 1:
        return "a parallel size below 1"
    if world % (tp * pp * cp):
        return f"world size {world} not divisible by TP·PP·CP = {tp * pp * cp}"
    if (world // pp) % (ep * etp):
        return f"world size {world} / PP {pp} not divisible by EP·ETP = {ep * etp}"
    return ""


def _gpus_per_node(config: Any) -> int | None:
    """``MODEL_ENV_VARS.MODEL_ARGS.GPUS_PER_NODE``: the first run's GPUs per node when a test sets it (the test
    runner exports it before launching, over the recipe's ``gpus``)."""
    env = config.get("MODEL_ENV_VARS") if isinstance(config, dict) else None
    first = env.get("MODEL_ARGS") if isinstance(env, dict) else None
    value = first.get("GPUS_PER_NODE") if isinstance(first, dict) else None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _passthrough() -> dict[str, tuple[str, Any]]:
    """Provider field → (annotation, default) for arguments named after a GPTModelProvider field."""
    from mbmem_lint.resolve.schema import Schema

    cls = Schema.load().get(".".join(PROVIDERS["gpt"]))
    if cls is None:
        return {}
    return {name: (f.type, f.default.get("value")) for name, f in cls.fields.items() if f.init}


def _literal(v: Any) -> str:
    if isinstance(v, Symbol):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_literal(x) for x in v) + "]"
    return repr(v)


_HEADER = '''"""Megatron-LM functional tests as Megatron Bridge recipes (generated by mbmem_lint.dev.mlm_goldens)."""

import torch
import torch.nn.functional as F
from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.models.hybrid.hybrid_provider import HybridModelProvider
from megatron.bridge.models.mla_provider import MLAModelProvider
from megatron.bridge.training.config import (
    CheckpointConfig,
    ConfigContainer,
    DistributedDataParallelConfig,
    LoggerConfig,
    MockGPTDatasetConfig,
    OptimizerConfig,
    RNGConfig,
    SchedulerConfig,
    TokenizerConfig,
    TrainingConfig,
)
from megatron.core.activations import quick_gelu, squared_relu
from megatron.core.transformer.enums import AttnBackend


def _container(model):
    return ConfigContainer(
        model=model,
        train=TrainingConfig(train_iters=100),
        optimizer=OptimizerConfig(optimizer="adam", lr=1e-4),
        ddp=DistributedDataParallelConfig(),
        scheduler=SchedulerConfig(),
        checkpoint=CheckpointConfig(),
        logger=LoggerConfig(),
        tokenizer=TokenizerConfig(),
        rng=RNGConfig(),
        dataset=MockGPTDatasetConfig(random_seed=1234, seq_length=1024, reset_position_ids=False,
                                     reset_attention_mask=False, eod_mask_loss=False),
        mixed_precision=None,
    )
'''


def unknown_fields(translation: Translation) -> list[str]:
    """Fields of the translation that the active Megatron Bridge's classes do not have."""
    from mbmem_lint.resolve.schema import Schema

    schema = Schema.load()
    out = []
    provider = schema.get(".".join(PROVIDERS[translation.provider]))
    for path in translation.fields:
        section, _, name = path.partition(".")
        if section == "env_vars":
            continue
        cls = provider if section == "model" else schema.get(SECTIONS.get(section, ""))
        if cls is None or not cls.has_field(name):
            out.append(path)
    return out


def recipe_source(recipes: Iterable[tuple[str, Translation]]) -> str:
    """A Python module with one recipe function per (function name, translation): the ConfigContainer a Megatron
    Bridge user would write for that run."""
    parts = [_HEADER]
    for fn, tr in recipes:
        module, cls = PROVIDERS[tr.provider]
        lines = [f"def {fn}() -> ConfigContainer:", f"    cfg = _container({cls}())"]
        for path, value in tr.fields.items():
            section, _, name = path.partition(".")
            if section == "env_vars":
                lines.append(f"    cfg.env_vars[{name!r}] = {_literal(value)}")
            else:
                lines.append(f"    cfg.{section}.{name} = {_literal(value)}")
        lines.append("    return cfg")
        parts.append("\n\n" + "\n".join(lines) + "\n")
    return "".join(parts)


def estimate_recipes(source: str, targets: Mapping[str, tuple[str, int]]) -> dict[str, Any]:
    """Resolve ``source`` (a recipe module) with the package's resolver and estimate each function in ``targets``
    (function → (GPU, world size)) as ``mbmem-lint estimate FILE::FUNCTION --gpu G --world-size N`` would: the
    :class:`~mbmem_lint.estimate.types.Estimate`, or the reason there is none (a string).

    The one place that calls the resolver and the estimator."""
    from mbmem_lint.estimate.api import estimate_recipe
    from mbmem_lint.estimate.types import EstimateUnavailable
    from mbmem_lint.pipeline import resolve_paths
    from mbmem_lint.resolve.resolver import ResolveOptions
    from mbmem_lint.settings import Settings

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mbmem-mlm-") as tmp:
        path = Path(tmp, "mlm_recipes.py")
        path.write_text(source, encoding="utf-8")
        run = resolve_paths([str(path)], Settings(root=Path(tmp)), ResolveOptions())
        for recipe in run.recipes:
            target = targets.get(recipe.function)
            if target is None:
                continue
            try:
                out[recipe.function] = estimate_recipe(recipe, gpu=target[0], world_size=target[1])
            except EstimateUnavailable as exc:
                out[recipe.function] = f"estimate unavailable: {exc.reason} ({', '.join(exc.missing_fields)})"
            except Exception as exc:  # an estimator failure on one run is that row's reason, not the bench's end
                out[recipe.function] = f"estimator error: {type(exc).__name__}: {exc}"
    for fn in targets:
        out.setdefault(fn, "the resolver found no recipe")
    return out


def function_name(index: int, row: Row) -> str:
    """The recipe function of a row: its world size in Bridge's ``_<N>gpu_<gpu>_`` naming, so the resolver's
    runtime rewrites see the run's data-parallel size."""
    return f"mlm_{index:04d}_{row.world_size}gpu_{(row.gpu or 'h100').split('-')[0]}_config"


def run_cases(cases: list[Case]) -> list[Row]:
    """Estimate every pending case (one resolver run for all of them) and fill in its row."""
    pending: list[tuple[str, Case]] = []
    for i, case in enumerate(cases):
        if case.row.status != "pending" or case.translation is None:
            continue
        missing = unknown_fields(case.translation)
        if missing:
            case.row.status, case.row.reason = "skipped", "no Megatron Bridge field for " + ", ".join(missing)
            continue
        pending.append((function_name(i, case.row), case))
    source = recipe_source((fn, c.translation) for fn, c in pending if c.translation is not None)
    results = estimate_recipes(source, {fn: (c.row.gpu or "", c.row.world_size or 1) for fn, c in pending})
    for fn, case in pending:
        row, est = case.row, results[fn]
        if isinstance(est, str):
            row.status, row.reason = "skipped", est
            continue
        last = est.stages[-1]
        row.estimated_bytes = last.allocated_bytes
        row.status = "estimated"
        if row.measured_bytes:
            row.error = row.estimated_bytes / row.measured_bytes - 1
    return [c.row for c in cases]


def validate(data_dir: Path) -> list[Row]:
    """Every row of the layout under ``data_dir``."""
    return run_cases(load_cases(data_dir))
