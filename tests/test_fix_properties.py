"""Property tests of the fix primitives over hand-written recipe fixtures (fixtures/fix/).

For every scenario: the fix is non-empty, the fixed file parses, bytes outside the edits are unchanged,
comments survive, the unified diff passes ``git apply --check`` (and applies to the same text) in a
temporary git repository, and running the fix again on the fixed file produces no edit.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbmem_lint.diagnostics import Edit
from mbmem_lint.fix import edits as E
from mbmem_lint.fix.apply import EditConflict, apply_edits, normalize_edits
from mbmem_lint.fix.diff import unified_diff
from mbmem_lint.fix.testing import recipe_from_source
from mbmem_lint.parse.yaml_overrides import load_override_file
from mbmem_lint.sources import SourceFile, Sources

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures" / "fix"
GIT = shutil.which("git")

Builder = Callable[[str, Sources], list[Edit]]


def _src(rel: str, text: str) -> Sources:
    kind = "yaml" if rel.endswith((".yaml", ".yml")) else "python"
    return {rel: SourceFile(rel, text, kind)}  # type: ignore[arg-type]


def py(
    fn: Callable[..., list[Edit]],
    *args: object,
    function: str | None = None,
    library: dict[str, object] | None = None,
) -> Builder:
    def build(rel: str, sources: Sources) -> list[Edit]:
        recipe = recipe_from_source(rel, sources[rel].text, function, library=library)
        return fn(recipe, *args, sources)

    return build


def on_write(fn: Callable[..., list[Edit]], path: str, *args: object) -> Builder:
    def build(rel: str, sources: Sources) -> list[Edit]:
        recipe = recipe_from_source(rel, sources[rel].text)
        ws = [w for w in recipe.writes if w.path == path]
        return fn(ws[-1], *args, sources) if ws else []

    return build


def on_entry(fn: Callable[..., list[Edit]], path: str, *args: object) -> Builder:
    def build(rel: str, sources: Sources) -> list[Edit]:
        of = load_override_file(rel, sources[rel].text)
        es = [e for e in of.entries if e.path == path]
        return fn(es[-1], *args, sources) if es else []

    return build


def on_file(fn: Callable[..., list[Edit]], *args: object) -> Builder:
    def build(rel: str, sources: Sources) -> list[Edit]:
        return fn(load_override_file(rel, sources[rel].text), *args, sources)

    return build


def rename_once(path: str, new: str) -> Builder:
    """Rename; on the fixed file the old name is gone, so the second run finds nothing to do."""
    return on_write(E.rename_attribute, path, new)


LIB: dict[str, object] = {
    "env_vars": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    "env_vars.PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "model.recompute_granularity": None,
    "peft": {"_target_": "LoRA"},
}

SCENARIOS: dict[str, tuple[str, Builder]] = {
    "set-field-in-place": ("llama_pretrain.py", py(E.set_field, "model.tensor_model_parallel_size", "2")),
    "set-field-insert-before-return": (
        "llama_pretrain.py",
        py(E.set_field, "model.recompute_method", '"uniform"'),
    ),
    "set-field-library-value": (
        "llama_pretrain.py",
        py(E.set_field, "model.recompute_granularity", '"selective"', library=LIB),
    ),
    "env-add-key-multiline": (
        "llama_pretrain.py",
        py(E.set_dict_key, "env_vars", "NCCL_GRAPH_REGISTER", "0"),
    ),
    "env-bool-to-int": ("llama_pretrain.py", py(E.set_dict_key, "env_vars", "NCCL_NVLS_ENABLE", "0")),
    "env-extend-alloc-conf": ("llama_pretrain.py", py(E.extend_alloc_conf, "expandable_segments:True")),
    "rename-attribute": (
        "llama_pretrain.py",
        rename_once("model.recompute_granulariy", "recompute_granularity"),
    ),
    "remove-assignment-with-comment": (
        "llama_pretrain.py",
        on_write(E.remove_assignment, "model.sequence_parallel"),
    ),
    "env-add-key-inline": ("inline_env.py", py(E.set_dict_key, "env_vars", "NCCL_GRAPH_REGISTER", "0")),
    "env-alloc-conf-from-library": ("inline_env.py", py(E.extend_alloc_conf, "expandable_segments:True")),
    "lora-add-keyword-multiline": (
        "lora_peft.py",
        py(E.set_field, "peft.sequence_parallel_input_regather", "True"),
    ),
    "lora-set-keyword": ("lora_peft.py", py(E.set_field, "peft.dim", "16")),
    "lora-remove-keyword-own-line": ("lora_peft.py", on_write(E.remove_assignment, "peft.target_modules")),
    "lora-remove-last-keyword": ("lora_peft.py", on_write(E.remove_assignment, "peft.alpha")),
    "env-insert-subscript": ("lora_peft.py", py(E.set_dict_key, "env_vars", "NCCL_GRAPH_REGISTER", "0")),
    "lora-add-keyword-inline": (
        "lora_inline.py",
        py(E.set_field, "peft.sequence_parallel_input_regather", "True"),
    ),
    "remove-semicolon-statement": (
        "lora_inline.py",
        on_write(E.remove_assignment, "model.sequence_parallel"),
    ),
    "remove-only-statement-in-block": (
        "lora_inline.py",
        on_write(E.remove_assignment, "dataset.packed_sequence_specs.pad_seq_to_mult"),
    ),
    "lora-remove-inline-keyword": ("lora_inline.py", on_write(E.remove_assignment, "peft.alpha")),
    "no-eol-in-place": ("no_eol.py", py(E.set_field, "train.micro_batch_size", "1")),
    "no-eol-insert": ("no_eol.py", py(E.set_field, "train.global_batch_size", "64")),
    "crlf-unicode-in-place": ("crlf_unicode.py", py(E.set_field, "logger.log_interval", "1")),
    "crlf-unicode-insert": ("crlf_unicode.py", py(E.set_field, "model.recompute_granularity", '"selective"')),
    "crlf-unicode-remove": ("crlf_unicode.py", on_write(E.remove_assignment, "model.seq_length")),
    "yaml-set-value": (
        "override.yaml",
        on_entry(E.yaml_set_value, "env_vars.PYTORCH_CUDA_ALLOC_CONF", '"expandable_segments:True"'),
    ),
    "yaml-rename-key": (
        "override.yaml",
        on_entry(E.yaml_rename_key, "model.recompute_granulariy", "recompute_granularity"),
    ),
    "yaml-remove-entry": ("override.yaml", on_entry(E.yaml_remove_entry, "model.sequence_parallel")),
    "yaml-remove-last-entry-of-section": (
        "override.yaml",
        on_entry(E.yaml_remove_entry, "env_vars.PYTORCH_CUDA_ALLOC_CONF"),
    ),
    "yaml-add-entry-nested": (
        "override.yaml",
        on_file(E.yaml_add_entry, "model.recompute_method", "uniform"),
    ),
    "yaml-add-entry-new-section": (
        "override.yaml",
        on_file(E.yaml_add_entry, "ddp.use_distributed_optimizer", "true"),
    ),
    "yaml-add-entry-existing": ("override.yaml", on_file(E.yaml_add_entry, "train.micro_batch_size", "1")),
}


def _read(rel: str) -> str:
    with open(FIX / rel, encoding="utf-8", newline="") as fh:
        return fh.read()


def _comments(text: str) -> list[str]:
    return [ln.split("#", 1)[1].strip() for ln in text.splitlines() if "#" in ln]


def _git_apply_check(tmp: Path, rel: str, old: str, diff: str, expected: str) -> None:
    repo = tmp / "repo"
    target = repo / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([GIT, "init", "-q", str(repo)], check=True)  # type: ignore[list-item]
    with open(target, "w", encoding="utf-8", newline="") as fh:
        fh.write(old)
    (repo / "fix.patch").write_text(diff, encoding="utf-8", newline="")
    res = subprocess.run([GIT, "apply", "--check", "fix.patch"], cwd=repo, capture_output=True, text=True)  # type: ignore[list-item]
    assert res.returncode == 0, res.stderr + "\n" + diff
    subprocess.run([GIT, "apply", "fix.patch"], cwd=repo, check=True)  # type: ignore[list-item]
    with open(target, encoding="utf-8", newline="") as fh:
        assert fh.read() == expected


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_fix_properties(name: str, tmp_path: Path) -> None:
    fixture, build = SCENARIOS[name]
    rel = f"fixtures/fix/{fixture}"
    old = _read(fixture)
    sources = _src(rel, old)
    edits = build(rel, sources)
    assert edits, "the fix produced no edit"
    assert all(e.path == rel for e in edits)
    new = apply_edits(old, edits)
    assert new != old
    # The fixed file parses.
    if fixture.endswith(".py"):
        ast.parse(new)
    else:
        from ruamel.yaml import YAML

        YAML(typ="safe").load(new)
    # Bytes outside the edits are unchanged: rebuild the new text from the old one.
    rebuilt, pos = [], 0
    for e in normalize_edits(edits):
        rebuilt.append(old[pos : e.start])
        rebuilt.append(e.replacement)
        pos = max(pos, e.end)
    rebuilt.append(old[pos:])
    assert "".join(rebuilt) == new
    # Comments survive unless their whole line was removed.
    removed = "".join(old[e.start : e.end] for e in edits)
    for c in _comments(old):
        assert c in new or c in removed, c
    # Line endings kept.
    if "\r\n" in old:
        assert new.count("\n") == new.count("\r\n")
    # Idempotence: the fix on the fixed file changes nothing.
    assert build(rel, _src(rel, new)) == []
    # The diff applies with git.
    diff = unified_diff(old, new, rel)
    assert diff.startswith(f"diff --git a/{rel} b/{rel}\n--- a/{rel}\n+++ b/{rel}\n")
    if GIT:
        _git_apply_check(tmp_path, rel, old, diff, new)


def test_combined_fixes_same_dict_apply_together(tmp_path: Path) -> None:
    """Two fixes adding keys to the same env_vars literal combine deterministically (either order)."""
    for fixture in ("llama_pretrain.py", "inline_env.py"):
        rel = f"fixtures/fix/{fixture}"
        old = _read(fixture)
        sources = _src(rel, old)
        recipe = recipe_from_source(rel, old)
        a = E.set_dict_key(recipe, "env_vars", "NCCL_GRAPH_REGISTER", "0", sources)
        b = E.set_dict_key(recipe, "env_vars", "TORCH_NCCL_AVOID_RECORD_STREAMS", "1", sources)
        c = E.set_field(recipe, "model.recompute_method", '"uniform"', sources)
        d = E.set_field(recipe, "model.recompute_num_layers", "1", sources)
        one = apply_edits(old, a + b + c + d)
        assert one == apply_edits(old, d + c + b + a)
        tree = ast.parse(one)
        assert "NCCL_GRAPH_REGISTER" in one and "TORCH_NCCL_AVOID_RECORD_STREAMS" in one
        assert tree is not None


# -- apply_edits over random non-overlapping edits ----------------------------------------------------


@st.composite
def _text_and_edits(draw: st.DrawFn) -> tuple[str, list[Edit]]:
    text = draw(st.text(alphabet="ab\n é", max_size=40))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
    edits = []
    for i in range(0, len(cuts) - 1, 2):
        edits.append(Edit("f", cuts[i], cuts[i + 1], draw(st.text(alphabet="xy\n", max_size=4))))
    return text, edits


@settings(max_examples=200, deadline=None)
@given(_text_and_edits(), st.randoms())
def test_apply_edits_order_independent_and_local(data: tuple[str, list[Edit]], rnd: object) -> None:
    text, edits = data
    try:
        out = apply_edits(text, edits)
    except EditConflict:
        return
    shuffled = list(edits)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert apply_edits(text, shuffled) == out
    assert apply_edits(text, edits + edits) == out  # duplicates merge
    if edits:
        first = min(e.start for e in edits)
        last = max(e.end for e in edits)
        assert out.startswith(text[:first])
        assert out.endswith(text[last:])
