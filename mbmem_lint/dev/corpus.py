"""The megatron-bridge wheels of each shipped release and the megatron-core wheel each was built
against (:data:`mbmem_lint.resolve.versions.SHIPPED`), downloaded and unpacked for tests, benches
and ``mbmem-lint dev regenerate``.

Never committed: ``ensure_corpus(version)`` fetches them with ``pip download`` into
``.cache/corpus`` (0.6.2, the default) or ``.cache/corpus/<version>``. An unpacked copy is used
instead when set: ``$MBMEM_CORPUS_DIR`` (the default release) or ``$MBMEM_CORPORA_DIR/<version>``,
each a folder holding ``megatron/bridge`` and ``megatron/core``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

from mbmem_lint.resolve.versions import SHIPPED

DEFAULT_VERSION = "0.6.2"
REPO_ROOT = Path(__file__).resolve().parents[2]


def default_cache_dir(version: str = DEFAULT_VERSION) -> Path:
    base = REPO_ROOT / ".cache" / "corpus"
    return base if version == DEFAULT_VERSION else base / version


def ensure_corpus(cache_dir: Path | None = None, version: str = DEFAULT_VERSION) -> Path:
    """Folder containing the ``megatron/bridge`` sources of release ``version`` and the
    ``megatron/core`` sources it was built against (downloaded once)."""
    if version not in SHIPPED:
        raise ValueError(f"megatron-bridge {version} is not a shipped release ({', '.join(SHIPPED)})")
    env = os.environ.get("MBMEM_CORPUS_DIR") if version == DEFAULT_VERSION else None
    if env and (Path(env) / "megatron" / "bridge").is_dir():
        return Path(env)
    corpora = os.environ.get("MBMEM_CORPORA_DIR")
    if corpora and (Path(corpora) / version / "megatron" / "bridge").is_dir():
        return Path(corpora) / version
    cache = cache_dir or default_cache_dir(version)
    unpacked = cache / "unpacked"
    marker = unpacked / ".complete"
    if marker.is_file():
        return unpacked
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--python-version", "3.12",
        "--only-binary=:all:", "--dest", str(wheels), f"megatron-bridge=={version}",
        f"megatron-core=={SHIPPED[version]}",
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    unpacked.mkdir(parents=True, exist_ok=True)
    for whl in sorted(wheels.glob(f"megatron_bridge-{version}-*.whl")) + sorted(
            wheels.glob(f"megatron_core-{SHIPPED[version]}-*.whl")):
        with zipfile.ZipFile(whl) as zf:
            for name in zf.namelist():
                # Only Python sources are needed; skip compiled extensions and metadata.
                if name.startswith("megatron/") and name.endswith(".py"):
                    zf.extract(name, unpacked)
    marker.write_text("ok\n")
    return unpacked


def recipe_files(corpus: Path) -> list[Path]:
    """Every ``.py`` file under ``recipes/`` and ``perf_recipes/`` (the lint corpus; 0.4 and 0.5 have
    no ``perf_recipes/``), sorted."""
    bridge = corpus / "megatron" / "bridge"
    files = list((bridge / "recipes").rglob("*.py")) + list((bridge / "perf_recipes").rglob("*.py"))
    return sorted(files)


# The fields issue 2's acceptance asks the resolver to know for >= 95% of corpus recipes.
KEY_FIELDS: dict[str, str] = {
    "TP": "model.tensor_model_parallel_size",
    "PP": "model.pipeline_model_parallel_size",
    "VPP": "model.virtual_pipeline_model_parallel_size",
    "CP": "model.context_parallel_size",
    "EP": "model.expert_model_parallel_size",
    "SP": "model.sequence_parallel",
    "MBS": "train.micro_batch_size",
    "GBS": "train.global_batch_size",
    "seq_length": "model.seq_length",
    "recompute_granularity": "model.recompute_granularity",
    "use_distributed_optimizer": "optimizer.use_distributed_optimizer",
    "num_layers": "model.num_layers",
    "hidden_size": "model.hidden_size",
    "num_attention_heads": "model.num_attention_heads",
}
SHAPE_KEYS = ("num_layers", "hidden_size", "num_attention_heads")


@contextlib.contextmanager
def corpus_cwd(corpus: Path) -> Iterator[list[str]]:
    """Work inside ``megatron/bridge`` of the corpus; yields the recipe files relative to it
    (so findings read ``recipes/llama/...`` rather than absolute paths)."""
    bridge = corpus / "megatron" / "bridge"
    old = os.getcwd()
    os.chdir(bridge)
    try:
        yield [str(Path(f).relative_to(bridge)) for f in recipe_files(corpus)]
    finally:
        os.chdir(old)
