"""Shared fixtures: real git repositories and a real Redis."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.gitrepo import RepoBuilder


@pytest.fixture
def make_repo(tmp_path: Path):
    """Factory for pinned-env repositories under tmp_path: make_repo("upstream")."""

    def make(name: str = "upstream") -> RepoBuilder:
        return RepoBuilder(tmp_path / name)

    return make
