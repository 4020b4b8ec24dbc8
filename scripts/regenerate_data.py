#!/usr/bin/env python
"""Regenerate (or check) the shipped data of one Megatron Bridge release from its wheels; the same
as ``mbmem-lint dev regenerate [--version X] [--check]``.

Usage: python scripts/regenerate_data.py [--version X.Y.Z] [--check]
"""

from __future__ import annotations

import sys

from mbmem_lint.cli import main

if __name__ == "__main__":
    sys.exit(main(["dev", "regenerate", *sys.argv[1:]]))
