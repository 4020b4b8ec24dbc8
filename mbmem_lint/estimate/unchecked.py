"""Why a recipe's memory cannot be checked, and how to supply what is missing (MBM704 and ``estimate``).

The same text goes into the ``memory-not-checked`` finding of ``check`` and into the error ``estimate`` exits 2
with, so that a recipe with an unknown model never reads as "fits".
"""

from __future__ import annotations

from mbmem_lint.estimate.inputs import SHAPE_PATHS
from mbmem_lint.estimate.types import EstimateUnavailable
from mbmem_lint.resolve.resolved import ResolvedRecipe, Unknown


def _hf_id(recipe: ResolvedRecipe) -> str | None:
    arch = recipe.architecture
    if arch is not None and isinstance(arch.get("hf_id"), str):
        return str(arch["hf_id"])
    v = recipe.get("model.hf_model_id", None)
    return v if isinstance(v, str) else None


def supply_hint(hf_id: str | None) -> str:
    """The three ways to give the estimator an architecture."""
    name = hf_id or "ORG/NAME"
    return (
        f'supply the architecture in one of three ways: (1) map it to a config.json, or a checkpoint folder holding '
        f'one, in pyproject.toml: [tool.mbmem-lint.models] "{name}" = "path/to/config.json"; (2) put its config.json '
        f"in the Hugging Face cache (`huggingface-cli download {name} config.json`, read from $HF_HUB_CACHE, "
        f"$HF_HOME/hub or ~/.cache/huggingface/hub; never downloaded by mbmem-lint); (3) set the shape on the "
        f"provider in the recipe (model.num_layers, model.hidden_size, model.num_attention_heads, and the "
        f"fields the model needs beyond them)"
    )


def not_checked_reason(recipe: ResolvedRecipe, exc: EstimateUnavailable) -> str:
    """Why the model is unknown: the architecture lookup's reason, or the unknown shape fields."""
    arch = recipe.architecture
    hf_id = _hf_id(recipe)
    if arch is not None and arch.get("origin") == "unknown":
        reason = str(arch.get("reason") or "").strip()
        return f"the architecture of {hf_id!r} is not known" + (f" ({reason})" if reason else "")
    missing = [p for p in exc.missing_fields] or list(SHAPE_PATHS)
    why = ""
    f = recipe.fields.get(missing[0])
    if f is not None and isinstance(f.value, Unknown):
        why = f.value.reason
    if hf_id is None and ("model id is not statically known" in why or "model built from an in-memory" in why):
        return "the Hugging Face model id is not statically known"
    return f"the model shape is not statically known ({', '.join(missing)}" + (f": {why})" if why else ")")


def memory_not_checked_message(recipe: ResolvedRecipe, exc: EstimateUnavailable) -> str:
    """The full text: what is unknown, that memory is not checked, and the three ways to supply it."""
    hf_id = _hf_id(recipe)
    return (f"memory not checked: {not_checked_reason(recipe, exc)}; no capacity verdict for this recipe. "
            f"To check it, {supply_hint(hf_id)}")
