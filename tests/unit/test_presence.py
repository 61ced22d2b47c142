"""The presence table across heads (bot.core.presence): cells from the engine's reports, and
the text and JSON forms."""

from __future__ import annotations

import pytest

from bot.core.classify import Decision, Status
from bot.core.presence import (
    Cell,
    HeadsEvidence,
    Presence,
    PresenceError,
    build_table,
    cell_for,
    needs_human,
    render_text,
)
from bot.core.report import PatchReport, SeriesReport

OWN = "a" * 40
PICKED = "b" * 40
CONTENT = "c" * 40
HEAD_1, HEAD_2, HEAD_3 = "1" * 40, "2" * 40, "3" * 40


def report(
    status: Status,
    decision: Decision = Decision.KEEP,
    *,
    name: str = "0001-fix.patch",
    landings: list[str] | None = None,
    evidence: list[dict[str, object]] | None = None,
) -> PatchReport:
    found = PatchReport(name, status, decision, "why", list(evidence or []), "Fix it")
    if landings is not None:
        found.upstream_commits = [
            {"sha": sha, "subject": "s", "pr": None, "how": "patch-id"} for sha in landings
        ]
    return found


def series(head: str, ref: str | None, *patches: PatchReport) -> SeriesReport:
    return SeriesReport("/up", head, ref, None, list(patches))


@pytest.mark.parametrize(
    ("status", "landings", "presence", "sha"),
    [
        (Status.CONTAINED, [PICKED, CONTENT], Presence.OTHER, PICKED),
        (Status.UPSTREAM_VERSION, [CONTENT], Presence.OTHER, CONTENT),
        (Status.UPSTREAM_VERSION, [], Presence.OTHER, None),
        (Status.PARTIAL, [CONTENT], Presence.PARTIAL, CONTENT),
        (Status.CONFLICT, None, Presence.CONFLICT, None),
        (Status.INVALID, None, Presence.INVALID, None),
        (Status.APPLIES, None, Presence.ABSENT, None),
        (Status.APPLIES_MOVED, None, Presence.ABSENT, None),
    ],
)
def test_cell_follows_the_engine_status(status, landings, presence, sha):
    cell = cell_for(report(status, landings=landings), OWN, in_head=False)
    assert (cell.presence, cell.sha, cell.status) == (presence, sha, status)


def test_own_commit_in_the_head_is_same_whatever_the_status():
    cell = cell_for(report(Status.CONTAINED, Decision.DROP, landings=[OWN]), OWN, in_head=True)
    assert (cell.presence, cell.sha, cell.decision) == (Presence.SAME, OWN, Decision.DROP)
    # No own commit to name: a head "holding" None is not the same commit.
    assert cell_for(report(Status.APPLIES), None, in_head=True).presence is Presence.ABSENT


def test_patch_id_evidence_names_the_other_commit_when_no_landing_does():
    match = {"signal": "patch-id-match", "commit": PICKED, "reverted_by": None}
    undone = {"signal": "patch-id-match", "commit": CONTENT, "reverted_by": "d" * 40}
    cell = cell_for(report(Status.CONTAINED, evidence=[undone, match]), OWN, in_head=False)
    assert cell.sha == PICKED  # a reverted match is not where the head's version came from


def test_cell_text_uses_stable_tooling_words():
    def text(presence: Presence, sha: str | None) -> str:
        return Cell(presence, sha, Status.CONTAINED, Decision.DROP).text()

    assert text(Presence.SAME, OWN) == "present (same SHA)"
    assert text(Presence.OTHER, PICKED) == f"present (different SHA: {PICKED[:12]})"
    assert text(Presence.OTHER, None) == "present (no commit found)"
    assert text(Presence.PARTIAL, CONTENT) == f"partial ({CONTENT[:12]})"
    assert text(Presence.ABSENT, None) == "absent"


def three_heads() -> HeadsEvidence:
    fix, helper = "0001-fix.patch", "0002-a-much-longer-name.patch"
    return HeadsEvidence(
        reports=(
            series(
                HEAD_1,
                "refs/heads/release/1.0",
                report(Status.CONTAINED, Decision.DROP, name=fix, landings=[PICKED]),
                report(Status.APPLIES, name=helper),
            ),
            series(
                HEAD_2,
                "refs/heads/release/2.0",
                report(Status.CONTAINED, Decision.DROP, name=fix, landings=[OWN]),
                report(Status.APPLIES, name=helper),
            ),
            series(
                HEAD_3,
                None,
                report(Status.APPLIES, name=fix),
                report(Status.CONFLICT, name=helper),
            ),
        ),
        own_commits=(OWN, None),
        contains={HEAD_1: frozenset(), HEAD_2: frozenset({OWN}), HEAD_3: frozenset()},
    )


def test_table_rows_are_patches_and_columns_heads():
    table = build_table(three_heads(), ["release/1.0", "release/2.0", HEAD_3[:7]])
    assert [h.sha for h in table.heads] == [HEAD_1, HEAD_2, HEAD_3]
    assert [(c.presence, c.sha) for c in table.rows[0].cells] == [
        (Presence.OTHER, PICKED),
        (Presence.SAME, OWN),
        (Presence.ABSENT, None),
    ]
    assert [c.presence for c in table.rows[1].cells] == [
        Presence.ABSENT,
        Presence.ABSENT,
        Presence.CONFLICT,
    ]
    assert table.rows[0].commit == OWN and table.rows[1].commit is None
    assert needs_human(table)


def test_text_is_aligned_under_each_head():
    text = render_text(build_table(three_heads(), ["release/1.0", "release/2.0", "main"]))
    title, header, fix, helper = text.splitlines()
    assert title == "presence of 2 patches on 3 heads of /up"
    starts = [header.index(f"{name} (") for name in ("release/1.0", "release/2.0", "main")]
    assert header.startswith("  patch ")
    assert fix.startswith("  0001-fix.patch ") and helper.startswith("  0002-a-much-longer")
    assert fix[starts[0] :].startswith(f"present (different SHA: {PICKED[:12]})")
    assert fix[starts[1] :].startswith("present (same SHA)")
    assert fix[starts[2] :] == "absent"  # no trailing blanks
    assert helper[starts[2] :] == "conflict"
    assert f"release/1.0 ({HEAD_1[:12]})" in header


def test_json_form():
    out = build_table(three_heads(), ["release/1.0", "release/2.0", "main"]).as_dict()
    assert out["heads"][0] == {
        "name": "release/1.0",
        "head": HEAD_1,
        "head_ref": "refs/heads/release/1.0",
    }
    first = out["patches"][0]
    assert first["commit"] == OWN and first["subject"] == "Fix it"
    assert first["cells"][0] == {
        "head": "release/1.0",
        "presence": "other",
        "sha": PICKED,
        "status": "contained",
        "decision": "drop",
    }
    assert [c["presence"] for c in first["cells"]] == ["other", "same", "absent"]


def test_nothing_to_do_needs_no_human():
    calm = HeadsEvidence(
        (
            series(HEAD_1, None, report(Status.APPLIES)),
            series(HEAD_2, None, report(Status.APPLIES)),
        ),
        (None,),
        {},
    )
    assert not needs_human(build_table(calm, ["a", "b"]))


def test_mismatched_evidence_is_refused():
    evidence = three_heads()
    with pytest.raises(PresenceError, match="3 head reports for 2 heads"):
        build_table(evidence, ["a", "b"])
    short = HeadsEvidence(evidence.reports, (OWN,), evidence.contains)
    with pytest.raises(PresenceError, match="same patches"):
        build_table(short, ["a", "b", "c"])
