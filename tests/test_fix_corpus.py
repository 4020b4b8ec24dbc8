"""Issue 20's acceptance for fixes, on NVIDIA's own 293 recipe files (a copy): no fix adds an assignment
to a field its function already assigns, and ``check --fix --diff | git apply`` (the safe fixes) leaves
none of the findings it fixed. The work is in ``bench/fix_corpus.py``, which prints the same figures."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from mbmem_lint.dev.corpus import ensure_corpus

pytestmark = pytest.mark.corpus
BENCH = Path(__file__).resolve().parents[1] / "bench" / "fix_corpus.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fix_corpus", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git apply")
def test_corpus_fixes_edit_in_place_and_safe_fixes_fix(tmp_path: Path) -> None:
    bench = _bench()
    run, safe, remaining, git_err = bench.apply_safe_and_recheck(ensure_corpus(), tmp_path)
    fixed = [d for d in run.diagnostics if d.fix is not None and d.fix.edits]
    kinds = {bench.fix_kind(d, run.sources) for d in fixed}
    assert {"edit", "delete", "append"} <= kinds  # the corpus exercises every way of fixing
    assert bench.append_violations(fixed, run.sources) == []
    assert not git_err.strip()
    assert len(safe) >= 40  # 46 when written (MBM404, MBM406, MBM108, MBM405)
    assert [(d.code, d.location.path, d.location.line) for d in remaining] == []
