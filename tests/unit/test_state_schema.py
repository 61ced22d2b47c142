"""The stored series document: its schema version, the migration of what older carry stored,
and enum values read back safely."""

from __future__ import annotations

import copy
import json
import logging

import pytest

from bot.core.classify import Decision, Status
from bot.core.state import (
    SCHEMA_VERSION,
    CiStatus,
    Outcome,
    Phase,
    SchemaError,
    SeriesState,
)
from tests.support.stored_states import stored_by_schema_1


def test_the_fixture_is_what_schema_1_stored():
    assert "schema" not in stored_by_schema_1()


def test_a_schema_1_document_loads_with_every_field_and_typed_values():
    old = stored_by_schema_1()
    state = SeriesState.from_dict(copy.deepcopy(old))

    assert state.schema == SCHEMA_VERSION == 2
    assert state.phase is Phase.PAUSED and state.outcome is Outcome.REVIEW
    assert [p.status for p in state.patches] == [
        Status.APPLIES,
        Status.CONTAINED,
        Status.CONFLICT,
        Status.PENDING,
    ]
    assert [p.decision for p in state.patches] == [
        Decision.KEEP,
        Decision.DROP,
        Decision.REVIEW,
        Decision.NONE,
    ]
    assert state.ci["gaudi"].state is CiStatus.WAITING_APPROVAL
    # the overrides a maintainer set survive the migration
    assert state.paused_by == "alice" and state.patches[0].pinned
    assert state.approvals == ["d" * 40]
    written = json.loads(json.dumps(state.to_dict()))
    # fields added since then come back with their defaults; nothing stored is lost
    added = {"engine_decision": "none", "engine_reason": "", "upstream_commits": [], "refresh": {}}
    patches = [{**patch, **added} for patch in old["patches"]]
    expected = {**old, "schema": SCHEMA_VERSION, "replaced_heads": [], "patches": patches}
    expected |= {"heads": [], "last_good": None, "red_streak": None, "bisect": None}
    expected |= {"tree_branch": None, "tree_commits": {}}  # the tested tree as a branch
    expected |= {"closed_pr": None, "human_wait": None, "publish_refused": None}
    expected |= {"pushes": []}  # no push was recorded before issue 33: every head waits once
    # a CI row from before carry kept its check run is taken as on GitHub (issue 34 item 2)
    expected["ci"] = {
        key: {**row, "check_run_id": 0, "reported": row["state"]} for key, row in old["ci"].items()
    }
    expected |= {"notices": []}  # what carry must still say on its PR (issue 34 item 8)
    # no CI table edit owed on a PR from before carry recorded refused ones (issue 34 item 2)
    expected["pr"] = {**old["pr"], "ci_table_owed": False}
    assert written == expected


def test_a_newer_schema_is_refused_naming_both_versions():
    newer = {**stored_by_schema_1(), "schema": SCHEMA_VERSION + 1}
    with pytest.raises(SchemaError, match=rf"schema {SCHEMA_VERSION + 1}.*schema {SCHEMA_VERSION}"):
        SeriesState.from_dict(newer)


@pytest.mark.parametrize("schema", [0, "2", None, -1])
def test_a_schema_that_is_not_a_version_is_refused(schema):
    with pytest.raises(SchemaError, match="not a version number"):
        SeriesState.from_dict({**stored_by_schema_1(), "schema": schema})


@pytest.mark.parametrize(
    ("where", "unknown", "read_as"),
    [
        ("decision", "drop-now", Decision.REVIEW),  # never a drop
        ("status", "shiny", Status.INVALID),
    ],
)
def test_an_unknown_patch_value_is_read_as_the_safe_one_and_logged(where, unknown, read_as, caplog):
    data = stored_by_schema_1()
    data["patches"][0][where] = unknown
    with caplog.at_level(logging.WARNING, logger="carry.state"):
        state = SeriesState.from_dict(data)
    assert getattr(state.patches[0], where) is read_as
    assert f"{unknown!r} is unknown" in caplog.text and "0001-async-inputs.patch" in caplog.text


def test_unknown_phase_outcome_and_ci_state_read_as_errors():
    data = stored_by_schema_1()
    data.update(phase="thinking", outcome="great")
    data["ci"]["gaudi"]["state"] = "exploded"
    state = SeriesState.from_dict(data)
    assert (state.phase, state.outcome) == (Phase.ERROR, Outcome.ERROR)
    assert state.ci["gaudi"].state is CiStatus.INFRA_ERROR


def test_recorded_pushes_are_stored_and_read_back_typed():
    """Issue 33: the pushes of the watched ref are kept for the series' trust."""
    from bot.core.trust import Push

    pushed = Push("1" * 40, "2" * 40, "maintainer", trusted=True, forced=True)
    state = SeriesState(id="s1", pushes=[pushed])
    stored = json.loads(json.dumps(state.to_dict()))
    assert stored["pushes"] == [
        {"before": "1" * 40, "after": "2" * 40, "pusher": "maintainer", "trusted": True}
        | {"forced": True}
    ]
    assert SeriesState.from_dict(stored).pushes == [pushed]
