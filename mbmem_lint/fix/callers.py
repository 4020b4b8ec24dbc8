"""Which recipes run a helper function of the user's project: a static call graph over the linted
Python files, read from their text (nothing is imported or executed).

A fix that edits a statement inside a helper changes every recipe that calls the helper; the fix
says which. Recipes are the public top-level functions of the linted files (the resolver's own
candidates are public too; private ``_helpers`` run when recipes call them). A call ``name(...)``
or ``module.name(...)`` in a file refers to the helper when the file defines it, or imports it by
name (``from .common import helper``, ``from pkg import common``), matched on the module's last
name. Only the linted files are read, so recipes elsewhere in the project are not listed.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterator
from pathlib import PurePath

from mbmem_lint.records import dataclass, field
from mbmem_lint.sources import Sources

MAX_FUNCTIONS = 2000  # callers followed per question (a helper of a helper of ...)


@dataclass
class _FileGraph:
    """One file's top-level functions, what each calls, and the names its imports bind."""

    defined: set[str] = field(default_factory=set)
    calls: dict[str, set[tuple[str, str]]] = field(default_factory=dict)  # fn -> {(qualifier or "", name)}
    # local name -> (module's last name, imported name); ``import pkg.common as c`` -> c: ("common", None)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)


_GRAPHS: dict[str, _FileGraph] = {}
_GRAPHS_MAX = 512


# The patterns run over "\n" + text and start with that newline (a line start) or, for calls, over the reversed
# text starting with the "(": a literal first character lets the regex engine skip to candidates instead of
# trying every position (the graphs of the files that call a shared helper cost ~4x less).
# Top-level statements start at column 0 (a closing bracket there ends a multi-line signature).
_TOP_RE = re.compile(r"\n[@A-Za-z_]")  # @, class, def, async def or any other name
_DEF_RE = re.compile(r"(?:async\s+)?def\s+([A-Za-z_]\w*)")
# A call ``name(`` / ``a.b.name(``: a maximal run of [\w.] starting with [A-Za-z_] right before "(",
# reversed: "(" then the run, ending on [A-Za-z_] with no [\w.] after it.
_CALL_REVERSED_RE = re.compile(r"\(([\w.]*[A-Za-z_])(?![\w.])")
_FROM_RE = re.compile(r"\nfrom\s+(\.*[\w.]*)\s+import\s+(\([^)]*\)|[^\n#]*)")
_IMPORT_RE = re.compile(r"\nimport\s+([^\n#]*)")


def _calls(reversed_text: str, start: int, end: int) -> set[str]:
    """The dotted names called in ``text[start:end]`` (``reversed_text`` is ``text[::-1]``): each run must start
    at or after ``start``, and the character before it (which may lie before ``start``) must not continue it."""
    n = len(reversed_text)
    lo, hi = n - end, n - start  # the span in the reversed text
    return {m.group(1)[::-1] for m in _CALL_REVERSED_RE.finditer(reversed_text, lo, min(n, hi + 1))
            if m.end() <= hi}


def _graph(text: str) -> _FileGraph:
    """The file's call graph from its text (regular expressions, not ``ast``: asked for a helper
    shared by every recipe of the corpus, parsing the ~150 files that call it took 0.4 s, more than
    a quarter of the whole check; names in strings or comments can only add callers)."""
    hit = _GRAPHS.get(text)
    if hit is not None:
        return hit
    graph = _FileGraph()
    lined = "\n" + text  # every line start follows a newline; offsets in ``lined`` are text offsets + 1
    for m in _FROM_RE.finditer(lined):
        module = m.group(1).rsplit(".", 1)[-1]
        for item in m.group(2).strip("() \t\r\n").replace("\n", ",").split(","):
            parts = item.split()
            if not parts or parts[0] == "*":
                continue
            name, local = parts[0], parts[2] if len(parts) == 3 and parts[1] == "as" else parts[0]
            # ``from pkg import common`` binds a module; ``from .common import helper`` a function.
            graph.imports[local] = (module, name) if module else (name, None)
    for m in _IMPORT_RE.finditer(lined):
        for item in m.group(1).split(","):
            parts = item.split()
            if parts:
                local = parts[2] if len(parts) == 3 and parts[1] == "as" else parts[0].split(".")[0]
                graph.imports[local] = (parts[0].rsplit(".", 1)[-1], None)
    starts = [m.start() for m in _TOP_RE.finditer(lined)] + [len(text)]  # the newline's offset: the line's in text
    reversed_text = text[::-1]
    for start, end in zip(starts, starts[1:]):
        d = _DEF_RE.match(text, start)
        if d is None:
            continue
        graph.defined.add(d.group(1))
        calls = set()
        for dotted in _calls(reversed_text, d.end(), end):
            qualifier, _, name = dotted.rpartition(".")
            calls.add((qualifier.rsplit(".", 1)[-1], name))
        graph.calls[d.group(1)] = calls
    if len(_GRAPHS) >= _GRAPHS_MAX:
        _GRAPHS.pop(next(iter(_GRAPHS)))
    _GRAPHS[text] = graph
    return graph


def _stem(path: str) -> str:
    p = PurePath(path)
    return p.parent.name if p.stem == "__init__" else p.stem


def _refers(graph: _FileGraph, same_file: bool, call: tuple[str, str], target_stem: str, name: str) -> bool:
    qualifier, called = call
    if not qualifier:
        if same_file and called == name and called in graph.defined:
            return True
        bound = graph.imports.get(called)
        return bound is not None and bound == (target_stem, name)
    bound = graph.imports.get(qualifier)  # ``common.helper()``: ``common`` must be the helper's module
    return called == name and bound is not None and (
        bound[1] == target_stem or (bound[1] is None and bound[0] == target_stem))


_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_DIGITS = frozenset("0123456789")


def _has_identifier(text: str, name: str) -> bool:
    """Whether ``name`` is one of the identifiers :data:`_IDENT_RE` finds in ``text``: an occurrence that no
    word character follows and that starts its run of word characters, or follows only digits there (the
    pattern cannot start on a digit: ``9name`` holds the identifier ``name``)."""
    n, end = len(name), len(text)
    i = text.find(name)
    while i >= 0:
        j = i + n
        if j == end or text[j] not in _WORD:
            k = i
            while k > 0 and text[k - 1] in _DIGITS:
                k -= 1
            if k == 0 or text[k - 1] not in _WORD:
                return True
        i = text.find(name, i + 1)
    return False


class _Memo:
    """Answers for one run's sources (the same questions recur for every finding in a shared helper)."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources  # held, so the identity check below is not fooled by a reused id
        self.python = sorted(p for p, src in sources.items() if src.kind == "python")
        self.answers: dict[tuple[str, str, int | None], tuple[list[tuple[str, str]], bool]] = {}
        self._naming: dict[str, list[str]] = {}

    def files_naming(self, name: str) -> list[str]:
        """The Python files (in path order) whose text has the identifier ``name``. A substring search per
        name (C, a few hundred names per run at most) is ~4x cheaper than tokenizing every file once."""
        hit = self._naming.get(name)
        if hit is None:
            if _IDENT_RE.fullmatch(name) is None:
                hit = []
            else:
                texts = [(path, self.sources[path].text) for path in self.python]
                hit = [path for path, text in texts if name in text and _has_identifier(text, name)]
            self._naming[name] = hit
        return hit


_MEMO: list[_Memo] = []


def _memo(sources: Sources) -> _Memo:
    if not _MEMO or _MEMO[0].sources is not sources:
        _MEMO[:] = [_Memo(sources)]
    return _MEMO[0]


def _direct_callers(memo: _Memo, path: str, name: str) -> Iterator[tuple[str, str]]:
    """Functions of the linted files that call ``name`` of ``path``, file by file in path order."""
    stem = _stem(path)
    for src_path in memo.files_naming(name):
        graph = _graph(memo.sources[src_path].text)
        same = src_path == path
        for fn, calls in graph.calls.items():
            if any(_refers(graph, same, c, stem, name) for c in calls):
                yield src_path, fn


def recipes_running(sources: Sources, path: str, function: str,
                    limit: int | None = None) -> tuple[list[tuple[str, str]], bool]:
    """(file, function) of the public top-level functions of the linted files that call ``function``
    of ``path``, directly or through other functions (``function`` itself too when it is public: a
    public helper is also a recipe candidate), and whether that list is complete. Callers are
    followed breadth-first in file order; with ``limit`` the search stops once that many are found
    (a helper every recipe calls would otherwise send it through every file)."""
    memo = _memo(sources)
    key = (path, function, limit)
    hit = memo.answers.get(key)
    if hit is not None:
        return list(hit[0]), hit[1]
    seen = {(path, function)}
    found = [] if function.startswith("_") else [(path, function)]
    queue = collections.deque([(path, function)])
    complete = True
    while queue and complete:
        cur = queue.popleft()
        for caller in _direct_callers(memo, *cur):
            if len(seen) >= MAX_FUNCTIONS or (limit is not None and len(found) >= limit):
                complete = False
                break
            if caller not in seen:
                seen.add(caller)
                queue.append(caller)
                if not caller[1].startswith("_"):
                    found.append(caller)
    memo.answers[key] = (found, complete)
    return list(found), complete
