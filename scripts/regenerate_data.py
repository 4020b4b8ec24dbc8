#!/usr/bin/env python
"""Regenerate mbmem_lint/data/{schema.json.gz,models.json} from the megatron-bridge 0.6.2 wheels.

Usage: python scripts/regenerate_data.py [--check]
"""

from __future__ import annotations

import sys

from mbmem_lint.dev.corpus import ensure_corpus
from mbmem_lint.dev.regenerate import check_stale, regenerate


def main(argv: list[str]) -> int:
    corpus = ensure_corpus()
    if "--check" in argv:
        stale = check_stale(corpus)
        for name in stale:
            print(f"stale: mbmem_lint/data/{name}")
        return 1 if stale else 0
    for path in regenerate(corpus):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
