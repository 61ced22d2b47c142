"""Where carry clones and pushes the downstream repository, for each kind of GitHub API root."""

from __future__ import annotations

import pytest

from bot.github.urls import git_base_url


@pytest.mark.parametrize(
    ("api", "git"),
    [
        ("https://api.github.com", "https://github.com"),
        ("https://api.github.com/", "https://github.com"),
        # Enterprise Server: the API under /api/v3 on the host itself.
        ("https://ghe.corp.example/api/v3", "https://ghe.corp.example"),
        ("https://ghe.corp.example/api/v3/", "https://ghe.corp.example"),
        # Enterprise Cloud with data residency (GHE.com): api.SUBDOMAIN.ghe.com for the API,
        # SUBDOMAIN.ghe.com for the web and git (GitHub docs, "Network details for GHE.com").
        ("https://api.acme.ghe.com", "https://acme.ghe.com"),
        ("http://127.0.0.1:8765", "http://127.0.0.1:8765"),
        ("http://127.0.0.1:8765/api/v3", "http://127.0.0.1:8765"),
    ],
)
def test_the_git_host_is_derived_from_the_api_root(api: str, git: str) -> None:
    assert git_base_url(api) == git
