"""Series documents as older carry stored them (tests/data/state), for the migration tests."""

from __future__ import annotations

import json

from tests.support.paths import STORED_STATES

SCHEMA_1 = STORED_STATES / "series-schema-1.json"


def stored_by_schema_1() -> dict:
    data: dict = json.loads(SCHEMA_1.read_text())
    return data
