"""Exact-output tests of the fix primitives on small recipes (the statement shapes of Bridge 0.6.2's recipes)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from mbmem_lint.diagnostics import Location
from mbmem_lint.fix import edits as E
from mbmem_lint.fix.apply import apply_edits
from mbmem_lint.fix.testing import recipe_from_source
from mbmem_lint.resolve.resolved import Write
from mbmem_lint.sources import SourceFile, Sources

P = "recipes/r.py"


def _setup(code: str, **kw: object) -> tuple[str, Sources]:
    text = textwrap.dedent(code).lstrip("\n")
    return text, {P: SourceFile(P, text, "python")}


def _run(code: str, fn: str, *args: object, library: dict[str, object] | None = None) -> str:
    text, sources = _setup(code)
    r = recipe_from_source(P, text, library=library)
    out = apply_edits(text, getattr(E, fn)(r, *args, sources))
    ast.parse(out)
    return out


def test_literals() -> None:
    assert (
        E.py_literal(True) == "True"
        and E.py_literal("a:b") == '"a:b"'
        and E.py_literal([1, "x"]) == '[1, "x"]'
    )
    assert (
        E.yaml_literal(True) == "true"
        and E.yaml_literal("expandable_segments:True") == '"expandable_segments:True"'
    )
    assert (
        E.yaml_literal("full") == "full" and E.yaml_literal("1") == '"1"' and E.yaml_literal(None) == "null"
    )
    assert E.merge_alloc_conf(None, "expandable_segments:True") == "expandable_segments:True"
    assert (
        E.merge_alloc_conf("expandable_segments:False,x:1", "expandable_segments:True")
        == "expandable_segments:True,x:1"
    )


def test_set_field_library_origin_inserts_in_user_function() -> None:
    code = """
    def f():
        cfg = base()
        if cfg.model.context_parallel_size > 1:
            cfg.dataset.x = 2

        return cfg
    """
    out = _run(
        code,
        "set_field",
        "model.recompute_granularity",
        '"selective"',
        library={"model.recompute_granularity": "full"},
    )
    assert out.endswith('\n    cfg.model.recompute_granularity = "selective"\n    return cfg\n')


def test_set_field_chained_target_is_split_out_of_the_chain() -> None:
    code = """
    def f():
        cfg = base()
        cfg.rng.te_rng_tracker = cfg.model.use_te_rng_tracker = True
        return cfg
    """
    out = _run(code, "set_field", "model.use_te_rng_tracker", "False")
    assert out == textwrap.dedent("""
    def f():
        cfg = base()
        cfg.rng.te_rng_tracker = True
        cfg.model.use_te_rng_tracker = False
        return cfg
    """).lstrip("\n")
    out = _run(code, "set_field", "rng.te_rng_tracker", "False")
    assert "    cfg.model.use_te_rng_tracker = True\n    cfg.rng.te_rng_tracker = False\n    return cfg" in out


HELPER_CODE = """
def _common(cfg):
    cfg.train.micro_batch_size = 2


def f():
    cfg = base()
    _common(cfg)
    return cfg


def g():
    cfg = base()
    _common(cfg)
    return cfg
"""


def _helper_recipe(code: str) -> tuple[str, Sources, object]:
    text, sources = _setup(code)
    r = recipe_from_source(P, text, "f")
    loc = Location(P, 2, 34, 2, 35)  # the helper's ``2``, as the resolver records it
    stmt = Location(P, 2, 5, 2, 35)
    r.writes.append(Write("train.micro_batch_size", 2, "recipe", loc, loc, True, None,
                          "cfg.train.micro_batch_size", stmt, "_common"))
    return text, sources, r


def test_set_field_in_a_helper_edits_it_and_names_the_other_recipes() -> None:
    from mbmem_lint.fix.placement import place

    text, sources, r = _helper_recipe(HELPER_CODE)
    p = place(r, "train.micro_batch_size", sources)  # type: ignore[arg-type]
    assert (p.how, p.helper, p.also) == ("edit", "_common", ("g",))
    assert p.note() == " in _common() (recipes/r.py:2); this also changes 1 other recipe that calls it: g"
    out = apply_edits(text, E.set_field(r, "train.micro_batch_size", "1", sources))  # type: ignore[arg-type]
    assert out == text.replace("micro_batch_size = 2", "micro_batch_size = 1")
    # Only f calls it: the same edit, said to be this recipe's alone.
    text2, sources2, r2 = _helper_recipe(HELPER_CODE.split("\n\n\ndef g")[0] + "\n")
    p2 = place(r2, "train.micro_batch_size", sources2)  # type: ignore[arg-type]
    assert p2.also == () and p2.note() == " in _common() (recipes/r.py:2), which only this recipe calls"


def test_set_field_on_an_object_built_elsewhere_appends_and_says_so() -> None:
    from mbmem_lint.fix.placement import place

    code = """
    def f():
        cfg = base()
        peft = make_peft()
        cfg.peft = peft
        return cfg
    """
    text, sources = _setup(code)
    r = recipe_from_source(P, text)
    p = place(r, "peft.sequence_parallel_input_regather", sources)
    assert p.how == "append" and p.note() == (
        "; added before `return`: recipes/r.py:4 assigns an object built elsewhere")
    assert _run(code, "set_field", "peft.sequence_parallel_input_regather", "True").endswith(
        "    cfg.peft = peft\n    cfg.peft.sequence_parallel_input_regather = True\n    return cfg\n")


def test_set_field_append_says_where_the_value_comes_from() -> None:
    from mbmem_lint.fix.placement import place

    text, sources = _setup("""
    def f():
        cfg = base()
        return cfg
    """)
    r = recipe_from_source(P, text, library={"ddp.use_distributed_optimizer": False})
    p = place(r, "ddp.use_distributed_optimizer", sources)
    assert p.how == "append"
    assert p.note() == ("; added before `return`: the value comes from Megatron Bridge "
                        "(megatron/bridge/recipes/common.py:1)")
    assert place(r, "ddp.overlap_grad_reduce", sources).note() == (
        "; added before `return`: the value comes from the field's default")


def test_set_field_without_return_or_config_var_gives_no_fix() -> None:
    text, sources = _setup("""
    def f():
        cfg = base()
        cfg.train.micro_batch_size = 2
        return build(cfg)
    """)
    r = recipe_from_source(P, text)
    assert E.set_field(r, "model.recompute_method", '"uniform"', sources) == []


def test_set_field_keyword_on_call_without_args_and_with_kwargs() -> None:
    code = """
    def f():
        cfg = base()
        cfg.peft = LoRA()
        return cfg
    """
    assert "cfg.peft = LoRA(sequence_parallel_input_regather=True)" in _run(
        code, "set_field", "peft.sequence_parallel_input_regather", "True"
    )
    code2 = code.replace("LoRA()", "LoRA(**kw)")
    out = _run(code2, "set_field", "peft.sequence_parallel_input_regather", "True")
    assert "LoRA(**kw)\n    cfg.peft.sequence_parallel_input_regather = True\n" in out


def test_env_vars_not_literal_uses_subscript() -> None:
    code = """
    def f():
        cfg = base()
        cfg.env_vars = dict(BASE_ENV)
        return cfg
    """
    out = _run(code, "set_dict_key", "env_vars", "NCCL_GRAPH_REGISTER", "0")
    assert 'cfg.env_vars["NCCL_GRAPH_REGISTER"] = 0\n    return cfg' in out


def test_env_vars_empty_dict_and_subscript_write() -> None:
    code = """
    def f():
        cfg = base()
        cfg.env_vars = {}
        cfg.env_vars["NCCL_NVLS_ENABLE"] = True
        return cfg
    """
    out = _run(code, "set_dict_key", "env_vars", "NCCL_GRAPH_REGISTER", "0")
    assert 'cfg.env_vars = {"NCCL_GRAPH_REGISTER": 0}' in out
    out = _run(code, "set_dict_key", "env_vars", "NCCL_NVLS_ENABLE", "1")
    assert 'cfg.env_vars["NCCL_NVLS_ENABLE"] = 1' in out


def test_extend_alloc_conf_replaces_option_and_is_idempotent() -> None:
    code = """
    def f():
        cfg = base()
        cfg.env_vars = {**COMMON_RECIPE_ENV_VARS, 'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:true,x:1'}
        return cfg
    """
    out = _run(code, "extend_alloc_conf", "expandable_segments:True")
    assert "'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True,x:1'}" in out
    text, sources = _setup(out)
    assert E.extend_alloc_conf(recipe_from_source(P, text), "expandable_segments:True", sources) == []


def test_extend_alloc_conf_library_value_is_merged() -> None:
    code = """
    def f():
        cfg = base()
        return cfg
    """
    lib: dict[str, object] = {"env_vars.PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}
    out = _run(code, "extend_alloc_conf", "expandable_segments:True", library=lib)
    assert 'cfg.env_vars["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:128,expandable_segments:True"' in out


def test_rename_keyword_argument() -> None:
    text, sources = _setup("""
    def f():
        cfg = base()
        cfg.peft = LoRA(dimm=8)
        return cfg
    """)
    r = recipe_from_source(P, text)
    w = next(w for w in r.writes if w.path == "peft.dimm")
    assert "LoRA(dim=8)" in apply_edits(text, E.rename_attribute(w, "dim", sources))


def test_remove_only_keyword() -> None:
    text, sources = _setup("""
    def f():
        cfg = base()
        cfg.model = GPTModelProvider(sequence_parallel=True)
        return cfg
    """)
    r = recipe_from_source(P, text)
    w = next(w for w in r.writes if w.path == "model.sequence_parallel")
    assert "GPTModelProvider()" in apply_edits(text, E.remove_assignment(w, sources))


def test_ast_byte_columns_are_tolerated() -> None:
    """A resolver passing ``ast`` byte columns through still gets the right span on non-ASCII lines."""
    text, sources = _setup("""
    def f():
        cfg = base()
        cfg.logger.name = "Größe"; cfg.train.micro_batch_size = 2
        return cfg
    """)
    node = ast.parse(text).body[0].body[1].value  # type: ignore[attr-defined]
    stmt = ast.parse(text).body[0].body[2]  # type: ignore[attr-defined]
    val = stmt.value
    loc = Location(P, val.lineno, val.col_offset + 1, val.end_lineno, val.end_col_offset + 1)
    assert node is not None
    r = recipe_from_source(P, text)
    r.writes = [Write("train.micro_batch_size", 2, "recipe", loc, loc, True, None, None, None, "f")]
    out = apply_edits(text, E.set_field(r, "train.micro_batch_size", "1", sources))
    assert 'cfg.logger.name = "Größe"; cfg.train.micro_batch_size = 1\n' in out


def test_library_paths_are_never_edited() -> None:
    text, sources = _setup("x = 1\n")
    loc = Location("megatron/bridge/recipes/common.py", 1, 5, 1, 6, in_library=True)
    assert E.replace_value(loc, "2", sources) == []
    assert E.replace_value(Location(P, 1, 5, 1, 6), "2", sources)[0].replacement == "2"


def test_set_field_when_a_yaml_override_wins_edits_the_yaml() -> None:
    from mbmem_lint.parse.yaml_overrides import load_override_file

    text, sources = _setup("""
    def f():
        cfg = base()
        cfg.model.sequence_parallel = True
        return cfg
    """)
    y = "model:\n  sequence_parallel: true  # from the launcher\n"
    sources["o.yaml"] = SourceFile("o.yaml", y, "yaml")
    entry = load_override_file("o.yaml", y).entries[0]
    r = recipe_from_source(P, text)
    r.writes.append(Write(entry.path, True, "yaml", entry.location, entry.location, True, None))
    edits = E.set_field(r, "model.sequence_parallel", "False", sources)
    assert [e.path for e in edits] == ["o.yaml"]
    assert apply_edits(y, edits) == "model:\n  sequence_parallel: false  # from the launcher\n"
    r.writes[-1] = Write(entry.path, True, "cli", Location("<--set>", 1, 1, 1, 5), entry.location, True, None)
    assert E.set_field(r, "model.sequence_parallel", "False", sources) == []


def test_set_field_never_assigns_into_a_string_or_none_section() -> None:
    code = """
    def f():
        cfg = base()
        return cfg
    """
    text, sources = _setup(code)
    lib: dict[str, object] = {"mixed_precision": "bf16_mixed", "comm_overlap": None}
    r = recipe_from_source(P, text, library=lib)
    assert E.set_field(r, "mixed_precision.grad_reduce_in_fp32", "False", sources) == []
    assert E.set_field(r, "comm_overlap.tp_comm_overlap", "False", sources) == []
    assert E.set_field(r, "model.recompute_method", '"uniform"', sources) != []


def test_remove_assignment_shapes() -> None:
    code = """
    def f():
        cfg = base()
        if cfg.x:
            cfg.model.a = 1  # alone in its block
        cfg.model.b = 2  # a comment goes with it
        cfg.model.c = 3; cfg.model.d = 4
        if cfg.y: cfg.model.e = 5
        return cfg
    """
    text, sources = _setup(code)
    r = recipe_from_source(P, text)

    def removed(path: str) -> str:
        w = next(w for w in r.writes if w.path == path)
        out = apply_edits(text, E.remove_assignment(w, sources))
        ast.parse(out)
        return out

    assert "    if cfg.x:\n        pass\n    cfg.model.b" in removed("model.a")
    assert "cfg.model.b" not in removed("model.b") and "a comment" not in removed("model.b")
    assert "    cfg.model.c = 3\n    if cfg.y" in removed("model.d")
    assert "    cfg.model.d = 4\n" in removed("model.c")
    assert removed("model.e") == text  # a one-line compound statement is left alone


def _removal_agreement(files: list[Path]) -> tuple[int, int]:
    """(writes checked, removals the ast-only paths handled): every removal, rename, keyword and dict
    entry the ast-only paths make is the one the libcst paths make."""
    from mbmem_lint.fix._text import py_index

    checked = fast = 0
    for f in files:
        text = f.read_text(encoding="utf-8")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        src = SourceFile(str(f), text, "python")
        idx = py_index(text)
        assert idx is not None
        for fn in tree.body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            r = recipe_from_source(str(f), text, fn.name)
            for w in r.writes:
                if w.origin != "recipe" or w.statement is None:
                    continue
                quick = E._remove_plain_statement(src, idx, w)
                if quick is None:
                    quick = E._remove_keyword_plain(src, idx, w)
                checked += 1
                if quick is not None:
                    fast += 1
                    assert quick == E._remove_with_libcst(src, idx, w), (f, w.path)
                assert E.rename_attribute(w, "zz", {str(f): src}) == E._rename_attribute_libcst(src, idx, w, "zz")
                sp = idx.loc_span(w.location)
                value = text[sp.start : sp.end]
                if value.endswith(")") and "(" in value:
                    for name in ("zz", "dim", "tensor_model_parallel_size"):
                        assert (E.add_keyword(w.location, name, "1", {str(f): src})
                                == E._add_keyword_libcst(src, idx, sp, name, "1")), (f, w.path, name)
                if value.startswith("{"):
                    for key in ("ZZ", "PYTORCH_CUDA_ALLOC_CONF", "NCCL_NVLS_ENABLE"):
                        assert (E._dict_literal_edits(src, idx, w.location, key, "1")
                                == E._dict_literal_edits_libcst(src, idx, w.location, key, "1")), (f, w.path, key)
    return checked, fast


def test_ast_only_edits_agree_with_libcst_on_the_fixtures() -> None:
    root = Path(__file__).resolve().parents[1] / "fixtures"
    checked, fast = _removal_agreement(sorted(root.rglob("*.py")))
    assert fast > 0.9 * checked > 100


@pytest.mark.corpus
def test_ast_only_edits_agree_with_libcst_on_the_corpus() -> None:
    from mbmem_lint.dev.corpus import ensure_corpus

    recipes = ensure_corpus() / "megatron" / "bridge" / "recipes"
    checked, fast = _removal_agreement([recipes / "common.py", recipes / "gemma" / "h100" / "gemma3.py"])
    assert fast > 0.9 * checked > 200


def test_a_helper_many_recipes_call_names_four_and_more() -> None:
    from mbmem_lint.fix.placement import place

    recipes = "".join(f"\n\ndef r{i}():\n    cfg = base()\n    _common(cfg)\n    return cfg\n" for i in range(6))
    text, sources, r = _helper_recipe(HELPER_CODE + recipes)
    p = place(r, "train.micro_batch_size", sources)  # type: ignore[arg-type]
    assert p.note() == (" in _common() (recipes/r.py:2); this also changes other recipes that call it: "
                        "g, r0, r1, r2 and more")
    assert p.changes_other_recipes
