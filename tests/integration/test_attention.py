"""People are told once per change when a head needs a human (issue 32): a patch that newly
conflicts, one newly sent to review, and a series stuck waiting for a human for
notify.stuck_heads heads. Real git, real Redis; carry's rebase in this process, its queue
recorded (what goes to the webhooks: the carry.notify task)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.carry_env import BODY, SERIES, CarryEnv, one_fix_in_this_process
from workers import attention
from workers import runtime as runtime_module
from workers.rebase import rebase_series
from workers.runtime import Runtime

MAIN = "refs/heads/main"
CLASH = {"mod.py": BODY.replace("compute(10)", "compute(10, other=True)")}  # the patched line


@pytest.fixture
def env(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[CarryEnv]:
    with one_fix_in_this_process(tmp_path, redis_url, monkeypatch) as carry:
        config = json.loads(carry.config_path.read_text())
        config["notify"] = {"stuck_heads": 3, "stuck_hours": None}
        carry.config_path.write_text(json.dumps(config))
        runtime_module.reset()
        yield carry


@dataclasses.dataclass
class Told:
    notices: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def __call__(self, name: str, kwargs: dict[str, Any]) -> None:
        if name == "carry.notify":
            self.notices.append(kwargs["notice"])

    def changes(self) -> list[str]:
        found = [n["change"] for n in self.notices]
        self.notices.clear()
        return found


def check(rt: Runtime, head: str) -> None:
    assert rebase_series(rt, SERIES, head, MAIN) is not None


def test_a_new_conflict_is_told_once_and_a_long_wait_once_as_stuck(env: CarryEnv) -> None:
    told = Told()
    rt = dataclasses.replace(runtime_module.runtime(), send=told)
    check(rt, env.upstream.head())
    assert told.changes() == []  # the fix applies: nobody needs telling

    check(rt, env.upstream.commit("upstream rewrites the patched line", CLASH))
    (notice,) = told.notices
    assert told.changes() == ["new-conflict"]
    assert list(notice["patches"]) == [p.name for p in env.state().patches]
    assert "no longer applies on" in notice["summary"]
    (entry,) = env.history("new-conflict")
    assert entry["data"]["key"] == notice["key"]

    check(rt, env.upstream.commit("an unrelated change", {"other.py": "x = 1\n"}))
    assert told.changes() == []  # the same conflict on the next head: said already
    check(rt, env.upstream.commit("another", {"other.py": "x = 2\n"}))
    stuck = told.notices[0] if told.notices else {}
    assert told.changes() == ["stuck"]
    assert stuck["heads"] == 3 and "waited for a human for 3 heads" in stuck["summary"]
    check(rt, env.upstream.commit("and another", {"other.py": "x = 3\n"}))
    assert told.changes() == []  # stuck is said once per stretch
    wait = env.state().human_wait
    assert wait is not None and (wait.heads, wait.told) == (4, True)

    check(rt, env.upstream.commit("upstream restores the line", {"mod.py": BODY}))
    assert told.changes() == [] and env.state().human_wait is None
    check(rt, env.upstream.commit("and rewrites it again", CLASH))
    assert told.changes() == ["new-conflict"]  # a new stretch, a new message


def test_hours_pass_between_heads_and_the_beat_says_the_series_is_stuck(env: CarryEnv) -> None:
    """An upstream that does not move checks no head: the beat's carry.stuck asks instead."""
    config = json.loads(env.config_path.read_text())
    config["notify"] = {"stuck_heads": None, "stuck_hours": 2}
    env.config_path.write_text(json.dumps(config))
    runtime_module.reset()
    told = Told()
    base = dataclasses.replace(runtime_module.runtime(), send=told)
    at = dataclasses.replace(base, clock=lambda: "2026-12-06T08:00:00Z")
    check(at, env.upstream.commit("upstream rewrites the patched line", CLASH))
    assert told.changes() == ["new-conflict"]

    for now, stuck in (("2026-12-06T09:59:00Z", []), ("2026-12-06T10:00:00Z", [SERIES])):
        assert attention.tell_stuck(dataclasses.replace(base, clock=lambda now=now: now)) == stuck
    (notice,) = told.notices
    assert told.changes() == ["stuck"]
    assert notice["since"] == "2026-12-06T08:00:00Z" and notice["heads"] == 1
    (entry,) = env.history("stuck")
    assert entry["data"]["key"] == notice["key"]
    later = dataclasses.replace(base, clock=lambda: "2026-12-09T00:00:00Z")
    assert attention.tell_stuck(later) == [] and told.changes() == []  # once per stretch
