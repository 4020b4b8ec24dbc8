"""Shared test set-up."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _restore_bridge_data() -> Iterator[None]:
    """A test that lints against another Megatron Bridge release (process-wide state) leaves the
    default active for the next one."""
    from mbmem_lint.resolve import versions

    before = list(versions._ACTIVE)
    yield
    versions._ACTIVE[:] = before
