"""Each shipped Megatron Bridge release against its own corpus (issue 18 acceptance): its recipes
(``recipes/`` + ``perf_recipes/`` of that wheel) lint without a crash against that release's data,
and >= 95% of the recipe functions know the 11 layout fields. (0.6.2's resolver facts and floors
are in test_corpus_resolve.py.)"""

from __future__ import annotations

import functools

import pytest

from mbmem_lint.dev.corpus import KEY_FIELDS, SHAPE_KEYS, corpus_cwd, ensure_corpus
from mbmem_lint.pipeline import CheckRun, resolve_paths, run_check
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.resolve.versions import SHIPPED
from mbmem_lint.settings import Settings

pytestmark = pytest.mark.corpus

LAYOUT = {k: v for k, v in KEY_FIELDS.items() if k not in SHAPE_KEYS}
# Recipe functions of the older releases the resolver cannot turn into a ConfigContainer, and why
# (each read in that release's source).
EXPECTED_UNRESOLVED = {
    "0.4.2": {
        "recipes/qwen/qwen3_next.py::qwen3_next_80b_a3b_peft_config",  # really raises NotImplementedError
        "recipes/utils/dataset_utils.py::apply_dataset_override",  # takes the config as a parameter
    },
    "0.5.1": {
        "recipes/qwen/qwen3_next.py::qwen3_next_80b_a3b_peft_config",
        "recipes/utils/dataset_utils.py::apply_dataset_override",
    },
}


@functools.lru_cache(maxsize=4)
def _resolved(version: str) -> tuple[list[str], CheckRun]:
    with corpus_cwd(ensure_corpus(version=version)) as files:
        return files, resolve_paths(files, Settings(), ResolveOptions(megatron_bridge_version=version))


@pytest.mark.parametrize("version", list(SHIPPED))
def test_corpus_lints_without_crash(version: str) -> None:
    with corpus_cwd(ensure_corpus(version=version)) as files:
        run = run_check(files, Settings(), ResolveOptions(megatron_bridge_version=version), need_edits=False)
    assert run.bridge is not None and run.bridge.version == version and run.bridge.notice() is None
    crashes = [d for d in run.diagnostics if d.code in ("MBM001", "MBM002")]
    assert crashes == [], [(d.location.path, d.message) for d in crashes[:5]]
    assert len(run.diagnostics) > 100  # it really linted


@pytest.mark.parametrize("version", [v for v in SHIPPED if v in EXPECTED_UNRESOLVED])
def test_layout_field_coverage(version: str) -> None:
    files, run = _resolved(version)
    assert len(files) > 50 and len(run.recipes) > 200
    failed = {f.split(": ")[0] for f in run.failed}
    assert failed == EXPECTED_UNRESOLVED[version]
    for label, path in LAYOUT.items():
        share = sum(r.known(path) for r in run.recipes) / len(run.recipes)
        assert share >= 0.95, (label, share)
    every = sum(all(r.known(p) for p in LAYOUT.values()) for r in run.recipes) / len(run.recipes)
    assert every >= 0.95
