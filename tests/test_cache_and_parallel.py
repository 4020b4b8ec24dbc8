"""The on-disk caches are never stale, and parallel / cached / plain runs report the same findings."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from mbmem_lint.pipeline import CheckRun, run_check
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import Settings

HELPER = """\
def tune(cfg):
    cfg.model.pipeline_model_parallel_size = {pp}
    cfg.model.cpu_offloading = True
"""

RECIPE = """\
from megatron.bridge.recipes.llama import llama3_8b_pretrain_config
from megatron.bridge.training.config import ConfigContainer

from helpers import tune


def my_8gpu_h100_config() -> ConfigContainer:
    cfg = llama3_8b_pretrain_config()
    tune(cfg)
    return cfg
"""


def _tree(root: Path, pp: int) -> None:
    (root / "helpers.py").write_text(HELPER.format(pp=pp), encoding="utf-8")
    (root / "recipe.py").write_text(RECIPE, encoding="utf-8")


def _tree_with_overrides(root: Path) -> None:
    """:func:`_tree` plus a second recipe file, a file that does not parse and a YAML override of
    ``recipe.py`` (one key with a typo)."""
    _tree(root, pp=2)
    (root / "second.py").write_text(RECIPE.replace("my_8gpu_h100_config", "other_16gpu_h100_config"),
                                    encoding="utf-8")
    (root / "broken.py").write_text("def f(:\n", encoding="utf-8")
    (root / "override.yaml").write_text(
        "# mbmem-lint: recipe=recipe.py::my_8gpu_h100_config\n"
        "model:\n  tensor_model_parallel_size: 3\n  tensor_model_paralel_size: 2\n", encoding="utf-8")


def _check_in(root: Path, paths: list[str], settings: Settings, *, need_edits: bool = False) -> CheckRun:
    """``run_check`` from ``root`` as working folder (paths in findings are as given)."""
    old = os.getcwd()
    os.chdir(root)
    try:
        return run_check(paths, settings, ResolveOptions(), need_edits=need_edits)
    finally:
        os.chdir(old)


def _codes(root: Path, settings: Settings) -> list[str]:
    run = _check_in(root, ["recipe.py"], settings)
    return sorted(d.code for d in run.diagnostics if d.location.path in ("recipe.py", "helpers.py"))


def test_results_cache_follows_imported_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MBMEM_LINT_CACHE_DIR", str(tmp_path / "cache"))
    settings = Settings(root=tmp_path, cache=True)
    _tree(tmp_path, pp=2)
    cold = _codes(tmp_path, settings)
    assert "MBM205" in cold  # CPU offloading with PP=2, set in the imported helper
    assert list((tmp_path / "cache").rglob("*.json")), "the run wrote cache entries"
    assert _codes(tmp_path, settings) == cold  # warm: same findings
    # Only the *imported* file changes: a cache keyed on recipe.py alone would be stale here.
    (tmp_path / "helpers.py").write_text(HELPER.format(pp=1), encoding="utf-8")
    assert "MBM205" not in _codes(tmp_path, settings)


def test_results_cache_matches_uncached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MBMEM_LINT_CACHE_DIR", str(tmp_path / "cache"))
    _tree(tmp_path, pp=4)
    plain = _codes(tmp_path, Settings(root=tmp_path))
    cached_cold = _codes(tmp_path, Settings(root=tmp_path, cache=True))
    cached_warm = _codes(tmp_path, Settings(root=tmp_path, cache=True))
    assert plain == cached_cold == cached_warm and plain


def test_results_cache_in_parallel_matches_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold cache checked on forked workers stores what one process stores: the warm runs after it
    (and after a one-process cold run) report the same findings, edits included, and a YAML-paired
    finding is not cached under the recipe file (removing the override drops it)."""
    _tree_with_overrides(tmp_path)

    def findings(jobs: str, cache_dir: str, *, cache: bool = True) -> list[tuple[object, ...]]:
        monkeypatch.setenv("MBMEM_LINT_JOBS", jobs)
        monkeypatch.setenv("MBMEM_LINT_CACHE_DIR", str(tmp_path / cache_dir))
        run = _check_in(tmp_path, ["."], Settings(root=tmp_path, cache=cache), need_edits=True)
        return [(d.code, d.location.path, d.location.line, d.message,
                 [(e.path, e.start, e.end, e.replacement) for e in (d.fix.edits if d.fix else [])])
                for d in run.diagnostics]

    plain = findings("1", "unused", cache=False)
    assert {"MBM002", "MBM205", "MBM601"} <= {f[0] for f in plain}
    assert findings("2", "par") == plain  # cold, on workers
    # An entry per Python file (the parse error included), written from the workers' results.
    assert len(list((tmp_path / "par").glob("results-v*/*/*.json"))) == 4
    assert findings("1", "par") == plain  # warm, from what the workers stored
    assert findings("1", "seq") == plain  # cold, one process
    assert findings("2", "seq") == plain  # warm
    (tmp_path / "override.yaml").unlink()
    without_yaml = findings("1", "unused", cache=False)
    assert len(without_yaml) < len(plain)
    assert findings("2", "par") == without_yaml  # warm entries hold no YAML-paired findings


def test_ir_cache_round_trip(tmp_path: Path) -> None:
    from mbmem_lint.parse.python import lower_module
    from mbmem_lint.resolve.cache import IRCache

    cache = IRCache(tmp_path)
    text = "def f():\n    return 1\n"
    assert cache.get(text) is None
    body = lower_module(text)
    cache.put(text, body)
    assert cache.get(text) == body
    assert cache.get(text + "\n") is None  # keyed by content


@pytest.mark.corpus
def test_parallel_equals_sequential_on_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    from mbmem_lint.dev.corpus import ensure_corpus

    corpus = ensure_corpus() / "megatron" / "bridge"
    # The whole corpus: ~30 file groups over the queue, workers re-using one resolver across groups.
    paths = [str(corpus / "recipes"), str(corpus / "perf_recipes")]

    def findings(jobs: str) -> list[tuple[object, ...]]:
        monkeypatch.setenv("MBMEM_LINT_JOBS", jobs)
        run = run_check(paths, Settings(), ResolveOptions(), need_edits=False)
        return [(d.code, d.location.path, d.location.line, d.message, d.function) for d in run.diagnostics]

    sequential = findings("1")
    assert sequential
    assert findings("2") == sequential


def test_results_cache_keeps_fix_edits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MBMEM_LINT_CACHE_DIR", str(tmp_path / "cache"))
    _tree(tmp_path, pp=2)
    settings = Settings(root=tmp_path, cache=True)

    def fixes() -> list[tuple[str, list[tuple[str, int, int, str]]]]:
        run = _check_in(tmp_path, ["recipe.py"], settings, need_edits=True)
        return [(d.code, [(e.path, e.start, e.end, e.replacement) for e in d.fix.edits])
                for d in run.diagnostics if d.fix is not None]

    cold = fixes()
    assert any(edits for _, edits in cold), "a finding with edits"
    assert fixes() == cold  # warm: served from the cache, edits included


def test_parallel_equals_sequential_with_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The queue's YAML task (override files, paired recipes, parse errors) reports what one process
    reports."""
    _tree_with_overrides(tmp_path)
    (tmp_path / "bad.yaml").write_text("# mbmem-lint: recipe=recipe.py::my_8gpu_h100_config\nmodel: [unclosed\n",
                                      encoding="utf-8")

    def findings(jobs: str) -> list[tuple[object, ...]]:
        monkeypatch.setenv("MBMEM_LINT_JOBS", jobs)
        run = _check_in(tmp_path, ["."], Settings(root=tmp_path), need_edits=True)
        return [(d.code, d.location.path, d.location.line, d.message, d.function,
                 [(e.path, e.start, e.end, e.replacement) for e in (d.fix.edits if d.fix else [])])
                for d in run.diagnostics]

    sequential = findings("1")
    codes = {f[0] for f in sequential}
    assert {"MBM002", "MBM205", "MBM601"} <= codes, codes  # parse error, helper finding, YAML typo
    assert any(f[1] == "bad.yaml" for f in sequential)
    assert findings("2") == sequential
    assert findings("3") == sequential


def test_estimates_for_summaries_are_the_same_in_parallel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``want_estimates`` (the GitHub and Markdown summaries): every recipe's estimate, the YAML-paired
    one included, comes back from the workers in the order one process gives."""
    _tree(tmp_path, pp=2)
    (tmp_path / "second.py").write_text(RECIPE.replace("my_8gpu_h100_config", "other_16gpu_h100_config"),
                                        encoding="utf-8")
    (tmp_path / "override.yaml").write_text(
        "# mbmem-lint: recipe=recipe.py::my_8gpu_h100_config\nmodel:\n  tensor_model_parallel_size: 4\n",
        encoding="utf-8")

    def estimates(jobs: str) -> list[dict[str, Any]]:
        monkeypatch.setenv("MBMEM_LINT_JOBS", jobs)
        old = os.getcwd()
        os.chdir(tmp_path)
        try:
            return run_check(["."], Settings(root=tmp_path), ResolveOptions(), need_edits=False,
                             want_estimates=True).estimates
        finally:
            os.chdir(old)

    sequential = estimates("1")
    names = [(e["recipe"], e["parallelism"]["tp"]) for e in sequential]
    # Sorted by file and function; the recipe paired with override.yaml (TP 4) after its plain run (TP 1).
    assert names == [("recipe.py::my_8gpu_h100_config", 1), ("recipe.py::my_8gpu_h100_config", 4),
                     ("second.py::other_16gpu_h100_config", 1)], names
    assert estimates("2") == sequential
    assert estimates("3") == sequential


def test_parallel_worker_error_is_a_finding_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mbmem_lint.resolve.resolver import Resolver

    _tree(tmp_path, pp=2)

    def broken(self: Resolver, src: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(Resolver, "adopt", broken)  # inherited by the forked workers
    monkeypatch.setenv("MBMEM_LINT_JOBS", "2")
    run = _check_in(tmp_path, ["."], Settings(root=tmp_path))
    internal = [d for d in run.diagnostics if d.code == "MBM001"]
    assert sorted(d.location.path for d in internal) == ["helpers.py", "recipe.py"]
    assert all("RuntimeError: boom" in d.message for d in internal)


def test_parallel_worker_that_dies_is_a_finding_not_a_hang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed mid-task (out of memory, a signal) sends nothing back: the files of every task
    it did not report become MBM001 findings."""
    from mbmem_lint.resolve.resolver import Resolver

    _tree(tmp_path, pp=2)
    real_adopt = Resolver.adopt

    def dies_on_helpers(self: Resolver, src: Any) -> Any:
        if src.path.endswith("helpers.py"):
            os._exit(9)
        return real_adopt(self, src)

    monkeypatch.setattr(Resolver, "adopt", dies_on_helpers)
    monkeypatch.setenv("MBMEM_LINT_JOBS", "2")
    run = _check_in(tmp_path, ["."], Settings(root=tmp_path))
    internal = [d for d in run.diagnostics if d.code == "MBM001"]
    assert "helpers.py" in {d.location.path for d in internal}
    assert all("exited without reporting" in d.message for d in internal)
    assert "helpers.py: internal error (the worker process checking this file exited without reporting)" in run.failed


def test_fork_queue_hands_each_task_to_exactly_one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The task queue (a pipe of 4-byte entries) larger than the pipe buffer: 20,000 tasks over 3
    workers, each task run once (no entry lost, split or read twice)."""
    from mbmem_lint import parallel

    monkeypatch.setattr(parallel, "_run_task", lambda i: parallel.TaskResult([], [], i))
    tasks = list(range(-1, 19_999))  # -1: the YAML task's index
    results = parallel._fork_map(tasks, 3)
    assert sorted(r.functions_seen for r in results) == tasks


def test_engine_fingerprint_follows_installed_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An edited rule or data file with the same version number must not reuse cached results.
    from mbmem_lint import fingerprint
    from mbmem_lint.results_cache import ResultsCache

    pkg = tmp_path / "pkg"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "rule.py").write_text("X = 1\n", encoding="utf-8")
    (pkg / "__pycache__" / "rule.cpython-312.pyc").write_bytes(b"\0")
    monkeypatch.setattr(fingerprint, "_package_dirs", lambda: [str(pkg)])
    fingerprint.engine_fingerprint.cache_clear()
    try:
        first = fingerprint.engine_fingerprint()
        settings, options = Settings(cache=True, root=tmp_path), ResolveOptions()
        context = ResultsCache.for_run(settings, options).context
        (pkg / "__pycache__" / "rule.cpython-312.pyc").write_bytes(b"\0\0")  # bytecode: ignored
        fingerprint.engine_fingerprint.cache_clear()
        assert fingerprint.engine_fingerprint() == first
        (pkg / "rule.py").write_text("X = 22\n", encoding="utf-8")
        fingerprint.engine_fingerprint.cache_clear()
        assert fingerprint.engine_fingerprint() != first
        assert ResultsCache.for_run(settings, options).context != context
    finally:
        fingerprint.engine_fingerprint.cache_clear()
