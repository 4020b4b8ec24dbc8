"""A small abstract interpreter over the recipe IR (see :mod:`mbmem_lint.parse.python`).

It runs a recipe function statement by statement the way Python would, but over abstract
values: anything it cannot know becomes :class:`~mbmem_lint.resolve.resolved.Unknown`, never a
guess. Branches on unknown conditions run both sides in *may* mode, where every write joins
with the previous value (equal → kept, different → unknown). Nothing is imported or executed.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import operator
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mbmem_lint.diagnostics import Location
from mbmem_lint.resolve import pyclasses
from mbmem_lint.resolve.clone import clone
from mbmem_lint.resolve.resolved import Unknown
from mbmem_lint.resolve.values import (
    BoundFunc,
    BoundMethod,
    Deferred,
    DictVal,
    Ext,
    Func,
    HFConfig,
    HFModel,
    LocalClass,
    ModuleRef,
    Obj,
    Prov,
    PyClass,
    PyInstance,
    Slot,
    SuperProxy,
    WriteRec,
    is_known_external,
)

if TYPE_CHECKING:
    from mbmem_lint.resolve.project import ModuleEnv, Project

MAX_CALL_DEPTH = 40
MAX_LOOP_UNROLL = 256
MAX_STEPS = 2_000_000  # statements per top-level evaluation: bounds pathological inputs
MAX_FACTORY_DEPTH = 8

# Write order across every evaluation (memoised call results keep their place in the order).
_SEQ = itertools.count(1)


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class _Raise(Exception):
    def __init__(self, loc: list[int]) -> None:
        self.loc = loc


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class BudgetExceeded(Exception):
    """The evaluation ran past :data:`MAX_STEPS`; the caller reports the file as too slow."""


def loc_of(module: ModuleEnv, ir_loc: list[int] | None) -> Location:
    """The Location of an IR span; one object per span (IR lists live as long as their module)."""
    if not ir_loc:
        return Location(module.display_path, 1, 1, in_library=module.is_library)
    cache = module.loc_cache
    key = id(ir_loc)
    hit = cache.get(key)
    if hit is not None and hit[0] is ir_loc:
        return hit[1]
    line, col, end_line, end_col = ir_loc
    loc = Location(module.display_path, line, col, end_line, end_col, in_library=module.is_library)
    cache[key] = (ir_loc, loc)
    return loc


def join(a: Any, b: Any, why: str) -> Any:
    """Value after a write that may or may not have happened."""
    if a is b:
        return a
    if type(a) is type(b) and isinstance(a, (int, float, str, bool)) and a == b:
        return a
    if a is None and b is None:
        return None
    if isinstance(a, Ext) and a == b:
        return a
    if (isinstance(a, (list, tuple)) and type(a) is type(b) and len(a) == len(b)
            and all(join(x, y, why) is x for x, y in zip(a, b))):
        return a
    return Unknown(why)


def dotted_text(ir: Any) -> str | None:
    """``cfg.model.tensor_model_parallel_size`` for an attribute-chain IR, else None."""
    if ir[0] == "n":
        return str(ir[1])
    if ir[0] == "a":
        base = dotted_text(ir[1])
        return f"{base}.{ir[2]}" if base else None
    if ir[0] == "sub" and ir[2][0] == "c":
        base = dotted_text(ir[1])
        return f"{base}[{ir[2][1]!r}]" if base else None
    return None


class Frame:
    __slots__ = ("module", "locals", "func", "may", "cur", "may_returns", "closure", "function", "tries",
                 "class_body")

    def __init__(self, module: ModuleEnv, local_vars: dict[str, Any] | None, func: str | None) -> None:
        self.module = module
        # None for module-level frames: names live in the module's globals.
        self.locals = local_vars
        self.func = func
        self.may = 0
        self.cur: list[int] | None = None  # location of the statement being executed
        self.may_returns: list[Any] = []
        self.closure: list[dict[str, Any]] | None = None  # enclosing functions' locals, innermost first
        self.function: Func | None = None  # the running function (methods: its class, for super())
        self.tries = 0  # enclosing try statements in this frame: a callee's raise propagates to them
        self.class_body = False  # the body of a class statement (its defs close over nothing)


class Interpreter:
    def __init__(self, project: Project) -> None:
        self.project = project
        self.stack: list[Frame] = []
        self.seq = 0
        self.steps = 0
        self.step_budget = MAX_STEPS
        self.notes: list[str] = []
        self._building: set[str] = set()
        self.deadline: float | None = None  # time.monotonic() bound, checked every 4096 steps
        self.last_locals: dict[str, Any] = {}  # locals of the last function that returned
        self.may_total = 0  # sum of the frames' may depths

    # ------------------------------------------------------------------ provenance helpers
    def next_seq(self) -> int:
        return next(_SEQ)

    @property
    def frame(self) -> Frame:
        return self.stack[-1]

    def user_anchor(self) -> Location:
        stack = self.stack
        for i in range(len(stack) - 1, -1, -1):
            f = stack[i]
            if not f.module.is_library:
                return loc_of(f.module, f.cur)
        if not stack:
            return Location("<unknown>", 1, 1)
        return loc_of(stack[-1].module, stack[-1].cur)

    def in_may(self) -> bool:
        return self.may_total > 0

    def enter_may(self) -> None:
        self.frame.may += 1
        self.may_total += 1

    def exit_may(self) -> None:
        self.frame.may -= 1
        self.may_total -= 1

    def prov(self, value_loc: list[int] | None, *, stmt: list[int] | None = None,
             target_text: str | None = None, origin: str | None = None) -> Prov:
        f = self.stack[-1]
        module = f.module
        cur = f.cur
        # The current statement's Location, looked up once (it is usually the value's span, the
        # statement and the anchor at once).
        cur_loc = loc_of(module, cur)
        loc = loc_of(module, value_loc) if value_loc else cur_loc
        stmt_loc = loc_of(module, stmt) if stmt else (cur_loc if cur else None)
        # The user-facing anchor: this frame's statement when it is user code (the common case).
        anchor = cur_loc if not module.is_library else self.user_anchor()
        org = origin or ("library" if module.is_library else "recipe")
        return Prov(loc, anchor, org, next(_SEQ), stmt_loc, target_text, f.func)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # ------------------------------------------------------------------ objects
    def new_obj(self, cls: str, schema: Any, prov: Prov) -> Obj:
        return Obj(cls, schema, prov)

    def construct(self, qualname: str, kwargs: list[tuple[str, Any, Prov]], call_prov: Prov) -> Any:
        schema = self.project.schema_class(qualname)
        cls = schema.qualname if schema is not None else qualname
        obj = Obj(cls, schema, call_prov)
        for name, value, p in kwargs:
            self.set_attr(obj, name, value, p)
        hook = _POST_INIT.get(cls.rsplit(".", 1)[-1]) if cls.startswith("megatron.") else None
        if hook is not None:
            hook(self, obj)
        return obj

    def derive(self, obj: Obj, name: str, value: Any, why: str) -> None:
        """A value a constructor computes (``__post_init__``/``__init__``), recorded as a default."""
        if obj.schema is not None and name not in obj.schema.fields:
            return
        p = obj.created
        obj.slots[name] = Slot(value, Prov(p.loc, p.anchor, "default", p.seq, p.stmt, None, p.function, note=why))

    def default_value(self, obj: Obj, name: str) -> tuple[bool, Any]:
        """(found, value) of the schema default of ``obj.name``; materialises factories."""
        if obj.schema is None or name not in obj.schema.fields:
            return False, None
        d = obj.schema.fields[name].default
        if "value" in d:
            v = d["value"]
            # Lists and dicts from defaults are fresh copies: recipes mutate them.
            if isinstance(v, list):
                return True, list(v)
            if isinstance(v, dict):
                dv = DictVal(obj.created)
                for k, x in v.items():
                    dv.slots[k] = Slot(x, obj.created)
                return True, dv
            return True, v
        if "symbol" in d:
            return True, Ext(str(d["symbol"]))
        if "factory" in d:
            q = str(d["factory"])
            if self.project.schema_class(q) is None:
                return True, Unknown(f"default of {name} is computed by {q}()")
            if len(self._building) > MAX_FACTORY_DEPTH or q in self._building:
                return True, Unknown(f"default factory {q}")
            self._building.add(q)
            try:
                return True, self.construct(q, [], obj.created)
            finally:
                self._building.discard(q)
        if d.get("required"):
            return True, Unknown(f"required field {name} not given")
        return True, Unknown(f"default of {name} is computed at runtime")

    def get_slot(self, obj: Obj, name: str) -> Slot | None:
        s = obj.slots.get(name)
        if s is not None:
            return s
        s = obj.invalid.get(name)
        if s is not None:
            return s
        found, value = self.default_value(obj, name)
        if not found:
            return None
        if obj.havoc is not None and not isinstance(value, (Obj, DictVal)):
            value = obj.havoc
        dp = obj.default_prov
        if dp is None:
            p = obj.created
            dp = obj.default_prov = Prov(p.loc, p.anchor, "default", p.seq, p.stmt, None, p.function)
        slot = Slot(value, dp)
        if isinstance(value, (Obj, DictVal, list)):
            obj.slots[name] = slot  # mutable defaults must persist once read
        return slot

    def get_attr_obj(self, obj: Obj, name: str) -> Any:
        slot = self.get_slot(obj, name)
        if slot is not None:
            return slot.value
        if name == "transformer" and obj.schema is not None and "num_layers" in obj.schema.fields:
            return obj  # GPTModelConfig.transformer proxies to the model config itself
        if obj.schema is None:
            return Unknown(f"attribute {name} of {obj.cls}")
        return BoundMethod(obj, name)

    def set_attr(self, obj: Obj, name: str, value: Any, prov: Prov) -> None:
        partner = _MP_SYNCED.get(name) if obj.cls.endswith(".MixedPrecisionConfig") else None
        if partner is not None:
            # MixedPrecisionConfig.__setattr__ keeps fp8_param/fp8_param_gather (and fp4_*) equal
            # (training/mixed_precision.py:76).
            self._set_attr(obj, partner, value, prov)
        self._set_attr(obj, name, value, prov)

    def _set_attr(self, obj: Obj, name: str, value: Any, prov: Prov) -> None:
        if isinstance(value, dict):
            value = self.to_dictval(value, prov)
        valid = (
            obj.schema is None
            or name in obj.schema.fields
            or (obj.open and self.project.any_model_field(name))
        )
        table = obj.slots if valid else obj.invalid
        old = table.get(name)
        if self.in_may():
            if old is None:
                old = self.get_slot(obj, name)
                if old is not None and old.prov.origin == "default" and name not in table:
                    table[name] = old
            old_value = old.value if old is not None else None
            new_value = join(old_value, value, f"set conditionally at {prov.loc.path}:{prov.loc.line}")
        else:
            new_value = value
        # An attribute Bridge's own conversion set on the provider (provider_bridge() may add attributes that
        # are not dataclass fields, which the model code reads) is a real attribute for later writes too.
        rec = WriteRec(value, prov, valid or (old is not None and bool(old.history)
                                              and old.history[0].prov.origin == "model-table"))
        slot = table.get(name)
        # Slots are replaced, never changed in place: clones share them (clone.py).
        table[name] = Slot(new_value, prov, (rec,) if slot is None else slot.history + (rec,))

    def to_dictval(self, d: dict[Any, Any], prov: Prov) -> DictVal:
        dv = DictVal(prov)
        for k, v in d.items():
            dv.slots[k] = Slot(self.to_dictval(v, prov) if isinstance(v, dict) else v, prov)
        return dv

    # ------------------------------------------------------------------ running code
    def tick(self) -> None:
        self.steps += 1
        if self.steps > self.step_budget:
            raise BudgetExceeded()
        if self.deadline is not None and not self.steps & 4095 and time.monotonic() > self.deadline:
            raise BudgetExceeded()

    def run_body(self, body: list[Any]) -> None:
        for stmt in body:
            self.exec_stmt(stmt)

    def exec_stmt(self, s: list[Any]) -> None:
        self.tick()
        f = self.frame
        kind = s[0]
        f.cur = s[4] if kind == "def" else s[2] if kind == "class" else s[-1]
        if kind == "assign":
            value = self.eval(s[2])
            for t in s[1]:
                self.assign(t, value, s[2])
        elif kind == "expr":
            self.eval(s[1])
        elif kind == "return":
            value = self.eval(s[1]) if s[1] is not None else None
            if f.may:
                f.may_returns.append(value)
            else:
                raise _Return(value)
        elif kind == "if":
            test = self.truth(self.eval(s[1]))
            if test is True:
                self.run_body(s[2])
            elif test is False:
                self.run_body(s[3])
            else:
                self.run_paths([s[2], s[3]])
        elif kind == "augassign":
            cur = self.eval(s[1])
            value = self.binop(s[2], cur, self.eval(s[3]))
            self.assign(s[1], value, s[3])
        elif kind == "for":
            self.exec_for(s)
        elif kind == "while":
            self.exec_while(s)
        elif kind == "with":
            self.run_body(s[1])
        elif kind == "try":
            self.exec_try(s)
        elif kind == "def":
            fn = Func(s[1], s[2], s[3], f.module, s[4], s[5], f"{f.module.name}.{s[1]}",
                      closure=self._closure_for(f), kind=pyclasses.func_kind(s[6]) if len(s) > 6 else "function")
            self.bind(s[1], fn)
        elif kind == "class":
            if len(s) > 3 and self.project.analyse_classes and f.module.is_library:
                known = self.project.class_value(f.module, s[1])
                self.bind(s[1], known if isinstance(known, Ext) else pyclasses.define_class(self, s))
            else:
                self.bind(s[1], self.project.class_value(f.module, s[1]))
        elif kind == "import":
            for name, asname in s[1]:
                if asname:
                    self.bind(asname, self.project.import_value(name, f.module, self))
                else:
                    top = name.split(".")[0]
                    self.bind(top, self.project.import_value(top, f.module, self))
        elif kind == "from":
            self.exec_from(s)
        elif kind == "raise":
            if not f.may:
                raise _Raise(s[1])
        elif kind == "break":
            if not f.may:
                raise _Break()
        elif kind == "continue":
            if not f.may:
                raise _Continue()
        elif kind == "opaque":
            for name in s[1]:
                self.bind(name, Unknown(f"bound by an unsupported statement at line {s[-1][0]}"))
        elif kind == "del":
            pass

    def run_paths(self, bodies: list[list[Any]]) -> None:
        """Run bodies of which one runs, we do not know which (the branches of an ``if`` with an unknown
        condition, a loop body that may or may not run). Writes to objects join with their previous value
        as they happen (may mode); names are bound plainly on each path, every path starting from the same
        names, and merged after: a name whose paths disagree is unknown."""
        f = self.frame
        table = f.locals if f.locals is not None else f.module.globals
        pre = dict(table)
        outcomes: list[dict[str, Any]] = []
        self.enter_may()
        try:
            for body in bodies:
                if outcomes:
                    table.clear()
                    table.update(pre)
                self.run_may(body)
                outcomes.append(dict(table))
        finally:
            self.exit_may()
            table.clear()
            table.update(_merge_paths(pre, outcomes, f.cur))

    def run_may(self, body: list[Any]) -> None:
        """Run a body whose execution is uncertain; a raise/break in it just ends that path."""
        with contextlib.suppress(_Raise, _Break, _Continue):
            self.run_body(body)

    def exec_while(self, s: list[Any]) -> None:
        """Run the loop while its condition is known (at most MAX_LOOP_UNROLL times); from the first unknown
        condition on, the body may run (once or more) and so may the else branch."""
        for _ in range(MAX_LOOP_UNROLL):
            test = self.truth(self.eval(s[1]))
            if test is False:
                self.run_body(s[3])
                return
            if test is None:
                break
            try:
                self.run_body(s[2])
            except _Break:
                return
            except _Continue:
                continue
        self.run_paths([s[3], s[2] + s[3]])

    def exec_for(self, s: list[Any]) -> None:
        it = self.iterate(self.eval(s[2]))
        if it is None or len(it) > MAX_LOOP_UNROLL:
            self.assign(s[1], Unknown("loop variable"), None)
            self.run_paths([s[4], s[3] + s[4]])
            return
        broke = False
        for item in it:
            self.assign(s[1], item, None)
            try:
                self.run_body(s[3])
            except _Break:
                broke = True
                break
            except _Continue:
                continue
        if not broke:
            self.run_body(s[4])

    def exec_try(self, s: list[Any]) -> None:
        f = self.frame
        f.tries += 1
        try:
            self.run_body(s[1])
            raised = False
        except _Raise:
            raised = True
        finally:
            f.tries -= 1
        if raised:
            # A definite raise inside try: a handler runs, but we do not know which one.
            self.run_paths(s[2] or [[]])
        else:
            self.run_body(s[3])
        self.run_body(s[4])

    def exec_from(self, s: list[Any]) -> None:
        f = self.frame
        module_name, level, names = s[1], s[2], s[3]
        target = self.project.resolve_import(module_name, level, f.module)
        env = self.project.load_module(target, self) if target else None
        if names == "*":
            if env is not None:
                for k, v in self.project.star_names(env, self).items():
                    self.bind(k, v)
            else:
                self.note(f"star-import from {module_name} not resolvable")
            return
        for name, asname in names:
            if env is not None:
                value = self.project.module_attr(env, name, self)
            else:
                # Maybe a submodule: `from pkg import module`
                sub = f"{target}.{name}" if target else name
                if self.project.module_exists(sub):
                    value = ModuleRef(sub)
                elif level == 0 and is_known_external(module_name):
                    value = Ext(f"{module_name}.{name}")
                else:
                    # A module of the user's project that is not among the linted files.
                    value = Unknown(f"{name} comes from {'.' * level}{module_name}, which is not among the "
                                    "linted files")
            self.bind(asname or name, value)

    # ------------------------------------------------------------------ names
    def bind(self, name: str, value: Any) -> None:
        f = self.frame
        # Under an uncertain branch (f.may) too: run_paths merges the names of the paths afterwards.
        (f.locals if f.locals is not None else f.module.globals)[name] = value

    @staticmethod
    def _closure_for(f: Frame) -> list[dict[str, Any]] | None:
        """What a def or lambda in frame ``f`` closes over: the frame's locals and its own closure (the
        body of a class statement is no scope for the functions defined in it)."""
        if f.locals is None or f.class_body:
            return f.closure
        return [f.locals, *(f.closure or ())]

    def lookup(self, name: str) -> Any:
        f = self.frame
        if f.locals is not None and name in f.locals:
            return f.locals[name]
        if f.closure is not None:
            for scope in f.closure:
                if name in scope:
                    return scope[name]
        g = f.module.globals
        if name in g:
            value = g[name]
            return value.get(self) if type(value) is Deferred else value
        b = BUILTINS.get(name)
        if b is not None:
            return Ext(f"builtins.{name}")
        if name == "__name__":
            return f.module.name
        return Unknown(f"name {name!r} is not defined in the analysed code")

    # ------------------------------------------------------------------ assignment
    def assign(self, target: list[Any], value: Any, value_ir: list[Any] | None) -> None:
        kind = target[0]
        if kind == "n":
            if isinstance(value, Obj) and value.label is None and self.frame.locals is None:
                value.label = target[1]  # a module-level preset such as userbuffers_bf16_h100_..._seqlen8192
            self.bind(target[1], value)
        elif kind == "a":
            obj = self.eval(target[1])
            vloc = value_ir[2] if value_ir is not None and value_ir[0] == "at" else None
            p = self.prov(vloc, target_text=dotted_text(target))
            self.setattr_value(obj, target[2], value, p)
        elif kind == "sub":
            container = self.eval(target[1])
            key = self.eval(target[2])
            vloc = value_ir[2] if value_ir is not None and value_ir[0] == "at" else None
            p = self.prov(vloc, target_text=dotted_text(target))
            self.setitem(container, key, value, p)
        elif kind in ("tuple", "list"):
            items = self.iterate(value)
            elts = target[1]
            if items is not None and len(items) == len(elts) and not any(e[0] == "star" for e in elts):
                for e, v in zip(elts, items):
                    self.assign(e, v, None)
            else:
                for e in elts:
                    self.assign(e[1] if e[0] == "star" else e, Unknown("unpacking an unknown value"), None)
        elif kind == "star":
            self.assign(target[1], Unknown("starred assignment"), None)

    def setattr_value(self, obj: Any, name: str, value: Any, prov: Prov) -> None:
        if isinstance(obj, Obj):
            self.set_attr(obj, name, value, prov)
        elif isinstance(obj, Unknown):
            pass
        elif isinstance(obj, (PyClass, PyInstance, HFConfig)):
            pyclasses.set_attr(self, obj, name, value)
        else:
            self.note(f"attribute {name} set on a non-config value at {prov.loc.path}:{prov.loc.line}")

    def setitem(self, container: Any, key: Any, value: Any, prov: Prov) -> None:
        if isinstance(container, DictVal):
            if isinstance(key, Unknown):
                _set_all(container.slots, Unknown("dict written with an unknown key"))
                return
            if isinstance(value, dict):
                value = self.to_dictval(value, prov)
            old = container.slots.get(key)
            if self.in_may():
                value = join(old.value if old else None, value, "set conditionally")
            rec = WriteRec(value, prov, True)
            container.slots[key] = Slot(value, prov, (rec,) if old is None else old.history + (rec,))
        elif isinstance(container, list):
            if isinstance(key, int) and -len(container) <= key < len(container):
                container[key] = value if not self.in_may() else join(container[key], value, "conditional")
            else:
                container[:] = [Unknown("list written with an unknown index")] * len(container)

    # ------------------------------------------------------------------ expressions
    def eval(self, e: list[Any]) -> Any:
        kind = e[0]
        if kind == "at":
            return self.eval(e[1])
        if kind == "c":
            return e[1]
        if kind == "n":
            return self.lookup(e[1])
        if kind == "a":
            return self.getattr_value(self.eval(e[1]), e[2])
        if kind == "call":
            return self.eval_call(e)
        if kind == "bin":
            return self.binop(e[1], self.eval(e[2]), self.eval(e[3]))
        if kind == "un":
            return self.unop(e[1], self.eval(e[2]))
        if kind == "bool":
            return self.boolop(e[1], e[2])
        if kind == "cmp":
            return self.compare(e)
        if kind in ("list", "tuple", "set"):
            out: list[Any] = []
            for x in e[1]:
                if x[0] == "star":
                    items = self.iterate(self.eval(x[1]))
                    if items is None:
                        return Unknown("starred unknown value")
                    out.extend(items)
                else:
                    out.append(self.eval(x))
            return tuple(out) if kind == "tuple" else out
        if kind == "dict":
            return self.eval_dict(e)
        if kind == "sub":
            return self.subscript(self.eval(e[1]), self.eval(e[2]))
        if kind == "slice":
            return slice(*(self.eval(x) for x in e[1:4]))
        if kind == "ifx":
            t = self.truth(self.eval(e[1]))
            if t is True:
                return self.eval(e[2])
            if t is False:
                return self.eval(e[3])
            a, b = self.eval(e[2]), self.eval(e[3])
            return join(a, b, "conditional expression with an unknown condition")
        if kind == "fstr":
            parts = [self.eval(p) for p in e[1]]
            if all(isinstance(p, (str, int, float, bool)) or p is None for p in parts):
                return "".join(str(p) for p in parts)
            return Unknown("f-string with unknown parts")
        if kind == "star":
            return Unknown("starred expression")
        if kind == "comp":
            return self.eval_comp(e)
        if kind == "lambda":
            f = self.frame
            return Func("<lambda>", e[1], [["return", e[2], e[3]]], f.module, e[3], None,
                        f"{f.module.name}.<lambda>", closure=self._closure_for(f))
        return Unknown(str(e[1]) if len(e) > 1 else "unsupported expression")

    def eval_comp(self, e: list[Any]) -> Any:
        """A comprehension, unrolled: its variables live in a scope of their own (Python 3)."""
        kind, elt, key, gens = e[1], e[2], e[3], e[4]
        outer = self.frame
        frame = Frame(outer.module, dict(outer.locals) if outer.locals is not None else {}, outer.func)
        frame.closure = outer.closure
        frame.function = outer.function
        frame.cur = outer.cur
        results: list[Any] = []
        self.stack.append(frame)
        try:
            if not self._comp_loop(gens, 0, kind, elt, key, results):
                return Unknown("comprehension over an unknown value")
        finally:
            self.stack.pop()
        if kind == "dict":
            dv = DictVal(self.prov(None))
            for k, v in results:
                if isinstance(k, (Unknown, list, DictVal, Obj)):
                    return Unknown("dict comprehension with an unknown key")
                dv.slots[k] = Slot(v, dv.created)
            return dv
        return results

    def _comp_loop(self, gens: list[Any], i: int, kind: str, elt: Any, key: Any, out: list[Any]) -> bool:
        if i == len(gens):
            out.append((self.eval(key), self.eval(elt)) if kind == "dict" else self.eval(elt))
            return True
        target, it_ir, conds = gens[i]
        items = self.iterate(self.eval(it_ir))
        if items is None or len(items) > MAX_LOOP_UNROLL:
            return False
        for item in items:
            self.tick()
            self.assign(target, item, None)
            ok = True
            for c in conds:
                t = self.truth(self.eval(c))
                if t is None:
                    return False  # an element that may or may not be there: the result is unknown
                if not t:
                    ok = False
                    break
            if ok and not self._comp_loop(gens, i + 1, kind, elt, key, out):
                return False
        return True

    def eval_dict(self, e: list[Any]) -> Any:
        dv = DictVal(self.prov(e[2]))
        anchor = self.user_anchor()
        for key_ir, value_ir in e[1]:
            if key_ir is None:
                src = self.eval(value_ir)
                if isinstance(src, DictVal):
                    for k, s in src.slots.items():
                        p = s.prov
                        np = Prov(p.loc, anchor if p.loc.in_library else p.anchor, p.origin, p.seq,
                                  p.stmt, p.target_text, p.function)
                        dv.slots[k] = Slot(s.value, np)
                else:
                    return Unknown("dict spread of an unknown value")
                continue
            k = self.eval(key_ir)
            if isinstance(k, (Unknown, list, DictVal, Obj)):
                return Unknown("dict with an unknown key")
            v = self.eval(value_ir)
            dv.slots[k] = Slot(v, self.prov(value_ir[2] if value_ir[0] == "at" else None))
        return dv

    def getattr_value(self, base: Any, name: str) -> Any:
        if isinstance(base, Obj):
            return self.get_attr_obj(base, name)
        if isinstance(base, Ext):
            if name == "__dataclass_fields__":
                cls = self.project.schema_class(base.qualname)
                if cls is not None:
                    dv = DictVal(self.prov(None))
                    for fname in cls.fields:
                        dv.slots[fname] = Slot(None, dv.created)
                    return dv
            if name == "__name__":
                return base.qualname.rsplit(".", 1)[-1]
            q = f"{base.qualname}.{name}"
            return Ext(_normalise_symbol(q))
        if isinstance(base, (PyClass, PyInstance, SuperProxy, HFConfig)):
            return pyclasses.get_attr(self, base, name)
        if isinstance(base, ModuleRef):
            env = self.project.load_module(base.name, self)
            if env is not None:
                return self.project.module_attr(env, name, self)
            sub = f"{base.name}.{name}"
            return ModuleRef(sub) if self.project.module_exists(sub) else Ext(sub)
        if isinstance(base, Unknown):
            return base
        if isinstance(base, (str, list, tuple, DictVal, HFModel, int, float)):
            return BoundMethod(base, name)
        if isinstance(base, LocalClass):
            return Unknown(f"attribute {name} of class {base.qualname}")
        return Unknown(f"attribute {name}")

    def subscript(self, base: Any, key: Any) -> Any:
        if isinstance(base, Unknown):
            return base
        if isinstance(key, Unknown):
            return Unknown("subscript with an unknown key")
        try:
            if isinstance(base, DictVal):
                s = base.slots.get(key)
                return s.value if s is not None else Unknown(f"missing key {key!r}")
            if isinstance(base, (list, tuple, str)):
                if isinstance(key, slice) and any(isinstance(x, Unknown) for x in (key.start, key.stop, key.step)):
                    return Unknown("slice with unknown bounds")
                return base[key]
        except (IndexError, TypeError, ValueError, KeyError):
            return Unknown("subscript out of range")
        return Unknown("subscript of an unsupported value")

    def truth(self, v: Any) -> bool | None:
        if isinstance(v, Unknown):
            return None
        if v is None:
            return False
        if isinstance(v, (bool, int, float, str, list, tuple)):
            return bool(v)
        if isinstance(v, DictVal):
            return bool(v.slots)
        if isinstance(v, (Obj, Func, Ext, ModuleRef, HFModel, LocalClass, BoundMethod, PyClass, PyInstance,
                          HFConfig, BoundFunc)):
            return True
        return None

    def boolop(self, op: str, values: list[Any]) -> Any:
        result: Any = None
        for i, ir in enumerate(values):
            v = self.eval(ir)
            t = self.truth(v)
            if t is None:
                # the rest may still decide it: `x and False` is False whatever x is
                rest = [self.truth(self.eval(r)) for r in values[i + 1:]]
                if op == "and" and False in rest:
                    return False
                if op == "or" and True in rest:
                    return True
                return Unknown("boolean of an unknown value")
            if op == "and" and not t:
                return v
            if op == "or" and t:
                return v
            result = v
        return result

    def compare(self, e: list[Any]) -> Any:
        left = self.eval(e[1])
        result: Any = True
        for op, right_ir in zip(e[2], e[3]):
            right = self.eval(right_ir)
            r = self.cmp(op, left, right)
            if r is False:
                return False
            if isinstance(r, Unknown):
                result = r
            left = right
        return result

    def cmp(self, op: str, a: Any, b: Any) -> Any:
        if op in ("is", "is not"):
            if isinstance(a, Unknown) or isinstance(b, Unknown):
                return Unknown("identity test on an unknown value")
            same = (a is None and b is None) or (a is b) or (isinstance(a, bool) and a == b and type(a) is type(b))
            if a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
                return same if op == "is" else not same
            if isinstance(a, (PyClass, PyInstance, HFConfig, Ext)) and isinstance(b, (PyClass, PyInstance, HFConfig,
                                                                                        Ext)):
                same = a is b or (isinstance(a, Ext) and a == b)
                return same if op == "is" else not same
            return Unknown("identity test")
        if op in ("in", "not in"):
            items = self.iterate(b) if not isinstance(b, str) else None
            if isinstance(b, str) and isinstance(a, str):
                return (a in b) if op == "in" else (a not in b)
            if isinstance(b, DictVal):
                if isinstance(a, Unknown):
                    return Unknown("membership of an unknown value")
                r = a in b.slots
                return r if op == "in" else not r
            if items is None or isinstance(a, Unknown) or any(isinstance(x, Unknown) for x in items):
                return Unknown("membership test on unknown values")
            if not _plain(a) or not all(_plain(x) for x in items):
                return Unknown("membership of non-literal values")
            r = a in items
            return r if op == "in" else not r
        if isinstance(a, Ext) and isinstance(b, Ext):
            return (a == b) if op == "==" else ((a != b) if op == "!=" else Unknown("ordering of symbols"))
        if op in ("==", "!=") and isinstance(a, DictVal) and isinstance(b, DictVal):
            av = {k: sl.value for k, sl in a.slots.items()}
            bv = {k: sl.value for k, sl in b.slots.items()}
            if not (all(_plain(x) for x in av.values()) and all(_plain(x) for x in bv.values())):
                return Unknown("comparison of dicts with unknown values")
            return (av == bv) if op == "==" else (av != bv)
        if not (_plain(a) and _plain(b)):
            return Unknown("comparison of unknown values")
        fn = _CMP.get(op)
        if fn is None:
            return Unknown(f"comparison {op}")
        try:
            return bool(fn(a, b))
        except TypeError:
            return Unknown("comparison of incompatible values")

    def binop(self, op: str, a: Any, b: Any) -> Any:
        if isinstance(a, Unknown):
            return a
        if isinstance(b, Unknown):
            return b
        if op == "|" and isinstance(a, DictVal) and isinstance(b, DictVal):
            dv = DictVal(a.created)
            dv.slots.update(a.slots)
            dv.slots.update(b.slots)
            return dv
        if not (_plain(a) and _plain(b)):
            return Unknown(f"operator {op} on non-literal values")
        fn = _BINOPS.get(op)
        if fn is None:
            return Unknown(f"operator {op}")
        try:
            if op == "**" and isinstance(b, (int, float)) and abs(b) > 256:
                return Unknown("exponent too large")
            if op == "*" and (isinstance(a, (str, list, tuple)) or isinstance(b, (str, list, tuple))):
                n = b if isinstance(b, int) else a
                if isinstance(n, int) and n > 100_000:
                    return Unknown("sequence repetition too large")
            r = fn(a, b)
        except (ArithmeticError, TypeError, ValueError, OverflowError):
            return Unknown(f"operator {op} failed")
        if isinstance(r, int) and not isinstance(r, bool) and abs(r) > 10**30:
            return Unknown("integer too large")
        return r

    def unop(self, op: str, v: Any) -> Any:
        if op == "not":
            t = self.truth(v)
            return Unknown("negation of an unknown value") if t is None else (not t)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            if isinstance(v, bool) and op in ("-", "+"):
                return -int(v) if op == "-" else int(v)
            return Unknown(f"unary {op}")
        if op == "-":
            return -v
        if op == "+":
            return v
        if op == "~" and isinstance(v, int):
            return ~v
        return Unknown(f"unary {op}")

    def iterate(self, v: Any) -> list[Any] | None:
        if isinstance(v, (list, tuple)):
            return list(v)
        if isinstance(v, DictVal):
            return list(v.slots.keys())
        if isinstance(v, str) and len(v) <= MAX_LOOP_UNROLL:
            return list(v)
        if isinstance(v, range) and len(v) <= MAX_LOOP_UNROLL:
            return list(v)
        return None

    # ------------------------------------------------------------------ calls
    def eval_call(self, e: list[Any]) -> Any:
        func = self.eval(e[1])
        args: list[Any] = []
        arg_irs: list[Any] = []
        for a in e[2]:
            if a[0] == "star":
                items = self.iterate(self.eval(a[1]))
                if items is None:
                    return self.unknown_call(func, "unknown *args")
                args.extend(items)
                arg_irs.extend([None] * len(items))
            else:
                args.append(self.eval(a))
                arg_irs.append(a)
        kwargs: list[tuple[str, Any, Prov]] = []
        for name, value_ir, kw_loc in e[3]:
            value = self.eval(value_ir)
            if name is None:
                if isinstance(value, DictVal):
                    for k, s in value.slots.items():
                        if isinstance(k, str):
                            kwargs.append((k, s.value, self.prov(None)))
                    continue
                return self.unknown_call(func, "unknown **kwargs")
            p = self.prov(value_ir[2], stmt=kw_loc, target_text=name)
            kwargs.append((name, value, p))
        return self.call(func, args, kwargs, e[4], arg_irs)

    def unknown_call(self, func: Any, why: str) -> Unknown:
        return Unknown(f"call with {why}")

    def call(self, func: Any, args: list[Any], kwargs: list[tuple[str, Any, Prov]],
             call_loc: list[int], arg_irs: list[Any] | None = None) -> Any:
        if isinstance(func, Func):
            return self.call_func(func, args, kwargs, call_loc)
        if isinstance(func, BoundMethod):
            return self.call_method(func, args, kwargs, call_loc)
        if isinstance(func, Ext):
            return self.call_ext(func, args, kwargs, call_loc)
        if isinstance(func, HFModel):
            return Unknown("call of a model handle")
        if isinstance(func, Unknown):
            self.havoc_args(args, kwargs, f"passed to a function that is not analysed ({func.reason})")
            return Unknown(f"result of calling an unknown function ({func.reason})")
        if isinstance(func, LocalClass):
            return Unknown(f"instance of {func.qualname}")
        if isinstance(func, BoundFunc):
            return self.call_func(func.func, [func.self_value, *args], kwargs, call_loc)
        if isinstance(func, PyClass):
            return pyclasses.instantiate(self, func, args, kwargs, call_loc)
        return Unknown("call of a non-callable value")

    def call_func(self, fn: Func, args: list[Any], kwargs: list[tuple[str, Any, Prov]],
                  call_loc: list[int]) -> Any:
        """Call with memoisation: a function called with literal arguments (``_pretrain_common()``,
        ``bf16_mixed()``, ``llama3_70b_pretrain_config()``) is evaluated once per project; each call
        gets a fresh deep copy whose user-facing anchors point at the new call site."""
        if fn.module.is_library and fn.name == "get_mixed_precision_config":
            # Its registry is filled by a decorator (@register) the summary does not run.
            special = self.project.special_call(fn.qualname)
            if special is not None:
                return special(self, args, kwargs, call_loc)
        if fn.body.__class__ is str:  # a library function whose body is decoded on its first call
            fn.body = self.project.library.function_body(fn.body)
        key = _memo_key(fn, args, kwargs) if not self.may_total and fn.closure is None else None
        if key is None:
            return self._call_func(fn, args, kwargs, call_loc)
        cache = self.project.call_cache
        anchor = self.user_anchor()
        hit = cache.get(key)
        if hit is not None:
            result, stored_anchor, notes, last_locals, plans = hit
            for n in notes:
                self.note(n)
            remap = (stored_anchor, anchor) if stored_anchor is not anchor else None
            memo: dict[int, Any] = {}
            # The stored copy never changes: what each of its tables needs is found once per kind of
            # copy (same call site, or remapped to another).
            out = clone(result, memo, remap, plans[remap is not None])
            self.last_locals = {k: memo.get(id(v), v) for k, v in last_locals.items()}
            return out
        before = len(self.notes)
        result = self._call_func(fn, args, kwargs, call_loc)
        memo2: dict[int, Any] = {}
        stored = clone(result, memo2)
        locals_map = {k: memo2[id(v)] for k, v in self.last_locals.items() if id(v) in memo2}
        cache[key] = (stored, anchor, self.notes[before:], locals_map, ({}, {}))
        return result

    def _call_func(self, fn: Func, args: list[Any], kwargs: list[tuple[str, Any, Prov]],
                   call_loc: list[int]) -> Any:
        if len(self.stack) >= MAX_CALL_DEPTH:
            self.note(f"call depth limit reached calling {fn.qualname}")
            return Unknown(f"call depth limit reached in {fn.name}")
        local_vars: dict[str, Any] = {}
        positional = [p for p in fn.params if p[2] == "pos"]
        kw = {k: v for k, v, _ in kwargs}
        extra_pos = args[len(positional):]
        for i, (pname, default_ir, _kind) in enumerate(positional):
            if i < len(args):
                local_vars[pname] = args[i]
            elif pname in kw:
                local_vars[pname] = kw.pop(pname)
            elif default_ir is not None:
                local_vars[pname] = self.eval_in_module(fn.module, default_ir)
            else:
                local_vars[pname] = Unknown(f"parameter {pname} has no default")
        for pname, default_ir, kind in fn.params:
            if kind == "kwonly":
                if pname in kw:
                    local_vars[pname] = kw.pop(pname)
                elif default_ir is not None:
                    local_vars[pname] = self.eval_in_module(fn.module, default_ir)
                else:
                    local_vars[pname] = Unknown(f"parameter {pname} has no default")
            elif kind == "vararg":
                local_vars[pname] = tuple(extra_pos)
            elif kind == "kwarg":
                dv = DictVal(self.prov(call_loc))
                for k, v in kw.items():
                    dv.slots[k] = Slot(v, self.prov(call_loc))
                kw = {}
                local_vars[pname] = dv
        frame = Frame(fn.module, local_vars, fn.name)
        frame.closure = fn.closure
        frame.function = fn
        caller = self.stack[-1] if self.stack else None
        self.stack.append(frame)
        try:
            self.run_body(fn.body)
            result: Any = None
        except _Return as r:
            result = r.value
        except _Raise as r:
            if caller is not None and caller.tries:
                raise  # the caller's try statement handles it
            result = Unknown(f"{fn.name} raises at line {r.loc[0]}")
        except (_Break, _Continue):
            result = Unknown("break outside loop")
        finally:
            self.stack.pop()
            self.last_locals = local_vars
        for mr in frame.may_returns:
            result = join(result, mr, f"{fn.name} returns different values on different paths")
        return result

    def eval_in_module(self, module: ModuleEnv, ir: list[Any]) -> Any:
        self.stack.append(Frame(module, None, None))
        try:
            return self.eval(ir)
        finally:
            self.stack.pop()

    def call_ext(self, func: Ext, args: list[Any], kwargs: list[tuple[str, Any, Prov]],
                 call_loc: list[int]) -> Any:
        q = func.qualname
        if q.startswith("builtins."):
            b = BUILTINS.get(q[9:])
            if b is not None:
                return b(self, args, {k: v for k, v, _ in kwargs})
        special = self.project.special_call(q)
        if special is not None:
            return special(self, args, kwargs, call_loc)
        schema = self.project.schema_class(q)
        if schema is not None:
            return self.construct(schema.qualname, kwargs, self.prov(call_loc))
        short = q.rsplit(".", 1)[-1]
        mod_fn = _MODULE_FUNCS.get(q)
        if mod_fn is not None:
            return mod_fn(self, args, {k: v for k, v, _ in kwargs})
        if short in ("warn", "warning", "info", "debug", "error", "print") or q.startswith(_HARMLESS_PREFIXES):
            return None if short in ("warn", "warning", "info", "debug", "error", "print") else Unknown(f"{q}()")
        if not q.endswith(_CONSUMERS):
            self.havoc_args(args, kwargs, f"passed to {q}(), which is not analysed")
        return Unknown(f"result of {q}()")

    def havoc_args(self, args: list[Any], kwargs: list[tuple[str, Any, Prov]], why: str) -> None:
        """A config object handed to code we cannot see may be changed by it: whatever it held
        becomes unknown (later assignments are known again). No false certainty."""
        targets = [a for a in args if isinstance(a, (Obj, DictVal))]
        targets += [v for _, v, _ in kwargs if isinstance(v, (Obj, DictVal))]
        if not targets:
            return
        self.note(f"config object {why}: its values are unknown after the call")
        seen: set[int] = set()
        for t in targets:
            self._havoc(t, Unknown(why), seen, 0)

    def _havoc(self, value: Any, unknown: Unknown, seen: set[int], depth: int) -> None:
        if id(value) in seen or depth > 8:
            return
        seen.add(id(value))
        if isinstance(value, Obj):
            value.havoc = unknown
            for table in (value.slots, value.invalid):
                for name, slot in list(table.items()):
                    if isinstance(slot.value, (Obj, DictVal)):
                        self._havoc(slot.value, unknown, seen, depth + 1)
                    else:
                        table[name] = Slot(unknown, slot.prov, slot.history)
        elif isinstance(value, DictVal):
            _set_all(value.slots, unknown)

    def call_method(self, m: BoundMethod, args: list[Any], kwargs: list[tuple[str, Any, Prov]],
                    call_loc: list[int]) -> Any:
        t, name = m.target, m.name
        kw = {k: v for k, v, _ in kwargs}
        if isinstance(t, HFModel):
            if name in ("to_megatron_provider", "to_provider"):
                return self.project.provider_for(self, t.hf_id, self.prov(call_loc), t.revision)
            return Unknown(f"{name}() of a Hugging Face model handle")
        if isinstance(t, str):
            return _str_method(t, name, args)
        if isinstance(t, HFConfig):
            return pyclasses.hf_method(self, t, name, args)
        if isinstance(t, DictVal):
            return self.dict_method(t, name, args, kw, call_loc)
        if isinstance(t, list):
            return self.list_method(t, name, args)
        if isinstance(t, Obj):
            if name in ("finalize", "validate", "__post_init__"):
                return None
            return Unknown(f"{t.cls}.{name}()")
        return Unknown(f"method {name}")

    def dict_method(self, d: DictVal, name: str, args: list[Any], kw: dict[str, Any],
                    call_loc: list[int]) -> Any:
        if name == "get":
            if not args or isinstance(args[0], Unknown):
                return Unknown("dict.get with an unknown key")
            s = d.slots.get(args[0])
            return s.value if s is not None else (args[1] if len(args) > 1 else None)
        if name in ("update", "setdefault"):
            p = self.prov(call_loc)
            if name == "setdefault":
                if args and not isinstance(args[0], Unknown) and args[0] not in d.slots:
                    self.setitem(d, args[0], args[1] if len(args) > 1 else None, p)
                return self.subscript(d, args[0]) if args else None
            src: Any = args[0] if args else None
            if isinstance(src, DictVal):
                for k, s in src.slots.items():
                    self.setitem(d, k, s.value, p)
            elif src is not None:
                _set_all(d.slots, Unknown("dict updated with an unknown mapping"))
            for k, v in kw.items():
                self.setitem(d, k, v, p)
            return None
        if name == "copy":
            dv = DictVal(d.created)
            dv.slots.update({k: Slot(s.value, s.prov) for k, s in d.slots.items()})
            return dv
        if name == "keys":
            return list(d.slots.keys())
        if name == "values":
            return [s.value for s in d.slots.values()]
        if name == "items":
            return [(k, s.value) for k, s in d.slots.items()]
        if name == "pop":
            if args and not isinstance(args[0], Unknown):
                s = d.slots.pop(args[0], None) if not self.in_may() else d.slots.get(args[0])
                return s.value if s is not None else (args[1] if len(args) > 1 else Unknown("missing key"))
            return Unknown("dict.pop")
        return Unknown(f"dict.{name}")

    def list_method(self, lst: list[Any], name: str, args: list[Any]) -> Any:
        may = self.in_may()
        if name in ("append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse"):
            if may:
                lst[:] = [Unknown("list changed conditionally")]
                return None
            try:
                if name == "append":
                    lst.append(args[0])
                elif name == "extend":
                    items = self.iterate(args[0])
                    if items is None:
                        lst[:] = [Unknown("list extended with an unknown value")]
                    else:
                        lst.extend(items)
                elif name == "insert":
                    lst.insert(args[0], args[1])
                elif name == "remove":
                    lst.remove(args[0])
                elif name == "pop":
                    return lst.pop(*args)
                elif name == "clear":
                    lst.clear()
                else:
                    return Unknown(f"list.{name}")
            except (IndexError, ValueError, TypeError):
                lst[:] = [Unknown(f"list.{name} failed")]
            return None
        if name == "copy":
            return list(lst)
        if name == "index" and args and _plain(args[0]):
            try:
                return lst.index(args[0])
            except ValueError:
                return Unknown("list.index")
        if name == "count" and args:
            return lst.count(args[0])
        return Unknown(f"list.{name}")


# ---------------------------------------------------------------------- helpers and builtins

_UNBOUND = object()


def _merge_paths(pre: dict[str, Any], outcomes: list[dict[str, Any]], cur: list[int] | None) -> dict[str, Any]:
    """Names after one of several paths ran: equal on every path → that value; otherwise unknown, except that a
    name bound (to an object, not a plain value) only on some paths keeps that object (what a recipe does with
    ``if peft_scheme == "lora": peft_cfg = LoRA(...)``)."""
    if len(outcomes) == 1 and not pre:
        return outcomes[0]
    merged: dict[str, Any] = {}
    line = (cur or [0])[0]
    names: dict[str, None] = dict.fromkeys(pre)
    for o in outcomes:
        names.update(dict.fromkeys(o))
    for name in names:
        vals = [o.get(name, _UNBOUND) for o in outcomes]
        first = vals[0]
        if all(v is first for v in vals[1:]):
            if first is not _UNBOUND:
                merged[name] = first
            continue
        bound = [v for v in vals if v is not _UNBOUND]
        if len(bound) < len(vals):
            last = bound[-1]
            plain = isinstance(last, (int, float, str, bool)) or last is None
            merged[name] = last if not plain else Unknown("bound conditionally")
            continue
        value = bound[0]
        for v in bound[1:]:
            value = join(value, v, f"bound conditionally at line {line}")
        merged[name] = value
    return merged


def _set_all(table: dict[Any, Slot], value: Any) -> None:
    """Every slot of ``table`` now holds ``value`` (replaced, not changed: clones share slots)."""
    for key, slot in list(table.items()):
        table[key] = Slot(value, slot.prov, slot.history)


def _hashable_literal(v: Any) -> bool:
    if v is None or isinstance(v, (bool, int, float, str, Ext)):
        return True
    if isinstance(v, tuple):
        return all(_hashable_literal(x) for x in v)
    return False


def _memo_key(fn: Func, args: list[Any], kwargs: list[tuple[str, Any, Prov]]) -> tuple[Any, ...] | None:
    if not all(_hashable_literal(a) for a in args) or not all(_hashable_literal(v) for _, v, _ in kwargs):
        return None
    return (id(fn.body), tuple((type(a).__name__, a) for a in args),
            tuple(sorted((k, type(v).__name__, v) for k, v, _ in kwargs)))


def _plain(v: Any) -> bool:
    if isinstance(v, (int, float, str, bool)) or v is None:
        return True
    if isinstance(v, (list, tuple)):
        return all(_plain(x) for x in v)
    return False


_BINOPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "|": operator.or_,
    "&": operator.and_, "^": operator.xor, "<<": lambda a, b: a << b if b < 256 else math.inf,
    ">>": operator.rshift,
}
_CMP: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge,
}

def _slot_value(interp: Interpreter, obj: Obj, name: str) -> Any:
    slot = interp.get_slot(obj, name)
    return slot.value if slot is not None else Unknown(f"{name} not set")


def _post_init_checkpoint(interp: Interpreter, obj: Obj) -> None:
    # megatron/training/config/training_config.py:632: without async_save the strategy is "mcore".
    if _slot_value(interp, obj, "async_save") is False:
        interp.derive(obj, "async_strategy", "mcore", "CheckpointConfig.__post_init__: no async_save")


def _post_init_tokenizer(interp: Interpreter, obj: Obj) -> None:
    # megatron/bridge/training/tokenizers/config.py:93: Bridge pads the vocabulary itself.
    interp.derive(obj, "pad_vocab_size", False, "TokenizerConfig.__post_init__")


def _post_init_gpt_dataset(interp: Interpreter, obj: Obj) -> None:
    # megatron/bridge/training/config.py:278: __init__ passes seq_length as MCore's sequence_length.
    interp.derive(obj, "sequence_length", _slot_value(interp, obj, "seq_length"), "GPTDatasetConfig.__init__")


def _post_init_mixed_precision(interp: Interpreter, obj: Obj) -> None:
    # __setattr__ keeps fp8_param/fp8_param_gather equal while __init__ assigns the fields in order
    # (fp8_param first, then fp8_param_gather): both end as the *_param_gather value.
    for param, gather in (("fp8_param", "fp8_param_gather"), ("fp4_param", "fp4_param_gather")):
        if param not in obj.slots or gather in obj.slots:
            interp.derive(obj, param, _slot_value(interp, obj, gather), "MixedPrecisionConfig.__setattr__ sync")


_POST_INIT: dict[str, Callable[[Interpreter, Obj], None]] = {
    "CheckpointConfig": _post_init_checkpoint,
    "TokenizerConfig": _post_init_tokenizer,
    "GPTDatasetConfig": _post_init_gpt_dataset,
    "MixedPrecisionConfig": _post_init_mixed_precision,
}

_MP_SYNCED = {"fp8_param": "fp8_param_gather", "fp8_param_gather": "fp8_param",
              "fp4_param": "fp4_param_gather", "fp4_param_gather": "fp4_param"}

# Bridge entry points that take the finished config (their runtime rewrites are modelled in runtime.py).
_CONSUMERS = (".pretrain", ".finetune", ".distill")

# Calls into these never change a config object handed to them.
_HARMLESS_PREFIXES = ("logging.", "warnings.", "builtins.", "math.", "os.path.", "typing.", "json.", "re.",
                      "dataclasses.fields", "dataclasses.asdict", "pprint.")

_SYMBOL_ALIASES = {
    "torch.float": "torch.float32", "torch.half": "torch.float16", "torch.double": "torch.float64",
    "torch.bfloat": "torch.bfloat16",
}


def _normalise_symbol(q: str) -> str:
    return _SYMBOL_ALIASES.get(q, q)


def _str_method(s: str, name: str, args: list[Any]) -> Any:
    if any(isinstance(a, Unknown) for a in args):
        return Unknown(f"str.{name} with unknown arguments")
    simple = {"lower", "upper", "strip", "lstrip", "rstrip", "title", "capitalize", "casefold"}
    try:
        if name in simple:
            return getattr(s, name)(*args[:1])
        if name in ("startswith", "endswith", "split", "rsplit", "replace", "join", "count", "find",
                    "removeprefix", "removesuffix", "partition", "isdigit", "isalpha"):
            if name == "join":
                items = args[0] if args else []
                if isinstance(items, (list, tuple)) and all(isinstance(x, str) for x in items):
                    return s.join(items)
                return Unknown("str.join of unknown items")
            result = getattr(s, name)(*args)
            return list(result) if isinstance(result, list) else result
        if name == "format":
            return Unknown("str.format")
    except (TypeError, ValueError):
        return Unknown(f"str.{name} failed")
    return Unknown(f"str.{name}")


def _cast(kind: type) -> Callable[[Interpreter, list[Any], dict[str, Any]], Any]:
    def fn(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
        if not args:
            return kind()
        v = args[0]
        if not _plain(v) or isinstance(v, (list, tuple)):
            if kind is bool:
                t = interp.truth(v)
                return Unknown("bool() of an unknown value") if t is None else t
            return Unknown(f"{kind.__name__}() of an unknown value")
        try:
            return kind(v)
        except (TypeError, ValueError, OverflowError):
            return Unknown(f"{kind.__name__}() failed")
    return fn


def _b_len(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    v = args[0] if args else None
    if isinstance(v, DictVal):
        return len(v.slots)
    if isinstance(v, (list, tuple, str)):
        return len(v)
    return Unknown("len() of an unknown value")


def _b_minmax(fn: Callable[..., Any]) -> Callable[[Interpreter, list[Any], dict[str, Any]], Any]:
    def inner(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
        items = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
        if not items or not all(_plain(x) for x in items):
            return Unknown("min/max of unknown values")
        try:
            return fn(items)
        except (TypeError, ValueError):
            return Unknown("min/max failed")
    return inner


def _b_list(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    if not args:
        return []
    items = interp.iterate(args[0])
    return items if items is not None else Unknown("list() of an unknown value")


def _b_tuple(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    r = _b_list(interp, args, kw)
    return tuple(r) if isinstance(r, list) else r


def _b_dict(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    dv = DictVal(interp.prov(None))
    if args:
        src = args[0]
        if isinstance(src, DictVal):
            dv.slots.update({k: Slot(s.value, s.prov) for k, s in src.slots.items()})
        else:
            return Unknown("dict() of an unknown value")
    for k, v in kw.items():
        dv.slots[k] = Slot(v, interp.prov(None))
    return dv


def _b_isinstance(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    if len(args) != 2:
        return Unknown("isinstance()")
    v, t = args
    types = t if isinstance(t, tuple) else (t,)
    ours = pyclasses.is_instance(interp, v, types)
    if ours is not None:
        return ours
    names = [x.qualname for x in types if isinstance(x, Ext)]
    if len(names) != len(types):
        return Unknown("isinstance() with an unknown type")
    py = {"builtins.str": str, "builtins.int": int, "builtins.float": float, "builtins.bool": bool,
          "builtins.list": list, "builtins.tuple": tuple, "builtins.dict": DictVal}
    if isinstance(v, Unknown):
        return Unknown("isinstance() of an unknown value")
    if isinstance(v, Ext) and all(n in py for n in names):
        return False  # a class or function outside the analysed code is no str/int/list/dict
    if all(n in py for n in names):
        if isinstance(v, (str, int, float, bool, list, tuple, DictVal)) or v is None:
            return any(isinstance(v, py[n]) for n in names)
        return False if isinstance(v, Obj) else Unknown("isinstance()")
    if isinstance(v, Obj):
        for n in names:
            if interp.project.is_subclass(v.cls, n):
                return True
        return Unknown("isinstance() of a config object") if v.schema is None else False
    if isinstance(v, (str, int, float, bool)) or v is None:
        return any(n in py and isinstance(v, py[n]) for n in names) if all(n in py for n in names) else False
    return Unknown("isinstance()")


def _b_getattr(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    if len(args) < 2 or not isinstance(args[1], str):
        return Unknown("getattr()")
    obj, name = args[0], args[1]
    if isinstance(obj, (PyClass, PyInstance, SuperProxy, HFConfig)):
        found, value = pyclasses.lookup_attr(interp, obj, name)
        if found is True:
            return value
        if found is False and len(args) > 2:
            return args[2]
        return pyclasses.get_attr(interp, obj, name)
    if isinstance(obj, Obj):
        slot = interp.get_slot(obj, name)
        if slot is not None:
            return slot.value
        if obj.schema is None:
            return Unknown(f"getattr of {obj.cls}")
        return args[2] if len(args) > 2 else Unknown(f"{obj.cls} has no attribute {name}")
    return interp.getattr_value(obj, name)


def _b_hasattr(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    if len(args) < 2 or not isinstance(args[1], str):
        return Unknown("hasattr()")
    obj, name = args
    if isinstance(obj, Obj) and obj.schema is not None:
        return interp.get_slot(obj, name) is not None
    if isinstance(obj, (PyClass, PyInstance, SuperProxy, HFConfig)):
        found = pyclasses.lookup_attr(interp, obj, name)[0]
        return Unknown(f"hasattr({name!r})") if found is None else found
    return Unknown("hasattr()")


def _b_super(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    if not args:
        return pyclasses.super_of(interp)
    if len(args) == 2 and isinstance(args[0], PyClass) and isinstance(args[1], (PyInstance, PyClass)):
        return SuperProxy(args[0], args[1])
    return Unknown("super()")


def _b_issubclass(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    if len(args) != 2:
        return Unknown("issubclass()")
    return pyclasses.is_subclass(interp, args[0], args[1])


def _b_setattr(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    if len(args) == 3 and isinstance(args[1], str):
        interp.setattr_value(args[0], args[1], args[2], interp.prov(None, target_text=f"setattr({args[1]!r})"))
    return None


def _b_range(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    if not args or not all(isinstance(a, int) and not isinstance(a, bool) for a in args):
        return Unknown("range() of unknown bounds")
    r = range(*args)
    return list(r) if len(r) <= MAX_LOOP_UNROLL else Unknown("range too long to unroll")


def _b_sorted(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    items = interp.iterate(args[0]) if args else None
    if items is None or not all(_plain(x) for x in items) or kw:
        return Unknown("sorted() of unknown values")
    try:
        return sorted(items)
    except TypeError:
        return Unknown("sorted() failed")


def _b_anyall(fn: Callable[[list[bool]], bool]) -> Callable[[Interpreter, list[Any], dict[str, Any]], Any]:
    def inner(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
        items = interp.iterate(args[0]) if args else None
        if items is None:
            return Unknown("any/all of unknown values")
        truths = [interp.truth(x) for x in items]
        if None in truths:
            return Unknown("any/all of unknown values")
        return fn([bool(t) for t in truths])
    return inner


def _b_noop(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    return None


def _b_abs(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    v = args[0] if args else None
    return abs(v) if isinstance(v, (int, float)) else Unknown("abs()")


def _b_round(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    if args and all(isinstance(a, (int, float)) for a in args):
        return round(*args)
    return Unknown("round()")


def _b_sum(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    items = interp.iterate(args[0]) if args else None
    if items is None or not all(isinstance(x, (int, float)) for x in items):
        return Unknown("sum()")
    return sum(items)


def _b_zip(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    seqs = [interp.iterate(a) for a in args]
    if any(s is None for s in seqs):
        return Unknown("zip() of unknown values")
    return [tuple(t) for t in zip(*seqs)]


def _b_enumerate(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    items = interp.iterate(args[0]) if args else None
    if items is None:
        return Unknown("enumerate() of an unknown value")
    start = args[1] if len(args) > 1 and isinstance(args[1], int) else 0
    return [(i + start, x) for i, x in enumerate(items)]


BuiltinFn = Callable[[Interpreter, list[Any], dict[str, Any]], Any]

BUILTINS: dict[str, BuiltinFn] = {
    "int": _cast(int), "float": _cast(float), "str": _cast(str), "bool": _cast(bool),
    "len": _b_len, "min": _b_minmax(min), "max": _b_minmax(max), "list": _b_list, "tuple": _b_tuple,
    "dict": _b_dict, "isinstance": _b_isinstance, "getattr": _b_getattr, "hasattr": _b_hasattr,
    "setattr": _b_setattr, "range": _b_range, "sorted": _b_sorted, "any": _b_anyall(any),
    "all": _b_anyall(all), "print": _b_noop, "abs": _b_abs, "round": _b_round, "sum": _b_sum,
    "zip": _b_zip, "enumerate": _b_enumerate, "set": _b_list, "super": _b_super, "issubclass": _b_issubclass,
}


def _math2(fn: Callable[[int, int], int]) -> BuiltinFn:
    def inner(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
        if args and all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            return fn(*args)
        return Unknown("math function of unknown values")
    return inner


def _math1(fn: Callable[[float], Any]) -> BuiltinFn:
    def inner(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
        if len(args) == 1 and isinstance(args[0], (int, float)) and not isinstance(args[0], bool):
            return fn(args[0])
        return Unknown("math function of unknown values")
    return inner


def _deepcopy(interp: Interpreter, args: list[Any], kw: dict[str, Any]) -> Any:
    return clone(args[0]) if args else Unknown("deepcopy()")


_MODULE_FUNCS: dict[str, BuiltinFn] = {
    "math.lcm": _math2(math.lcm), "math.gcd": _math2(math.gcd), "math.ceil": _math1(math.ceil),
    "math.floor": _math1(math.floor), "math.log2": _math1(math.log2), "math.sqrt": _math1(math.sqrt),
    "copy.deepcopy": _deepcopy, "copy.copy": _deepcopy,
    # typing.cast(T, value) returns value (recipes cast AutoBridge providers to their class).
    "typing.cast": lambda interp, args, kw: args[1] if len(args) == 2 else Unknown("typing.cast()"),
}
