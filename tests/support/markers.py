"""Markers the tests share: what a test needs from the machine, said once."""

from __future__ import annotations

import shutil

import pytest

# The test starts redis-servers of its own (a private one, or several for runner users).
needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server"
)
