"""Markers for end-to-end tests (pyproject runs pytest with --strict-markers)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives headless Chromium through Playwright")
