"""``rules/_common.py`` helpers: the example builder's indentation equals textwrap's."""

from __future__ import annotations

import textwrap

from hypothesis import given
from hypothesis import strategies as st
from mbmem_lint.rules._common import _indented

LINES = st.lists(st.tuples(st.integers(0, 6), st.sampled_from(["", "x = 1", "cfg.a = 2  # <-", "   ", "if y:"])),
                 max_size=6)


@given(LINES, st.booleans(), st.booleans())
def test_indented_equals_textwrap(lines: list[tuple[int, str]], lead: bool, trail: bool) -> None:
    body = ("\n" if lead else "") + "\n".join(" " * n + text for n, text in lines) + ("\n  " if trail else "")
    assert _indented(body) == textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
