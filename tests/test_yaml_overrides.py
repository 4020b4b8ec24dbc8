"""YAML override files and ``--set`` dotlists (mbmem_lint.parse.yaml_overrides).

Expected entries were checked by hand against the fixture text: every value/key span below is also
checked to slice exactly the value/key text out of the file (``value_offsets`` / ``key_offsets``).
Scalar semantics were checked against omegaconf 2.3.1 (PyYAML 6.0) and dotlist semantics against
hydra-core 1.3 (``OverridesParser``), see the tables below.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from mbmem_lint.parse.override_types import MISSING, Interpolation, OverrideEntry, OverrideFile
from mbmem_lint.parse.yaml_overrides import (
    DOTLIST_PATH,
    find_recipe_ref,
    load_override_bytes,
    load_override_file,
    parse_dotlist,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "yaml"

Row = tuple[str, Any, str, tuple[int, int, int | None, int | None], tuple[int, int, int | None, int | None]]

EXPECTED_ENTRIES = {
    "anchors.yaml": [
        ("base.seq_length", 4096, "set", (2, 15, 2, 19), (2, 3, 2, 13)),
        ("base.tensor_model_parallel_size", 2, "set", (3, 31, 3, 32), (3, 3, 3, 29)),
        ("model.seq_length", 4096, "set", (2, 15, 2, 19), (2, 3, 2, 13)),
        ("model.tensor_model_parallel_size", 4, "set", (6, 31, 6, 32), (6, 3, 6, 29)),
        ("dataset.blend", ["a", "b"], "set", (8, 17, 8, 23), (8, 3, 8, 8)),
        ("validation.blend", ["a", "b"], "set", (8, 17, 8, 23), (9, 14, 9, 19)),
    ],
    "distill_override.yaml": [
        ("model.tensor_model_parallel_size", 2, "set", (2, 31, 2, 32), (2, 3, 2, 29)),
        ("model.sequence_parallel", True, "set", (3, 22, 3, 26), (3, 3, 3, 20)),
        ("model.teacher.seq_length", 4096, "set", (4, 25, 4, 29), (4, 13, 4, 23)),
        ("model.teacher.tensor_model_parallel_size", 2, "set", (4, 59, 4, 60), (4, 31, 4, 57)),
        ("model.teacher.sequence_parallel", True, "set", (4, 81, 4, 85), (4, 62, 4, 79)),
        (
            "model.kd_config.logit_layers",
            ["output_layer", "output_layer"],
            "set",
            (5, 29, 5, 61),
            (5, 15, 5, 27),
        ),
        ("model.kd_config.skip_lm_loss", True, "set", (5, 77, 5, 81), (5, 63, 5, 75)),
        ("optimizer.lr", 0.0001, "set", (6, 17, 6, 21), (6, 13, 6, 15)),
        ("optimizer.min_lr", 1e-05, "set", (6, 31, 6, 35), (6, 23, 6, 29)),
    ],
    "duplicates.yaml": [
        ("model.tensor_model_parallel_size", 4, "set", (3, 31, 3, 32), (3, 3, 3, 29)),
        ("train.global_batch_size", 64, "set", (5, 28, 5, 30), (5, 9, 5, 26)),
    ],
    "llama32_1b_finetune.yaml": [
        ("train.train_iters", 100, "set", (3, 22, 3, 25), (3, 9, 3, 20)),
        ("train.global_batch_size", 128, "set", (3, 46, 3, 49), (3, 27, 3, 44)),
        ("train.micro_batch_size", 2, "set", (3, 69, 3, 70), (3, 51, 3, 67)),
        ("train.eval_iters", 10, "set", (3, 84, 3, 86), (3, 72, 3, 82)),
        ("train.eval_interval", 50, "set", (3, 103, 3, 105), (3, 88, 3, 101)),
        (
            "checkpoint.pretrained_checkpoint",
            "./checkpoints/llama32_1b",
            "set",
            (4, 37, 4, 61),
            (4, 14, 4, 35),
        ),
        ("checkpoint.save_interval", 50, "set", (4, 78, 4, 80), (4, 63, 4, 76)),
        ("peft.dim", 8, "set", (6, 8, 6, 9), (6, 3, 6, 6)),
        ("peft.alpha", 16, "set", (7, 10, 7, 12), (7, 3, 7, 8)),
        ("model.seq_length", 4096, "set", (8, 21, 8, 25), (8, 9, 8, 19)),
        ("model.tensor_model_parallel_size", 1, "set", (8, 55, 8, 56), (8, 27, 8, 53)),
        ("model.pipeline_model_parallel_size", 1, "set", (8, 88, 8, 89), (8, 58, 8, 86)),
        ("model.context_parallel_size", 1, "set", (8, 114, 8, 115), (8, 91, 8, 112)),
    ],
    "nemotron_vl_video.yaml": [
        ("model.seq_length", 8192, "set", (1, 21, 1, 25), (1, 9, 1, 19)),
        ("model.freeze_language_model", False, "set", (1, 50, 1, 55), (1, 27, 1, 48)),
        ("model.tensor_model_parallel_size", 8, "set", (1, 85, 1, 86), (1, 57, 1, 83)),
        ("dataset.seq_length", 8192, "set", (3, 15, 3, 19), (3, 3, 3, 13)),
        ("dataset.source.dataset_name", "llava_video_178k", "set", (5, 19, 5, 35), (5, 5, 5, 17)),
        ("dataset.source.adapter_kwargs.video_root_path", MISSING, "set", (7, 24, 7, 27), (7, 7, 7, 22)),
        ("checkpoint.save", MISSING, "set", (9, 9, 9, 12), (9, 3, 9, 7)),
    ],
    "qwen3_vl_pretrain_override.yaml": [
        ("model.cp_comm_type", "p2p", "set", (2, 17, 2, 20), (2, 3, 2, 15)),
        ("model.recompute_granularity", "full", "set", (3, 26, 3, 30), (3, 3, 3, 24)),
        ("model.recompute_method", "uniform", "set", (4, 21, 4, 28), (4, 3, 4, 19)),
        ("model.recompute_num_layers", 1, "set", (5, 25, 5, 26), (5, 3, 5, 23)),
        ("train.global_batch_size", 8, "set", (6, 28, 6, 29), (6, 9, 6, 26)),
        ("train.micro_batch_size", 4, "set", (6, 49, 6, 50), (6, 31, 6, 47)),
        ("optimizer.lr", 0.0005, "set", (7, 17, 7, 23), (7, 13, 7, 15)),
        ("optimizer.min_lr", 0, "set", (7, 33, 7, 34), (7, 25, 7, 31)),
        ("optimizer.adam_eps", 1e-08, "set", (7, 46, 7, 50), (7, 36, 7, 44)),
        ("dataset.seq_length", 4096, "set", (8, 23, 8, 27), (8, 11, 8, 21)),
        ("dataset.enable_in_batch_packing", True, "set", (8, 54, 8, 58), (8, 29, 8, 52)),
    ],
    "specials.yaml": [
        ("model.sequence_parallel", True, "set", (5, 22, 5, 25), (5, 3, 5, 20)),
        ("model.gradient_accumulation_fusion", False, "set", (6, 33, 6, 36), (6, 3, 6, 31)),
        ("model.bf16", True, "set", (7, 9, 7, 13), (7, 3, 7, 7)),
        ("model.recompute_modules", ["core_attn", "mlp"], "set", (9, 5, 10, 10), (8, 3, 8, 20)),
        (
            "model.seq_length",
            Interpolation(text="${dataset.seq_length}"),
            "set",
            (11, 15, 11, 36),
            (11, 3, 11, 13),
        ),
        ("model.cuda_graph_scope", None, "set", (12, 21, 12, 22), (12, 3, 12, 19)),
        ("model.fp8", None, "set", (13, 8, 13, 12), (13, 3, 13, 6)),
        ("ddp", {}, "set", (14, 6, 14, 8), (14, 1, 14, 4)),
        (
            "mixed_precision",
            {"_target_": "megatron.bridge.training.mixed_precision.MixedPrecisionConfig", "bf16": True},
            "set",
            (15, 18, 15, 103),
            (15, 1, 15, 16),
        ),
        ("env_vars.NCCL_NVLS_ENABLE", 0, "set", (17, 21, 17, 22), (17, 3, 17, 19)),
        ("env_vars.CUDA_DEVICE_MAX_CONNECTIONS", "1", "set", (18, 32, 18, 35), (18, 3, 18, 30)),
        ("model.new_field", 3, "add", (19, 19, 19, 20), (19, 1, 19, 17)),
        ("train.exit_signal_handler", True, "force", (20, 30, 20, 32), (20, 1, 20, 28)),
        ("dataset", None, "delete", (21, 11, 21, 15), (21, 1, 21, 9)),
        ("logger.wandb_exp_name", "first line\nsecond line\n", "set", (23, 19, 26, 1), (23, 3, 23, 17)),
        ("logger.tensorboard_dir", "<path to logs>", "set", (26, 20, 26, 36), (26, 3, 26, 18)),
    ],
    "tags.yaml": [
        ("model.tensor_model_parallel_size", 4, "set", (2, 37, 2, 40), (2, 3, 2, 29)),
        ("train.train_iters", "100", "set", (7, 22, 7, 25), (7, 3, 7, 14)),
    ],
}


def _load(name: str) -> tuple[str, OverrideFile]:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return text, load_override_file(f"fixtures/yaml/{name}", text)


def _row(e: OverrideEntry) -> Row:
    loc, key = e.location, e.key_location
    return (
        e.path,
        e.value,
        e.op,
        (loc.line, loc.column, loc.end_line, loc.end_column),
        (key.line, key.column, key.end_line, key.end_column),
    )


def _line_col_to_offset(text: str, line: int, column: int) -> int:
    lines = text.splitlines(keepends=True)
    return sum(len(x) for x in lines[: line - 1]) + column - 1


@pytest.mark.parametrize("name", sorted(EXPECTED_ENTRIES))
def test_fixture_entries(name: str) -> None:
    text, result = _load(name)
    assert [_row(e) for e in result.entries] == EXPECTED_ENTRIES[name]
    for e in result.entries:
        assert e.location.path == f"fixtures/yaml/{name}"
        assert e.value_offsets is not None and e.key_offsets is not None
        # offsets and line/column agree, and slice exactly the value / key text
        assert _line_col_to_offset(text, e.location.line, e.location.column) == e.value_offsets[0]
        assert e.location.end_line is not None and e.location.end_column is not None
        assert _line_col_to_offset(text, e.location.end_line, e.location.end_column) == e.value_offsets[1]
        assert _line_col_to_offset(text, e.key_location.line, e.key_location.column) == e.key_offsets[0]
        key_text = text[e.key_offsets[0] : e.key_offsets[1]]
        assert e.path.split(".")[-1] in key_text


def test_fixtures_without_problems_have_no_diagnostics() -> None:
    for name in EXPECTED_ENTRIES:
        if name in ("duplicates.yaml", "tags.yaml"):
            continue
        assert _load(name)[1].diagnostics == [], name


def test_value_spans_slice_the_source() -> None:
    text, result = _load("specials.yaml")
    spans = {e.path: text[e.value_offsets[0] : e.value_offsets[1]] for e in result.entries if e.value_offsets}
    assert spans["model.sequence_parallel"] == "yes"
    assert spans["env_vars.CUDA_DEVICE_MAX_CONNECTIONS"] == '"1"'
    assert spans["model.recompute_modules"] == "- core_attn\n    - mlp"
    assert (
        spans["logger.wandb_exp_name"] == "|\n    first line\n    second line\n"
    )  # block scalar: whole node
    assert spans["mixed_precision"].startswith("{_target_:") and spans["mixed_precision"].endswith("}")


def test_recipe_ref() -> None:
    assert _load("llama32_1b_finetune.yaml")[1].recipe_ref == (
        "fixtures/recipes/llama32_1b.py::llama32_1b_peft_config"
    )
    assert _load("specials.yaml")[1].recipe_ref == "recipes/llama3.py::llama3_8b_pretrain_config"
    assert _load("distill_override.yaml")[1].recipe_ref is None
    # only leading comments count
    assert find_recipe_ref("model: {a: 1}\n# mbmem-lint: recipe=a.py::f\n") is None
    assert find_recipe_ref("#mbmem-lint:recipe=a.py::f\n") == "a.py::f"


def test_special_values() -> None:
    _, result = _load("specials.yaml")
    by_path = {e.path: e for e in result.entries}
    assert by_path["model.seq_length"].value == Interpolation("${dataset.seq_length}")
    assert by_path["ddp"].value == {}
    assert by_path["mixed_precision"].value["_target_"].endswith("MixedPrecisionConfig")
    assert by_path["model.new_field"].op == "add"
    assert by_path["train.exit_signal_handler"].op == "force"
    assert by_path["dataset"].op == "delete"
    _, nemotron = _load("nemotron_vl_video.yaml")
    missing = [e.path for e in nemotron.entries if e.value is MISSING]
    assert missing == ["dataset.source.adapter_kwargs.video_root_path", "checkpoint.save"]


def test_duplicates_keep_last_and_are_reported() -> None:
    _, result = _load("duplicates.yaml")
    assert [(e.path, e.value) for e in result.entries] == [
        ("model.tensor_model_parallel_size", 4),
        ("train.global_batch_size", 64),  # PyYAML keeps the last *mapping*, not a merge
    ]
    diags = [(d.code, d.name, d.severity, d.location.line, d.location.column) for d in result.diagnostics]
    assert diags == [
        ("MBM003", "duplicate-key", "error", 3, 3),
        ("MBM003", "duplicate-key", "error", 5, 1),
    ]
    assert "first at line 2" in result.diagnostics[0].message
    assert "OmegaConf.load" in result.diagnostics[0].message


def test_unknown_tags_are_reported_not_constructed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _, result = _load("tags.yaml")
    assert [(e.path, e.value) for e in result.entries] == [
        ("model.tensor_model_parallel_size", 4),
        ("train.train_iters", "100"),
    ]
    codes = [(d.code, d.severity, d.location.line, d.location.column) for d in result.diagnostics]
    assert codes == [
        ("MBM005", "error", 3, 17),
        ("MBM005", "error", 4, 16),
        ("MBM005", "error", 5, 12),
    ]
    assert all(d.name == "unsupported-yaml-tag" for d in result.diagnostics)
    assert list(tmp_path.iterdir()) == []


def test_anchors_and_merge_keys() -> None:
    _, result = _load("anchors.yaml")
    by_path = {e.path: e for e in result.entries}
    assert by_path["model.seq_length"].via_alias and by_path["model.seq_length"].value == 4096
    assert not by_path["model.tensor_model_parallel_size"].via_alias  # explicit key beats the merge
    assert by_path["validation.blend"].via_alias
    assert by_path["validation.blend"].location == by_path["dataset.blend"].location  # the anchor's node


@pytest.mark.parametrize(
    ("name", "code", "line", "column"),
    [
        ("bad_syntax.yaml", "MBM002", 4, 6),
        ("toplevel_list.yaml", "MBM002", 1, 1),
        ("flow_missing_invalid.yaml", "MBM002", 3, 78),
    ],
)
def test_parse_errors(name: str, code: str, line: int, column: int) -> None:
    _, result = _load(name)
    assert result.entries == []
    [diag] = result.diagnostics
    assert (diag.code, diag.name, diag.severity) == (code, "parse-error", "error")
    assert (diag.location.line, diag.location.column) == (line, column)


# Checked with omegaconf 2.3.1: OmegaConf.load(io.StringIO(f"k: {text}")).k
OMEGACONF_SCALARS: list[tuple[str, Any]] = [
    ("yes", True), ("Yes", True), ("YES", True), ("no", False), ("on", True), ("On", True), ("off", False),
    ("OFF", False), ("y", "y"), ("n", "n"), ("Y", "Y"), ("true", True), ("True", True), ("TRUE", True),
    ("false", False), ("False", False), ("tRue", "tRue"), ("1e-4", 1e-4), ("2e-5", 2e-5), ("1e4", 1e4),
    ("1E4", 1e4), ("1.5", 1.5), ("1.", 1.0), ("-.5", "-.5"), (".5", 0.5), ("1_000", 1000), ("0x1F", 31),
    ("017", 15), ("0o17", "0o17"), ("0b101", 5), ("1:30", 90), ("1:30.5", 90.5), ("190:20:30", 685230),
    (".inf", math.inf), ("-.inf", -math.inf), ("null", None), ("Null", None), ("NULL", None), ("~", None),
    ("", None), ("???", MISSING), ("'???'", MISSING), ("2024-01-01", "2024-01-01"),
    ("2024-01-01T10:00:00Z", "2024-01-01T10:00:00Z"), ("+1", 1), ("-0", 0), ("00", 0), ("0", 0),
    ("1e", "1e"), ("0.1_0", 0.1), ("<path>", "<path>"), ("12_3.4", 123.4), ("1.0e+3", 1000.0),
    ("1e+3", 1000.0), ("+.inf", math.inf), ("08", "08"), ("0xg", "0xg"), ("_1", "_1"),
    ("'yes'", "yes"), ('"1e-4"', "1e-4"), ("!!str 5", "5"), ("!!int '5'", 5), ("!!float 1", 1.0),
    ("!!bool yes", True), ("'${a.b}'", Interpolation("${a.b}")), ("x${a}y", Interpolation("x${a}y")),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), OMEGACONF_SCALARS)
def test_scalars_as_omegaconf_reads_them(text: str, expected: Any) -> None:
    result = load_override_file("s.yaml", f"k: {text}\n")
    assert result.diagnostics == []
    [entry] = result.entries
    assert entry.value == expected and type(entry.value) is type(expected)


def test_nan() -> None:
    [entry] = load_override_file("s.yaml", "k: .NaN\n").entries
    assert math.isnan(entry.value)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("a: 1\n---\nb: 2\n", "MBM002"),  # OmegaConf.load: expected a single document
        ("a: =\n", "MBM002"),  # !!value tag: OmegaConf.load cannot construct
        ("5\n", "MBM002"),
        ("a: *nope\n", "MBM002"),
        ("a: &x {b: *x}\n", "MBM002"),
        ("a:\n\tb: 1\n", "MBM002"),
        ("a: !!binary aGVsbG8=\n", "MBM005"),
        ("a: !!set {x}\n", "MBM005"),
        ("a: !foo 1\n", "MBM005"),
        ("a: \x00\n", "MBM004"),
    ],
)
def test_bad_documents(text: str, code: str) -> None:
    result = load_override_file("x.yaml", text)
    assert result.entries == [] or code == "MBM005"
    assert [d.code for d in result.diagnostics] == [code]


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "~\n", "null\n"])
def test_empty_documents(text: str) -> None:
    result = load_override_file("e.yaml", text)
    assert (result.entries, result.diagnostics) == ([], [])


def test_crlf_bom_and_unicode_offsets() -> None:
    text = "\ufeffmodel:\r\n  name: \u00e9t\u00e9\r\n  tp: 2\r\n"
    result = load_override_file("u.yaml", text)
    assert [(e.path, e.value) for e in result.entries] == [("model.name", "\u00e9t\u00e9"), ("model.tp", 2)]
    for e in result.entries:
        assert e.value_offsets is not None
        assert text[e.value_offsets[0] : e.value_offsets[1]] in ("\u00e9t\u00e9", "2")
    assert result.entries[1].location.line == 3


def test_anchor_and_tag_not_part_of_value_span() -> None:
    text = "a: &x 4\nb: !!int 5\nc: *x\n"
    result = load_override_file("p.yaml", text)
    assert [text[e.value_offsets[0] : e.value_offsets[1]] for e in result.entries if e.value_offsets] == [
        "4",
        "5",
        "4",
    ]


def test_load_override_bytes() -> None:
    ok = load_override_bytes("a.yaml", "\ufeffmodel: {tp: 2}\n".encode())
    assert [(e.path, e.value) for e in ok.entries] == [("model.tp", 2)]
    bad = load_override_bytes("b.yaml", b"model:\n  name: \xff\xfe\n")
    [diag] = bad.diagnostics
    assert (diag.code, diag.name, diag.location.line, diag.location.column) == (
        "MBM004",
        "file-skipped",
        2,
        9,
    )
    assert "UTF-8" in diag.message
    binary = load_override_bytes("c.yaml", b"\x7fELF\x00\x00")
    assert [d.code for d in binary.diagnostics] == ["MBM004"]


# ------------------------------------------------------------------------------------------------- dotlists

# Checked with hydra-core 1.3 OverridesParser.parse_override(item).value()
DOTLIST_VALUES: list[tuple[str, Any]] = [
    ("a.b=1", 1), ("a.b=1.5", 1.5), ("a.b=1e-4", 1e-4), ("a.b=true", True), ("a.b=True", True),
    ("a.b=tRue", True), ("a.b=yes", "yes"), ("a.b=on", "on"), ("a.b=null", None), ("a.b=NULL", None),
    ("a.b=[a,b]", ["a", "b"]), ("a.b=[1, 2]", [1, 2]), ("a.b='\"9999,8,2\"'", '"9999,8,2"'),
    ('a.b="x"', "x"), ("a.b='x'", "x"), ("a.b=${x.y}", Interpolation("${x.y}")),
    ("a.b=foo${x}bar", Interpolation("foo${x}bar")), ("a.b=", ""), ("a.b=[[a,b],null]", [["a", "b"], None]),
    ("a.b=abc def", "abc def"), ("a.b= 5", 5), ("a.b=5 ", 5), ("a.b=-3", -3), ("a.b=1_000", 1000),
    ("a.b=0x10", "0x10"), ("a.b=inf", math.inf), ("a.b=-inf", -math.inf), ("a.b=/path/to/x", "/path/to/x"),
    ("a.b=torch.float32", "torch.float32"), ("a.b=1.", 1.0), ("a.b=.5", 0.5), ("a.b=+5", 5),
    ("a.b=1e3", 1000.0), ("a.b=\\,", ","), ("a.b=[a,${x}]", ["a", Interpolation("${x}")]), ("a.b=[]", []),
    ("a.b=1:30", "1:30"), ("a.b=${oc.env:HOME}", Interpolation("${oc.env:HOME}")), ('a.b="it\'s"', "it's"),
    ("a.b=null_x", "null_x"), ("a.b=True_", "True_"), ("a.b=???", MISSING),
    ("a.b={_target_:x.Y,k:1}", {"_target_": "x.Y", "k": 1}), ("a.b={}", {}),
]  # fmt: skip


@pytest.mark.parametrize(("item", "expected"), DOTLIST_VALUES)
def test_dotlist_values_as_hydra_parses_them(item: str, expected: Any) -> None:
    result = parse_dotlist([item])
    assert result.diagnostics == []
    [entry] = result.entries
    assert (entry.path, entry.op) == ("a.b", "set")
    assert entry.value == expected and type(entry.value) is type(expected)


def test_dotlist_ops_locations_and_dict_flattening() -> None:
    items = [
        "model.tensor_model_parallel_size=4",
        "+model.foo=1",
        "++env_vars={CUDA_DEVICE_MAX_CONNECTIONS:1, NCCL_NVLS_ENABLE:0}",
        "~model.seq_length",
        "~a.b=3",
    ]
    result = parse_dotlist(items)
    assert result.path == DOTLIST_PATH and result.diagnostics == []
    rows = [
        (e.path, e.value, e.op, e.location.line, e.location.column, e.location.end_column,
         e.key_location.column, e.key_location.end_column)
        for e in result.entries
    ]  # fmt: skip
    assert rows == [
        ("model.tensor_model_parallel_size", 4, "set", 1, 34, 35, 1, 33),
        ("model.foo", 1, "add", 2, 12, 13, 2, 11),
        ("env_vars.CUDA_DEVICE_MAX_CONNECTIONS", 1, "force", 3, 41, 42, 13, 40),
        ("env_vars.NCCL_NVLS_ENABLE", 0, "force", 3, 61, 62, 44, 60),
        ("model.seq_length", None, "delete", 4, 2, 18, 2, 18),
        ("a.b", 3, "delete", 5, 6, 7, 2, 5),
    ]
    for e in result.entries:
        item = items[e.location.line - 1]
        assert e.key_offsets is not None
        assert (
            item[e.key_offsets[0] : e.key_offsets[1]] == e.path.split(".")[-1]
            or "." in item[e.key_offsets[0] : e.key_offsets[1]]
        )
        if e.value_offsets:
            assert item[e.value_offsets[0] : e.value_offsets[1]] in ("4", "1", "0", "3")
    assert result.entries[4].value_offsets is None


@pytest.mark.parametrize(
    "item",
    [
        "a.b",  # no '='
        "a.b=a=b",
        "a..b=1",
        "a.b=[1,2,]",
        "a.b=choice(1,2)",  # sweeps are not run by Megatron Bridge
        "a.b=1,2",
        "a/b=1",
        "=5",
        "key with space=1",
        "a.b='unterminated",
        "a.b=[" * 1 + "[" * 5000,
        "a.b={x}",
        "a.b=~",
    ],
)
def test_bad_dotlist_items(item: str) -> None:
    result = parse_dotlist(["ok.key=1", item])
    assert [e.path for e in result.entries] == ["ok.key"]
    [diag] = result.diagnostics
    assert (diag.code, diag.name, diag.severity, diag.location.line) == ("MBM006", "bad-override", "error", 2)
    assert diag.location.path == DOTLIST_PATH and len(diag.message) < 400
