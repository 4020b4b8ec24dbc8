"""A YAML override file on its own: its values as a partial ``ConfigContainer`` in which everything
the file does not set is unknown.

The recipe the file is meant for is not known, so every value it would provide is
:class:`~mbmem_lint.resolve.resolved.Unknown`, and the catalog's rules, which never fire on unknowns,
check what the file alone decides: unknown keys (did-you-mean), value types, ``~key`` deletions,
``_target_`` classes, and combinations the file sets on its own (``cpu_offloading`` with
``pipeline_model_parallel_size: 4``). Bridge's runtime rewrites run too, over the same unknowns.

A section the file writes into is an object of the section's class whose every field is unknown
(``Obj.havoc``), so a key is checked against that class. Where the class depends on the recipe, the
keys accepted are those of every candidate: ``model`` accepts any model-provider field, ``dataset`` and
``peft`` (unions / base classes with subclasses that add fields) accept any key. A section the file does
not touch is unknown as a whole.
"""

from __future__ import annotations

from mbmem_lint.diagnostics import Location
from mbmem_lint.parse.override_types import OverrideFile
from mbmem_lint.resolve.flatten import flatten
from mbmem_lint.resolve.interpreter import Interpreter
from mbmem_lint.resolve.overrides import apply_overrides
from mbmem_lint.resolve.resolved import ResolvedRecipe, Target, Unknown
from mbmem_lint.resolve.runtime import RuntimeRewriter
from mbmem_lint.resolve.schema import CONFIG_CONTAINER, Schema, section_keys
from mbmem_lint.resolve.values import Obj, Prov, Slot

PARTIAL_FUNCTION = ""  # ResolvedRecipe.function of a partial config (its findings carry no function)
UNSET = "set by the recipe this override file is paired with"
MODEL_PROVIDER = "megatron.bridge.models.gpt_provider.GPTModelProvider"


# Sections whose class the recipe chooses among several, with the declared base class: ``dataset`` is a
# union, ``peft`` an abstract base (LoRA, DoRA, ... add fields). Computed from the schema by
# ``open_sections`` (0.1 s: it decodes every class), which a test compares with this table.
OPEN_SECTIONS = {
    "dataset": "megatron.bridge.training.config.GPTDatasetConfig",
    "peft": "megatron.bridge.peft.base.PEFT",
}


def open_sections(schema: Schema) -> dict[str, str]:
    """Sections declared as a union of classes, or as a class the schema has subclasses of."""
    out: dict[str, str] = {}
    container = schema.get(CONFIG_CONTAINER)
    if container is None:
        return out
    for name, fs in container.fields.items():
        cls = schema.section_class(name)
        if cls is None or name == "model":
            continue
        declared = fs.type
        optional = "Optional" in declared or "None" in declared
        union = declared.count("|") + declared.count(",") > (1 if optional else 0)
        if union or any(q != cls.qualname and schema.is_subclass(q, cls.qualname) for q in schema.classes):
            out[name] = cls.qualname
    return out


def names_config_sections(f: OverrideFile) -> bool:
    """Whether a top-level key of the file is a ``ConfigContainer`` section: a YAML file that names none
    (a CI workflow, a data config pre-commit passed along) is not an override file to check alone."""
    hits = section_keys(e.path for e in f.entries)
    return hits is not None and any(hits)


def partial_container(interp: Interpreter, files: list[OverrideFile]) -> Obj:
    """The ``ConfigContainer`` the override files write into, with every value they do not set unknown."""
    schema = interp.project.schema
    loc = Location(files[0].path, 1, 1)
    created = Prov(loc, loc, "default", interp.next_seq())
    unknown = Unknown(UNSET)
    root = Obj(CONFIG_CONTAINER, schema.get(CONFIG_CONTAINER) if schema is not None else None, created)
    root.havoc = unknown
    touched = {e.path.split(".", 1)[0] for f in files for e in f.entries if "." in e.path}
    container = schema.get(CONFIG_CONTAINER) if schema is not None else None
    for name in container.fields if container is not None else ():
        section: Obj | None = None
        if name in touched and schema is not None:
            if name == "model":
                section = interp.construct(MODEL_PROVIDER, [], created)
                section.open = True  # the provider class is the recipe's: any provider field is a key
            elif name in OPEN_SECTIONS:
                section = Obj(OPEN_SECTIONS[name], None, created)  # a subclass adds fields: any key
            elif (cls := schema.section_class(name)) is not None:
                section = interp.construct(cls.qualname, [], created)
        if section is not None:
            interp._havoc(section, unknown, set(), 0)
            root.slots[name] = Slot(section, created)
        else:
            root.slots[name] = Slot(unknown, created)
    return root


def partial_recipe(interp: Interpreter, files: list[OverrideFile], target: Target,
                   apply_runtime: bool = True) -> ResolvedRecipe:
    """The partial config of an override file on its own (``files[0]``; ``--set`` items after it), as
    a recipe for the rules (``partial``)."""
    f = files[0]
    root = partial_container(interp, files)
    loc = Location(f.path, 1, 1)
    apply_overrides(interp, root, files)
    rewriter = RuntimeRewriter(interp, root, target.world_size, loc)
    if apply_runtime:
        rewriter.run()
    fields, writes = flatten(root)
    return ResolvedRecipe(
        path=f.path,
        function=PARTIAL_FUNCTION,
        location=loc,
        fields=fields,  # type: ignore[arg-type]
        writes=writes,
        rewrites=rewriter.rewrites,
        target=target,
        pre_runtime=rewriter.pre_runtime(),
        overrides=[o.path for o in files],
        notes=list(interp.notes),
        partial=True,
    )
