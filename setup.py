"""Package discovery for the wheel (everything else is in pyproject.toml).

pyproject's ``packages.find`` cannot express the one mapped package: the rule catalog lives in the
top-level ``rules/`` folder and installs as ``mbmem_lint.rules`` (``package-dir`` in pyproject.toml).
Listing packages by hand once left ``mbmem_lint.verify`` out of the wheel; tests/test_wheel.py builds
the wheel and runs every command from a fresh environment.
"""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["mbmem_lint", "mbmem_lint.*"]),
        "mbmem_lint.rules",
        *(f"mbmem_lint.rules.{name}" for name in find_packages("rules")),
    ],
)
