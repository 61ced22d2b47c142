"""Entries without a sentence of their own read as their fields in words: no JSON braces,
quotes, true/false or null reach a page (table test, pure)."""

from __future__ import annotations

from typing import Any

import pytest

from bot.web.timeline import describe

PATCH = "0001-seed.patch"


@pytest.mark.parametrize(
    ("kind", "data", "said"),
    [
        (
            "rebased",
            {
                "head": "6e2b0a5200d7" + "0" * 28,
                "outcome": "changed",
                "summary": {"applies": 2, "contained": 1},
            },
            "checked on 6e2b0a5200d7, outcome changed: 2 applies, 1 contained",
        ),
        (
            "checked",
            {"patches": {PATCH: {"status": "applies", "decision": "keep"}}},
            f"patches: {PATCH} (status applies, decision keep)",
        ),
        ("retarget", {"base": {"branch": "main"}, "by": None}, "base: branch main, by: none"),
        ("ci-approved", {"sha": "abc", "runs": ["r1", "r2"]}, "sha: abc, runs: r1, r2"),
        ("label-removed", {"pr": 12, "pushed": False}, "pr: 12, pushed: no"),
        (
            "proposal",
            {"read_only": True, "changed": False, "title": "carry(s): refresh", "body": "..."},
            "PR proposed (read-only mode, nothing pushed): carry(s): refresh",
        ),
        (
            "ci-started",
            {"run_id": "r1", "runner": "gaudi-1", "attempt": 1},
            "r1 started on gaudi-1",
        ),
        (
            "ci-started",
            {"run_id": "r1", "runner": "gaudi-2", "attempt": 2},
            "r1 started on gaudi-2 (attempt 2)",
        ),
        (
            "tree-branch",
            {"branch": "carry/tree/s", "head": "a" * 40, "commit": "b" * 40, "pushed": True},
            "carry/tree/s pushed: aaaaaaaaaaaa + the series = bbbbbbbbbbbb",
        ),
        (
            "good-ref",
            {"ref": "carry/good/s", "head": "a" * 40, "commit": "b" * 40, "pushed": False},
            "carry/good/s at bbbbbbbbbbbb, the tree of good head aaaaaaaaaaaa",
        ),
        (
            "push-read-back",
            {"branch": "carry/x", "tip": "a" * 40, "landed": True, "version": "20261206.2"},
            "the push failed; carry/x has carry's commit: VERSION 20261206.2 recorded",
        ),
        (
            "push-read-back",
            {"branch": "carry/x", "tip": "b" * 40, "landed": False, "version": None},
            "the push failed; carry/x is at bbbbbbbbbbbb",
        ),
        (
            "publish-refused",
            {"code": "GH013", "branch": "carry/s", "setting": '"Block force pushes" in a ruleset'},
            'GitHub refused the push to carry/s (GH013): "Block force pushes" in a ruleset; '
            "not retried",
        ),
    ],
)
def test_fields_read_as_words(kind: str, data: dict[str, Any], said: str) -> None:
    assert describe(kind, data) == said
