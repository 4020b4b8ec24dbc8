"""The caller search reads Python text with patterns tuned for speed (fix/callers.py): they must find what
the plain patterns find, on any text."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from mbmem_lint.fix import callers as C
from mbmem_lint.sources import SourceFile

# The plain patterns: every line start (MULTILINE ^), every position for calls, a set of identifiers per file.
TOP = re.compile(r"^(?:@|class\b|(?:async\s+)?def\b|[A-Za-z_])", re.M)
CALL = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*)\(")
FROM = re.compile(r"^from\s+(\.*[\w.]*)\s+import\s+(\([^)]*\)|[^\n#]*)", re.M)
IMPORT = re.compile(r"^import\s+([^\n#]*)", re.M)
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def reference_graph(text: str) -> C._FileGraph:
    g = C._FileGraph()
    for m in FROM.finditer(text):
        module = m.group(1).rsplit(".", 1)[-1]
        for item in m.group(2).strip("() \t\r\n").replace("\n", ",").split(","):
            parts = item.split()
            if not parts or parts[0] == "*":
                continue
            name, local = parts[0], parts[2] if len(parts) == 3 and parts[1] == "as" else parts[0]
            g.imports[local] = (module, name) if module else (name, None)
    for m in IMPORT.finditer(text):
        for item in m.group(1).split(","):
            parts = item.split()
            if parts:
                local = parts[2] if len(parts) == 3 and parts[1] == "as" else parts[0].split(".")[0]
                g.imports[local] = (parts[0].rsplit(".", 1)[-1], None)
    starts = [m.start() for m in TOP.finditer(text)] + [len(text)]
    for start, end in zip(starts, starts[1:]):
        d = C._DEF_RE.match(text, start)
        if d is None:
            continue
        g.defined.add(d.group(1))
        g.calls[d.group(1)] = {(q.rsplit(".", 1)[-1], n) for q, _, n in
                               (dotted.rpartition(".") for dotted in CALL.findall(text, d.end(), end))}
    return g


def _same(text: str) -> None:
    C._GRAPHS.clear()
    got, want = C._graph(text), reference_graph(text)
    assert got.defined == want.defined
    assert list(got.calls.items()) == list(want.calls.items())
    assert list(got.imports.items()) == list(want.imports.items())


CASES = [
    "def f(x=g(1)):\n    a.b(c(d))\n    return h (2)\nimport os, sys as s\nfrom . import (a, b as c)\n"
    "from .x.y import z\n@dec\ndef g(): f()\nclass K:\n    def m(self): f()\n",
    "from\n  pkg import helper\nasync def run():\n    await helper()\n",
    "x.def f(", "def f.x(g(", "def h():\n    9name(1)\n    é(2)\n    aé(3)\n    _x.y.z(4)\n    .w(5)\n",
    "", "\n", "def", "def f", "def f(\n)\n)\ndef g(): pass(\n",
]


def test_caller_graph_matches_the_plain_patterns_on_examples() -> None:
    for text in CASES:
        _same(text)


PIECES = ["def ", "async def ", "class ", "f", "g", "helper", "a.b", ".", "(", ")", "9", "é", "_", " ", "\n",
          "\n    ", "import ", "from ", " import ", " as ", ",", "#", "@", ":", "=", "'", "common"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_caller_graph_matches_the_plain_patterns(text: str) -> None:
    _same(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["name", "nam", "x", "9", "_", ".", " ", "é", "(", "\n"]), max_size=20).map("".join),
       st.sampled_from(["name", "nam", "x", "x9", "_", "ame"]))
def test_has_identifier_matches_the_tokenizer(text: str, name: str) -> None:
    assert C._has_identifier(text, name) == (name in set(IDENT.findall(text)))


def test_files_naming_lists_the_files_with_the_identifier_in_path_order() -> None:
    texts = {"b.py": "from a import helper\nhelper()\n", "a.py": "def helper(): pass\n", "c.py": "helpers = 1\n",
             "d.py": "x = '9helper'\n", "e.yaml": "helper: 1\n"}
    sources = {p: SourceFile(p, t, "yaml" if p.endswith(".yaml") else "python") for p, t in texts.items()}
    memo = C._Memo(sources)
    assert memo.files_naming("helper") == ["a.py", "b.py", "d.py"]
    assert memo.files_naming("a.b") == []  # not an identifier


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=30).map("".join), st.integers(0, 200), st.integers(0, 200))
def test_calls_in_a_span_match_the_plain_pattern(text: str, a: int, b: int) -> None:
    start, end = sorted((min(a, len(text)), min(b, len(text))))
    assert C._calls(text[::-1], start, end) == set(CALL.findall(text, start, end))


def test_calls_see_the_character_before_their_span() -> None:
    """As with ``pattern.findall(text, start, end)``, a run that continues a name begun before ``start`` is no
    call of its own."""
    for text in ("ff(", "a.b(", "x9y(1)", "é(f(g.h(", "def f(x=g(1)):\n  a.b(c(d))\n"):
        for start in range(len(text) + 1):
            for end in range(start, len(text) + 1):
                assert C._calls(text[::-1], start, end) == set(CALL.findall(text, start, end)), (text, start, end)
