"""Helpers shared by the rule modules: example builders, fix builders, value formatting."""

from __future__ import annotations

from typing import Any

from mbmem_lint.check.rule import RuleContext, entry_for
from mbmem_lint.diagnostics import Edit, Fix
from mbmem_lint.resolve.resolved import Write, is_known

PRETRAIN = "llama3_8b_pretrain_config"  # MB recipes/llama/h100/llama3.py:235 (TP1 PP1 CP2, seq 8192, GBS 512)
PEFT = "llama3_8b_peft_config"  # MB recipes/llama/h100/llama3.py:2338 (LoRA dim 8, TP1, seq 4096)
SFT = "llama3_8b_sft_config"  # MB recipes/llama/h100/llama3.py:1550


# Rules about variables set through ``cfg.env_vars``: the field (applied with ``os.environ.setdefault``
# in ``ConfigContainer.validate``) is new in Megatron Bridge 0.6.
ENV_VARS_SINCE = "0.6.0"
ENV_VARS_NOTE = ("`ConfigContainer.env_vars` (applied with `os.environ.setdefault` in `validate()`) appeared in "
                 "Megatron Bridge 0.6. Before, the job's environment comes from the launcher alone, which a static "
                 "check cannot see, and assigning `cfg.env_vars` is an unknown field (MBM601).")


def py(body: str, *, base: str = PRETRAIN, gpus: int = 8, task: str = "pretrain", imports: str = "") -> str:
    """A user recipe in the Megatron Bridge style: start from a library recipe, apply a delta.

    The function name carries the world size (``..._8gpu_h100_bf16_config``), as canonical recipe
    names do; the resolver reads it from there.
    """
    module = "llama"
    head = f"from megatron.bridge.recipes.{module} import {base}\n"
    if imports:
        head += imports.rstrip("\n") + "\n"
    body = _indented(body)
    return (
        f"{head}\n\n"
        f"def my_{task}_{gpus}gpu_h100_bf16_config():\n"
        f"    cfg = {base}()\n"
        f"{body}\n"
        f"    return cfg\n"
    )


def _indented(body: str) -> str:
    """``textwrap.indent(textwrap.dedent(body).strip("\\n"), "    ")`` without regexes: the catalog
    builds ~150 examples every time it loads, and ``textwrap``'s regexes were ~18% of that."""
    if "\t" in body:  # tabs: the general rules apply
        import textwrap

        return textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
    lines = [line if line.strip() else "" for line in body.split("\n")]  # as dedent: blank lines emptied
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    cut = min((len(line) - len(line.lstrip(" ")) for line in lines if line), default=0)
    return "\n".join("    " + line[cut:] if line else "" for line in lines)


def fmt(value: Any) -> str:
    """A value as Python source (for messages and fixes)."""
    if isinstance(value, str):
        if value.startswith("torch."):
            return value
        return py_str(value)
    return repr(value)


def py_str(value: str) -> str:
    """A string literal in the quote style recipes use (double quotes, as Black writes them)."""
    if '"' not in value and "\\" not in value and value.isprintable():
        return f'"{value}"'
    return repr(value)


def closest(name: str, candidates: list[str] | tuple[str, ...] | set[str], n: int = 1) -> list[str]:
    import difflib  # only when a name is wrong

    return difflib.get_close_matches(name, sorted(candidates), n=n, cutoff=0.6)


# -- fix builders (call the colleague's primitives lazily; every fix is optional) -----------------


def _placed(ctx: RuleContext, paths: list[str], description: str, applicability: Any) -> tuple[Any, str, Any]:
    """Where each path is set (:mod:`mbmem_lint.fix.placement`), and the description and applicability
    that say it: a fix that edits a helper other recipes also run changes their runs too (never safe)."""
    from mbmem_lint.fix.placement import place

    placements = [place(ctx.r, p, ctx.sources) for p in paths]
    notes = list(dict.fromkeys(pl.note() for pl in placements if pl.note()))
    if any(pl.changes_other_recipes for pl in placements) and applicability == "safe":
        applicability = "unsafe"
    return placements, description + "".join(notes), applicability


def fix_set(ctx: RuleContext, path: str, value_src: str, description: str, applicability: Any = "safe",
            saving_bytes: int | None = None) -> Fix | None:
    (placement,), description, applicability = _placed(ctx, [path], description, applicability)

    def build() -> list[Edit]:
        from mbmem_lint.fix import edits

        return list(edits.set_field(ctx.r, path, value_src, ctx.sources, placement))

    return ctx.fix(description, applicability, build, saving_bytes)


def fix_set_many(ctx: RuleContext, items: list[tuple[str, str]], description: str,
                 applicability: Any = "safe") -> Fix | None:
    placements, description, applicability = _placed(ctx, [p for p, _ in items], description, applicability)

    def build() -> list[Edit]:
        from mbmem_lint.fix import edits

        out: list[Edit] = []
        for (path, src), placement in zip(items, placements):
            out.extend(edits.set_field(ctx.r, path, src, ctx.sources, placement))
        return out

    return ctx.fix(description, applicability, build)


def fix_env(ctx: RuleContext, key: str, value_src: str, description: str, applicability: Any = "safe",
            extra: list[tuple[str, str]] | None = None) -> Fix | None:
    keys = [(key, value_src), *(extra or [])]
    placements, description, applicability = _placed(ctx, [f"env_vars.{k}" for k, _ in keys], description,
                                                      applicability)

    def build() -> list[Edit]:
        from mbmem_lint.fix import edits

        out: list[Edit] = []
        for (k, v), placement in zip(keys, placements):
            out.extend(edits.set_dict_key(ctx.r, "env_vars", k, v, ctx.sources, placement))
        return out

    return ctx.fix(description, applicability, build)


def dead_writes(ctx: RuleContext, path: str) -> list[Write]:
    """The statements that set ``path`` since the object holding it was last built (a keyword of the
    call that built it counts), when a runtime rewrite overwrites the result: all of them are dead."""
    from mbmem_lint.fix.placement import contains, enclosing_writes

    enclosing = enclosing_writes(ctx.r, path)
    return [w for w in ctx.writes(path) if w.origin != "runtime" and not any(
        ctx.write_position(e) > ctx.write_position(w) and not contains(e.location, w.location) for e in enclosing)]


def fix_delete_dead(ctx: RuleContext, writes: list[Write], description: str) -> Fix | None:
    """Delete assignments whose value never reaches the run (a runtime rewrite overwrites them): the run
    is unchanged and the code stops saying otherwise. Statements in the recipe's files and YAML
    entries are deleted; a write in Megatron Bridge code stays (the user does not edit it, and it is
    as dead as before). None when one of them is a ``--set`` item (nothing to edit) or nothing is
    left to delete. Deleting in a helper other recipes run names them (and is then unsafe)."""
    from mbmem_lint.fix.placement import Placement, in_linted_python, other_recipes

    python: list[Write] = []
    yaml: list[Any] = []
    notes: list[str] = []
    also: tuple[str, ...] = ()
    for w in writes:
        if w.origin in ("yaml", "cli"):
            entry = entry_for(ctx, w)
            if entry is None or w.origin == "cli":
                return None
            yaml.append(entry)
        elif in_linted_python(w, ctx.sources):
            python.append(w)
            helper = w.function if w.function not in (None, ctx.r.function) else None
            if helper:
                others = other_recipes(ctx.r, w, ctx.sources)
                also += others
                note = Placement("edit", w, helper, others).note()
                if note not in notes:
                    notes.append(note)
    if not python and not yaml:
        return None

    def build() -> list[Edit]:
        from mbmem_lint.fix import edits

        out: list[Edit] = []
        for w in python:
            removal = edits.remove_assignment(w, ctx.sources)
            if not removal:
                return []
            out.extend(removal)
        for entry in yaml:
            removal = edits.yaml_remove_entry(entry, ctx.sources)
            if not removal:
                return []
            out.extend(removal)
        return out

    return ctx.fix(description + "".join(notes), "unsafe" if also else "safe", build)


def fix_rename(ctx: RuleContext, write: Write, new_name: str, description: str,
               applicability: Any = "unsafe") -> Fix | None:
    def build() -> list[Edit]:
        from mbmem_lint.fix import edits

        return list(edits.rename_attribute(write, new_name, ctx.sources))

    return ctx.fix(description, applicability, build)


# -- shared value logic ------------------------------------------------------------------------------


def parse_alloc_conf(text: str) -> list[tuple[str, str]]:
    """``"expandable_segments:True, max_split_size_mb:128"`` → ``[(key, value), ...]`` (spaces stripped)."""
    out: list[tuple[str, str]] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        key, _, value = part.partition(":")
        out.append((key, value))
    return out


def alloc_conf(ctx: RuleContext) -> dict[str, str | None]:
    """Known allocator strings by variable name (None: not set). Unknown values are left out."""
    out: dict[str, str | None] = {}
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        v = ctx.env_str(name)
        if v is None or isinstance(v, str):
            out[name] = v
    return out


def has_expandable_token(text: str | None) -> bool:
    """MCore's nccl_ub guard: comma split, exact token ``expandable_segments:True``."""
    return bool(text) and "expandable_segments:True" in [p.strip() for p in (text or "").split(",")]


def cuda_graph_impl(ctx: RuleContext) -> str | None:
    """Effective ``cuda_graph_impl`` (None when unknown); deprecated booleans mapped like MCore."""
    impl = ctx.as_str("model.cuda_graph_impl")
    if impl is None and not is_known(ctx.get("model.cuda_graph_impl")):
        return None
    impl = impl or "none"
    if impl == "none":
        if ctx.is_true("model.enable_cuda_graph"):
            return "local"
        if ctx.is_true("model.external_cuda_graph"):
            return "transformer_engine"
    return impl


def graph_modules(ctx: RuleContext) -> list[str] | None:
    mods = ctx.as_list("model.cuda_graph_modules")
    scope = ctx.as_list("model.cuda_graph_scope")
    if mods and mods != ["full"]:
        return [str(m).split(".")[-1].lower() for m in mods]
    if scope is not None and scope and scope != ["full"]:
        return [str(m).split(".")[-1].lower() for m in scope]
    if mods is None and scope is None:
        return None
    return []


def peft_class(ctx: RuleContext) -> str | None:
    cls = ctx.section_class("peft")
    return cls.rsplit(".", 1)[-1] if cls else None


def is_fsdp(ctx: RuleContext) -> bool | None:
    a, b = ctx.pre("dist.use_megatron_fsdp"), ctx.pre("ddp.use_megatron_fsdp")
    if a is True or b is True:
        return True
    if is_known(a) and is_known(b):
        return False
    if is_known(b) and "dist.use_megatron_fsdp" not in ctx.r.fields:
        return False
    return None
