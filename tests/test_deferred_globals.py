"""Library module-level config constructions run when their name is first read (values.Deferred).

Megatron Bridge's ``training/comm_overlap.py`` builds 19 userbuffers presets at import; a recipe that
imports ``CommOverlapConfig`` only should not pay for them, and one that uses a preset must see the
same object as if the module had built it at import.
"""

from __future__ import annotations

from typing import Any

from mbmem_lint.parse.python import lower_module
from mbmem_lint.resolve.interpreter import Interpreter
from mbmem_lint.resolve.project import ModuleEnv
from mbmem_lint.resolve.resolver import load_default_project
from mbmem_lint.resolve.values import Deferred, Obj
from mbmem_lint.settings import Settings

COMM_OVERLAP = "megatron.bridge.training.comm_overlap"
PRESET = "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"


def _interp() -> Interpreter:
    return Interpreter(load_default_project(Settings()))


def _run(interp: Interpreter, source: str, name: str = "megatron.bridge.deferred_probe") -> ModuleEnv:
    env = ModuleEnv(name, name.replace(".", "/") + ".py", lower_module(source), is_library=True,
                    is_package=False)
    interp.project.execute_module(env, interp)
    return env


def _value(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj.slots[part].value
    return obj


def test_unread_presets_are_not_built_and_a_read_one_is_the_import_time_object() -> None:
    interp = _interp()
    env = interp.project.load_module(COMM_OVERLAP, interp)
    assert env is not None
    presets = [k for k in env.globals if k.startswith("userbuffers_")]
    assert len(presets) == 19
    assert all(type(env.globals[k]) is Deferred and env.globals[k].state == "new" for k in presets)

    preset = interp.project.module_attr(env, PRESET, interp)
    # comm_overlap.py: qkv_wgrad=BulkOverlapCfg(num_sm=24, ...), proj_fprop=PipelineOverlapCfg(num_sm=24,
    # cga_size=2, num_splits=4, set_sm_margin=True), qkv_fprop=RingExchangeOverlapCfg(aggregate=False)
    assert isinstance(preset, Obj) and preset.cls.endswith("TransformerLayerTPOverlapCfg")
    assert preset.label == PRESET  # named as Interpreter.assign names module-level presets
    assert _value(preset, "qkv_wgrad.num_sm") == 24
    assert _value(preset, "proj_fprop.num_splits") == 4 and _value(preset, "proj_fprop.set_sm_margin") is True
    assert _value(preset, "qkv_fprop.aggregate") is False
    slot = preset.slots["qkv_wgrad"].value.slots["num_sm"]
    assert slot.prov.loc.path.endswith("training/comm_overlap.py") and slot.prov.loc.line == 100
    # built once: every later read (import, attribute, name) is the same object
    assert interp.project.module_attr(env, PRESET, interp) is preset
    assert sum(env.globals[k].state == "done" for k in presets) == 1


def test_only_constructions_that_cannot_depend_on_when_they_run_are_deferred() -> None:
    interp = _interp()
    env = _run(interp, """
from megatron.bridge.training.comm_overlap import BulkOverlapCfg, TransformerLayerTPOverlapCfg
N = 4
plain = BulkOverlapCfg(num_sm=4, cga_size=2, set_sm_margin=False)
nested = TransformerLayerTPOverlapCfg(qkv_dgrad=BulkOverlapCfg(num_sm=-1, cga_size=2, set_sm_margin=False))
reads_a_name = BulkOverlapCfg(num_sm=N, cga_size=2, set_sm_margin=False)
not_a_config = len([1, 2])
spread = BulkOverlapCfg(**{"num_sm": 1})
twice = BulkOverlapCfg(num_sm=1, cga_size=2, set_sm_margin=False)
twice = None
a, b = BulkOverlapCfg(num_sm=1, cga_size=2, set_sm_margin=False), 2
""")
    kinds = {k: type(v).__name__ for k, v in env.globals.items() if not k.startswith("__")}
    assert kinds["plain"] == "Deferred" and kinds["nested"] == "Deferred"
    assert kinds["reads_a_name"] == "Obj"  # N could be rebound before the name is read
    assert kinds["not_a_config"] == "int" and kinds["spread"] == "Obj" and kinds["a"] == "Obj"
    assert env.globals["twice"] is None
    nested = interp.project.module_attr(env, "nested", interp)
    assert _value(nested, "qkv_dgrad.num_sm") == -1


def test_a_class_rebound_later_or_a_star_import_keeps_evaluation_at_import() -> None:
    interp = _interp()
    env = _run(interp, """
from megatron.bridge.training.comm_overlap import BulkOverlapCfg
early = BulkOverlapCfg(num_sm=1, cga_size=2, set_sm_margin=False)
from megatron.bridge.training.comm_overlap import PipelineOverlapCfg as BulkOverlapCfg
""", "megatron.bridge.deferred_rebound")
    assert isinstance(env.globals["early"], Obj) and env.globals["early"].cls.endswith(".BulkOverlapCfg")
    env = _run(interp, """
from megatron.bridge.training.comm_overlap import BulkOverlapCfg
early = BulkOverlapCfg(num_sm=1, cga_size=2, set_sm_margin=False)
from megatron.bridge.training.comm_overlap import *
""", "megatron.bridge.deferred_star")
    assert isinstance(env.globals["early"], Obj)


def test_a_preset_first_read_under_an_unknown_condition_is_built_unconditionally() -> None:
    interp = _interp()
    env = _run(interp, """
from megatron.bridge.training.comm_overlap import BulkOverlapCfg
preset = BulkOverlapCfg(num_sm=4, cga_size=2, set_sm_margin=False)
if unknown_flag():
    chosen = preset
else:
    chosen = preset
""", "megatron.bridge.deferred_branch")
    assert type(env.globals["preset"]) is Deferred
    chosen = env.globals["chosen"]
    # both paths read the same deferred object: the merge keeps it, and its fields are plain values
    assert isinstance(chosen, Obj) and _value(chosen, "num_sm") == 4 and _value(chosen, "cga_size") == 2
