"""History entries in words (table test): known kinds read as sentences, any other entry as
its fields without the machine-only ones (idempotency keys, digests), numbers rounded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from bot.web.timeline import by_head, describe

HEAD, NEWER = "3f2a1c9d8e7f" + "0" * 28, "9c1e22aa33bb" + "1" * 28


@pytest.mark.parametrize(
    ("kind", "data", "said"),
    [
        (
            "rebased",
            {"head": HEAD, "digest": "d" * 64, "outcome": "changed", "summary": "2 apply, 1 drop"},
            "checked on 3f2a1c9d8e7f, outcome changed: 2 apply, 1 drop",
        ),
        (
            "decision",
            {
                "patch": "0001-x.patch",
                "status": "contained",
                "decision": "drop",
                "reason": "merged in #1919",
            },
            "0001-x.patch contained, decided drop: merged in #1919",
        ),
        (
            "superseded",
            {"head": HEAD, "newest": NEWER},
            "3f2a1c9d8e7f not checked: a newer head 9c1e22aa33bb came",
        ),
        (
            "published",
            {"pr": 12, "pushed": True, "head": HEAD, "files": ["a", "b"]},
            "PR #12 updated for 3f2a1c9d8e7f: 2 file(s) pushed",
        ),
        (
            "published",
            {"pr": 13, "pushed": True, "head": HEAD, "files": ["a"], "replaces": 12},
            "PR #13 updated for 3f2a1c9d8e7f: 1 file(s) pushed (it replaces #12, closed by a "
            "person)",
        ),
        ("published", {"result": "nothing to propose", "head": HEAD}, "nothing to propose"),
        ("ci-check", {"run_id": "r1", "runner": "gaudi", "state": "failure"}, "gaudi: failure"),
        (
            "rebase",
            {"reason": "refs/heads/main moved to 3f2a1c9d8e7f", "key": "rebase:s:" + HEAD},
            "refs/heads/main moved to 3f2a1c9d8e7f",
        ),
        # Unknown kinds: their fields, without idempotency keys or digests, numbers rounded.
        (
            "other",
            {"key": "k:1", "tree_key": "t" * 64, "duration_s": 0.09065809499998068},
            "duration_s: 0.09",
        ),
        # An older entry of a known kind, missing what its sentence needs, still says something.
        (
            "decision",
            {"reason": "kept by /carry keep"},
            "kept by /carry keep",
        ),
    ],
)
def test_entries_read_as_sentences(kind: str, data: dict[str, Any], said: str) -> None:
    assert describe(kind, data) == said


def test_a_long_sentence_is_cut() -> None:
    assert len(describe("waiting-for-ref", {"ref": "r" * 1000})) == 300


@dataclass
class Row:
    kind: str
    data: dict[str, Any]


def test_a_timeline_is_grouped_by_the_head_its_entries_are_about() -> None:
    h1, h2 = "1" * 40, "2" * 40
    newest_first = [
        Row("record_carry_pr", {"state": "open"}),  # no head: joins the group it sits in
        Row("published", {"pr": 1, "head": h2}),
        Row("decision", {"patch": "p", "status": "applies", "decision": "keep", "head": h2}),
        Row("rebase", {"reason": "moved", "head_sha": h2}),
        Row("superseded", {"head": h1, "newest": h2}),
        Row("rebased", {"head": h1, "outcome": "clean"}),
    ]
    groups = by_head(newest_first)
    assert [(g.head, [r.kind for r in g.entries]) for g in groups] == [
        (h2, ["record_carry_pr", "published", "decision", "rebase"]),
        (h1, ["superseded", "rebased"]),
    ]
    assert [g.head for g in by_head([Row("note", {"reason": "x"})])] == [""]
