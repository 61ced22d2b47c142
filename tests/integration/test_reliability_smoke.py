"""The cheapest scenarios of bench/reliability (`make reliability`), so CI runs them too:
fuzzed patch files through the parser, fuzzed webhooks against the running web process, the
intake abuse attacks (slow, unsigned, aborted bodies) at their quick sizes, and GitHub's
production faults (github-faults) on a whole deployment.

The hand-picked edge cases include those that once gave a 500 (deep JSON, huge numbers and
timestamps, lone surrogates) or escaped the parser (absurd mail dates).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.reliability import (
    PARSER_EDGE_CASES,
    QUICK,
    Attack,
    Footprint,
    LogWritten,
    ParserFuzz,
    edge_cases,
    fuzz_parser,
    fuzz_webhooks,
    parse_one,
    post_webhook,
    run_intake_abuse,
    scenario_github_faults,
)
from harness.carry_env import CarryEnv
from harness.redis_server import PrivateRedis

SEED = 0
# Edge cases that once gave a 500 or escaped the parser; now fixed. A name listed here with the
# reason would be expected to fail (xfail strict), so that a regression is visible.
KNOWN_500S: dict[str, str] = {}
KNOWN_PARSER_ESCAPES: dict[str, str] = {}


def known(name: str, bugs: dict[str, str]) -> pytest.ParameterSet:
    marks = [pytest.mark.xfail(strict=True, reason=bugs[name])] if name in bugs else []
    return pytest.param(name, marks=marks, id=name)


# --------------------------------------------------------------------------- parser


def test_fuzzed_patch_files_only_ever_raise_patch_file_error() -> None:
    result = fuzz_parser(400, SEED, edge=False)
    assert result.examples == 400
    assert result.parsed > 0 and result.refused > 0  # both paths were exercised
    assert dict(result.unexpected) == {}, result.smallest


@pytest.mark.parametrize("name", [known(n, KNOWN_PARSER_ESCAPES) for n in PARSER_EDGE_CASES])
def test_parser_edge_case_is_refused_or_parsed(name: str) -> None:
    result = ParserFuzz()
    parse_one(result, PARSER_EDGE_CASES[name])
    assert dict(result.unexpected) == {}
    assert result.parsed + result.refused == 1


# --------------------------------------------------------------------------- webhooks


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("fuzz")
    server = PrivateRedis(root / "redis", persist=False).start()
    env = CarryEnv(root / "carry", server.url)
    env.carry_patches([{"mod.py": "value = 1\n"}])
    env.write_config()
    try:
        yield env.start_web()
    finally:
        env.stop()
        server.stop(kill=True)


def test_fuzzed_webhooks_never_get_a_500(web: str) -> None:
    result = fuzz_webhooks(web, 60, SEED, edge=False)
    assert result.sent >= 50  # a few generated requests cannot be sent over HTTP at all
    assert result.five_hundreds == 0, result.failures[:3]
    assert {202, 401}.issubset(result.statuses)  # signed ones got in, forged ones did not
    assert httpx.get(f"{web}/healthz", timeout=5).status_code == 200


@pytest.mark.parametrize("name", [known(n, KNOWN_500S) for n, _, _ in edge_cases()])
def test_webhook_edge_case_gets_a_4xx_or_2xx(web: str, name: str) -> None:
    headers, body = next((h, b) for n, h, b in edge_cases() if n == name)
    with httpx.Client(timeout=30) as http:
        status = post_webhook(http, web, headers, body)
    assert 200 <= status < 500


def test_edge_case_lists_are_what_the_marks_name() -> None:
    names = {n for n, _, _ in edge_cases()}
    assert set(KNOWN_500S) <= names
    assert set(KNOWN_PARSER_ESCAPES) <= set(PARSER_EDGE_CASES)


# --------------------------------------------------------------------------- intake abuse


def test_intake_abuse_at_quick_sizes_stays_within_its_bounds(tmp_path: Path) -> None:
    slow, unsigned, aborted = attacks = run_intake_abuse(tmp_path, QUICK)
    rows = [attack.row() for attack in attacks]
    assert all(row.ok for row in rows), [row.recovered for row in rows]
    assert [a.requests for a in attacks] == [
        QUICK.abuse_slow,
        QUICK.abuse_unsigned,
        QUICK.abuse_aborts,
    ]
    for attack, row in zip(attacks, rows, strict=True):
        assert attack.cost.rss_before > 0 and math.isfinite(attack.cost.peak_growth)
        assert re.search(r"[+-]\d+\.\d MiB peak \(-?\d+\.\d KiB per request\)", row.recovered)
        assert re.search(r"log \+\d+ lines, \d+ B", row.recovered)
        assert "older carry" in row.recovered
    # 408 at the deadline, read or still waiting for a read (503 only when the wait took
    # the whole deadline): no delivery past the 64 read at once is refused at once any more
    assert re.match(r"\d+ x (408|503)", slow.answers)
    assert unsigned.answers.startswith(f"{QUICK.abuse_unsigned} x 401,")
    assert 0 < len(aborted.cost.log.lines) <= QUICK.abuse_aborts  # logged, once each at most


def test_an_intake_abuse_row_fails_when_a_bound_does_not_hold() -> None:
    cost = Footprint(90.0, 200.0, 150.0, 7, 2007, 7, LogWritten(0, []))
    bounds = {"RSS peak growth < 50 MiB": cost.peak_growth < 50, "no traceback": True}
    row = Attack("slow", "2000 slow bodies", 2000, "-", cost, bounds, "-").row()
    assert not row.ok
    assert "bounds NOT held: RSS peak growth < 50 MiB (held: no traceback)" in row.recovered


# --------------------------------------------------------------------------- GitHub's faults


def test_github_faults_lose_duplicate_and_leave_wrong_nothing(tmp_path: Path) -> None:
    """Issue 34: faults after the effect, out-of-order pushes, a protected branch, a secondary-
    limit storm on CI reports, deliveries answered 503, a rename and a transfer, a person's close; each row counts what was lost, duplicated or left wrong on GitHub, and ends ok
    or WRONG."""
    rows = scenario_github_faults(tmp_path, QUICK)
    assert [row.scenario for row in rows] == [
        "GitHub faults after the effect",
        "out-of-order pushes",
        "protected branch (ruleset)",
        "secondary-limit storm on CI reports",
        "deliveries answered 503",
        "downstream renamed, then transferred",
        "a person's close",
    ]
    for row in rows:
        assert (row.lost, row.duplicated) == ("0", "0"), row
        assert row.recovered.endswith("left wrong on GitHub: 0 -- ok"), row
        assert row.ok
