"""Long fuzz campaign (not CI): ``python bench/fuzz_campaign.py [--yaml N] [--dotlist N] [--recipes N]``.

Runs the same properties as tests/test_fuzz.py with many more examples and prints, per target, the
number of examples tried and the number of crashes (expected: 0). Exit code 1 if anything crashed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from fuzz_strategies import dotlist_items, python_recipes, yaml_documents  # noqa: E402
from test_fuzz import check_dotlist, check_recipe, check_yaml  # noqa: E402


def campaign(
    name: str, strategy: st.SearchStrategy[Any], check: Callable[[Any], None], n: int
) -> tuple[int, int]:
    tried = 0
    crashes: list[str] = []

    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(strategy)
    def run(example: Any) -> None:
        nonlocal tried
        tried += 1
        try:
            check(example)
        except Exception:  # count and keep going: the campaign reports every crash
            crashes.append(f"{example!r}\n{traceback.format_exc()}")

    start = time.monotonic()
    run()
    elapsed = time.monotonic() - start
    print(f"{name:10s} examples tried: {tried:6d}  crashes: {len(crashes)}  ({elapsed:.1f} s)")
    for crash in crashes[:5]:
        print(crash[:3000])
    return tried, len(crashes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--yaml", type=int, default=5000)
    parser.add_argument("--text", type=int, default=5000)
    parser.add_argument("--dotlist", type=int, default=5000)
    parser.add_argument("--recipes", type=int, default=200)
    args = parser.parse_args()
    total_crashes = 0
    total_crashes += campaign("yaml", yaml_documents(), check_yaml, args.yaml)[1]
    total_crashes += campaign("yaml-text", st.text(max_size=400), check_yaml, args.text)[1]
    total_crashes += campaign("dotlist", st.lists(dotlist_items, max_size=8), check_dotlist, args.dotlist)[1]
    if args.recipes:
        if not (ROOT / "mbmem_lint" / "cli.py").exists():
            print("recipes    skipped: the CLI (mbmem_lint/cli.py) has not landed yet")
        else:
            with tempfile.TemporaryDirectory() as tmp:
                counter = iter(range(10**9))
                total_crashes += campaign(
                    "recipes",
                    python_recipes(),
                    lambda src: check_recipe(src, Path(tmp) / f"w{next(counter)}"),
                    args.recipes,
                )[1]
    print(f"total crashes: {total_crashes}")
    return 1 if total_crashes else 0


if __name__ == "__main__":
    sys.exit(main())
