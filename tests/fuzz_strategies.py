"""Hypothesis strategies shared by tests/test_fuzz.py and bench/fuzz_campaign.py."""

from __future__ import annotations

from hypothesis import strategies as st

SECTIONS = ["model", "train", "optimizer", "ddp", "dataset", "checkpoint", "env_vars", "peft", "comm_overlap"]
FIELDS = [
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "sequence_parallel", "micro_batch_size", "global_batch_size", "seq_length", "lr",
    "recompute_granularity", "use_distributed_optimizer", "NCCL_NVLS_ENABLE", "dim", "num_layers",
]  # fmt: skip
SPECIAL_SCALARS = [
    "yes", "no", "on", "off", "True", "false", "y", "n", "null", "~", "???", "'???'", "1e-4", "2e-5",
    "0x1F", "017", "1:30", "1_000", ".inf", "-.5", "2024-01-01", "${model.seq_length}", "'${a}'", '"1"',
    "<path to ckpt>", "''", "=", "!!str 5", "!!int 3", "!foo x", "!!python/object:os.system x", "[a, b]",
    "{}", "[]", "{_target_: a.B, x: 1}", "*undefined", "&anchor 1",
]  # fmt: skip

keys = st.one_of(
    st.sampled_from(FIELDS),
    st.sampled_from(["+extra", "++forced", "~gone", "_target_", "<<", "a.b", "1", "on"]),
    st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True),
)
scalars = st.one_of(
    st.sampled_from(SPECIAL_SCALARS),
    st.integers(-(10**12), 10**12).map(str),
    st.floats(allow_nan=False).map(repr),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12).map(lambda s: repr(s)),
)


@st.composite
def yaml_documents(draw: st.DrawFn) -> str:
    """Override-file-like YAML: sections of nested mappings, block and flow style, special scalars."""

    def mapping(depth: int, indent: int) -> list[str]:
        lines: list[str] = []
        for key in draw(st.lists(keys, min_size=1, max_size=4)):
            kind = draw(
                st.sampled_from(["scalar", "scalar", "flow", "block", "list"] if depth < 3 else ["scalar"])
            )
            pad = " " * indent
            if kind == "scalar":
                lines.append(f"{pad}{key}: {draw(scalars)}")
            elif kind == "flow":
                items = draw(st.lists(st.tuples(keys, scalars), max_size=3))
                lines.append(f"{pad}{key}: {{{', '.join(f'{k}: {v}' for k, v in items)}}}")
            elif kind == "list":
                lines.append(f"{pad}{key}:")
                lines.extend(f"{pad}  - {v}" for v in draw(st.lists(scalars, min_size=1, max_size=3)))
            else:
                lines.append(f"{pad}{key}:")
                lines.extend(mapping(depth + 1, indent + 2))
        return lines

    out: list[str] = []
    if draw(st.booleans()):
        out.append("# mbmem-lint: recipe=recipes/x.py::x_config")
    for section in draw(st.lists(st.sampled_from(SECTIONS), min_size=1, max_size=4)):
        out.append(f"{section}:")
        out.extend(mapping(1, 2))
    text = "\n".join(out) + "\n"
    if draw(st.integers(0, 9)) == 0:  # sometimes break it
        pos = draw(st.integers(0, len(text)))
        text = (
            text[:pos]
            + draw(st.sampled_from(["\t", "{", "]", ": :", "\n  - ", "&a ", "*a", "\x00"]))
            + text[pos:]
        )
    return text


dotlist_values = st.one_of(
    scalars,
    st.sampled_from(
        ["[core_attn,mlp]", "{A:1,B:0}", "'\"9,8,2\"'", "choice(1,2)", "1,2", "\\,", "[[a],null]"]
    ),
    st.text(max_size=20),
)
dotlist_items = st.one_of(
    st.builds(
        lambda op, sec, f, v: f"{op}{sec}.{f}={v}",
        st.sampled_from(["", "+", "++", "~"]),
        st.sampled_from(SECTIONS),
        st.sampled_from(FIELDS),
        dotlist_values,
    ),
    st.text(max_size=30),
)

# ------------------------------------------------------------------------------------- recipe-like Python

_RHS = ["2", "4", "8", "True", "False", "None", "'full'", "\"selective\"", "1e-4", "TP * 2", "SEQ // 2",
        "seq_length", "tp", "4096 * 2", "[\"core_attn\", \"mlp\"]", "{\"NCCL_NVLS_ENABLE\": \"0\"}",
        "torch.bfloat16", "helper(cfg)", "-1", "2 ** 3", "max(1, tp)", "not True", "x if tp > 1 else 2"]  # fmt: skip


@st.composite
def python_recipes(draw: st.DrawFn) -> str:
    """A recipe module: imports, constants, helpers, a recipe function with assignments and if/else."""
    lines = [
        "import torch",
        "from megatron.bridge.recipes.llama import llama3_8b_pretrain_config",
        "from megatron.bridge.training.config import ConfigContainer",
        "",
        f"TP = {draw(st.integers(1, 16))}",
        f"SEQ = {draw(st.sampled_from([2048, 4096, 8192]))}",
        "",
        "",
        "def helper(cfg, n=2):",
        f"    cfg.train.micro_batch_size = {draw(st.sampled_from(_RHS))}",
        "    return n",
        "",
        "",
    ]
    name = draw(st.from_regex(r"[a-z]{1,8}", fullmatch=True))
    lines.append(
        f"def {name}_pretrain_config(tp: int = {draw(st.integers(1, 8))}, seq_length: int = 4096) -> ConfigContainer:"
    )
    lines.append("    cfg = llama3_8b_pretrain_config()")
    body_len = draw(st.integers(1, 8))
    for _ in range(body_len):
        kind = draw(st.sampled_from(["assign", "assign", "if", "call", "alias"]))
        target = f"cfg.{draw(st.sampled_from(SECTIONS))}.{draw(st.sampled_from(FIELDS))}"
        rhs = draw(st.sampled_from(_RHS))
        if kind == "assign":
            lines.append(f"    {target} = {rhs}")
        elif kind == "if":
            lines.append(f"    if tp {draw(st.sampled_from(['>', '==', '<=']))} {draw(st.integers(0, 8))}:")
            lines.append(f"        {target} = {rhs}")
            lines.append("    else:")
            lines.append(f"        {target} = {draw(st.sampled_from(_RHS))}")
        elif kind == "call":
            lines.append("    helper(cfg)")
        else:
            lines.append("    model_cfg = cfg.model")
            lines.append(f"    model_cfg.{draw(st.sampled_from(FIELDS))} = {rhs}")
    lines.append("    return cfg")
    return "\n".join(lines) + "\n"
