"""The caller search reads Python text with patterns tuned for speed (fix/callers.py): they must find what
the plain patterns find, on any text."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from mbmem_lint.fix import callers as C
from mbmem_lint.sources import SourceFile

# The plain pattern: a set of identifiers per file.
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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

